"""Does GRPO improve the policy on the very tasks it trains on? A check for a dead RL signal.

A comparison can only ask whether SEED reaches GRPO's success with fewer episodes if GRPO itself
improves. This script reads `seedrl compare` result folders and prints, for each cell:

- at every evaluation point, greedy success on the evaluated tasks that are also *train* tasks (a run
  trained with ``--set env.train_split=valid_seen --set env.train_size=32`` evaluates the 32 rooms it
  trains on beside 96 it never sees) and on the rest of the panel ("other"); where some of those others
  start at the state of an expert demonstration the runs learnt from (the replay pool, a recorded SFT warm
  start's), also on the held-out tasks, the others less those: the report's ``<split>_heldout`` panel,
  built by the same helpers (:func:`seedrl.experiments.heldout.demonstration_start_tasks`, over all the
  folder's cells, where every cell trains on that split), with a line saying how many were left out and
  what could not be checked;
- the training-rollout success (``rollout/success_rate``, temperature of the run) averaged over blocks
  of iterations: runs of one seed draw the same task stream, so blocks compare across cells;
- how far the policy moved: the per-token KL to the reference model (``loss/kl``) at the last iteration,
  the largest per-iteration ``ppo/approx_kl`` with the iteration it happened in, and the largest
  ``ppo/clipfrac``.

    python benchmarks/grpo_fit.py benchmarks/results/sokoban_grpo_fit/fit_lr3e-5 [more folders] [--block 5]

A run with dynamic sampling (``algo.dynamic_sampling``) plays more episodes than its budget counts; the
script prints how many (``sampling/episodes``). ``--eval FILE --trained SPLIT:N`` splits a ``seedrl
eval`` JSON the same way, for a model trained outside ``seedrl compare`` (e.g. a supervised fit of
the first N tasks of SPLIT):

    python benchmarks/grpo_fit.py --eval benchmarks/results/grpo_ladder/evals/capacity32.json --trained valid_seen:32

A cell's ``metrics.jsonl`` is read from ``FOLDER/metrics/<cell>/`` when the folder carries a copy
(committed results), else from the cell's ``run_dir``; without either, only the greedy evaluations are
read. Last, per method: final - iteration-0 success on the trained tasks, on the others (never
trained on) and, where it differs from the others, on the held-out panel, with a 95% interval paired on
seeds and tasks. ``--eval`` splits trained vs other only (a ``seedrl eval`` JSON names no demonstrations).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from seedrl.errors import SeedRLError
from seedrl.experiments.heldout import (
    HELDOUT_SUFFIX,
    demonstration_start_tasks,
    eval_task_ids,
    subset,
    train_task_ids,
)


def split_wins(won: str, task_ids: list[str], trained: set[str]) -> tuple[tuple[int, int], tuple[int, int]]:
    """(wins, tasks) on the trained tasks and on the others of one evaluation's ``won`` string."""
    ins, outs = (subset(won, task_ids, trained, inside) for inside in (True, False))
    return (ins.count("1"), len(ins)), (outs.count("1"), len(outs))


def demonstration_starts(cells: list[dict[str, Any]]) -> dict[str, tuple[set[str], list[str], list[str]]]:
    """``{split: (tasks, checked, unchecked)}`` (:func:`seedrl.experiments.heldout.demonstration_start_tasks`)
    for every evaluated split that all ``cells`` train on, as the report's ``<split>_heldout`` panel takes
    them: one set of tasks for all the cells."""
    return {split: demonstration_start_tasks(cells, split) for split in cells[0]["splits"]
            if all(c["config"]["env"].get("train_split", "train") == split for c in cells)}


def heldout_lines(cells: list[dict[str, Any]], demo: dict[str, tuple[set[str], list[str], list[str]]]) -> list[str]:
    """One line per split with a held-out panel: how many of its untrained tasks start at a demonstration's
    state, against which demonstrations, and what could not be checked."""
    lines = []
    for split, (tasks, checked, unchecked) in demo.items():
        c = cells[0]
        ids = eval_task_ids(c["config"], split, c["curve"][0]["panels"][split].get("panel_hash"))
        trained = train_task_ids(c["config"], c.get("panel_hashes", {}).get("train"))
        others = [t for t in ids if t not in trained]
        n = sum(t in tasks for t in others)
        line = (f"{split}{HELDOUT_SUFFIX}: {len(others) - n} of the {len(others)} other tasks; {n} start at a "
                f"demonstration's state" + (f" ({'; '.join(checked)})" if checked else " (no demonstrations to check)"))
        lines.append(line + (f"; not checked: {'; '.join(unchecked)}" if unchecked else ""))
    return lines


def block_means(values: list[float], block: int) -> list[float]:
    """Means of consecutive blocks of ``block`` values (the last block may be shorter)."""
    return [sum(values[i:i + block]) / len(values[i:i + block]) for i in range(0, len(values), block)]


def movement(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """KL to the reference at the last iteration, the largest per-iteration approx_kl (and its iteration)
    and the largest clip fraction."""
    with_kl = [r for r in rows if "ppo/approx_kl" in r]
    worst = max(with_kl, key=lambda r: r["ppo/approx_kl"]) if with_kl else None
    clips = [r["ppo/clipfrac"] for r in rows if "ppo/clipfrac" in r]
    return {"kl_ref_last": rows[-1].get("loss/kl") if rows else None,
            "approx_kl_max": None if worst is None else worst["ppo/approx_kl"],
            "approx_kl_max_iteration": None if worst is None else worst["iteration"],
            "clipfrac_max": max(clips) if clips else None}


def metrics_rows(folder: Path, cell: dict[str, Any]) -> list[dict[str, Any]]:
    """The run's metrics rows: ``FOLDER/metrics/<cell>/metrics.jsonl`` (a committed copy), else the cell's
    ``run_dir``."""
    from seedrl.experiments.compare import cell_name, read_metrics

    name = cell_name(cell["algo"], cell["seed"])  # "algo" carries a --tag already: seed+oracle_opd1
    for run in (folder / "metrics" / name, Path(cell["run_dir"])):
        if (run / "metrics.jsonl").is_file():
            rows = read_metrics(run)
            if not rows:
                raise SystemExit(f"{run / 'metrics.jsonl'} has no rows")
            return rows
    return []


def change_report(cells: list[dict[str, Any]],
                  demo: dict[str, tuple[set[str], list[str], list[str]]] | None = None) -> list[str]:
    """Per method and panel: final - iteration-0 greedy success on the trained tasks, on the others and,
    where ``demo`` (:func:`demonstration_starts`) names some of the others, on the held-out tasks (the others
    less those), paired on seeds and tasks (:func:`seedrl.experiments.stats.paired_task_bootstrap`). The
    others are tasks the run never trained on; the held-out ones are the report's ``<split>_heldout``."""
    from seedrl.experiments.stats import paired_task_bootstrap

    demo = demo or {}
    by_algo: dict[str, list[dict[str, Any]]] = {}
    for c in cells:
        by_algo.setdefault(c["algo"], []).append(c)
    lines = []
    for algo, group in by_algo.items():
        for split in group[0]["splits"]:
            starts = demo.get(split, (set(),))[0]
            groups = [(True, False, "trained"), (False, False, "other")]
            if starts:
                groups.append((False, True, "held out"))
            for inside, held, label in groups:
                first, last = {}, {}
                for c in group:
                    cfg = c["config"]
                    trained = train_task_ids(cfg, c.get("panel_hashes", {}).get("train"))
                    ids = eval_task_ids(cfg, split, c["curve"][0]["panels"][split].get("panel_hash"))
                    keep = trained | starts if held else trained
                    first[c["seed"]] = subset(c["curve"][0]["panels"][split]["won"], ids, keep, inside)
                    last[c["seed"]] = subset(c["curve"][-1]["panels"][split]["won"], ids, keep, inside)
                n = len(next(iter(first.values())))
                if not n:
                    continue
                r = paired_task_bootstrap(last, first)
                lo, hi = r["ci95"]
                wins = " ".join(f"{first[s].count('1')}->{last[s].count('1')}" for s in sorted(first))
                lines.append(f"{algo} {split} {label} ({n} tasks), final - iteration 0 over {r['n_seeds']} seed(s): "
                             f"{r['mean']:+.3f} [{lo:+.3f}, {hi:+.3f}]; wins by seed {wins}")
    return lines


def report(folder: Path, block: int) -> list[str]:
    from seedrl.experiments.compare import load_cells

    cells = load_cells(folder)
    if not cells:
        raise SystemExit(f"{folder}: no cells/*.json (a `seedrl compare --out` folder?)")
    demo = demonstration_starts(cells)
    lines = [f"{folder.name}: {line}" for line in heldout_lines(cells, demo)]
    for cell in cells:
        cfg = cell["config"]
        trained = train_task_ids(cfg, cell.get("panel_hashes", {}).get("train"))
        e = cfg["env"]
        lines.append(f"{folder.name}: {cell['algo']} seed {cell['seed']}, lr {cfg['optim']['lr']:g}, "
                     f"train {e.get('train_split', 'train')}[:{e.get('train_size') or 'all'}], "
                     f"{cell['budget_episodes']} episodes")
        for split in cell["splits"]:
            ids = eval_task_ids(cfg, split, cell["curve"][0]["panels"][split].get("panel_hash"))
            starts = demo.get(split, (set(),))[0]
            parts = []
            for pt in cell["curve"]:
                (wi, ni), (wo, no) = split_wins(pt["panels"][split]["won"], ids, trained)
                held = subset(pt["panels"][split]["won"], ids, trained | starts, inside=False)
                parts.append(f"{pt['episodes']}: " + (f"trained {wi}/{ni}, other {wo}/{no}" if ni else f"{wo}/{no}")
                             + (f" (held out {held.count('1')}/{len(held)})" if starts else ""))
            lines.append(f"  greedy {split} by episodes: " + "; ".join(parts))
        rows = metrics_rows(folder, cell)
        if not rows:
            lines.append("  (no metrics.jsonl kept for this cell: greedy evaluations only)")
            continue
        # with dynamic sampling rollout/success_rate is over the kept (mixed) groups: use every played episode
        succ = [r.get("sampling/success_rate_played", r.get("rollout/success_rate", 0.0)) for r in rows]
        lines.append(f"  rollout success by {block} iterations: "
                     + " ".join(f"{m:.3f}" for m in block_means(succ, block)))
        if any("sampling/episodes" in r for r in rows):
            lines.append(f"  episodes played (dynamic sampling) {sum(r.get('sampling/episodes', 0) for r in rows)}, "
                         f"groups kept {sum(r.get('sampling/groups_kept', 0) for r in rows)} of "
                         f"{sum(r.get('sampling/groups_played', 0) for r in rows)}, iterations without an update "
                         f"{sum(1 for r in rows if r.get('update/skipped'))}")
        mv = movement(rows)
        kl = "n/a" if mv["kl_ref_last"] is None else f"{mv['kl_ref_last']:.4f}"
        worst = ("n/a" if mv["approx_kl_max"] is None
                 else f"{mv['approx_kl_max']:.2e} (iteration {mv['approx_kl_max_iteration']})")
        clip = "n/a" if mv["clipfrac_max"] is None else f"{mv['clipfrac_max']:.4f}"
        lines.append(f"  kl to reference at the end {kl}; largest approx_kl {worst}; largest clipfrac {clip}; "
                     f"last rollout invalid rate {rows[-1]['rollout/invalid_rate']:.3f}")
    return lines + change_report(cells, demo)


def eval_report(path: Path, trained: str) -> list[str]:
    """Trained vs other wins of each panel of a ``seedrl eval`` JSON; ``trained`` = "SPLIT:N", the first
    N tasks of that split's panel (as ``env.train_split=SPLIT env.train_size=N`` trains on)."""
    import json

    from seedrl.envs.panels import build_panel

    split, _, n = trained.partition(":")
    res = json.loads(path.read_text())
    ids = set(build_panel(res["env"], split, int(n), **res["env_kwargs"]).task_ids)
    lines = []
    for name, panel in res["panels"].items():
        ins = [t["won"] for t in panel["tasks"] if t["task_id"] in ids]
        outs = [t["won"] for t in panel["tasks"] if t["task_id"] not in ids]
        lines.append(f"{path.name} {name}: trained {sum(ins)}/{len(ins)}, other {sum(outs)}/{len(outs)} "
                     f"(success {panel['success_rate']:.3f})")
    return lines


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="*", type=Path)
    ap.add_argument("--block", type=int, default=5, help="iterations per rollout-success block")
    ap.add_argument("--eval", type=Path, action="append", default=[], help="a `seedrl eval` JSON")
    ap.add_argument("--trained", default="valid_seen:32", help="SPLIT:N, the tasks an --eval model trained on")
    a = ap.parse_args(argv)
    if not a.folders and not a.eval:
        ap.error("give a compare folder or --eval FILE")
    try:  # a panel that no longer matches the hash a cell recorded: the one-line reason
        for f in a.folders:
            print("\n".join(report(f, a.block)))
    except SeedRLError as e:
        raise SystemExit(str(e)) from None
    for f in a.eval:
        print("\n".join(eval_report(f, a.trained)))


if __name__ == "__main__":
    main()
