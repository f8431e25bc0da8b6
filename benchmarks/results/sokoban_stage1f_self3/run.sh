#!/usr/bin/env bash
# One cell of the sokoban self-analyzer comparison from the stage1f model (second Stage-1 round, on-policy analysis data).
# Usage: bash run.sh ALGO SEED [more compare options]   (two cells at a time, one thread each):
#   grpo and seed x seeds 0,1,2
set -euo pipefail
algo=$1; seed=$2; shift 2
exec .venv/bin/seedrl compare --config configs/sokoban_grpo.yaml --algos "$algo" --seeds "$seed," \
  --budget-episodes 256 --eval-every 2 \
  --out benchmarks/results/sokoban_stage1f_self3 --runs-dir runs/compare/sokoban_stage1f_self3 \
  --set model.name=runs/sokoban_literate_stage1f/model --set 'env.kwargs.unseen_dim=[6,5]' \
  --set eval.num_tasks=128 --set eval.batch_size=64 --set torch_threads=1 \
  --set skills.max_new_tokens=320 --efficiency-split valid_seen "$@"
