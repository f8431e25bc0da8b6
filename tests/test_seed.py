"""SEED in the loop: which prompt carries a skill, which weights score the teacher, where OPD enters."""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch

from seedrl.skills.analyzers.base import AnalysisResult
from seedrl.skills.injection import has_skill
from seedrl.train.batching import batched_logprobs
from seedrl.train.trainer import Trainer
from tests.test_train import tiny_cfg

SKILL = "When the box is left of the target, walk to its left side and push right."


class FixedAnalyzer:
    """Gives a skill to even trajectory ids, garbage to odd ones (as a real analyzer might)."""

    name = "fixed"

    def __init__(self):
        self.calls = 0

    def analyze(self, trajectories):
        self.calls += 1
        return [AnalysisResult(t.traj_id, SKILL if t.traj_id % 2 == 0 else None,
                               error=None if t.traj_id % 2 == 0 else "parse: no JSON object") for t in trajectories]


class RaisingAnalyzer:
    name = "raising"

    def analyze(self, trajectories):
        raise TimeoutError("analysis server unreachable")


def seed_trainer(tmp_path, analyzer, **over) -> Trainer:
    tr = Trainer(tiny_cfg(tmp_path / "run", **({"algo.name": "seed", "eval.num_tasks": 0, "iterations": 2} | over)))
    tr.analyzer = analyzer
    return tr


def test_teacher_prompts_carry_the_skill_and_student_prompts_never(tmp_path, tiny_tokenizer):
    tr = seed_trainer(tmp_path, FixedAnalyzer())
    trajs = tr.collect({})
    samples = [s for t in trajs for s in t.steps]
    for s in samples:
        student = tiny_tokenizer.decode(s.prompt_ids)
        teacher = tiny_tokenizer.decode(tr.teacher_prompt_ids(s, SKILL))
        assert not has_skill(student) and SKILL not in student
        assert has_skill(teacher) and SKILL in teacher
        # the skill sits right after the task line, before the observation
        assert teacher.index("Your task is to:") < teacher.index(SKILL) < teacher.index("Current board")
    # evaluation prompts: record what the generator is given during an evaluation
    seen: list[str] = []
    real_generate = tr.backend.generate

    def recording_generate(prompts, params, seed):
        seen.extend(tiny_tokenizer.decode(p) for p in prompts)
        return real_generate(prompts, params, seed)

    tr.backend.generate = recording_generate
    tr.cfg.eval.num_tasks = 2
    tr.run_eval("check")
    assert seen and not any(has_skill(p) or SKILL in p for p in seen)


def test_teacher_signal_only_for_parsed_trajectories_and_scored_by_pre_update_weights(tmp_path):
    tr = seed_trainer(tmp_path, FixedAnalyzer())
    trajs = tr.collect({})
    samples = [s for t in trajs for s in t.steps if s.response_ids]
    results = tr.analyze(trajs)
    skills = {r.traj_id: r.skill for r in results if r.skill}
    snapshot = copy.deepcopy(tr.model)  # the rollout-time weights
    teacher, signal = tr.teacher_logprobs(samples, skills)
    assert signal.tolist() == [1.0 if s.traj_id % 2 == 0 else 0.0 for s in samples]
    idx = [i for i, s in enumerate(samples) if signal[i] > 0]
    expect = batched_logprobs(snapshot, [tr.teacher_prompt_ids(samples[i], SKILL) for i in idx],
                              [samples[i].response_ids for i in idx], tr.tokenizer.pad_token_id, 4)
    for i, e in zip(idx, expect):
        torch.testing.assert_close(teacher[i], e)
    # the update then moves the weights: re-scoring now would differ, the stored teacher must not
    old = tr.logprobs(tr.model, samples)
    adv = tr.advantages(trajs, samples) + 1.0
    tr.update(samples, old, None, adv, teacher, signal)
    after = batched_logprobs(tr.model, [tr.teacher_prompt_ids(samples[i], SKILL) for i in idx[:1]],
                             [samples[idx[0]].response_ids], tr.tokenizer.pad_token_id, 4)
    assert not torch.allclose(after[0], teacher[idx[0]])


def test_seed_iteration_logs_the_distillation_signal_and_saves_skills(tmp_path):
    tr = seed_trainer(tmp_path, FixedAnalyzer())
    tr.train()
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    for r in rows:
        assert math.isfinite(r["loss/opd"]) and r["loss/opd"] != 0.0
        assert 0 < r["skills/signal_frac"] < 1 and r["skills/parse_rate"] == pytest.approx(0.5, abs=0.01)
        assert 0 < r["opd/gate_mean"] < 1
        assert "time/analysis" in r and "time/rescore" in r and "teacher/delta_mean" in r
    skills = [json.loads(x) for x in (tmp_path / "run" / "skills.jsonl").read_text().splitlines()]
    assert {s["iteration"] for s in skills} == {1, 2}
    assert all((s["skill"] == SKILL) == (s["traj_id"] % 2 == 0) for s in skills)


def test_grpo_opsd_uses_a_uniform_gate(tmp_path):
    tr = seed_trainer(tmp_path, FixedAnalyzer(), **{"algo.name": "grpo_opsd", "iterations": 1})
    tr.train()
    row = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert row["opd/gate_mean"] == pytest.approx(0.5)


def test_a_failing_analyzer_never_stops_training(tmp_path):
    tr = seed_trainer(tmp_path, RaisingAnalyzer())
    tr.train()
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2
    for r in rows:
        assert r["skills/parse_rate"] == 0.0 and r["skills/signal_frac"] == 0.0
        assert r["skills/errors"] > 0
        assert "loss/opd" not in r  # no signal: no OPD term at all, GRPO still updates
        assert math.isfinite(r["loss/pg"])


def test_grpo_never_calls_an_analyzer(tmp_path):
    tr = Trainer(tiny_cfg(tmp_path / "run", **{"algo.name": "grpo", "eval.num_tasks": 0, "iterations": 1}))
    assert tr.analyzer is None
    tr.train()
    row = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert not any(k.startswith(("skills/", "opd/", "teacher/")) or k == "loss/opd" for k in row)
    assert not (tmp_path / "run" / "skills.jsonl").exists()


def test_sdar_uses_static_skills_for_every_trajectory(tmp_path):
    tr = Trainer(tiny_cfg(tmp_path / "run", **{"algo.name": "sdar", "eval.num_tasks": 0, "iterations": 1}))
    assert tr.analyzer.name == "static"
    tr.train()
    row = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert row["skills/signal_frac"] == 1.0 and math.isfinite(row["loss/opd"])
    skills = {json.loads(x)["skill"] for x in (tmp_path / "run" / "skills.jsonl").read_text().splitlines()}
    assert len(skills) == 1 and "corner" in skills.pop()  # the shipped sokoban general skill


def test_opid_moves_the_update_only_through_the_advantage(tmp_path):
    params = {}
    for name in ("grpo", "opid"):
        tr = seed_trainer(tmp_path / name, FixedAnalyzer(), **{"algo.name": name, "iterations": 1,
                                                               "algo.opid_coef": 1.0})
        tr.train()
        row = json.loads((tmp_path / name / "run" / "metrics.jsonl").read_text().splitlines()[0])
        assert "loss/opd" not in row and "loss/skill_sd" not in row
        params[name] = torch.cat([p.detach().flatten() for p in tr.model.parameters()])
    assert not torch.equal(params["grpo"], params["opid"])  # same rollouts; only the advantage differs


def test_skill_sd_adds_its_reverse_kl_term(tmp_path):
    tr = seed_trainer(tmp_path, FixedAnalyzer(), **{"algo.name": "skill_sd", "iterations": 1})
    tr.train()
    row = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert math.isfinite(row["loss/skill_sd"]) and row["skill_sd/rho_mean"] > 0 and "loss/opd" not in row


def test_self_analyzer_reads_the_trajectory_through_the_policy_backend(tmp_path, tiny_tokenizer):
    from seedrl.rollout.backends import Generation
    from seedrl.skills.analyzers.self_analyzer import SelfAnalyzer

    tr = seed_trainer(tmp_path, FixedAnalyzer())
    trajs = tr.collect({})[:3]
    seen = {}

    class Backend:
        def generate(self, prompts, params, seed):
            seen["prompts"], seen["params"] = [tiny_tokenizer.decode(p) for p in prompts], params
            texts = ['{"episode_summary": "ok", "episode_skill": "' + SKILL + '"}', "no json here",
                     '```json\n{"episode_summary": "s", "episode_skill": "too short"}\n```']
            return [Generation(tiny_tokenizer(t)["input_ids"], [], t, "stop") for t in texts]

    results = SelfAnalyzer(Backend(), tiny_tokenizer, max_prompt_tokens=100_000).analyze(trajs)
    assert [r.skill for r in results] == [SKILL, None, None]
    assert results[1].error and results[2].error and results[0].error is None
    assert seen["params"].greedy and '"}' in seen["params"].stop  # greedy, one attempt, stops at the JSON end
    for t, p in zip(trajs, seen["prompts"]):
        assert "episode_success: " + ("success" if t.won else "failure") in p
        assert all(s.response_text in p for s in t.steps)
