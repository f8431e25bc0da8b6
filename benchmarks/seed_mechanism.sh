#!/usr/bin/env bash
# SEED's question on household search (benchmarks/results/seed_mechanism/notes.md): `seedrl compare` of six
# methods from one start, the Stage-1 model (configs/household_stage1_sft.yaml: it acts, reads skills and
# writes its own), 128 episodes per cell (8 iterations x 4 games x group 4), greedy eval on 48 held-out games
# under the training prior (valid_seen) and 48 under the shifted prior (valid_unseen) at iteration 0 and
# after every iteration (9 points). Methods: grpo; seed+self (SEED, the policy writes its skills); seed+oracle
# (positive control: the oracle's correct skills); seed_nogate+self; sdar and grpo_opsd (static skill files).
# No arm replays demonstrations, so there is no replay-only arm.
# OUT, START, BUDGET, GAMES, PANEL, EVAL_EVERY, SETS and METHODS (environment) change the folder, the start, the episodes
# per cell, the games per iteration, the games per evaluation panel, the evaluation interval, extra compare options and the methods (seed_mechanism_s2: OUT=benchmarks/results/seed_mechanism_s2 START=<S2> BUDGET=256 GAMES=8).
# Usage (cells are resumable; run at most two at a time, one torch thread each):
#   bash benchmarks/seed_mechanism.sh cell METHOD SEED     e.g. cell seed+self 0; METHOD@C sets algo.opd_coef=C
#                                                          (cell seed+oracle@0.1 0 is the cell seed+oracle_opd0.1-seed0)
#   bash benchmarks/seed_mechanism.sh grid [SEEDS] [JOBS]  every method for seeds 0..SEEDS-1, or FIRST-LAST (default 5, 2 jobs)
#   bash benchmarks/seed_mechanism.sh report
set -euo pipefail
OUT=${OUT:-benchmarks/results/seed_mechanism}
START=${START:-runs/household_stage1_sft/model}
BUDGET=${BUDGET:-128}  # episodes per cell
GAMES=${GAMES:-4}      # games per iteration (x group 4 episodes)
PANEL=${PANEL:-48}     # games per evaluation panel
EVAL_EVERY=${EVAL_EVERY:-1}  # iterations between evaluations (and the last one)
# more compare options for every cell, e.g. SETS="--set optim.shared_prefix=true"; read into another
# name: bash does not export an array, and the grid's cell processes read SETS from the environment
export SETS=${SETS:-}
read -r -a sets <<< "$SETS"
METHODS=${METHODS:-"grpo seed+self seed+oracle seed_nogate+self sdar grpo_opsd"}
SEEDRL=${SEEDRL:-.venv/bin/seedrl}  # the seedrl command (a test replaces it with a recorder)
export SEEDRL
compare() {
  "$SEEDRL" compare --config configs/household_grpo.yaml --budget-episodes "$BUDGET" --eval-every "$EVAL_EVERY" \
    --out "$OUT" --runs-dir "runs/compare/$(basename "$OUT")" --split valid_seen --split valid_unseen \
    --efficiency-split valid_seen --set "model.name=$START" --set torch_threads=1 \
    --set "rollout.tasks_per_batch=$GAMES" --set rollout.group_size=4 --set optim.lr=1e-4 --set optim.ppo_epochs=2 \
    --set "eval.num_tasks=$PANEL" --set eval.batch_size=48 --set save_every=0 --set log.progress=false "${sets[@]}" "$@"
}
case ${1:-} in
  cell)
    method=$2; seed=$3; shift 3
    coef=""; [[ $method == *@* ]] && { coef=${method#*@}; method=${method%@*}; }
    algo=${method%%+*}; tag=""; [[ $method == *+* ]] && tag=${method#*+}
    extra=()
    case $tag in
      self) extra=(--set skills.analyzer=self) ;;
      oracle) extra=(--set skills.analyzer=oracle) ;;
      "") ;;
      *) echo "unknown variant $tag (self | oracle)" >&2; exit 2 ;;
    esac
    # METHOD@C: the same method at algo.opd_coef=C, its own cells (<algo>+<tag>_opdC)
    [[ -n $coef ]] && { extra+=(--set "algo.opd_coef=$coef"); tag="${tag:+${tag}_}opd$coef"; }
    [[ -n $tag ]] && extra=(--tag "$tag" "${extra[@]}")
    compare --algos "$algo" --seeds "$seed," "${extra[@]}" "$@" ;;
  grid)  # SEEDS: a count (seeds 0..SEEDS-1) or a range FIRST-LAST
    seeds=${2:-5}; jobs=${3:-2}
    if [[ $seeds == *-* ]]; then first=${seeds%-*}; last=${seeds#*-}; else first=0; last=$((seeds - 1)); fi
    # JOBS seeds at a time, method by method: the cells running together have different seeds, so every
    # method after a seed's first reuses that seed's iteration-0 evaluation
    for s in $(seq "$first" "$jobs" "$last"); do
      for m in $METHODS; do for t in $(seq "$s" $((s + jobs - 1))); do if ((t <= last)); then echo "$m $t"; fi; done; done
    done | xargs -P "$jobs" -L 1 bash "$0" cell ;;
  report)
    compare --report-only ;;
  *) echo "usage: $0 cell METHOD SEED | grid [SEEDS] [JOBS] | report" >&2; exit 2 ;;
esac
