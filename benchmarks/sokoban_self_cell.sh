#!/usr/bin/env bash
# One cell of a sokoban self-analyzer comparison: `seedrl compare` of one method and seed from a
# Stage-1 model, 256 episodes, greedy eval on 128 held-out 5x5 (valid_seen) and 6x5 (valid_unseen) rooms
# every 2 iterations; cells go to benchmarks/results/NAME, runs to runs/compare/NAME.
# Usage: bash benchmarks/sokoban_self_cell.sh NAME STAGE1_MODEL ALGO SEED [more compare options]
#   (two cells at a time, one thread each), e.g.
#   bash benchmarks/sokoban_self_cell.sh sokoban_literate_self3 runs/sokoban_literate_stage1d/model seed 0
#   bash benchmarks/sokoban_self_cell.sh sokoban_literate_self3 runs/sokoban_literate_stage1d/model seed 0 \
#       --tag self_opd1 --set algo.opd_coef=1.0
#   bash benchmarks/sokoban_self_cell.sh sokoban_stage1f_self3 runs/sokoban_literate_stage1f/model grpo 0
set -euo pipefail
name=$1; model=$2; algo=$3; seed=$4; shift 4
exec .venv/bin/seedrl compare --config configs/sokoban_grpo.yaml --algos "$algo" --seeds "$seed," \
  --budget-episodes 256 --eval-every 2 \
  --out "benchmarks/results/$name" --runs-dir "runs/compare/$name" \
  --set "model.name=$model" --set 'env.kwargs.unseen_dim=[6,5]' \
  --set eval.num_tasks=128 --set eval.batch_size=64 --set torch_threads=1 \
  --set skills.max_new_tokens=320 --efficiency-split valid_seen "$@"
