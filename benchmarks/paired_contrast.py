"""Paired per-seed difference between two methods' success in one `seedrl compare` runs folder, where
neither is the report's GRPO baseline (e.g. SEED against its uniform-gate control).

    python benchmarks/paired_contrast.py runs/compare/seed_mechanism_s2_early seed+oracle_opd1 seed_nogate+oracle_opd1 \\
        --seeds 5-14 --split valid_seen

Reads each cell's eval.jsonl (the last evaluated iteration of the split, or `--iteration N`), prints the
per-seed differences, their mean, and two 95 % intervals from `seedrl.experiments.stats`: over seeds only
(`paired_difference_ci`) and over seeds and the panel's tasks (`paired_task_bootstrap`, the compare report's
paired interval, from each evaluation's per-task outcomes).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from seedrl.experiments.compare import task_outcomes
from seedrl.experiments.stats import paired_difference_ci, paired_task_bootstrap


def evaluation(cell: Path, split: str, iteration: int | None = None) -> dict:
    """The split's eval.jsonl row at ``iteration`` (None: the last evaluated one) of the cell."""
    rows = [r for r in map(json.loads, (cell / "eval.jsonl").read_text().splitlines()) if r.get("split") == split]
    if not rows:
        raise SystemExit(f"{cell}/eval.jsonl has no {split} evaluation")
    if iteration is None:
        return max(rows, key=lambda r: r["iteration"])
    at = [r for r in rows if r["iteration"] == iteration]
    if not at:
        raise SystemExit(f"{cell}/eval.jsonl has no {split} evaluation at iteration {iteration} "
                         f"(evaluated: {sorted(r['iteration'] for r in rows)})")
    return at[-1]


def contrast(runs: Path, a: str, b: str, seeds: range, split: str, iteration: int | None = None) -> dict:
    """``a - b`` per seed (cells ``<runs>/<a>-seed<s>``, ``<runs>/<b>-seed<s>``) with the seeds-only interval
    and, where every evaluation kept its per-task outcomes, the seeds x tasks one (else None)."""
    rows = {m: {s: evaluation(runs / f"{m}-seed{s}", split, iteration) for s in seeds} for m in (a, b)}
    seeds_only = paired_difference_ci({s: r["success_rate"] for s, r in rows[a].items()},
                                      {s: r["success_rate"] for s, r in rows[b].items()})
    won = {m: {s: task_outcomes(runs / f"{m}-seed{s}", r["iteration"], split) for s, r in rows[m].items()}
           for m in (a, b)}
    complete = all(w for m in won.values() for w in m.values())
    return {"seeds": seeds_only, "tasks": paired_task_bootstrap(won[a], won[b]) if complete else None}


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
    c = contrast(args.runs, args.a, args.b, range(first, last + 1), args.split, args.iteration)
    d = list(c["seeds"]["per_seed"].values())
    lo, hi = c["seeds"]["ci95"]
    at = "final" if args.iteration is None else f"iteration {args.iteration}"
    tasks = (f"; seeds x tasks [{c['tasks']['ci95'][0]:+.3f}, {c['tasks']['ci95'][1]:+.3f}]" if c["tasks"]
             else "; no per-task outcomes for the seeds x tasks interval")
    print(f"{args.a} - {args.b}, {at} {args.split}, seeds {args.seeds}: per seed "
          f"{', '.join(f'{x:+.3f}' for x in d)}; mean {c['seeds']['mean']:+.3f}, seeds only [{lo:+.3f}, {hi:+.3f}]"
          f"{tasks} ({sum(x > 0 for x in d)} of {len(d)} positive)")


if __name__ == "__main__":
    main()
