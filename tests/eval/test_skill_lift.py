"""The skill-lift probe: its second attempts carry the skill, first attempts and `seedrl eval` never."""

from __future__ import annotations

import json

import torch
from typer.testing import CliRunner

from seedrl.cli import app
from seedrl.envs.panels import build_panel
from seedrl.eval.skill_lift import skill_lift
from seedrl.rollout.backends import HFBackend
from seedrl.skills.analyzers.oracle import OracleAnalyzer
from seedrl.skills.injection import has_skill


class Spy(HFBackend):
    """The real backend, recording whether each generate call's prompts carry a skill."""

    def __init__(self, model, tok):
        super().__init__(model, tok)
        self.calls: list[list[bool]] = []

    def generate(self, prompts, params, seed):
        self.calls.append([has_skill(self.tokenizer.decode(p)) for p in prompts])
        return super().generate(prompts, params, seed)


def test_second_attempts_carry_the_oracle_skill_and_first_attempts_match_plain_eval(tiny_model, tiny_tokenizer):
    from seedrl.eval.evaluate import evaluate

    panel = build_panel("sokoban", "valid_seen", None, dim=[5, 5], unseen_dim=[6, 6])
    spy = Spy(tiny_model, tiny_tokenizer)
    kw = dict(max_steps=3, history_length=1, max_new_tokens=8, num_tasks=3, batch_size=3)
    res = skill_lift(spy, tiny_tokenizer, tiny_model, panel, OracleAnalyzer("sokoban"), **kw)
    assert res["diagnostic"] == "skill_lift" and "not a success rate" in res["note"]
    assert res["with_skill"] == 3 and res["teacher_tokens"] > 0 and 0 <= res["teacher_above_student_frac"] <= 1
    assert 0 <= res["teacher_argmax_differs_frac"] <= 1 and 0 <= res["teacher_tv_mean"] <= 1
    # 3 turns of plain first attempts, then 3 turns with the skill in every prompt
    assert [all(c) for c in spy.calls] == [False] * 3 + [True] * 3 and not any(any(c) for c in spy.calls[:3])
    plain = evaluate(HFBackend(tiny_model, tiny_tokenizer), tiny_tokenizer, panel, **kw)
    assert [r["won"] for r in res["tasks"]] == [r["won"] for r in plain["tasks"]]
    assert res["success_plain_all"] == plain["success_rate"]


def test_the_probe_stays_out_of_seedrl_eval(tmp_path):
    runner = CliRunner()
    base = ["eval", "--checkpoint", "tiny-micro", "--env", "sokoban", "--split", "valid_seen", "--num-tasks", "2",
            "--max-steps", "2"]
    r = runner.invoke(app, base + ["--out", str(tmp_path / "plain.json")])
    plain = json.loads((tmp_path / "plain.json").read_text())
    assert r.exit_code == 0 and "diagnostic" not in plain and "DIAGNOSTIC" not in r.output
    r = runner.invoke(app, base + ["--with-skills", "oracle", "--out", str(tmp_path / "lift.json"),
                                   "--set", "skills.max_obs_chars=120"])
    lift = json.loads((tmp_path / "lift.json").read_text())
    assert r.exit_code == 0 and lift["diagnostic"] == "skill_lift" and "DIAGNOSTIC skill lift" in r.output
    assert lift["config"]["skills"]["max_obs_chars"] == 120 and lift["config"]["skills"]["analyzer"] == "oracle"
    assert "success_rate" not in lift["panels"]["valid_seen"]  # never reported as a success rate
    r = runner.invoke(app, base + ["--with-skills", "nope"])
    assert r.exit_code == 2 and "oracle or self" in r.output
    r = runner.invoke(app, base + ["--set", "skills.max_obs_chrs=1"])
    assert r.exit_code == 2 and "unknown config key 'skills.max_obs_chrs'" in r.output


def test_distribution_disagreement_is_zero_for_one_prompt_and_counts_every_response_token(tiny_model, tiny_tokenizer):
    from seedrl.eval.skill_lift import distribution_disagreement

    g = torch.Generator().manual_seed(0)
    V = len(tiny_tokenizer)
    prompts = [torch.randint(5, V, (n,), generator=g).tolist() for n in (12, 7, 20)]
    other = [torch.randint(5, V, (n,), generator=g).tolist() for n in (9, 15, 4)]
    responses = [torch.randint(5, V, (n,), generator=g).tolist() for n in (3, 5, 1)]
    pad = tiny_tokenizer.pad_token_id
    shift, same = distribution_disagreement(tiny_model, prompts, prompts, responses, pad, micro=2)
    assert [len(d) for d in shift] == [3, 5, 1] and max(float(d.abs().max()) for d in shift) < 1e-5
    assert same == {"tokens": 9.0, "argmax_differs": 0.0, "teacher_argmax_not_sampled": same["teacher_argmax_not_sampled"],
                    "tv": same["tv"]} and same["tv"] < 1e-6
    shift, diff = distribution_disagreement(tiny_model, prompts, other, responses, pad, micro=2)
    from seedrl.models.scoring import batched_logprobs

    student = batched_logprobs(tiny_model, prompts, responses, pad, 2)
    teacher = batched_logprobs(tiny_model, other, responses, pad, 2)
    assert all(torch.allclose(d, t - s_, atol=1e-5) for d, t, s_ in zip(shift, teacher, student))
    assert diff["tokens"] == 9.0 and 0.0 < diff["tv"] <= 9.0
    # the teacher's argmax vs the sampled token: recomputed here from the full distribution of one sample
    from seedrl.models.scoring import pack, response_logits

    b = pack([other[1]], [responses[1]], pad, "cpu")
    with torch.no_grad():
        am = response_logits(tiny_model, b).argmax(-1)[0, -5:]
    _, single = distribution_disagreement(tiny_model, [prompts[1]], [other[1]], [responses[1]], pad, micro=1)
    assert single["teacher_argmax_not_sampled"] == float((am != torch.tensor(responses[1])).sum())


def test_with_skills_reports_the_skill_following_keys_and_harm_against_a_start(tmp_path):
    runner = CliRunner()
    base = ["eval", "--checkpoint", "tiny-micro", "--env", "sokoban", "--split", "valid_seen", "--num-tasks", "3",
            "--max-steps", "2"]
    r = runner.invoke(app, base + ["--against", "tiny-micro"])
    assert r.exit_code == 2 and "add --with-skills oracle" in r.output
    r = runner.invoke(app, base + ["--with-skills", "oracle", "--against", "tiny-micro", "--out",
                                   str(tmp_path / "f.json")])
    assert r.exit_code == 0, r.output
    res = json.loads((tmp_path / "f.json").read_text())
    p = res["panels"]["valid_seen"]
    assert res["against"] == "tiny-micro" and res["config"]["follow_decisions"] == 3
    assert p["oracle_lift"] == p["success_with_skill"] - p["success_without_skill"]
    assert 0 <= p["mcnemar_p"] <= 1 and "follow" in p and "follow_rate" in p
    # the same model against itself: the same skill-free games, so no harm and no discordant task
    assert p["harm"] == p["success_plain_all"] - p["against"]["success"] == 0.0
    assert p["against"]["won_only_by_start"] == p["against"]["won_only_by_model"] == 0


def test_the_analyzers_facts_are_checked_against_each_first_attempt(tiny_model, tiny_tokenizer):
    """household's oracle skills agree with its own states; skills naming the wrong place never do."""
    from seedrl.envs.household.oracle import skill_text
    from seedrl.skills.analyzers.base import AnalysisResult

    panel = build_panel("household", "valid_seen", None)
    kw = dict(max_steps=2, history_length=1, max_new_tokens=8, num_tasks=4, batch_size=4, follow_decisions=0)
    res = skill_lift(HFBackend(tiny_model, tiny_tokenizer), tiny_tokenizer, tiny_model, panel,
                     OracleAnalyzer("household"), **kw)
    assert res["facts_checked"] == 4 and res["fact_agreement"] == 1.0
    assert all(r["fact_agrees"] is True for r in res["tasks"])

    class Wrong:
        name = "wrong"

        def analyze(self, trajs):
            return [AnalysisResult(t.traj_id, skill_text(t.privileged_state["object_class"], next(
                r for r in t.privileged_state["receptacles"] if r != t.privileged_state["object_receptacle"])))
                for t in trajs]

    res = skill_lift(HFBackend(tiny_model, tiny_tokenizer), tiny_tokenizer, tiny_model, panel, Wrong(), **kw)
    assert res["facts_checked"] == 4 and res["fact_agreement"] == 0.0
    assert res["fact_agreement_failure"] == (0.0 if any(not r["won"] for r in res["tasks"]) else None)
