"""benchmarks/teacher_tail.py: which traced tokens count, their kinds, and the advantage-sign agreement."""

import importlib.util
import json
import math
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location(
    "teacher_tail", Path(__file__).parents[2] / "benchmarks" / "teacher_tail.py")
tt = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(tt)


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
