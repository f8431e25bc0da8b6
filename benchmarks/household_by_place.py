"""Two methods' greedy success on household search, split by where the object lay: the rank of its receptacle
class under the *training* prior (0 = the class the policy learnt to search first). Where a method's lead
comes from: a hindsight skill that says where the object was should help most where the prior is wrong.

    python benchmarks/household_by_place.py runs/compare/seed_mechanism_s3_confirm seed+self_opd1 grpo \\
        --seeds 20-29 --iteration 8

Reads each cell's ``eval/iter_<iteration>_<split>.json`` (per-task outcomes) for valid_seen and valid_unseen;
prints, per rank (3 and beyond pooled), the episodes per method and each method's success.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

from seedrl.envs.household.world import place_rank


def by_place(runs: Path, a: str, b: str, seeds: range, split: str, iteration: int,
             top: int = 3) -> dict[int, dict[str, float]]:
    """{rank (``top`` pools it and beyond): {"n": episodes per method, a: success, b: success}}."""
    won: dict[int, dict[str, int]] = defaultdict(lambda: {"n": 0, a: 0, b: 0})
    for s in seeds:
        for m in (a, b):
            f = runs / f"{m}-seed{s}" / "eval" / f"iter_{iteration:06d}_{split}.json"
            if not f.exists():
                raise SystemExit(f"{f} is missing")
            for t in json.loads(f.read_text())["tasks"]:
                r = min(place_rank(t["task_id"]), top)
                won[r][m] += bool(t["won"])
                won[r]["n"] += m == a
    return {r: {"n": w["n"], a: w[a] / w["n"], b: w[b] / w["n"]} for r, w in sorted(won.items())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", type=Path)
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--seeds", required=True, help="FIRST-LAST")
    ap.add_argument("--iteration", type=int, required=True)
    args = ap.parse_args()
    first, last = (int(x) for x in args.seeds.split("-"))
    for split in ("valid_seen", "valid_unseen"):
        print(split)
        for r, row in by_place(args.runs, args.a, args.b, range(first, last + 1), split, args.iteration).items():
            print(f"  prior rank {r}{'+' if r == 3 else ''}: {row['n']} episodes per method, {args.a} {row[args.a]:.3f}, "
                  f"{args.b} {row[args.b]:.3f}, difference {row[args.a] - row[args.b]:+.3f}")


if __name__ == "__main__":
    main()
