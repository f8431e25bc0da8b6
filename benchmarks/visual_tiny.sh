#!/usr/bin/env bash
# The tiny visual result (issue 45): the built-in tiny Qwen2.5-VL warm-started on pixel Sokoban from rendered
# solver demonstrations (configs/sokoban_visual_tiny_sft.yaml), then GRPO and SEED from that start
# (configs/sokoban_visual_rl_tiny.yaml) through `seedrl compare`: success on 128 held-out 5x5 rooms
# (valid_seen) before and after, every 5 iterations. OUT, SFT, BUDGET and SEEDS (environment) change the
# result folder, the warm start's folder, the episodes per cell and the seeds.
# Usage (one torch thread per process, at most two at a time):
#   bash benchmarks/visual_tiny.sh sft                the warm start (SFT/model)
#   bash benchmarks/visual_tiny.sh cell ALGO SEED     one cell (grpo | seed)
#   bash benchmarks/visual_tiny.sh grid [JOBS]        every (algo, seed) cell, JOBS at a time (default 2)
#   bash benchmarks/visual_tiny.sh report
set -euo pipefail
OUT=${OUT:-benchmarks/results/visual_tiny}
SFT=${SFT:-runs/visual_tiny/sft}
BUDGET=${BUDGET:-640}   # 10 iterations x 8 rooms x group 8
SEEDS=${SEEDS:-"0 1"}
SEEDRL=${SEEDRL:-.venv/bin/seedrl}
export OUT SFT BUDGET SEEDS SEEDRL
compare() {
  "$SEEDRL" compare --config configs/sokoban_visual_rl_tiny.yaml --budget-episodes "$BUDGET" --eval-every 5 \
    --out "$OUT" --runs-dir "runs/compare/$(basename "$OUT")" --split valid_seen --efficiency-split valid_seen \
    --set "model.name=$SFT/model" "$@"
}
case ${1:-} in
  sft) "$SEEDRL" sft --config configs/sokoban_visual_tiny_sft.yaml --set "run_dir=$SFT" ;;
  cell) compare --algos "$2" --seeds "$3," ;;
  grid) for s in $SEEDS; do for a in grpo seed; do echo "$a $s"; done; done | xargs -P "${2:-2}" -L 1 bash "$0" cell ;;
  report) compare --algos grpo,seed --report-only ;;
  *) echo "usage: $0 sft | cell ALGO SEED | grid [JOBS] | report" >&2; exit 2 ;;
esac
