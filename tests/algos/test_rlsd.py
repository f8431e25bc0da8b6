"""SDAR's RLSD (``compute_rlsd_token_advantage`` and ``_get_rlsd_lambda`` of ``ZJU-REAL/SDAR``'s
``verl/trainer/ppo/rlsd_utils.py`` / ``rlsd_ray_trainer.py``) against values computed by hand."""

from __future__ import annotations

import math

import pytest
import torch

from seedrl.algos import rlsd_advantage, rlsd_lambda


def test_rlsd_advantage_by_hand():
    """Winning row (A = 1): w = clip(exp(+delta), 0.8, 1.2); losing row (A = -2): w = clip(exp(-delta));
    A_t = A (0.5 + 0.5 w). The last token of the losing row is outside the mask: it keeps A."""
    adv = torch.tensor([[1.0, 1.0, 1.0], [-2.0, -2.0, -2.0], [0.0, 0.0, 0.0]])
    old = torch.tensor([[-1.0, -1.0, -1.0], [-2.0, -2.0, -2.0], [-1.0, -1.0, -1.0]])
    delta = torch.tensor([[0.1, -0.5, 0.0], [0.1, -0.5, 0.3], [1.0, -1.0, 0.5]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    out = rlsd_advantage(adv, old + delta, old, mask, lam=0.5, clip_eps=0.2)
    expected = torch.tensor([
        [0.5 + 0.5 * math.exp(0.1), 0.5 + 0.5 * 0.8, 1.0],   # exp(-0.5) = 0.61 clipped up to 0.8
        [-2.0 * (0.5 + 0.5 * math.exp(-0.1)), -2.0 * (0.5 + 0.5 * 1.2), -2.0],  # exp(0.5) = 1.65 -> 1.2
        [0.0, 0.0, 0.0],  # A = 0: nothing to re-weight
    ])
    torch.testing.assert_close(out, expected)
    # numbers once more, written out: 1.0525855, 0.9 and -1.9048374, -2.2
    torch.testing.assert_close(out[:2, :2], torch.tensor([[1.0525855, 0.9], [-1.9048374, -2.2]]))


def test_rlsd_advantage_lambda_zero_is_grpo_and_lambda_one_is_the_clipped_weight_alone():
    g = torch.Generator().manual_seed(0)
    adv = torch.randn(3, 4, generator=g)
    old, teacher = -torch.rand(3, 4, generator=g), -torch.rand(3, 4, generator=g)
    mask = torch.ones(3, 4)
    torch.testing.assert_close(rlsd_advantage(adv, teacher, old, mask, lam=0.0), adv)
    w = torch.clamp(torch.exp(torch.sign(adv) * (teacher - old)), 0.7, 1.3)
    torch.testing.assert_close(rlsd_advantage(adv, teacher, old, mask, lam=1.0, clip_eps=0.3), adv * w)


def test_rlsd_advantage_carries_no_gradient():
    old = torch.zeros(1, 2)
    teacher = torch.tensor([[0.1, -0.1]], requires_grad=True)
    assert not rlsd_advantage(torch.ones(1, 2), teacher, old, torch.ones(1, 2)).requires_grad


@pytest.mark.parametrize("step,expected", [(1, 0.495), (50, 0.25), (99, 0.005), (100, 0.0), (150, 0.0)])
def test_rlsd_lambda_decays_linearly_to_zero_over_the_warmdown(step, expected):
    """SDAR's launchers: rlsd_lambda 0.5, warmdown_steps 100; verl's first step is 1."""
    assert rlsd_lambda(step, 0.5, 100) == pytest.approx(expected)
