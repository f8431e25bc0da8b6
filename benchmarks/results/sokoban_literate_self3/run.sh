#!/usr/bin/env bash
# One cell of the sokoban self-analyzer comparison from the stage1d model.
# Usage: bash run.sh ALGO SEED [more compare options]   (two cells at a time, one thread each):
#   grpo and seed x seeds 0,1,2, and the variant
#   bash run.sh seed SEED --tag self_opd1 --set algo.opd_coef=1.0
set -euo pipefail
algo=$1; seed=$2; shift 2
exec .venv/bin/seedrl compare --config configs/sokoban_grpo.yaml --algos "$algo" --seeds "$seed," \
  --budget-episodes 256 --eval-every 2 \
  --out benchmarks/results/sokoban_literate_self3 --runs-dir runs/compare/sokoban_literate_self3 \
  --set model.name=runs/sokoban_literate_stage1d/model --set 'env.kwargs.unseen_dim=[6,5]' \
  --set eval.num_tasks=128 --set eval.batch_size=64 --set torch_threads=1 \
  --set skills.max_new_tokens=320 --efficiency-split valid_seen "$@"
