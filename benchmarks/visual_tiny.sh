#!/usr/bin/env bash
# The tiny visual result (issue 45): the built-in tiny Qwen2.5-VL warm-started from rendered solver
# demonstrations, then GRPO and SEED from that start through `seedrl compare`: success on 128 held-out
# valid_seen tasks before and after, every EVERY iterations. TASK picks the family: `sokoban` (pixel Sokoban,
# 5x5 rooms: configs/sokoban_visual_tiny_sft.yaml, configs/sokoban_visual_rl_tiny.yaml) or `ezpoints`
# (configs/ezpoints_tiny_sft.yaml, configs/ezpoints_rl_tiny.yaml). OUT, SFT, BUDGET, SEEDS and ALGOS
# (environment) change the result folder, the warm start's folder, the episodes per cell, the seeds and methods.
# Usage (one torch thread per process, at most two at a time):
#   bash benchmarks/visual_tiny.sh sft                the warm start (SFT/model)
#   bash benchmarks/visual_tiny.sh cell METHOD SEED   one cell: grpo, seed (the preset's self-analyzer),
#                                                     ALGO+ANALYZER (seed+oracle: the env oracle's skills),
#                                                     and @C for algo.opd_coef=C (seed+oracle@1)
#   bash benchmarks/visual_tiny.sh grid [JOBS]        every (algo, seed) cell, JOBS at a time (default 2)
#   bash benchmarks/visual_tiny.sh report
set -euo pipefail
TASK=${TASK:-sokoban}
case $TASK in
  sokoban) SFT_CONFIG=configs/sokoban_visual_tiny_sft.yaml RL_CONFIG=configs/sokoban_visual_rl_tiny.yaml
           OUT=${OUT:-benchmarks/results/visual_tiny} SFT=${SFT:-runs/visual_tiny/sft}
           BUDGET=${BUDGET:-640} EVERY=${EVERY:-5} ;;     # 10 iterations x 8 rooms x group 8
  ezpoints) SFT_CONFIG=configs/ezpoints_tiny_sft.yaml RL_CONFIG=configs/ezpoints_rl_tiny.yaml
            OUT=${OUT:-benchmarks/results/ezpoints_tiny} SFT=${SFT:-runs/ezpoints_tiny/sft}
            BUDGET=${BUDGET:-1920} EVERY=${EVERY:-5} ;;   # 30 iterations x 8 tasks x group 8
  *) echo "TASK is sokoban or ezpoints, not '$TASK'" >&2; exit 2 ;;
esac
SEEDS=${SEEDS:-"0 1"}
ALGOS=${ALGOS:-"grpo seed"}
SEEDRL=${SEEDRL:-.venv/bin/seedrl}
export TASK OUT SFT BUDGET EVERY SEEDS ALGOS SEEDRL
compare() {
  "$SEEDRL" compare --config "$RL_CONFIG" --budget-episodes "$BUDGET" --eval-every "$EVERY" \
    --out "$OUT" --runs-dir "runs/compare/$(basename "$OUT")" --split valid_seen --efficiency-split valid_seen \
    --set "model.name=$SFT/model" "$@"
}
case ${1:-} in
  sft) "$SEEDRL" sft --config "$SFT_CONFIG" --set "run_dir=$SFT" ;;
  cell)  # METHOD[+ANALYZER][@C]: @C sets algo.opd_coef=C, its own cells (seed+oracle@1: seed+oracle_opd1-seed0)
    method=${2%@*}; coef=""; [[ $2 == *@* ]] && coef=${2#*@}
    algo=${method%%+*}; tag=""; extra=()
    [[ $method == *+* ]] && { tag=${method#*+}; extra=(--set "skills.analyzer=$tag"); }
    [[ -n $coef ]] && { tag="${tag:+${tag}_}opd$coef"; extra+=(--set "algo.opd_coef=$coef"); }
    [[ -n $tag ]] && extra=(--tag "$tag" "${extra[@]}")
    compare --algos "$algo" --seeds "$3," "${extra[@]}" ;;
  grid) for s in $SEEDS; do for a in $ALGOS; do echo "$a $s"; done; done | xargs -P "${2:-2}" -L 1 bash "$0" cell ;;
  report) compare --algos "$(echo $ALGOS | tr ' ' ,)" --report-only ;;
  *) echo "usage: $0 sft | cell ALGO SEED | grid [JOBS] | report" >&2; exit 2 ;;
esac
