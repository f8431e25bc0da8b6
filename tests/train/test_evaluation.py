"""seedrl.train.evaluation's schedule by hand: which iterations evaluate and save. Through a real run:
tests/eval/test_evaluate.py::test_trainer_evaluates_every_panel_on_schedule."""

from __future__ import annotations

from seedrl.train.evaluation import eval_metrics, evaluates_first, evaluates_last, evaluates_now, saves_now
from tests.helpers import tiny_cfg


def test_evaluation_and_checkpoint_schedule(tmp_path):
    cfg = tiny_cfg(tmp_path, **{"iterations": 5, "eval.every": 2, "save_every": 3})
    its = range(6)
    assert [evaluates_first(cfg, i) for i in its] == [True] + [False] * 5
    assert [evaluates_now(cfg, i) for i in its] == [True, False, True, False, True, False]  # not the last
    assert [evaluates_last(cfg, i) for i in its] == [False] * 5 + [True]
    assert [saves_now(cfg, i) for i in range(1, 6)] == [False, False, True, False, True]  # and the last
    off = tiny_cfg(tmp_path, **{"iterations": 5, "eval.every": 2, "eval.num_tasks": 0, "save_every": 0})
    assert not any(f(off, i) for f in (evaluates_first, evaluates_now, evaluates_last, saves_now) for i in its)


def test_an_evaluation_adds_the_primary_and_every_panels_success_rate():
    res = {"valid_seen": {"success_rate": 0.5}, "valid_unseen": {"success_rate": 0.25}}
    assert eval_metrics(res) == {"eval/success_rate": 0.5, "eval/valid_seen/success_rate": 0.5,
                                 "eval/valid_unseen/success_rate": 0.25}
