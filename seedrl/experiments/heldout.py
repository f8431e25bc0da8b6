"""Held-out sub-panels of a comparison whose training tasks are part of an evaluated panel.

A fit check trains on the first N tasks of an evaluation split (``env.train_split=valid_seen
env.train_size=32``) and evaluates the whole split, so one panel mixes the tasks the run trains on with
tasks it never sees. :func:`with_heldout_panels` adds to every cell the panel ``<split>_heldout``: the
same evaluations restricted to the tasks that are *not* in the cell's train panel, with their own
success, per-task outcomes, final and best values, so every table of the report (final, best, what
training changed, sample efficiency) can be read on tasks no run trained on.

The task ids are rebuilt from each cell's config (as the trainer built its panels) and checked against
the panel hashes the cell recorded: a changed env or option fails here instead of pairing one task's
outcome with another task.
"""

from __future__ import annotations

import copy
from typing import Any

from seedrl.errors import SeedRLError

HELDOUT_SUFFIX = "_heldout"


def _checked(panel, stored_hash: str | None, what: str):
    if stored_hash is not None and not panel.matches(stored_hash):
        raise SeedRLError(f"the {what} panel rebuilt from the cell's config has hash {panel.hash}, the cell "
                          f"recorded {stored_hash}: the env or its options changed since the run")
    return panel


def train_task_ids(config: dict[str, Any], stored_hash: str | None = None) -> set[str]:
    """The task ids of a run's train panel, rebuilt from its config as the trainer builds it."""
    from seedrl.envs.panels import build_panel

    e = config["env"]
    panel = build_panel(e["name"], e.get("train_split", "train"), e.get("train_size"), **e["kwargs"])
    return set(_checked(panel, stored_hash, "train").task_ids)


def eval_task_ids(config: dict[str, Any], split: str, stored_hash: str | None = None) -> list[str]:
    """The task ids of one evaluated panel (the trainer's ``subset(eval.num_tasks)``), in the order of a
    cell's ``won`` strings."""
    from seedrl.envs.panels import build_panel

    e = config["env"]
    panel = build_panel(e["name"], split, None, **e["kwargs"]).subset(config["eval"]["num_tasks"])
    return list(_checked(panel, stored_hash, split).task_ids)


def subset(won: str, task_ids: list[str], keep: set[str], inside: bool) -> str:
    """The outcomes of ``won`` on the tasks in ``keep`` (``inside``) or on the others, in panel order."""
    if len(won) != len(task_ids):
        raise ValueError(f"{len(won)} outcomes for a panel of {len(task_ids)} tasks")
    return "".join(w for w, t in zip(won, task_ids) if (t in keep) == inside)


def with_heldout_panels(cells: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """``(cells', derived)``: copies of ``cells`` with a ``<split>_heldout`` panel after every evaluated
    split that contains train tasks, and ``{name: description}`` of each added panel.

    A panel is added only when every cell trained on that split and recorded per-task outcomes at every
    evaluation point, so that all cells carry the same panels. ``cells`` is not modified, and is returned
    as it is (not copied) where no panel is added."""
    if not cells:
        return cells, {}
    splits = list(cells[0]["splits"])
    found: dict[str, tuple[str, list[list[str]], int]] = {}  # name -> (split, per cell: outcomes per point, trained)
    for split in splits:
        name = split + HELDOUT_SUFFIX
        if name in splits or not all(c.get("config", {}).get("env", {}).get("train_split", "train") == split
                                     and all(p["panels"][split].get("won") for p in c["curve"]) for c in cells):
            continue
        subs = []  # per cell: the held-out outcomes at every evaluation point
        n_in = set()
        for c in cells:
            trained = train_task_ids(c["config"], c.get("panel_hashes", {}).get("train"))
            ids = eval_task_ids(c["config"], split, c["curve"][0]["panels"][split].get("panel_hash"))
            subs.append([subset(p["panels"][split]["won"], ids, trained, inside=False) for p in c["curve"]])
            n_in.add(len(ids) - len(subs[-1][0]))
        if subs[0][0] and n_in != {0} and len(n_in) == 1:  # else all or none of its tasks were trained on,
            found[name] = (split, subs, n_in.pop())        # or the cells trained on different parts
    if not found:
        return cells, {}
    out = copy.deepcopy(cells)
    derived: dict[str, str] = {}
    for name, (split, subs, n_in) in found.items():
        for c, cell_subs in zip(out, subs):
            for p, won in zip(c["curve"], cell_subs):
                p["panels"][name] = {"success": won.count("1") / len(won), "num_tasks": len(won), "won": won}
            c["splits"] = [*c["splits"], name]
            c["final"][name] = c["curve"][-1]["panels"][name]["success"]
            best = next(p for p in c["curve"] if p["iteration"] == c["best"]["iteration"])
            c["best"]["success"][name] = best["panels"][name]["success"]
        derived[name] = (f"the {len(subs[0][0])} tasks of {split} outside the train panel (the runs train on the "
                         f"other {n_in}: env.train_split={split}, "
                         f"env.train_size={cells[0]['config']['env'].get('train_size')})")
    return out, derived
