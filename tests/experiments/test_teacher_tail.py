"""benchmarks/teacher_tail.py: which traced tokens count, their kinds, and the advantage-sign agreement."""

import json
import math

import pytest

from tests.helpers import load_script

tt = load_script("benchmarks/teacher_tail.py")


def _step(step, tokens, old, teacher, adv):
    gate = None if teacher is None else [0.5 + (t - o) / 10 for o, t in zip(old, teacher)]  # made up, linear
    return {"step": step, "action": "".join(tokens), "tokens": tokens, "old_logp": old,
            "teacher_logp": teacher, "advantage": adv, "gate": gate}


def test_tail_counts_kinds_and_agreement_by_hand(tmp_path):
    run = tmp_path / "seed-seed0"
    (run / "traces").mkdir(parents=True)
    won = {"task_id": "t0", "won": True, "skill": "push right first",
           "steps": [_step(0, ["<action>", "2"], [-0.1, -1.0], [-0.1, 0.5], 0.7)]}  # digit +1.5, agrees
    lost = {"task_id": "t1", "won": False, "skill": "box at (1,1) deadlocks",
            "steps": [_step(0, ["<action>", "up"], [-0.2, -0.5], [-0.2, -2.5], -0.7),  # word -2.0, agrees
                      _step(1, ["<action>", "3"], [-0.3, -2.0], [-0.3, -0.5], -0.7),  # digit +1.5, disagrees
                      _step(2, ["<action>", "4"], [-0.3, -2.0], None, -0.7)]}  # no teacher: not counted
    (run / "traces" / "iter_000001.json").write_text(json.dumps({"trajectories": [won, lost]}))
    rows = tt.shifted_tokens([run])
    assert len(rows) == 6
    assert [r["kind"] for r in rows] == ["markup", "digit", "markup", "word", "markup", "digit"]
    assert sum(abs(r["delta"]) > 1.0 for r in rows) == 3
    text = tt.report(rows, tail=1.0, top=2)
    assert "3 (50.0%) move by more than 1.0 nat" in text
    # |gate - 0.5| = |delta| / 10 here: (0 + 0.15 + 0 + 0.2 + 0 + 0.15) / 6 = 0.0833, three of six above 0.1
    assert "mean |gate - 0.5| 0.0833, share of tokens with |gate - 0.5| > 0.1: 50.00%" in text
    # weights 1 - p_old: 1 - e^-0.1, 1 - e^-1 | 1 - e^-0.2, 1 - e^-0.5 | 1 - e^-0.3, 1 - e^-2
    w = [1 - math.exp(-x) for x in (0.1, 1.0, 0.2, 0.5, 0.3, 2.0)]
    d = [0.0, 1.5, 0.0, -2.0, 0.0, 1.5]
    agree = (d[1] * w[1] + 2.0 * w[3] - d[5] * w[5]) / (d[1] * w[1] + 2.0 * w[3] + d[5] * w[5])
    assert f"mean |shift| {sum(abs(x) * y for x, y in zip(d, w)) / sum(w):.3f}" in text
    assert f"agreement with the advantage's sign {agree:+.3f}" in text
    gate_dev = sum(abs(x) / 10 * y for x, y in zip(d, w)) / (0.5 * sum(w))  # |gate - 0.5| = |delta| / 10 here
    assert f"weighted |gate - 0.5| / 0.5 {gate_dev:.3f}" in text
    assert text.splitlines()[-2].strip().startswith("-2.00")  # the largest first


def test_a_run_without_traces_is_named(tmp_path):
    with pytest.raises(SystemExit, match="no traces"):
        tt.shifted_tokens([tmp_path])


def test_decision_tokens_place_and_outcome_agreement_by_hand(tmp_path):
    """Decision tokens are the ``<action>`` block's content; a ``go to`` decision is split by whether it goes
    where the skill says the object was; agreement is read against the advantage's sign and, apart, the
    outcome: a lost episode ranked up by its all-lost group (advantage > 0) counts as a flip."""
    run = tmp_path / "seed-seed0"
    (run / "traces").mkdir(parents=True)

    def go(step, place, old, teacher, adv):
        toks = ["<action>", "go to ", place, "</action>"]
        return {"step": step, "action": f"go to {place}", "tokens": toks, "old_logp": [0.0, old, old, 0.0],
                "teacher_logp": [0.0, old, teacher, 0.0], "advantage": adv, "gate": [0.5, 0.5, 0.9, 0.5]}

    skill = "The apple was in drawer 2 (not in shelf 1, which you checked)."
    won = {"task_id": "t0", "won": True, "skill": skill, "steps": [go(0, "drawer 2", -1.0, 0.0, 1.0)]}
    lost = {"task_id": "t1", "won": False, "skill": skill, "steps": [go(0, "shelf 1", -1.0, -3.0, 0.5)]}
    (run / "traces" / "iter_000001.json").write_text(json.dumps({"trajectories": [won, lost]}))
    rows = tt.shifted_tokens([run])
    assert [r["decision"] for r in rows] == [False, True, True, False] * 2
    assert [r["to_skill_place"] for r in rows if r["decision"]] == [True, True, False, False]
    lines = tt.agreement_lines(rows)
    w = 1 - math.exp(-1.0)  # both decision tokens of a step have p_old = e^-1; only the place token shifts
    # decision tokens: +1 (won, adv +) and -2 (lost, adv +): against the advantage (1 - 2) / 3, the outcome (1 + 2) / 3
    dec = next(x for x in lines if x.strip().startswith("decision tokens"))
    assert dec.split()[-2:] == [f"{-1 / 3:+.3f}", "+1.000"]
    assert dec.split()[2:4] == ["4", f"{(1 - 2) / 4:+.3f}"]
    gate = (0.5 * w + 0.9 * w) / (2 * w)
    assert dec.split()[4] == f"{gate:.3f}"
    where = next(x for x in lines if "go where the skill says, won" in x)
    assert where.split()[-2:] == ["+1.000", "+1.000"]
    elsewhere = next(x for x in lines if "go elsewhere, lost" in x)
    assert elsewhere.split()[-2:] == ["-1.000", "+1.000"]
    assert lines[-2].endswith("contradicts the outcome: 2 of 4 with an advantage")
    # gates 0.5, 0.9 on each step's two decision tokens (format tokens: p_old = 1, no weight); |A| 1.0 and 0.5
    assert lines[-1].endswith(f"{(2 * 1.4 * w) / (2 * 1.0 * w + 2 * 0.5 * w):.3f}")
