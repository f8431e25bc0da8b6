"""Which way GRPO pushes each sample of a group whose episodes both won and lost: the episode's own way.

The invalid-action penalty (0.1 a penalised step) is far smaller than the gap between a win's score and a
loss's, so in a mixed group every step sample of a won episode gets a positive advantage and every one of a
lost episode a negative one, under both normalisations and both ways of taking the group's statistics. Only
in groups whose episodes all won or all lost does the penalty decide the sign (see
``teacher/adv_agree_gradw`` against ``outcome_agree_gradw`` in seedrl.train.metrics).
"""

import random

import pytest
import torch

from seedrl.algos.advantages import grpo_advantages, invalid_action_penalty


def _batch(rng: random.Random, groups: int, size: int, win_score: float):
    """Random episodes of 1-4 steps, a random share of invalid steps, each group mixed (a win and a loss)."""
    reward, valid, group, traj, won = [], [], [], [], []
    for g in range(groups):
        outcomes = [True, False] + [rng.random() < 0.4 for _ in range(size - 2)]
        rng.shuffle(outcomes)
        for e, w in enumerate(outcomes):
            for _ in range(rng.randint(1, 4)):
                reward.append(win_score if w else 0.0)
                valid.append(rng.random() > 0.3)
                group.append(g)
                traj.append(g * size + e)
                won.append(w)
    return (torch.tensor(reward, dtype=torch.float64), torch.tensor(valid), torch.tensor(group), torch.tensor(traj),
            torch.tensor(won))


@pytest.mark.parametrize("norm", ["mean_std", "mean"])
@pytest.mark.parametrize("stats", ["steps", "trajectories"])
@pytest.mark.parametrize("win_score", [1.0, 10.0])
def test_a_mixed_groups_advantages_carry_their_episodes_signs(norm, stats, win_score):
    rng = random.Random(f"{norm}{stats}{win_score}")
    for _ in range(20):
        reward, valid, group, traj, won = _batch(rng, groups=8, size=4, win_score=win_score)
        adv = grpo_advantages(invalid_action_penalty(reward, valid, 0.1), group, traj, norm=norm, stats=stats)
        assert torch.equal(adv > 0, won) and torch.equal(adv < 0, ~won)


def test_in_an_all_lost_group_the_penalty_alone_decides_the_sign():
    # one episode with an invalid step, one without: same outcome, opposite advantages of unit size
    reward = torch.zeros(4, dtype=torch.float64)
    valid = torch.tensor([True, True, False, True])
    adv = grpo_advantages(invalid_action_penalty(reward, valid, 0.1), torch.zeros(4, dtype=torch.long),
                          torch.tensor([0, 0, 1, 1]), norm="mean_std")
    assert adv[2] < 0 < adv[0] and adv.abs().max() > 0.5
