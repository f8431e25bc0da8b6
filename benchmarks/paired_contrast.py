"""Paired per-seed difference between two methods' success in one `seedrl compare` runs folder, where
neither is the report's GRPO baseline (e.g. SEED against its uniform-gate control).

    python benchmarks/paired_contrast.py runs/compare/seed_mechanism_s2_early seed+oracle_opd1 seed_nogate+oracle_opd1 \\
        --seeds 5-14 --split valid_seen

Reads each cell's eval.jsonl (the last evaluated iteration of the split, or `--iteration N`), prints the
per-seed differences, their mean, and two 95 % intervals from `seedrl.experiments.stats`: over seeds only
(`paired_difference_ci`) and over seeds and the panel's tasks (`paired_task_bootstrap`, the compare report's
paired interval, from each evaluation's per-task outcomes).

Several runs folders pool their seeds (each cell read from the first folder that has it); `--tasks N` reads
every evaluation's first N tasks only, the head that panels of different sizes share (a household panel of
192 begins with the panel of 96):

    python benchmarks/paired_contrast.py runs/compare/seed_mechanism_s3 runs/compare/seed_mechanism_s3_confirm \
        seed+self_opd1 grpo --seeds 15-29 --tasks 96

`--min-place-rank R` (household search) keeps only the games whose object lay in a receptacle class of rank R
or beyond under the training prior (`seedrl.envs.household.world.place_rank`: 0 = the class a policy trained on train
searches first), every evaluation filtered by its own task ids, which must then agree between the paired
cells: the off-prior games a hindsight skill is about. `--max-place-rank R` bounds it from above
(`--max-place-rank 0`: only the games where the prior's favourite place is right).

    python benchmarks/paired_contrast.py runs/compare/seed_mechanism_s3_offprior seed+self_opd1 grpo \
        --seeds 30-39 --min-place-rank 1

A method written as FOLDER/METHOD is read from that folder only: the same method under two recipes, each its
own comparison folder, paired by seed:

    python benchmarks/paired_contrast.py runs/compare/seed_mechanism_s3_mean/grpo \
        runs/compare/seed_mechanism_s3_confirm/grpo --seeds 20-24
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
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


def task_ids(cell: Path, split: str, iteration: int) -> list[str]:
    """The task ids of one evaluation, in panel order (``eval/iter_<it>_<split>.json``)."""
    f = cell / "eval" / f"iter_{iteration:06d}_{split}.json"
    if not f.exists():
        raise SystemExit(f"{f} is missing: a task filter needs every evaluation's per-task outcomes")
    return [t["task_id"] for t in json.loads(f.read_text())["tasks"]]


def place_filter(min_rank: int = 0, max_rank: int | None = None) -> Callable[[str], bool]:
    """Household games whose object's place ranks ``min_rank`` to ``max_rank`` (both kept; None: no upper bound)
    under the training prior."""
    from seedrl.envs.household.world import place_rank

    return lambda task_id: min_rank <= place_rank(task_id) and (max_rank is None or place_rank(task_id) <= max_rank)


def cell_dir(runs: Sequence[Path], name: str) -> Path:
    """The cell ``name`` in the first of the ``runs`` folders that has it."""
    for r in runs:
        if (r / name).is_dir():
            return r / name
    raise SystemExit(f"no cell {name} in {', '.join(map(str, runs))}")


def contrast(runs: Path | Sequence[Path], a: str, b: str, seeds: range, split: str, iteration: int | None = None,
             tasks: int | None = None, keep: Callable[[str], bool] | None = None) -> dict:
    """``a - b`` per seed (cells ``<runs>/<a>-seed<s>``, ``<runs>/<b>-seed<s>``) with the seeds-only interval
    and, where every evaluation kept its per-task outcomes, the seeds x tasks one (else None). ``tasks``: each
    evaluation's first N tasks only (then every evaluation needs its per-task outcomes); ``keep``: only the tasks
    whose id it accepts (after ``tasks``), the same ids in both cells of a seed, in the same order."""
    runs = [runs] if isinstance(runs, Path) else list(runs)
    where = {m: ([Path(m).parent], Path(m).name) if "/" in m else (runs, m) for m in (a, b)}
    cells = {m: {s: cell_dir(where[m][0], f"{where[m][1]}-seed{s}") for s in seeds} for m in (a, b)}
    rows = {m: {s: evaluation(c, split, iteration) for s, c in cells[m].items()} for m in (a, b)}
    won = {m: {s: task_outcomes(cells[m][s], r["iteration"], split) for s, r in rows[m].items()} for m in (a, b)}
    complete = all(w for m in won.values() for w in m.values())
    if tasks is not None:
        if not complete:
            raise SystemExit("--tasks needs every evaluation's per-task outcomes (eval/iter_*_<split>.json)")
        short = min(len(w) for m in won.values() for w in m.values())
        if short < tasks:
            raise SystemExit(f"--tasks {tasks}: an evaluation has only {short} tasks")
        won = {m: {s: w[:tasks] for s, w in won[m].items()} for m in won}
    if keep is not None:
        if not complete:
            raise SystemExit("a task filter needs every evaluation's per-task outcomes (eval/iter_*_<split>.json)")
        ids = {m: {s: task_ids(cells[m][s], split, r["iteration"])[:len(won[m][s])] for s, r in rows[m].items()}
               for m in won}
        for s in seeds:
            if ids[a][s] != ids[b][s]:
                raise SystemExit(f"seed {s}: {a} and {b} were evaluated on different tasks; cannot pair them")
        kept = {s: [i for i, t in enumerate(ids[a][s]) if keep(t)] for s in seeds}
        if not all(kept.values()):
            raise SystemExit("the task filter keeps no task of some evaluation")
        won = {m: {s: "".join(w[i] for i in kept[s]) for s, w in won[m].items()} for m in won}
    if tasks is not None or keep is not None:
        rate = {m: {s: w.count("1") / len(w) for s, w in won[m].items()} for m in won}
    else:
        rate = {m: {s: r["success_rate"] for s, r in rows[m].items()} for m in rows}
    seeds_only = paired_difference_ci(rate[a], rate[b])
    return {"seeds": seeds_only, "tasks": paired_task_bootstrap(won[a], won[b]) if complete else None,
            "games": {s: len(w) for s, w in won[a].items()} if complete else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", type=Path, nargs="*", help="runs folders (their seeds pooled)")
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--seeds", required=True, help="FIRST-LAST")
    ap.add_argument("--split", default="valid_seen")
    ap.add_argument("--iteration", type=int, default=None, help="the evaluation at this iteration (default: the last)")
    ap.add_argument("--tasks", type=int, default=None, help="each evaluation's first N tasks only")
    ap.add_argument("--min-place-rank", type=int, default=None,
                    help="household: only games whose object's place ranks R or beyond under the training prior")
    ap.add_argument("--max-place-rank", type=int, default=None,
                    help="household: only games whose object's place ranks R or before (0: the prior's favourite)")
    args = ap.parse_args()
    first, last = (int(x) for x in args.seeds.split("-"))
    ranked = args.min_place_rank is not None or args.max_place_rank is not None
    keep = place_filter(args.min_place_rank or 0, args.max_place_rank) if ranked else None
    c = contrast(args.runs, args.a, args.b, range(first, last + 1), args.split, args.iteration, args.tasks, keep)
    d = list(c["seeds"]["per_seed"].values())
    lo, hi = c["seeds"]["ci95"]
    at = "final" if args.iteration is None else f"iteration {args.iteration}"
    tasks = (f"; seeds x tasks [{c['tasks']['ci95'][0]:+.3f}, {c['tasks']['ci95'][1]:+.3f}]" if c["tasks"]
             else "; no per-task outcomes for the seeds x tasks interval")
    head = f", first {args.tasks} tasks" if args.tasks else ""
    if keep is not None:
        n = sorted(set(c["games"].values()))
        bounds = " and ".join(f"{op} {r}" for op, r in ((">=", args.min_place_rank), ("<=", args.max_place_rank))
                              if r is not None)
        head += f", games with place rank {bounds} ({'/'.join(map(str, n))} a seed)"
    print(f"{args.a} - {args.b}, {at} {args.split}{head}, seeds {args.seeds}: per seed "
          f"{', '.join(f'{x:+.3f}' for x in d)}; mean {c['seeds']['mean']:+.3f}, seeds only [{lo:+.3f}, {hi:+.3f}]"
          f"{tasks} ({sum(x > 0 for x in d)} of {len(d)} positive)")


if __name__ == "__main__":
    main()
