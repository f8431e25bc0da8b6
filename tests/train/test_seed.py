"""SEED in the loop: which prompt carries a skill, which weights score the teacher, where OPD enters."""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch

from seedrl.models.scoring import batched_logprobs
from seedrl.skills.injection import has_skill
from seedrl.train.scoring import analyze
from seedrl.train.trainer import Trainer
from seedrl.train.update import UpdateBatch
from tests.helpers import SKILL, FixedAnalyzer, tiny_cfg


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
        teacher = tiny_tokenizer.decode(tr.scorer.teacher_prompt_ids(s, SKILL))
        assert not has_skill(student) and SKILL not in student
        assert has_skill(teacher) and SKILL in teacher
        # the skill sits right after the task line, before the observation
        assert teacher.index("Your task is to:") < teacher.index(SKILL) < teacher.index("Current board")
    # evaluation prompts: tests/test_eval.py::test_evaluation_prompts_never_carry_a_skill


@pytest.mark.slow
def test_teacher_signal_only_for_parsed_trajectories_and_scored_by_pre_update_weights(tmp_path):
    tr = seed_trainer(tmp_path, FixedAnalyzer())
    trajs = tr.collect({})
    samples = [s for t in trajs for s in t.steps if s.response_ids]
    results = analyze(tr.analyzer, trajs)
    skills = {r.traj_id: r.skill for r in results if r.skill}
    snapshot = copy.deepcopy(tr.model)  # the rollout-time weights
    teacher, signal = tr.scorer.teacher_logprobs(samples, skills)
    assert signal.tolist() == [1.0 if s.traj_id % 2 == 0 else 0.0 for s in samples]
    idx = [i for i, s in enumerate(samples) if signal[i] > 0]
    expect = batched_logprobs(snapshot, [tr.scorer.teacher_prompt_ids(samples[i], SKILL) for i in idx],
                              [samples[i].response_ids for i in idx], tr.tokenizer.pad_token_id, 4)
    for i, e in zip(idx, expect):
        torch.testing.assert_close(teacher[i], e)
    # the update then moves the weights: re-scoring now would differ, the stored teacher must not
    old = tr.scorer.logprobs(tr.model, samples)
    adv = tr.scorer.advantages(trajs, samples) + 1.0
    tr.update(UpdateBatch(samples, old, adv, None, teacher, signal))
    after = batched_logprobs(tr.model, [tr.scorer.teacher_prompt_ids(samples[i], SKILL) for i in idx[:1]],
                             [samples[idx[0]].response_ids], tr.tokenizer.pad_token_id, 4)
    assert not torch.allclose(after[0], teacher[idx[0]])


@pytest.mark.slow
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


@pytest.mark.slow
def test_seed_nogate_is_seed_with_a_uniform_gate(tmp_path):
    tr = seed_trainer(tmp_path, FixedAnalyzer(), **{"algo.name": "seed_nogate", "iterations": 1})
    spec = tr.method.spec
    assert spec.skills == "hindsight" and spec.placement == "after_task" and spec.opd_beta == 0
    assert tr.method.signal.name == "opd" and tr.method.signal.beta == 0
    tr.train()
    row = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert row["opd/gate_mean"] == pytest.approx(0.5)


@pytest.mark.parametrize("name,signal,beta", [("grpo_opsd", "opd", 0.0), ("sdar", "opd", 5.0),
                                              ("opsd", "opd", 5.0), ("rlsd", "rlsd", None),
                                              ("skill_sd", "skill_sd", None)])
@pytest.mark.slow
def test_sdar_family_teachers_read_the_static_skill_behind_the_privileged_prefix(tmp_path, tiny_tokenizer, name,
                                                                                  signal, beta):
    """SDAR's repository: GRPO+OPSD = SDAR's loss with gate_beta 0, OPSD = SDAR's loss without the PG term,
    RLSD = GRPO's advantage re-weighted by the teacher, Skill-SD = its SDL loss; all of them
    score the teacher on "[Privileged Skill Information]" + general and task-type skill files +
    the templated prompt, never on hindsight skills."""
    from seedrl.skills.injection import PRIVILEGED_HEADER

    tr = Trainer(tiny_cfg(tmp_path / "run", **{"algo.name": name, "eval.num_tasks": 0, "iterations": 1}))
    assert tr.analyzer.name == "static" and tr.method.spec.placement == "prefix"
    assert tr.method.signal.name == signal and tr.method.spec.opd_beta == beta
    trajs = tr.collect({})
    results = analyze(tr.analyzer, trajs)
    static = tr.analyzer.skills["general"]  # sokoban ships only the general file
    assert all(r.skill == static for r in results)
    s = trajs[0].steps[0]
    teacher = tiny_tokenizer.decode(tr.scorer.teacher_prompt_ids(s, results[0].skill))
    assert teacher == f"{PRIVILEGED_HEADER}\n{static}\n\n" + tiny_tokenizer.decode(s.prompt_ids)
    tr.train()
    row = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert row["skills/signal_frac"] == 1.0
    if name == "grpo_opsd":
        assert row["opd/gate_mean"] == pytest.approx(0.5)
    if name == "rlsd":  # the first update is verl's step 1: lambda 0.5 (1 - 1/100)
        assert row["rlsd/lambda"] == pytest.approx(0.495) and "loss/rlsd" not in row


@pytest.mark.slow
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


@pytest.mark.slow
def test_grpo_never_calls_an_analyzer(tmp_path):
    tr = Trainer(tiny_cfg(tmp_path / "run", **{"algo.name": "grpo", "eval.num_tasks": 0, "iterations": 1}))
    assert tr.analyzer is None
    tr.train()
    row = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert not any(k.startswith(("skills/", "opd/", "teacher/")) or k == "loss/opd" for k in row)
    assert not (tmp_path / "run" / "skills.jsonl").exists()


@pytest.mark.slow
def test_sdar_uses_static_skills_for_every_trajectory(tmp_path):
    tr = Trainer(tiny_cfg(tmp_path / "run", **{"algo.name": "sdar", "eval.num_tasks": 0, "iterations": 1}))
    assert tr.analyzer.name == "static"
    tr.train()
    row = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert row["skills/signal_frac"] == 1.0 and math.isfinite(row["loss/opd"])
    skills = {json.loads(x)["skill"] for x in (tmp_path / "run" / "skills.jsonl").read_text().splitlines()}
    assert len(skills) == 1 and "corner" in skills.pop()  # the shipped sokoban general skill


@pytest.mark.slow
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


@pytest.mark.slow
def test_skill_sd_adds_its_reverse_kl_term(tmp_path):
    tr = Trainer(tiny_cfg(tmp_path / "run", **{"algo.name": "skill_sd", "eval.num_tasks": 0, "iterations": 1}))
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


# ------------------------------------------------------------------ OPID step skills: critical-first routing
STEP_SKILL = "Push the box right now instead of walking up again."


class StepAnalyzer(FixedAnalyzer):
    """FixedAnalyzer plus a step skill for step index 1 of every trajectory (odd ones have no episode
    skill, so theirs must be ignored)."""

    def analyze(self, trajectories):
        out = super().analyze(trajectories)
        for r in out:
            r.step_skills = {1: STEP_SKILL}
        return out


def test_critical_first_routing_scores_the_critical_step_with_only_its_step_skill(tmp_path, tiny_tokenizer):
    from seedrl.agent.prompts import TURN_LINE
    from seedrl.skills.injection import SKILL_HEADER, STEP_SKILL_HEADER
    from seedrl.train.scoring import routed_step_skill

    tr = seed_trainer(tmp_path, StepAnalyzer(), **{"skills.step_skills": True})
    trajs = tr.collect({})
    samples = [s for t in trajs for s in t.steps if s.response_ids]
    results = analyze(tr.analyzer, trajs)
    skills = {r.traj_id: r.skill for r in results if r.skill}
    steps = {r.traj_id: r.step_skills for r in results if r.skill and r.step_skills}
    critical = [i for i, s in enumerate(samples) if s.traj_id % 2 == 0 and s.step == 1]
    assert critical and len(critical) < sum(s.traj_id % 2 == 0 for s in samples)
    for i, s in enumerate(samples):
        student = tiny_tokenizer.decode(s.prompt_ids)
        assert not has_skill(student) and SKILL not in student and STEP_SKILL not in student
        routed = routed_step_skill(s, skills, steps)
        assert (routed == STEP_SKILL) == (i in critical)  # odd trajectories: no episode skill, no routing
        if s.traj_id % 2:
            continue
        teacher = tiny_tokenizer.decode(tr.scorer.teacher_prompt_ids(s, skills[s.traj_id], routed))
        if i in critical:  # design: the critical step carries only its step skill (OPID step_priority)
            assert STEP_SKILL in teacher and SKILL not in teacher and SKILL_HEADER not in teacher
            assert teacher.index("Current board") < teacher.index(STEP_SKILL_HEADER) < teacher.index(TURN_LINE)
        else:
            assert SKILL in teacher and STEP_SKILL not in teacher and STEP_SKILL_HEADER not in teacher
    # teacher_logprobs uses exactly these routed prompts; odd trajectories get no signal at all
    teacher, signal = tr.scorer.teacher_logprobs(samples, skills, steps)
    assert signal.tolist() == [1.0 if s.traj_id % 2 == 0 else 0.0 for s in samples]
    i = critical[0]
    [expect] = batched_logprobs(tr.model, [tr.scorer.teacher_prompt_ids(samples[i], SKILL, STEP_SKILL)],
                                [samples[i].response_ids], tr.tokenizer.pad_token_id, 4)
    torch.testing.assert_close(teacher[i], expect)
    [episode_only] = batched_logprobs(tr.model, [tr.scorer.teacher_prompt_ids(samples[i], SKILL)],
                                      [samples[i].response_ids], tr.tokenizer.pad_token_id, 4)
    assert not torch.allclose(teacher[i], episode_only)


@pytest.mark.slow
def test_step_skill_routing_is_logged_and_off_by_default(tmp_path):
    tr = seed_trainer(tmp_path / "on", StepAnalyzer(), **{"skills.step_skills": True, "algo.name": "opid",
                                                          "iterations": 1})
    tr.train()
    row = json.loads((tmp_path / "on" / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert 0 < row["skills/step_skill_frac"] < 1 and row["skills/step_skills"] > 0
    rows = [json.loads(x) for x in (tmp_path / "on" / "run" / "skills.jsonl").read_text().splitlines()]
    assert all((r.get("step_skills") == {"1": STEP_SKILL}) == (r["traj_id"] % 2 == 0) for r in rows)
    # flag off: an analyzer's step skills are ignored, nothing is logged about them
    tr = seed_trainer(tmp_path / "off", StepAnalyzer(), iterations=1)
    seen = {}
    real = tr.scorer.teacher_logprobs

    def spy(samples, skills, step_skills=None):
        seen["step_skills"] = step_skills
        return real(samples, skills, step_skills)

    tr.scorer.teacher_logprobs = spy
    tr.train()
    row = json.loads((tmp_path / "off" / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert seen["step_skills"] is None and "skills/step_skill_frac" not in row


# ------------------------------------------------------------------ SDAR placement
def test_sdar_prefixes_the_templated_prompt_and_seed_does_not(tmp_path, tiny_tokenizer):
    from seedrl.skills.injection import PRIVILEGED_HEADER, SKILL_HEADER

    sdar = Trainer(tiny_cfg(tmp_path / "sdar", **{"algo.name": "sdar", "eval.num_tasks": 0}))
    seed = seed_trainer(tmp_path / "seed", FixedAnalyzer())
    assert sdar.method.spec.placement == "prefix" and seed.method.spec.placement == "after_task"
    s = [x for t in sdar.collect({}) for x in t.steps][0]
    templated = tiny_tokenizer.apply_chat_template(s.messages, tokenize=False, add_generation_prompt=True)
    student = tiny_tokenizer.decode(s.prompt_ids)
    t_sdar = tiny_tokenizer.decode(sdar.scorer.teacher_prompt_ids(s, SKILL))
    t_seed = tiny_tokenizer.decode(seed.scorer.teacher_prompt_ids(s, SKILL))
    # SDAR: the very first text, before the chat template's own prefix, and outside every message
    assert t_sdar.startswith(f"{PRIVILEGED_HEADER}\n{SKILL}\n\n")
    assert t_sdar[len(f"{PRIVILEGED_HEADER}\n{SKILL}\n\n"):] == student and SKILL_HEADER not in t_sdar
    assert templated.startswith(student[:20])
    # SEED: starts like the student prompt; the skill sits after the task line inside the user message
    assert not t_seed.startswith(PRIVILEGED_HEADER) and PRIVILEGED_HEADER not in t_seed
    assert t_seed[:len(student) // 4] == student[:len(student) // 4] and SKILL_HEADER in t_seed
    # left-truncation to the rollout prompt limit (SDAR's data.max_prompt_length) drops the skill first
    sdar.cfg.rollout.max_prompt_tokens = len(s.prompt_ids)
    assert sdar.scorer.teacher_prompt_ids(s, SKILL) == s.prompt_ids
    sdar.cfg.skills.max_prompt_tokens = 1  # the analysis prompt limit plays no part in teacher prompts
    assert sdar.scorer.teacher_prompt_ids(s, SKILL) == s.prompt_ids


# ------------------------------------------------------------------ self analyzer: precision and step skills
def test_self_analyzer_bf16_autocast_and_step_skills(tmp_path, tiny_tokenizer):
    from seedrl.methods.sources import make_analyzer
    from seedrl.rollout.backends import Generation
    from seedrl.skills.analyzers.self_analyzer import SelfAnalyzer

    tr = seed_trainer(tmp_path, FixedAnalyzer())
    trajs = tr.collect({})[:2]
    answer = ('{"episode_summary": "s", "episode_skill": "' + SKILL + '", "step_skills": '
              '[{"step": 0, "skill": "' + STEP_SKILL + '"}, {"step": 99, "skill": "' + STEP_SKILL + '"}]}')

    class Backend:
        calls: list = []

        def generate(self, prompts, params, seed):
            self.calls.append((torch.is_autocast_enabled("cpu"), list(params.stop),
                               tiny_tokenizer.decode(prompts[0])))
            return [Generation([1], [], answer, "stop") for _ in prompts]

    b = Backend()
    plain = SelfAnalyzer(b, tiny_tokenizer, max_prompt_tokens=100_000).analyze(trajs)
    assert b.calls[-1][:2] == (False, ['"}']) and "step_skills" not in b.calls[-1][2]
    assert all(r.skill == SKILL and r.step_skills == {} for r in plain)
    on = SelfAnalyzer(b, tiny_tokenizer, max_prompt_tokens=100_000, bf16=True, step_skills=True).analyze(trajs)
    assert b.calls[-1][:2] == (True, [']}']) and '"step_skills"' in b.calls[-1][2]
    assert all(r.step_skills == {0: STEP_SKILL} for r in on)  # step 99 is past the trajectory's end
    assert not torch.is_autocast_enabled("cpu")
    # the trainer's config reaches it; the real HF backend generates under autocast without error
    cfg = tiny_cfg(tmp_path / "c", **{"algo.name": "seed", "model.precision": "bf16", "skills.step_skills": True})
    a = make_analyzer(cfg, tr.backend, tiny_tokenizer, bf16=True)
    assert a.bf16 and a.step_skills and a.max_step_skills == 5
    a.max_new_tokens = 8
    results = a.analyze(trajs)
    assert len(results) == 2 and all(r.completion_tokens <= 8 for r in results)
