"""Success per task type (``Env.task_type``: EZPoints' pair of card values) of every method in a
``seedrl compare`` result folder, at the start and at the last evaluation, pooled over seeds, from the
per-task outcomes each cell records; a type the draw makes common can carry a success rate alone.

    python benchmarks/by_type.py benchmarks/results/ezpoints_tiny [--split valid_seen]
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

from seedrl.envs.panels import build_panel
from seedrl.envs.registry import env_class
from seedrl.errors import SeedRLError
from seedrl.experiments.compare import load_cells


def by_type(out: Path, split: str) -> dict[str, dict[str, dict[str, tuple[int, int]]]]:
    """{method: {"start" | "final": {task type: (won, played)}}} pooled over the method's seeds."""
    table: dict[str, dict[str, dict[str, list[int]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(lambda: [0, 0])))
    for cell in load_cells(out):
        for when, point in (("start", cell["curve"][0]), ("final", cell["curve"][-1])):
            panel = point["panels"][split]
            built = build_panel(cell["env"], split, panel["num_tasks"], **cell["config"]["env"]["kwargs"])
            if built.hash != panel["panel_hash"] or "won" not in panel:
                raise SeedRLError(f"{cell['algo']} seed {cell['seed']}: {split} is not the first {panel['num_tasks']} "
                                  f"tasks of its panel, or has no per-task outcomes; this table cannot type it")
            kind = env_class(cell["env"]).task_type
            for tid, won in zip(built.task_ids, panel["won"], strict=True):
                row = table[cell["algo"]][when][kind(tid)]
                row[0] += won == "1"
                row[1] += 1
    return {m: {w: {k: tuple(v) for k, v in sorted(t.items())} for w, t in d.items()} for m, d in sorted(table.items())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--split", default="valid_seen")
    args = ap.parse_args()
    table = by_type(args.out, args.split)
    kinds = sorted({k for d in table.values() for t in d.values() for k in t})
    print("| method | when | " + " | ".join(kinds) + " |")
    print("|---|---|" + "---|" * len(kinds))
    for m, d in table.items():
        for when in ("start", "final"):
            cells = [f"{d[when][k][0]}/{d[when][k][1]}" if k in d[when] else "-" for k in kinds]
            print(f"| {m} | {when} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
