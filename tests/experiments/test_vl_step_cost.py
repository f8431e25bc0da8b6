"""benchmarks/vl_step_cost.py: seconds per step sample of each stage, by hand."""


import pytest

from tests.helpers import load_script

vc = load_script("benchmarks/vl_step_cost.py")


def test_per_step_divides_each_stages_seconds_by_the_step_samples_of_all_rows():
    rows = [{"rollout/samples": 10, "time/rollout": 2.0, "time/update": 3.0, "time/eval": 50.0},
            {"rollout/samples": 30, "time/rollout": 6.0, "time/update": 1.0, "time/analysis": 4.0}]
    out = vc.per_step(rows)
    assert out["rollout"] == pytest.approx(0.2) and out["update"] == pytest.approx(0.1)
    assert out["analysis"] == pytest.approx(0.1) and out["old_logp"] == 0.0
    assert out["total"] == pytest.approx(0.4)  # evaluation is not a stage of the table
    assert out["samples"] == 40
