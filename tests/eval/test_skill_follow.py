"""Skill following: counterfactual skills are legal and differ from the policy's choice; the follow rate
counts switches to the named action on hand cases."""

from __future__ import annotations

import random

from seedrl.envs.oracle import norm
from seedrl.envs.panels import build_panel
from seedrl.envs.registry import make_env
from seedrl.envs.sokoban import oracle as sokoban_oracle
from seedrl.envs.sokoban.env import apply_action, simple_deadlock, solve
from seedrl.eval.skill_follow import counterfactual_decisions, follow_probe, follow_summary
from seedrl.rollout.backends import Generation, SamplingParams
from seedrl.rollout.types import StepSample, Trajectory
from seedrl.skills.injection import has_skill

KW = {"dim": [5, 5], "unseen_dim": [6, 6]}


def test_sokoban_counterfactual_is_another_move_that_still_solves():
    panel = build_panel("sokoban", "valid_seen", 12, **KW)
    seen = 0
    for tid in panel.task_ids:
        env = make_env("sokoban", **KW)
        env.reset(tid)
        default = env.expert_action()
        before = env._require_state()
        made = sokoban_oracle.counterfactual(env, default, random.Random(0))
        assert env._require_state() == before  # the probe never moves the live env
        if made is None:
            continue
        seen += 1
        skill, move = made
        assert move in env.admissible_actions() and norm(move) != norm(default)
        new, _ = apply_action(before, move)
        assert new.key() != before.key() and not simple_deadlock(new) and solve(new) is not None
        assert skill.startswith(f"From here, move {move} first")
    assert seen >= 6


class Scripted:
    """A backend that answers the named action when the prompt carries a skill naming it, ``other`` on
    the tasks in ``stubborn`` (a policy that reads past the skill), else its default."""

    def __init__(self, tokenizer, stubborn=()):
        self.tokenizer, self.stubborn = tokenizer, set(stubborn)
        self.prompts: list[str] = []

    def generate(self, prompts, params, seed):
        out = []
        for p in prompts:
            text = self.tokenizer.decode(p)
            self.prompts.append(text)
            task = next(t for t in ("task-A", "task-B", "task-C", "task-D") if t in text)
            move = "left" if task in self.stubborn else text.split("move ")[-1].split(" first")[0]
            out.append(Generation([], [], f"<think>x</think><action>{move}</action>", "stop"))
        return out


def _decision(task, default, named):
    msgs = [{"role": "user", "content": f"You are playing Sokoban. {task}\nYour task is to: solve it.\n"
                                        f"Now it's your turn to take an action."}]
    return {"task_id": task, "step": 0, "default": default, "named": named,
            "skill": f"From here, move {named} first: a solution goes {named} once.", "messages": msgs}


def test_follow_rate_on_a_hand_case(tiny_tokenizer):
    decisions = [_decision("task-A", "up", "down"), _decision("task-B", "up", "right"),
                 _decision("task-C", "left", "down"), _decision("task-D", "down", "up")]
    backend = Scripted(tiny_tokenizer, stubborn={"task-C", "task-D"})  # C keeps its own; D does neither
    rows = follow_probe(backend, tiny_tokenizer, "sokoban", KW, decisions,
                        sampling=SamplingParams(greedy=True), max_prompt_tokens=2048)
    assert all(has_skill(p) for p in backend.prompts)  # every probe prompt carries its skill
    assert [(r["followed"], r["kept"]) for r in rows] == [(True, False), (True, False), (False, True),
                                                         (False, False)]
    s = follow_summary(rows)
    assert s == {"decisions": 4, "followed": 2, "follow_rate": 0.5, "kept_rate": 0.25, "other_rate": 0.25,
                 "by_step": {"0": [4, 2]}, "by_default": {"down": [1, 0], "left": [1, 0], "up": [2, 2]}}
    steps = follow_summary([r | {"step": k} for r, k in zip(rows, (2, 0, 10, 2))])["by_step"]
    assert steps == {"0": [1, 1], "2": [2, 1], "10": [1, 0]} and list(steps) == ["0", "2", "10"]  # in step order
    assert follow_summary([])["follow_rate"] is None


def test_decisions_replay_the_plain_attempt_to_each_step(monkeypatch):
    """The counterfactual at step k is asked at the state the plain attempt reached before step k, and is
    told the action the policy took there."""
    panel = build_panel("sokoban", "valid_seen", 4, **KW)
    tid = panel.task_ids[0]
    env = make_env("sokoban", **KW)
    env.reset(tid)
    expected, actions = [], []
    for _ in range(3):
        expected.append(env._require_state().key())
        actions.append(env.expert_action())
        env.step(actions[-1])
    asked = []

    def spy(live, default, rng):
        asked.append((live._require_state().key(), default))
        return "From here, move sideways first: a solution goes sideways once.", "sideways"

    monkeypatch.setattr(sokoban_oracle, "counterfactual", spy)
    steps = [StepSample([1], [1], [0.0], 0, 0, i, 0.0, True, messages=[{"role": "user", "content": "x"}], action=a)
             for i, a in enumerate(actions)]
    ds = counterfactual_decisions("sokoban", KW, [Trajectory(0, 0, tid, steps=steps)], max_decisions=3)
    assert asked == list(zip(expected, actions))
    assert [(d["step"], d["default"], d["named"]) for d in ds] == [(i, a, "sideways") for i, a in enumerate(actions)]
    assert counterfactual_decisions("sokoban", KW, [Trajectory(0, 0, tid, steps=steps)], max_decisions=1) == ds[:1]
