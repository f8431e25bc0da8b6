"""SEED Stage 1 data: the outcome mix the analyzer learns from."""

from __future__ import annotations

import pytest

from seedrl.train.stage1 import balance_outcomes


def _rows(outcomes: str) -> list[dict]:
    return [{"task_id": f"t{i}", "success": c == "s"} for i, c in enumerate(outcomes)]


@pytest.mark.parametrize("outcomes,frac", [("sssssssssf", 0.5), ("ssssffssss", 0.3), ("sfsfsfssss", 0.6),
                                           ("ssf", 0.34), ("sssf", 1.0)])
def test_balancing_reaches_the_failure_fraction_by_dropping_successes_only(outcomes, frac):
    rows = _rows(outcomes)
    kept, note = balance_outcomes(rows, frac)
    failures = [r for r in kept if not r["success"]]
    assert note is None
    assert failures == [r for r in rows if not r["success"]]  # every failure kept, in order
    assert len(failures) / len(kept) >= frac
    # as many successes as the fraction allows: one more would break it
    assert (len(failures) / (len(kept) + 1) < frac) or len(kept) == len(rows)
    assert [r["task_id"] for r in kept] == sorted((r["task_id"] for r in kept), key=lambda t: int(t[1:]))


def test_balancing_leaves_enough_failures_alone_and_says_why_when_there_are_none():
    rows = _rows("ffsf")
    assert balance_outcomes(rows, 0.5) == (rows, None)
    assert balance_outcomes(rows, 0.0) == (rows, None)
    kept, note = balance_outcomes(_rows("ssss"), 0.5)
    assert len(kept) == 4 and "no failed trajectory among 4" in note and "temperature" in note


@pytest.mark.parametrize("outcomes,frac", [("fffffffffs", 0.5), ("ffffssffff", 0.7), ("fsfsfsffff", 0.4),
                                           ("ffs", 0.66), ("fffs", 0.0)])
def test_balancing_caps_the_failure_fraction_by_dropping_failures_only(outcomes, frac):
    """--max-failure-frac: at the RL temperature most trajectories fail, and a self-analyzer then sees few
    of the successes it must learn to name a found place from."""
    rows = _rows(outcomes)
    kept, note = balance_outcomes(rows, 0.0, frac)
    failures = [r for r in kept if not r["success"]]
    assert note is None
    assert [r for r in kept if r["success"]] == [r for r in rows if r["success"]]  # every success kept
    assert len(failures) / len(kept) <= frac
    assert (len(failures) + 1) / (len(kept) + 1) > frac  # as many failures as the cap allows
    assert [r["task_id"] for r in kept] == sorted((r["task_id"] for r in kept), key=lambda t: int(t[1:]))


def test_balancing_cap_says_why_without_successes_and_refuses_crossed_bounds():
    kept, note = balance_outcomes(_rows("ffff"), 0.0, 0.5)
    assert len(kept) == 4 and "no successful trajectory among 4" in note and "temperature" in note
    rows = _rows("ssff")
    assert balance_outcomes(rows, 0.5, 0.5) == (rows, None)
    from seedrl.errors import SeedRLError

    with pytest.raises(SeedRLError, match="min-failure-frac <= --max-failure-frac"):
        balance_outcomes(rows, 0.6, 0.5)


def test_skill_demonstrations_carry_the_skill_where_teacher_prompts_do_and_the_experts_action(tiny_tokenizer):
    """Same tasks and seed as plain demonstrations: every row is the plain row with the skill placed by
    the teacher prompt's own placement (SEED: after the task line), and the expert's action as target."""
    from seedrl.methods.teacher import teacher_prompt_ids
    from seedrl.rollout.runner import encode_messages
    from seedrl.skills.injection import has_skill
    from seedrl.train.sft import expert_demonstrations, skill_demonstrations

    kw = dict(max_steps=8, history_length=1, noise=0.0)
    tasks = [f"5x5-b1-s{i:05d}" for i in range(6)]
    env_kwargs = {"dim": [5, 5], "unseen_dim": [6, 6]}
    skilled = skill_demonstrations("sokoban", env_kwargs, tasks, attempt_noise=0.7, seed=3, **kw)
    assert {r["task_id"] for r in skilled} == set(tasks)
    assert any(not r["attempt_won"] for r in skilled) and any(r["attempt_won"] for r in skilled)
    for task in tasks:
        plain = expert_demonstrations("sokoban", env_kwargs, [task], seed=0, **kw)
        rows = [r for r in skilled if r["task_id"] == task]
        assert len(rows) == len(plain) > 0
        for p, r in zip(plain, rows):
            assert r["response"] == p["response"]  # the expert's action, skill or not
            assert has_skill(r["messages"][-1]["content"]) and not has_skill(p["messages"][-1]["content"])
            assert encode_messages(tiny_tokenizer, r["messages"]) == teacher_prompt_ids(
                "after_task", tiny_tokenizer, p["messages"], r["skill"], max_tokens=100_000)


# -- which tasks Stage 1 plays (issue 33, item 1) ---------------------------------------------------
def _type_sorted_panel(env_name: str):
    """The env's train panel with its ids sorted, so the task types come in blocks, as ALFWorld's
    path-sorted panel does (its first 180 tasks are all look_at_obj_in_light)."""
    import dataclasses

    from seedrl.envs.panels import build_panel

    panel = build_panel(env_name, "train")
    return dataclasses.replace(panel, task_ids=tuple(sorted(panel.task_ids)))


def test_stage1_tasks_are_drawn_evenly_over_task_types_and_seeded():
    from seedrl.envs.registry import env_class
    from seedrl.train.stage1 import select_tasks

    ids = _type_sorted_panel("alfworld-gen").task_ids
    kind = env_class("alfworld-gen").task_type
    chosen, counts = select_tasks(ids, 180, kind, seed="s0")
    assert len(counts) == 6 and set(counts.values()) == {30}  # SEED's 30 tasks x 6 types
    assert counts == {k: sum(kind(t) == k for t in chosen) for k in counts} and len(set(chosen)) == 180
    assert chosen == [t for t in ids if t in set(chosen)]  # panel order
    assert select_tasks(ids, 180, kind, seed="s0") == (chosen, counts)  # deterministic for a seed
    assert select_tasks(ids, 180, kind, seed="s1")[0] != chosen
    _, odd = select_tasks(ids, 32, kind, seed="s0")  # the remainder: one more for two types
    assert sorted(odd.values()) == [5, 5, 5, 5, 6, 6]
    # types of unequal size: a small type gives what it lacks to the others, no more than one apart
    sw = _type_sorted_panel("scienceworld").task_ids
    sw_type = env_class("scienceworld").task_type
    sizes: dict[str, int] = {}
    for t in sw:
        sizes[sw_type(t)] = sizes.get(sw_type(t), 0) + 1
    _, c = select_tasks(sw, 200, sw_type, seed=3)
    assert sum(c.values()) == 200 and set(c) == set(sizes)
    assert all(c[k] == sizes[k] or c[k] >= max(c.values()) - 1 for k in c)
    # one task type (sokoban), or `first`: the first n, as before
    soko = _type_sorted_panel("sokoban").task_ids
    assert select_tasks(soko, 5, env_class("sokoban").task_type, seed=0)[0] == list(soko[:5])
    assert select_tasks(ids, 7, kind, seed=0, sampling="first") == (list(ids[:7]), {"look_at_obj_in_light": 7})


def test_analyze_plays_every_task_type_and_records_the_counts(tmp_path, monkeypatch):
    import json

    from seedrl.config import TrainConfig, load_config
    from seedrl.envs.registry import env_class
    from seedrl.train import stage1

    panel = _type_sorted_panel("search")  # hop1 x 86, then hop2, then hop3
    monkeypatch.setattr(stage1, "build_panel", lambda *a, **k: panel)
    cfg = load_config(TrainConfig, None, ["env.name=search", "model.name=tiny-micro", "skills.analyzer=oracle",
                                          "env.max_steps=2", "rollout.max_new_tokens=8", "skills.max_new_tokens=400"])
    out = tmp_path / "d.jsonl"
    s = stage1.run_analyze(cfg, out, tasks=7, rollouts=1)
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    played = [r["task_id"] for r in rows]
    kind = env_class("search").task_type
    assert {kind(t) for t in played} == {"hop1", "hop2", "hop3"}
    assert sorted(s["task_types"].values()) == [2, 2, 3] and s["task_sampling"] == "per_type"
    meta = json.loads((tmp_path / "d.jsonl.meta.json").read_text())
    assert meta["task_types"] == rows[0]["provenance"]["task_types"] == s["task_types"]
    assert meta["analysis_prompt"] == "seed" and "\nStep 0\n" in rows[0]["messages"][-1]["content"]
    assert s["task_types"] == {k: sum(kind(t) == k for t in played) for k in s["task_types"]}
    again = stage1.run_analyze(cfg, tmp_path / "e.jsonl", tasks=7, rollouts=1)
    assert [json.loads(x)["task_id"] for x in (tmp_path / "e.jsonl").read_text().splitlines()] == played
    assert again["task_types"] == s["task_types"]
    first = stage1.run_analyze(cfg, tmp_path / "f.jsonl", tasks=7, rollouts=1, task_sampling="first")
    assert first["task_types"] == {"hop1": 7}


def test_the_readmes_sokoban_stage1_command_keeps_the_oracles_answers():
    """The README's "SEED on a CPU" recipe labels sokoban trajectories with the oracle for the tiny
    tokenizer: its answers run 114-162 tokens, over the default cap (half of the preset's
    skills.max_new_tokens, 100), which dropped every row. The command's --max-target-tokens must keep
    the oracle's answers (wins, deadlocks, wandering) and stay under what the self-analyzer may generate."""
    import random
    import re
    from pathlib import Path

    from seedrl.config import TrainConfig, load_config
    from seedrl.envs.registry import make_env
    from seedrl.models.loading import load_tokenizer
    from seedrl.skills.analyzers.oracle import OracleAnalyzer
    from seedrl.skills.prompts import skill_target
    from tests.envs.helpers import play_scripted

    root = Path(__file__).resolve().parents[2]
    readme = (root / "README.md").read_text()
    section = readme[readme.index("### SEED on a CPU"):]
    command = section[section.index("seedrl analyze --config configs/sokoban_seed.yaml"):].split("\n\n")[0]
    cap = re.search(r"--max-target-tokens (\d+)", command)
    assert cap, "the README's sokoban Stage-1 command sets no --max-target-tokens"
    cap = int(cap.group(1))
    cfg = load_config(TrainConfig, root / "configs/sokoban_seed.yaml", ["model.name=tiny-3m"])
    assert cap < cfg.skills.max_new_tokens
    tok = load_tokenizer(cfg.model.name)
    env = make_env("sokoban", **cfg.env.kwargs)
    rng = random.Random(0)
    lengths = []
    for n, tid in enumerate(type(env).panel_task_ids("train", 12, **cfg.env.kwargs)):
        env.reset(tid)
        plan = []
        while (a := env.expert_action()) is not None and len(plan) < cfg.env.max_steps:
            plan.append(a)
            env.step(a)
        actions = plan if n % 3 == 0 else [rng.choice(["up", "down", "left", "right"]) for _ in range(cfg.env.max_steps)]
        traj = play_scripted(env, actions, lambda tid=tid: env.reset(tid), tid)
        [r] = OracleAnalyzer(env_name="sokoban").analyze([traj])
        assert r.skill, r.error
        lengths.append(len(tok(skill_target(r.summary or "", r.skill), add_special_tokens=False)["input_ids"]))
    assert max(lengths) <= cap, lengths
    assert max(lengths) > cfg.skills.max_new_tokens // 2  # the default cap would drop them
