#!/usr/bin/env bash
# The vision-language GPU check (issue 45): benchmarks/gpu_check.py with a random-init
# Qwen2.5-VL-3B-Instruct-shaped model (3.75 B parameters, its published config; seedrl's shipped VL
# processor) on both 3B presets, SEED with oracle skills (every stage runs, the teacher re-scoring with
# the student's images included), 2 iterations each at a small batch (2 tasks x group 4, 4 turns, 64 new
# tokens per turn), no checkpoint (a 3.75 B fp32 one with AdamW state is ~50 GB of disk).
#   1. configs/sokoban_visual_seed_qwen2.5vl_3b.yaml  (pixel Sokoban)  -> $OUT/vl_sokoban_visual_seed.json
#   2. configs/ezpoints_seed_qwen2.5vl_3b.yaml        (EZPoints)       -> $OUT/vl_ezpoints_seed.json
# Each run's log goes to $OUT/<name>.log; a run that fails (e.g. out of memory) leaves its log and the
# next still runs; the exit status is non-zero if either failed.
# Memory: fp32 weights + gradients + AdamW moments + the fp32 reference model are ~75 GB (70 GiB) before
# activations, so expect a peak near 80 GiB: an H200 fits it; an 80 GB H100 may run out of memory.
# Time: about 2-3 minutes a preset on an H200 (estimate from the text 3B check; not yet measured), each
# run capped by PER_RUN_S (default 270 s) so that both fit ~8 minutes.
# Usage (repository root, a GPU, torch + transformers installed): bash benchmarks/gpu_check_vl.sh
# Environment: OUT (default benchmarks/results/gpu_check), PYTHON (default python3), ITERATIONS (2),
# PER_RUN_S (270); ARCH and DEVICE (qwen2.5-vl-3b, cuda) for a dry run of the script on a CPU:
#   OUT=/tmp/vl ARCH=tiny-vl DEVICE=cpu bash benchmarks/gpu_check_vl.sh
set -uo pipefail
OUT=${OUT:-benchmarks/results/gpu_check}
PYTHON=${PYTHON:-python3}
ITERATIONS=${ITERATIONS:-2}
PER_RUN_S=${PER_RUN_S:-270}
ARCH=${ARCH:-qwen2.5-vl-3b}
DEVICE=${DEVICE:-cuda}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
mkdir -p "$OUT"
[ "$DEVICE" = cpu ] || nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/vl_gpu.txt" || true
status=0
for run in sokoban_visual_seed ezpoints_seed; do
  echo "== $run"
  timeout "$PER_RUN_S" "$PYTHON" benchmarks/gpu_check.py --arch "$ARCH" --device "$DEVICE" \
    --preset "configs/${run}_qwen2.5vl_3b.yaml" --iterations "$ITERATIONS" --no-checkpoint \
    --set log.progress=false --out "$OUT/vl_$run.json" >"$OUT/vl_$run.log" 2>&1
  rc=$?
  if [ "$rc" -ne 0 ]; then
    status=1
    echo "$run failed (exit $rc); the end of $OUT/vl_$run.log:"
    tail -n 20 "$OUT/vl_$run.log"
  else
    "$PYTHON" -c 'import json, sys; d = json.load(open(sys.argv[1]))
keys = ("device", "parameters", "build_model_s", "load_s", "train_s", "peak_gpu_mem_gib", "params_changed_frac",
        "vision_params_changed_frac")
print({k: d.get(k) for k in keys}); [print(s) for s in d["stage_s_per_iteration"]]' "$OUT/vl_$run.json"
  fi
done
exit "$status"
