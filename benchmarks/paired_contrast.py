"""Paired per-seed difference between two methods' final success in one `seedrl compare` runs folder, where
neither is the report's GRPO baseline (e.g. SEED against its uniform-gate control).

    python benchmarks/paired_contrast.py runs/compare/seed_mechanism_s2_early seed+oracle_opd1 seed_nogate+oracle_opd1 \\
        --seeds 5-14 --split valid_seen

Reads each cell's eval.jsonl (the last evaluated iteration of the split), prints the per-seed differences,
their mean and a 95% percentile bootstrap over seeds (10,000 resamples, RNG seed 0). Unlike the compare
report's paired intervals it does not resample the panel's tasks, so its interval is narrower.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path


def final_success(cell: Path, split: str) -> float:
    rows = [json.loads(x) for x in (cell / "eval.jsonl").read_text().splitlines()]
    return max((r for r in rows if r.get("split") == split), key=lambda r: r["iteration"])["success_rate"]


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
    args = ap.parse_args()
    first, last = (int(x) for x in args.seeds.split("-"))
    diffs = [final_success(args.runs / f"{args.a}-seed{s}", args.split)
             - final_success(args.runs / f"{args.b}-seed{s}", args.split) for s in range(first, last + 1)]
    lo, hi = bootstrap(diffs)
    print(f"{args.a} - {args.b}, final {args.split}, seeds {args.seeds}: per seed "
          f"{', '.join(f'{d:+.3f}' for d in diffs)}; mean {sum(diffs) / len(diffs):+.3f} [{lo:+.3f}, {hi:+.3f}] "
          f"({sum(d > 0 for d in diffs)} of {len(diffs)} positive)")


if __name__ == "__main__":
    main()
