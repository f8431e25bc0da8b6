"""The gigpo method through the trainer's scorer: verl-agent's GiGPO advantage (episode groups plus
anchor-state step groups, ``gigpo/core_gigpo.py``) from the trajectories' own step rewards and
observations, against the numbers of ``tests/algos/test_gigpo.py`` worked by hand (here the lost
episode's invalid last step acts on the win's last observation, s2, so the penalty shows)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from seedrl.config import TrainConfig, load_config
from seedrl.rollout.types import StepSample, Trajectory
from seedrl.train.trainer import Trainer
from tests.helpers import tiny_cfg


def _trajs() -> list[Trajectory]:
    def step(tid, gid, k, obs, r, valid=True):
        return StepSample([1, 2], [3], [-0.1], traj_id=tid, group_id=gid, step=k, reward=r, action_valid=valid,
                          observation=obs, format_valid=valid)

    win = [step(0, 0, 0, "s0", 0.0), step(0, 0, 1, "s1", 0.0), step(0, 0, 2, "s2", 10.0)]
    loss = [step(1, 0, 0, "s0", 0.0), step(1, 0, 1, "s1", 0.0), step(1, 0, 2, "s2", 0.0, valid=False)]
    other = [step(2, 1, 0, "s0", 10.0)]
    return [Trajectory(0, 0, "a", steps=win, won=True), Trajectory(1, 0, "a", steps=loss),
            Trajectory(2, 1, "b", steps=other, won=True)]


def test_gigpo_is_grpo_plus_the_step_group_advantage_from_rewards_and_observations(tmp_path):
    """Kills: the step part left out (``algo.step_advantage_w`` ignored), step returns not discounted or
    not penalised at the invalid step, anchor groups across tasks, and any of it reaching grpo."""
    over = {"algo.name": "gigpo", "algo.adv_norm": "mean", "algo.invalid_penalty": 0.1, "eval.num_tasks": 0}
    tr = Trainer(tiny_cfg(tmp_path / "run", **over))
    assert tr.cfg.algo.step_advantage_w == 1.0 and tr.cfg.algo.step_gamma == 0.95
    trajs = _trajs()
    samples = [s for t in trajs for s in t.steps]
    mu = (30.0 - 0.1) / 6
    episode = torch.tensor([10 - mu, 10 - mu, 10 - mu, -mu, -mu, -0.1 - mu, 10.0])
    # s2 is shared here: the win's 10 and the invalid last step's 0 - 0.1 around 4.95
    step = torch.tensor([4.5125, 4.75, 5.05, -4.5125, -4.75, -5.05, 0.0])
    torch.testing.assert_close(tr.scorer.advantages(trajs, samples), episode + step)
    tr.cfg.algo.step_advantage_w = 0.0  # grpo's advantage: the episode part alone
    torch.testing.assert_close(tr.scorer.advantages(trajs, samples), episode)


def test_only_gigpo_turns_the_step_part_on_and_an_explicit_weight_wins():
    assert load_config(TrainConfig, None, ["algo.name=grpo"]).algo.step_advantage_w == 0.0
    assert load_config(TrainConfig, None, ["algo.name=seed"]).algo.step_advantage_w == 0.0
    assert load_config(TrainConfig, None, ["algo.name=gigpo", "algo.step_advantage_w=0.5"]).algo.step_advantage_w == 0.5


@pytest.mark.slow
def test_a_tiny_gigpo_run_trains(tmp_path):
    tr = Trainer(tiny_cfg(tmp_path / "run", **{"algo.name": "gigpo", "eval.num_tasks": 0, "iterations": 1}))
    assert tr.analyzer is None  # no skills, no teacher
    tr.train()
    row = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert math.isfinite(row["loss/pg"]) and "loss/opd" not in row
