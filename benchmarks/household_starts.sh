#!/usr/bin/env bash
# Rebuilds the household starts that issue 41's grids start from, in order: plain -> L7 -> L9 -> S3
# (benchmarks/results/skill_following/notes.md for plain, L7 and L9; seed_mechanism_s2/notes.md for S3).
# Every command is the one those notes record; a step whose model exists is kept. Each model's sha256
# is printed beside the one the notes give (2-core Xeon, AMX + avx512_bf16, bf16 autocast): another CPU
# kind or precision gives other bytes (and other numbers), so a grid names the sha of the start it used.
# Hours on one thread (the notes: L7 ~1 h, L9 38 min, S3's SFT 59 min, plus the analysis): start it in the
# background and keep the cores otherwise free.
#   OUT=runs/hh bash benchmarks/household_starts.sh          # DRY=1: print the commands only
# THREADS=N sets torch_threads on every step (the notes' commands use 1); on an otherwise idle 2-core machine
# THREADS=2 is faster, and bytes may differ from a 1-thread build as they do between CPU kinds.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/hh}
SEEDRL=${SEEDRL:-.venv/bin/seedrl}
T=()
if [ -n "${THREADS:-}" ]; then T=(--set "torch_threads=$THREADS"); fi
run() { echo "+ $* ${T[*]}"; if [ -z "${DRY:-}" ]; then "$@" "${T[@]}"; fi; }
have() { [ -f "$OUT/$1/model.safetensors" ]; }
sha() { if have "$1"; then echo "$1: $(sha256sum "$OUT/$1/model.safetensors" | cut -c1-16)… (notes: $2)"; fi; }

have plain/model || run "$SEEDRL" sft --config configs/household_sft.yaml --set run_dir="$OUT/plain"
sha plain/model a5126e54
have L7/model || run "$SEEDRL" sft --config configs/household_literate_sft.yaml \
  --set model.name="$OUT/plain/model" --set run_dir="$OUT/L7" --set epochs=5
sha L7/model "not recorded"
have L9/model || run "$SEEDRL" sft --config configs/household_literate_cf_sft.yaml \
  --set model.name="$OUT/L7/model" --set run_dir="$OUT/L9"
sha L9/model 105bfc89
if ! have S3/sft/model; then
  run "$SEEDRL" analyze --config configs/household_seed.yaml --model "$OUT/L9/model" --analyzer oracle \
    --tasks 2048 --rollouts 2 --min-failure-frac 0.5 --max-failure-frac 0.5 --max-target-tokens 192 \
    --out "$OUT/S3/data.jsonl" --set torch_threads=1 --set skills.oracle_view=observed --set env.train_size=2048
  run "$SEEDRL" sft --config configs/household_stage1_sft.yaml --set model.name="$OUT/L9/model" \
    --set data="$OUT/S3/data.jsonl" --set run_dir="$OUT/S3/sft"
fi
sha S3/sft/model ec3ad2ad
