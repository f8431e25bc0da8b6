"""Paired per-seed difference between two methods' success in one `seedrl compare` runs folder, where
neither is the report's GRPO baseline (e.g. SEED against its uniform-gate control).

    python benchmarks/paired_contrast.py runs/compare/seed_mechanism_s2_early seed+oracle_opd1 seed_nogate+oracle_opd1 \\
        --seeds 5-14 --split valid_seen

Reads each cell's eval.jsonl (the last evaluated iteration of the split, or `--iteration N`), prints the per-seed differences,
their mean and a 95% percentile bootstrap over seeds (10,000 resamples, RNG seed 0). Unlike the compare
report's paired intervals it does not resample the panel's tasks, so its interval is narrower.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path


def success(cell: Path, split: str, iteration: int | None = None) -> float:
    """The split's success rate at ``iteration`` (None: the last evaluated one) in the cell's eval.jsonl."""
    rows = [r for r in map(json.loads, (cell / "eval.jsonl").read_text().splitlines()) if r.get("split") == split]
    if not rows:
        raise SystemExit(f"{cell}/eval.jsonl has no {split} evaluation")
    if iteration is None:
        return max(rows, key=lambda r: r["iteration"])["success_rate"]
    at = [r for r in rows if r["iteration"] == iteration]
    if not at:
        raise SystemExit(f"{cell}/eval.jsonl has no {split} evaluation at iteration {iteration} "
                         f"(evaluated: {sorted(r['iteration'] for r in rows)})")
    return at[-1]["success_rate"]


def paired_diffs(runs: Path, a: str, b: str, seeds: range, split: str, iteration: int | None = None) -> list[float]:
    """a - b per seed: cells ``<runs>/<a>-seed<s>`` and ``<runs>/<b>-seed<s>``."""
    return [success(runs / f"{a}-seed{s}", split, iteration) - success(runs / f"{b}-seed{s}", split, iteration)
            for s in seeds]


def bootstrap(xs: list[float], n: int = 10_000, seed: int = 0) -> tuple[float, float]:
    rnd = random.Random(seed)
    means = sorted(sum(rnd.choice(xs) for _ in xs) / len(xs) for _ in range(n))
    return means[int(0.025 * n)], means[int(0.975 * n) - 1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", type=Path)
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--seeds", required=True, help="FIRST-LAST")
    ap.add_argument("--split", default="valid_seen")
    ap.add_argument("--iteration", type=int, default=None, help="the evaluation at this iteration (default: the last)")
    args = ap.parse_args()
    first, last = (int(x) for x in args.seeds.split("-"))
    diffs = paired_diffs(args.runs, args.a, args.b, range(first, last + 1), args.split, args.iteration)
    lo, hi = bootstrap(diffs)
    at = "final" if args.iteration is None else f"iteration {args.iteration}"
    print(f"{args.a} - {args.b}, {at} {args.split}, seeds {args.seeds}: per seed "
          f"{', '.join(f'{d:+.3f}' for d in diffs)}; mean {sum(diffs) / len(diffs):+.3f} [{lo:+.3f}, {hi:+.3f}] "
          f"({sum(d > 0 for d in diffs)} of {len(diffs)} positive)")


if __name__ == "__main__":
    main()
