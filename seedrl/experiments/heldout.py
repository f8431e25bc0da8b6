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

A task outside the train panel can still be one the runs learnt: its first state may be a state of an
expert demonstration they were trained on (a small env repeats states across splits: 21 of the 96
held-out 5x5 sokoban rooms of ``benchmarks/results/sample_efficiency`` start where a replayed
demonstration of a ``train`` room stands at some step, with the same expert action). The held-out panel
also leaves out every task whose step-0 prompt is the prompt of such a demonstration
(:func:`demonstration_start_tasks`): those of the replay pool (``algo.replay_coef`` > 0, rebuilt from the
cell's config) and those of the SFT warm start, where the cell recorded that its start is a ``seedrl sft``
run's model and that run's config (``start.sft``, :func:`seedrl.experiments.compare.start_record`). What
could not be checked (a cell written before it recorded its start, an SFT data file, a start of unknown
origin) is named in the panel's description. Skill-conditioned demonstrations carry a skill in their
prompt, which no evaluation prompt does: they cannot match.
"""

from __future__ import annotations

import copy
import json
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


def _key(messages: list[dict[str, str]]) -> str:
    return json.dumps(messages, sort_keys=True)


def start_prompts(config: dict[str, Any], task_ids: list[str]) -> dict[str, str]:
    """``{task id: its step-0 prompt}`` (the chat messages as JSON) under a cell's env config, built as the
    evaluation builds them (no history at step 0)."""
    from seedrl.agent.prompts import build_step_prompt, step_messages
    from seedrl.envs.registry import env_class, make_env

    e = config["env"]
    title = env_class(e["name"]).title or e["name"]
    env = make_env(e["name"], **e["kwargs"])
    out = {}
    try:
        for t in task_ids:
            obs = env.reset(t)
            text = build_step_prompt(title, env.task_description, obs, [], 0, e["history_length"],
                                     env.admissible_actions(), env.instruction, env.prompt_style)
            out[t] = _key(step_messages(text))
    finally:
        env.close()
    return out


def replay_source(config: dict[str, Any]) -> dict[str, Any] | None:
    """The arguments of :func:`seedrl.train.update.replay_demonstrations` a run with this config replayed
    (keys it predates take today's defaults); None without replay."""
    from seedrl.config import AlgoConfig

    a, e = config.get("algo", {}), config["env"]
    if not a.get("replay_coef", 0) > 0:
        return None
    fields = AlgoConfig.model_fields
    return {"env_name": e["name"], "env_kwargs": e["kwargs"],
            "tasks": a.get("replay_demo_tasks", fields["replay_demo_tasks"].default),
            "max_steps": e["max_steps"], "history_length": e["history_length"],
            "noise": a.get("replay_demo_noise", fields["replay_demo_noise"].default), "seed": config["seed"]}


def sft_source(sft: dict[str, Any]) -> dict[str, Any] | None:
    """What :func:`sft_demonstrations` rebuilds of a ``seedrl sft`` run's expert demonstrations (``sft``:
    its resolved config): ``run_sft``'s first ``demo_tasks`` tasks of ``env.train_split`` (``mix_demo_tasks``
    beside a data file); None where it played none."""
    e = sft["env"]
    n = sft.get("mix_demo_tasks", 0) if sft.get("data") else sft["demo_tasks"]
    if not n:
        return None
    # the panel is built with env.kwargs, the expert plays with sft.demo_env_kwargs on top where it has some
    return {"env_name": e["name"], "panel_kwargs": e["kwargs"],
            "env_kwargs": e["kwargs"] | (sft.get("demo_env_kwargs") or {}), "split": e.get("train_split", "train"),
            "size": e.get("train_size"), "tasks": n, "max_steps": e["max_steps"],
            "history_length": e["history_length"], "noise": sft["demo_noise"], "seed": sft["seed"]}


def sft_demonstrations(src: dict[str, Any]) -> list[dict[str, Any]]:
    """The expert rows ``seedrl sft`` trained on (:func:`seedrl.train.sft.run_sft`), from :func:`sft_source`."""
    from seedrl.envs.panels import build_panel
    from seedrl.train.sft import expert_demonstrations

    panel = build_panel(src["env_name"], src["split"], src["size"], **src["panel_kwargs"])
    return expert_demonstrations(src["env_name"], src["env_kwargs"], list(panel.task_ids[:src["tasks"]]),
                                 max_steps=src["max_steps"], history_length=src["history_length"],
                                 noise=src["noise"], seed=src["seed"])


def _describe(kind: str, srcs: list[dict[str, Any]]) -> str:
    seeds = ", ".join(str(s) for s in sorted({s["seed"] for s in srcs}))
    by = {json.dumps({k: v for k, v in s.items() if k != "seed"}, sort_keys=True): s for s in srcs}
    parts = []
    for s in by.values():
        if kind == "replay":
            parts.append(f"the replay pool (the expert on the first {s['tasks']} train tasks, noise {s['noise']}, "
                         f"{s['max_steps']} steps, seed{'s' if ',' in seeds else ''} {seeds})")
        else:
            parts.append(f"the SFT warm start's demonstrations (the expert on the first {s['tasks']} "
                         f"{s['split']} tasks, noise {s['noise']}, {s['max_steps']} steps, seed{'s' if ',' in seeds else ''} "
                         f"{seeds})")
    return "; ".join(parts)


def demonstration_start_tasks(cells: list[dict[str, Any]], split: str) -> tuple[set[str], list[str], list[str]]:
    """``(tasks, checked, unchecked)``: the tasks of the cells' evaluated ``split`` panel whose step-0
    prompt is the prompt of an expert demonstration any of the cells learnt from, at any step (one set for
    all cells, so that they keep one panel); ``checked``: the demonstrations compared with, in words;
    ``unchecked``: what could not be checked, in words. No env is built where there is nothing to check."""
    from seedrl.models.loading import TINY_CONFIGS
    from seedrl.train.update import replay_demonstrations

    replay: dict[str, dict[str, Any]] = {}
    sft: dict[str, dict[str, Any]] = {}
    unchecked: list[str] = []
    no_start = 0
    for c in cells:
        src = replay_source(c["config"])
        if src is not None:
            replay[json.dumps(src, sort_keys=True)] = src
        start = c.get("start")
        if start is None:
            no_start += 1
        elif start.get("sft"):
            s = sft_source(start["sft"])
            if s is not None:
                sft[json.dumps(s, sort_keys=True)] = s
            if start["sft"].get("data"):
                unchecked.append(f"the SFT data file {start['sft']['data']} of the start (not recorded in the cell)")
        elif c["config"]["model"]["name"] not in TINY_CONFIGS:
            unchecked.append(f"what the start {c['config']['model']['name']} learnt from (not a seedrl sft "
                             f"run's model)")
    if no_start:
        unchecked.append(f"the start's SFT data, not recorded in {no_start} of {len(cells)} cells (written "
                         f"before cells recorded their start)")
    unchecked = list(dict.fromkeys(unchecked))
    checked = [d for kind, srcs in (("replay", replay), ("sft", sft)) if srcs
               for d in [_describe(kind, list(srcs.values()))]]
    if not replay and not sft:
        return set(), checked, unchecked
    demos = {_key(r["messages"]) for src in replay.values() for r in replay_demonstrations(**src)}
    demos |= {_key(r["messages"]) for src in sft.values() for r in sft_demonstrations(src)}
    tasks: set[str] = set()
    seen: set[str] = set()
    for c in cells:
        env = json.dumps({k: c["config"]["env"][k] for k in ("name", "kwargs", "history_length")}, sort_keys=True)
        if env in seen:
            continue
        seen.add(env)
        tasks |= {t for t, p in start_prompts(c["config"], eval_task_ids(c["config"], split)).items() if p in demos}
    return tasks, checked, unchecked


def subset(won: str, task_ids: list[str], keep: set[str], inside: bool) -> str:
    """The outcomes of ``won`` on the tasks in ``keep`` (``inside``) or on the others, in panel order."""
    if len(won) != len(task_ids):
        raise ValueError(f"{len(won)} outcomes for a panel of {len(task_ids)} tasks")
    return "".join(w for w, t in zip(won, task_ids) if (t in keep) == inside)


def with_heldout_panels(cells: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """``(cells', derived)``: copies of ``cells`` with a ``<split>_heldout`` panel after every evaluated
    split that contains train tasks, and ``{name: description}`` of each added panel.

    A panel is added only when every cell trained on that split and recorded per-task outcomes at every
    evaluation point, so that all cells carry the same panels. It also leaves out the tasks whose first
    prompt is an expert demonstration's prompt (:func:`demonstration_start_tasks`), and its description
    says how many, against which demonstrations, and what could not be checked. ``cells`` is not
    modified, and is returned as it is (not copied) where no panel is added."""
    if not cells:
        return cells, {}
    splits = list(cells[0]["splits"])
    # name -> (split, per cell: outcomes per point, trained, demonstration starts, checked, unchecked)
    found: dict[str, tuple[str, list[list[str]], int, int, list[str], list[str]]] = {}
    for split in splits:
        name = split + HELDOUT_SUFFIX
        if name in splits or not all(c.get("config", {}).get("env", {}).get("train_split", "train") == split
                                     and all(p["panels"][split].get("won") for p in c["curve"]) for c in cells):
            continue
        panels = [(train_task_ids(c["config"], c.get("panel_hashes", {}).get("train")),
                   eval_task_ids(c["config"], split, c["curve"][0]["panels"][split].get("panel_hash"))) for c in cells]
        demo, checked, unchecked = demonstration_start_tasks(cells, split)
        subs = []  # per cell: the held-out outcomes at every evaluation point
        counts = set()  # per cell: (tasks of the panel trained on, others that start at a demonstration state)
        for c, (trained, ids) in zip(cells, panels):
            subs.append([subset(p["panels"][split]["won"], ids, trained | demo, inside=False) for p in c["curve"]])
            counts.add((sum(t in trained for t in ids), sum(t in demo and t not in trained for t in ids)))
        if subs[0][0] and len(counts) == 1 and min(counts)[0]:  # else none of its tasks were trained on, or
            n_in, n_demo = counts.pop()                        # the cells trained on different parts
            found[name] = (split, subs, n_in, n_demo, checked, unchecked)
    if not found:
        return cells, {}
    out = copy.deepcopy(cells)
    derived: dict[str, str] = {}
    for name, (split, subs, n_in, n_demo, checked, unchecked) in found.items():
        for c, cell_subs in zip(out, subs):
            for p, won in zip(c["curve"], cell_subs):
                p["panels"][name] = {"success": won.count("1") / len(won), "num_tasks": len(won), "won": won}
            c["splits"] = [*c["splits"], name]
            c["final"][name] = c["curve"][-1]["panels"][name]["success"]
            best = next(p for p in c["curve"] if p["iteration"] == c["best"]["iteration"])
            c["best"]["success"][name] = best["panels"][name]["success"]
        size = cells[0]["config"]["env"].get("train_size")
        if not checked:
            text = (f"the {len(subs[0][0])} tasks of {split} outside the train panel (the runs train on the other "
                    f"{n_in}: env.train_split={split}, env.train_size={size})")
        else:
            text = (f"the {len(subs[0][0])} tasks of {split} outside the train panel and outside the expert "
                    f"demonstrations the runs learnt from (the runs train on {n_in} others: env.train_split={split}, "
                    f"env.train_size={size}; {n_demo} more start at a demonstration's state, their step-0 prompt "
                    f"being a demonstration prompt of {'; '.join(checked)})")
        derived[name] = text + (f"; not checked: {'; '.join(unchecked)}" if unchecked else "")
    return out, derived
