"""Learning-rate warm-up (issue 33, item 3): ``optim.warmup_ratio`` is verl's ``lr_warmup_steps_ratio``,
a linear rise over ``int(ratio * iterations)`` iterations with the scheduler stepping once per
iteration; ``optim.warmup_steps`` counts optimizer steps. Checked by hand and through a tiny Trainer."""

from __future__ import annotations

import json

import pytest
import torch

from seedrl.errors import SeedRLError
from seedrl.train.trainer import Trainer
from seedrl.train.update import UpdateBatch, training_samples, warmup_factor, warmup_schedule
from tests.helpers import assert_updated, mixed_outcomes, tiny_cfg

CHEAP = {"eval.num_tasks": 0, "save_every": 0, "rollout.tasks_per_batch": 2, "rollout.group_size": 2,
         "env.max_steps": 2, "optim.lr": 1e-3}


def test_warmup_schedule_and_factor_by_hand():
    # SEED's search launcher: 150 training steps x 0.1 = 15 warm-up iterations, per iteration
    assert warmup_schedule(0, 0.1, 150) == (True, 15)
    assert warmup_schedule(0, 0.3, 10) == (True, 3)
    assert warmup_schedule(20, 0.0, 150) == (False, 20)  # optimizer steps
    assert warmup_schedule(0, 0.0, 150) == (False, 0)
    f = warmup_factor(4)
    assert [f(s) for s in range(7)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0, 1.0]
    assert [warmup_factor(0)(s) for s in range(3)] == [1.0, 1.0, 1.0]


def test_both_warmup_keys_are_refused(tmp_path):
    with pytest.raises(SeedRLError, match=r"optim.warmup_steps=5 .*optim.warmup_ratio=0.1.*set only one"):
        tiny_cfg(tmp_path / "r", **{"optim.warmup_steps": 5, "optim.warmup_ratio": 0.1})
    for bad in (1.0, -0.1):
        with pytest.raises(SeedRLError, match="optim.warmup_ratio"):
            tiny_cfg(tmp_path / "r", **{"optim.warmup_ratio": bad})


def _step_lrs(tr: Trainer, ub: UpdateBatch, updates: int) -> list[list[float]]:
    """The learning rate of every optimizer step, grouped by update (= iteration)."""
    seen: list[float] = []
    tr.optimizer.register_step_pre_hook(lambda opt, args, kwargs: seen.append(opt.param_groups[0]["lr"]))
    out = []
    for _ in range(updates):
        seen.clear()
        assert tr.update(ub)["optim_steps"] >= 2
        out.append(list(seen))
    return out


def test_warmup_ratio_rises_linearly_over_iterations_and_never_within_one(tmp_path):
    """warmup_ratio 0.3 of 10 iterations = 3: the rate of iteration i (from 1) is lr * min(1, i / 3),
    the same for every optimizer step of the iteration; warmup_steps 3 rises from step to step."""
    tr = Trainer(tiny_cfg(tmp_path / "r", **(CHEAP | {"iterations": 10, "optim.warmup_ratio": 0.3,
                                                     "optim.mini_batch_size": 2})))
    samples = training_samples(tr.collect({}))
    ub = UpdateBatch(samples, tr.scorer.logprobs(tr.model, samples), torch.linspace(-1.0, 1.0, len(samples)))
    lrs = _step_lrs(tr, ub, 6)
    for i, steps in enumerate(lrs, start=1):
        assert steps == pytest.approx([1e-3 * min(1.0, i / 3)] * len(steps), rel=1e-12), i
    assert [s[0] for s in lrs] == pytest.approx([1e-3 / 3, 2e-3 / 3, 1e-3, 1e-3, 1e-3, 1e-3])

    per_step = Trainer(tiny_cfg(tmp_path / "s", **(CHEAP | {"iterations": 10, "optim.warmup_steps": 3,
                                                           "optim.mini_batch_size": 2})))
    first = _step_lrs(per_step, ub, 1)[0]
    assert first[:3] == pytest.approx([1e-3 / 3, 2e-3 / 3, 1e-3])  # optimizer steps, within one iteration


def test_warmup_ratio_survives_a_resume_and_refuses_a_longer_warmup(tmp_path):
    """The scheduler state is in the checkpoint: a run killed after iteration 1 and resumed logs the
    rates of an uninterrupted one (1/3, 2/3, 1, 1 of lr). A resume that changes ``iterations`` so that
    the warm-up length changes is refused, naming the reason."""
    # groups of 4: with 2 (CHEAP), one iteration's groups both came out uniform (no advantage to compare)
    over = CHEAP | {"iterations": 4, "save_every": 1, "optim.warmup_ratio": 0.75, "rollout.group_size": 4}
    with mixed_outcomes():  # every iteration updates with a real advantage (tests.helpers)
        Trainer(tiny_cfg(tmp_path / "r", **over)).train(stop_after=1)
        with pytest.raises(SeedRLError, match=r"iterations 4 -> 8 \(optim.warmup_ratio warms up over 3 -> 6"):
            Trainer(tiny_cfg(tmp_path / "r", **(over | {"iterations": 8})), resume=True)
        resumed = Trainer(tiny_cfg(tmp_path / "r", **over), resume=True)
        assert resumed.iteration == 1
        resumed.train()
    rows = [json.loads(x) for x in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    assert_updated(rows)
    assert [r["iteration"] for r in rows] == [1, 2, 3, 4]
    assert [r["lr"] for r in rows] == pytest.approx([1e-3 / 3, 2e-3 / 3, 1e-3, 1e-3], rel=1e-12)


def test_an_iteration_without_an_update_steps_a_per_iteration_scheduler_only(tmp_path):
    """Dynamic sampling that keeps no group skips the update: a per-iteration warm-up still moves on (the
    rate is a function of the iteration), a per-optimizer-step one does not (no optimizer step was taken)."""
    for key, value, steps in (("optim.warmup_ratio", 0.5, 1), ("optim.warmup_steps", 3, 0)):
        tr = Trainer(tiny_cfg(tmp_path / key, **(CHEAP | {"iterations": 4, key: value, "algo.dynamic_sampling": True,
                                                          "algo.dynamic_sampling_rounds": 1})))
        m = tr.train_iteration()  # the random tiny policy loses every episode: every group is uniform
        assert m["update/skipped"] == 1
        assert tr.scheduler.last_epoch == steps, key
