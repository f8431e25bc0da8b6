"""GiGPO (verl-agent's ``gigpo/core_gigpo.py``, read in ZJU-REAL/SDAR's copy: ``compute_step_discounted_returns``,
``episode_norm_reward``, ``build_step_group``, ``step_norm_reward``, ``compute_gigpo_outcome_advantage``)
against values computed by hand.

The batch: task group 0 with a win (observations s0, s1, s2; rewards 0, 0, 10) and a loss (s0, s1, s3;
its last step invalid, penalty 0.1), and task group 1 with a one-step win on an observation that is also
called "s0" (another task: another anchor group)."""

from __future__ import annotations

import math

import pytest
import torch

from seedrl.algos import anchor_state_groups, gigpo_advantages, step_group_advantages, step_returns

GROUPS = [0, 0, 0, 0, 0, 0, 1]
ANCHORS = ["s0", "s1", "s2", "s0", "s1", "s3", "s0"]
SCORES = torch.tensor([10.0, 10.0, 10.0, 0.0, 0.0, -0.1, 10.0], dtype=torch.float64)
# discounted step returns at gamma 0.95, the invalid step less 0.1
STEP = torch.tensor([9.025, 9.5, 10.0, 0.0, 0.0, -0.1, 10.0], dtype=torch.float64)


def test_step_returns_by_hand():
    torch.testing.assert_close(step_returns(torch.tensor([0.0, 0.0, 10.0]), 0.95), torch.tensor([9.025, 9.5, 10.0]))
    torch.testing.assert_close(step_returns(torch.tensor([1.0, 2.0]), 0.5), torch.tensor([2.0, 2.0]))
    assert step_returns(torch.tensor([]), 0.9).numel() == 0


def test_anchor_state_groups_are_identical_observations_within_a_task_group():
    g = anchor_state_groups(GROUPS, ANCHORS).tolist()
    assert g == [0, 1, 2, 0, 1, 3, 4]  # s0 and s1 shared in group 0; group 1's "s0" is its own
    # similarity (verl-agent's enable_similarity): a near-identical text joins the first cluster
    near = anchor_state_groups([0, 0, 0], ["You see a red apple.", "You see a red appl.", "Nothing."], 0.9).tolist()
    assert near == [0, 0, 1]
    assert anchor_state_groups([0, 0], ["You see a red apple.", "You see a red appl."]).tolist() == [0, 1]
    with pytest.raises(ValueError, match="similarity"):
        anchor_state_groups([0], ["a"], 1.0)


def test_step_group_advantages_by_hand():
    step_group = anchor_state_groups(GROUPS, ANCHORS)
    # mean_norm: s0: 9.025 and 0 around 4.5125; s1: 9.5 and 0 around 4.75; groups of one: 0
    expected = torch.tensor([4.5125, 4.75, 0.0, -4.5125, -4.75, 0.0, 0.0], dtype=torch.float64)
    torch.testing.assert_close(step_group_advantages(STEP, step_group, "mean"), expected)
    # mean_std_norm: two values a and b around their mean are +-1/sqrt(2) of their unbiased std
    r = 1 / math.sqrt(2)
    torch.testing.assert_close(step_group_advantages(STEP, step_group, "mean_std"),
                               torch.tensor([r, r, 0.0, -r, -r, 0.0, 0.0], dtype=torch.float64), atol=1e-6, rtol=0)


def test_gigpo_joint_advantage_by_hand():
    step_group = anchor_state_groups(GROUPS, ANCHORS)
    mu = (30.0 - 0.1) / 6  # group 0's six step scores (verl-agent's mean across steps)
    episode = [10 - mu, 10 - mu, 10 - mu, -mu, -mu, -0.1 - mu, 10.0]  # group 1 alone: mean 0
    joint = gigpo_advantages(SCORES, STEP, torch.tensor(GROUPS), step_group, norm="mean", step_advantage_w=1.0)
    expected = torch.tensor(episode, dtype=torch.float64) + torch.tensor([4.5125, 4.75, 0, -4.5125, -4.75, 0, 0],
                                                                         dtype=torch.float64)
    torch.testing.assert_close(joint, expected)
    torch.testing.assert_close(joint[:2], torch.tensor([9.529167, 9.766667], dtype=torch.float64), atol=1e-6, rtol=0)
    half = gigpo_advantages(SCORES, STEP, torch.tensor(GROUPS), step_group, norm="mean", step_advantage_w=0.5)
    torch.testing.assert_close(half[0], torch.tensor(10 - mu + 0.5 * 4.5125, dtype=torch.float64))
    zero = gigpo_advantages(SCORES, STEP, torch.tensor(GROUPS), step_group, norm="mean", step_advantage_w=0.0)
    torch.testing.assert_close(zero, torch.tensor(episode, dtype=torch.float64))
