"""Per-step cost of a vision-language step against a text step on the CPU (issue 45): the same tiny
Qwen2.5-VL policy and the same Sokoban rooms, the board once as an image (``mode: rgb_array``) and once as
text (``mode: text``), through ``seedrl train`` with ``configs/sokoban_visual_seed_tiny.yaml``. Prints each
stage's seconds per step sample (``time/<stage>`` / ``rollout/samples``, summed over the iterations after the
first, which pays one-off costs), and writes the table as JSON with ``--out``.

    python benchmarks/vl_step_cost.py --iterations 4 --out benchmarks/results/speed/vl_step_cost.json

A random-init policy writes no skill, so the teacher's re-scoring is absent in both modes; the
stages compared are rollout, old / reference log-probs, analysis and the update.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

STAGES = ("rollout", "old_logp", "ref_logp", "analysis", "rescore", "update")


def per_step(rows: list[dict]) -> dict[str, float]:
    """Seconds per step sample of each stage over ``rows`` (metrics rows), their total and the sample count."""
    n = sum(r["rollout/samples"] for r in rows)
    out = {s: sum(r.get(f"time/{s}", 0.0) for r in rows) / n for s in STAGES}
    out["total"] = sum(out[s] for s in STAGES)
    out["samples"] = n
    return out


def run(mode: str, iterations: int, threads: int, root: Path) -> dict[str, float]:
    run_dir = root / mode
    cmd = [sys.executable, "-m", "seedrl.cli", "train", "--config", "configs/sokoban_visual_seed_tiny.yaml",
           "--set", f"iterations={iterations}", "--set", f"env.kwargs.mode={mode}", "--set", f"run_dir={run_dir}",
           "--set", "save_every=0", "--set", f"torch_threads={threads}", "--set", "log.progress=false"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return per_step([r for r in rows if r["iteration"] > 1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iterations", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        res = {m: run(m, args.iterations, args.threads, Path(tmp)) for m in ("rgb_array", "text")}
    print("| stage | image (ms/step) | text (ms/step) | ratio |\n|---|---|---|---|")
    for s in (*STAGES, "total"):
        a, b = res["rgb_array"][s] * 1e3, res["text"][s] * 1e3
        print(f"| {s} | {a:.1f} | {b:.1f} | {a / b:.2f} |" if b else f"| {s} | {a:.1f} | {b:.1f} | – |")
    if args.out:
        args.out.write_text(json.dumps({"command": " ".join(sys.argv), "threads": args.threads, **res}, indent=1) + "\n")


if __name__ == "__main__":
    main()
