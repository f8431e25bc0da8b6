"""Per-step cost of a vision-language step against a text step on the CPU (issue 45): the same tiny
Qwen2.5-VL policy and the same Sokoban rooms, the board once as an image (``mode: rgb_array``) and once as
text (``mode: text``), each run by :func:`grpo_speed.run` (the trainer, evaluation off) with
``configs/sokoban_visual_seed_tiny.yaml``. Prints each stage's seconds per step sample (``time/<stage>`` /
``rollout/samples``, summed over the iterations after the first, which pays one-off costs) and writes the
table, the CPU, the commit and the command as JSON with ``--out``.

    python benchmarks/vl_step_cost.py --iterations 8 --threads 2 --out benchmarks/results/speed/vl_step_cost.json

A random-init policy writes no skill, so the teacher's re-scoring is absent in both modes; the
stages compared are rollout, old / reference log-probs, analysis and the update.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from grpo_speed import STAGES, cpu_name, run  # noqa: E402

from seedrl.experiments.compare import git_state  # noqa: E402

CONFIG = "configs/sokoban_visual_seed_tiny.yaml"


def per_step(rows: list[dict]) -> dict[str, float]:
    """Seconds per step sample of each stage over ``rows`` (metrics rows), their total and the sample count."""
    n = sum(r["rollout/samples"] for r in rows)
    out = {s: sum(r.get(f"time/{s}", 0.0) for r in rows) / n for s in STAGES}
    out["total"] = sum(out[s] for s in STAGES)
    out["samples"] = n
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iterations", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    res = {m: per_step(run(CONFIG, args.iterations, [f"env.kwargs.mode={m}", f"torch_threads={args.threads}"])[1:])
           for m in ("rgb_array", "text")}
    print("| stage | image (ms/step) | text (ms/step) | ratio |\n|---|---|---|---|")
    for s in (*STAGES, "total"):
        a, b = res["rgb_array"][s] * 1e3, res["text"][s] * 1e3
        print(f"| {s} | {a:.1f} | {b:.1f} | {a / b:.2f} |" if b else f"| {s} | {a:.1f} | {b:.1f} | – |")
    if args.out:
        git = git_state()
        args.out.write_text(json.dumps({
            "command": "python " + " ".join(sys.argv), "commit": git["commit"] + ("-dirty" if git["dirty"] else ""),
            "cpu": cpu_name(), "threads": args.threads, "model": "tiny-qwen2.5-vl (built from config, init_seed 0)",
            **res}, indent=1) + "\n")


if __name__ == "__main__":
    main()
