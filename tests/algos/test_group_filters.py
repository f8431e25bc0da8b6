"""Reference tests of the GRPO group filters and the sign weighting of advantages
(seedrl.algos.advantages: scale_by_sign, group_reward_std, select_groups), worked out by hand."""

from __future__ import annotations

import math

import pytest
import torch

from seedrl.algos import group_reward_std, scale_by_sign, select_groups

F64 = torch.float64


# --------------------------------------------------------------------------- #
# scale_by_sign                                                               #
# --------------------------------------------------------------------------- #
ADV = torch.tensor([2.0, -1.0, 0.0, 0.5, -3.0], dtype=F64)


def test_scale_by_sign_weights_each_side_by_its_coefficient():
    out = scale_by_sign(ADV, pos_coef=0.5, neg_coef=2.0)
    assert out.tolist() == [1.0, -2.0, 0.0, 0.25, -6.0]
    assert out.dtype == F64 and out.shape == ADV.shape


def test_scale_by_sign_zero_stays_zero_whatever_the_coefficients():
    z = torch.zeros(4)
    for pos, neg in [(3.0, 7.0), (0.0, 0.0), (1.0, 0.0), (0.0, 5.0)]:
        assert scale_by_sign(z, pos, neg).tolist() == [0.0] * 4


def test_scale_by_sign_one_one_is_the_identity():
    assert torch.equal(scale_by_sign(ADV, 1.0, 1.0), ADV)
    assert torch.equal(scale_by_sign(ADV), ADV)  # the defaults are GRPO's


def test_scale_by_sign_one_zero_keeps_only_positive_advantages():
    out = scale_by_sign(ADV, 1.0, 0.0)
    assert out.tolist() == [2.0, 0.0, 0.0, 0.5, 0.0]
    assert not bool((out < 0).any())
    # and (0, 1) keeps only the negative ones
    assert scale_by_sign(ADV, 0.0, 1.0).tolist() == [0.0, -1.0, 0.0, 0.0, -3.0]


# --------------------------------------------------------------------------- #
# group_reward_std                                                            #
# --------------------------------------------------------------------------- #
def test_group_reward_std_is_the_population_std_of_each_group():
    # interleaved, non-contiguous ids: 4 -> [1, 3] (std 1; the sample std would be sqrt 2),
    # 9 -> [5, 5, 5] (uniform: 0), 2 -> [7] (alone: 0), 6 -> [0, 1, 2] (sqrt(2/3))
    index = torch.tensor([9, 4, 9, 2, 4, 9, 6, 6, 6])
    rewards = torch.tensor([5.0, 1.0, 5.0, 7.0, 3.0, 5.0, 0.0, 1.0, 2.0])
    groups, std = group_reward_std(rewards, index)
    assert groups.tolist() == [2, 4, 6, 9]  # sorted distinct ids
    torch.testing.assert_close(std, torch.tensor([0.0, 1.0, math.sqrt(2 / 3), 0.0], dtype=std.dtype))


def test_group_reward_std_uniform_and_single_groups_are_exactly_zero():
    groups, std = group_reward_std(torch.tensor([0.3, 0.3, 0.3, -2.5]), torch.tensor([100, 100, 100, 7]))
    assert groups.tolist() == [7, 100]
    assert std.tolist() == [0.0, 0.0]


def test_group_reward_std_does_not_depend_on_the_row_order():
    index = torch.tensor([3, 1, 3, 1, 3])
    rewards = torch.tensor([0.0, 10.0, 4.0, 0.0, 8.0])  # 1 -> [10, 0] std 5; 3 -> [0, 4, 8] std sqrt(32/3)
    perm = torch.tensor([4, 2, 0, 3, 1])
    for r, i in [(rewards, index), (rewards[perm], index[perm])]:
        groups, std = group_reward_std(r, i)
        assert groups.tolist() == [1, 3]
        torch.testing.assert_close(std, torch.tensor([5.0, math.sqrt(32 / 3)], dtype=std.dtype))


# --------------------------------------------------------------------------- #
# select_groups                                                               #
# --------------------------------------------------------------------------- #
def _layout(groups: dict[int, list[float]], order: list[int]):
    """Rows in the order ``order`` (group ids, each id as often as its group has members)."""
    left = {g: list(r) for g, r in groups.items()}
    rewards = [left[g].pop(0) for g in order]
    assert not any(left.values())
    return torch.tensor(rewards, dtype=F64), torch.tensor(order)


# first appearance: 7, 3, 5, 1; 7 and 5 mixed, 3 and 1 uniform
DROP_GROUPS = {7: [1.0, 0.0], 3: [2.0, 2.0], 5: [0.0, 1.0], 1: [4.0, 4.0]}
DROP_ORDER = [7, 3, 7, 5, 3, 1, 5, 1]


def test_select_groups_without_filters_keeps_every_group_in_first_appearance_order():
    r, i = _layout(DROP_GROUPS, DROP_ORDER)
    out = select_groups(r, i)
    assert out.tolist() == [7, 3, 5, 1]  # not sorted by id
    assert out.dtype == torch.int64


def test_select_groups_drop_uniform_drops_exactly_the_all_equal_groups():
    r, i = _layout(DROP_GROUPS, DROP_ORDER)
    assert select_groups(r, i, drop_uniform=True).tolist() == [7, 5]
    # a group of one is uniform; a difference far below tol counts as equal, a small real one does not
    r2, i2 = _layout({0: [1.0], 1: [1.0, 1.0 + 1e-13], 2: [0.0, 1e-6], 3: [0.0, 0.0, 1.0]}, [0, 1, 1, 2, 2, 3, 3, 3])
    assert select_groups(r2, i2, drop_uniform=True).tolist() == [2, 3]
    # every group uniform: nothing is kept
    assert select_groups(torch.zeros(4, dtype=F64), torch.tensor([0, 0, 1, 1]), drop_uniform=True).tolist() == []


# appearance: 40, 10, 30, 20, 0 with std 0.5, 1.0, 0.5, 0.0, 0.5
STD_GROUPS = {40: [0.0, 1.0], 10: [0.0, 2.0], 30: [1.0, 0.0], 20: [3.0, 3.0], 0: [1.0, 0.0]}
STD_ORDER = [40, 10, 40, 30, 20, 10, 30, 20, 0, 0]


def test_select_groups_keep_frac_keeps_the_largest_std_groups_ties_by_first_appearance():
    r, i = _layout(STD_GROUPS, STD_ORDER)
    # ceil(0.5 * 5) = 3: 10 (std 1), then of the tied 40, 30, 0 (std 0.5) the first two to appear
    # (40, 30; by id it would be 0 and 30); output in order of first appearance
    assert select_groups(r, i, keep_frac=0.5).tolist() == [40, 10, 30]
    assert select_groups(r, i, keep_frac=0.3).tolist() == [40, 10]  # ceil(1.5) = 2
    assert select_groups(r, i, keep_frac=0.2).tolist() == [10]  # ceil(1.0) = 1
    assert select_groups(r, i, keep_frac=0.01).tolist() == [10]  # at least one
    assert select_groups(r, i, keep_frac=0.7).tolist() == [40, 10, 30, 0]  # ceil(3.5) = 4: the uniform 20 goes
    assert select_groups(r, i, keep_frac=1.0).tolist() == [40, 10, 30, 20, 0]


def test_select_groups_keep_frac_ranks_by_std_not_by_mean_or_size():
    # 5 -> [10, 10, 10] (large mean, std 0), 6 -> [0, 1] (std 0.5), 7 -> [0, 0, 0, 3] (std 1.299)
    r, i = _layout({5: [10.0, 10.0, 10.0], 6: [0.0, 1.0], 7: [0.0, 0.0, 0.0, 3.0]}, [5, 5, 5, 6, 6, 7, 7, 7, 7])
    assert select_groups(r, i, keep_frac=0.34).tolist() == [6, 7]  # ceil(1.02) = 2
    assert select_groups(r, i, keep_frac=0.3).tolist() == [7]


def test_select_groups_max_groups_trims_the_earliest_first():
    r, i = _layout(STD_GROUPS, STD_ORDER)
    assert select_groups(r, i, max_groups=2).tolist() == [40, 10]
    assert select_groups(r, i, max_groups=10).tolist() == [40, 10, 30, 20, 0]
    r, i = _layout(DROP_GROUPS, DROP_ORDER)
    assert select_groups(r, i, drop_uniform=True, max_groups=1).tolist() == [7]  # trimmed after the filter


@pytest.mark.parametrize("frac", [0.0, -0.5, 1.0001, 2.0])
def test_select_groups_keep_frac_outside_zero_one_raises(frac):
    r, i = _layout(DROP_GROUPS, DROP_ORDER)
    with pytest.raises(ValueError, match="keep_frac"):
        select_groups(r, i, keep_frac=frac)


def test_length_discount_by_hand():
    from seedrl.algos import length_discount

    r = torch.tensor([10.0, 10.0, 0.0, 10.0])
    steps = torch.tensor([1, 3, 5, 5])
    out = length_discount(r, steps, 0.8)
    assert out.tolist() == pytest.approx([10.0, 6.4, 0.0, 10 * 0.8 ** 4])
    assert torch.equal(length_discount(r, steps, 1.0), r)  # gamma 1: the outcome alone
    with pytest.raises(ValueError):
        length_discount(r, steps, 0.0)


def test_discounted_wins_of_different_length_make_a_group_mixed():
    """Two wins of 2 and 4 steps: equal outcomes, unequal discounted returns, so dynamic sampling's
    filter (on the returns the advantages use) keeps the group; undiscounted it is uniform."""
    from seedrl.algos import length_discount

    r, steps, g = torch.tensor([10.0, 10.0]), torch.tensor([2, 4]), torch.tensor([0, 0])
    assert select_groups(r, g, drop_uniform=True).tolist() == []
    assert select_groups(length_discount(r, steps, 0.9), g, drop_uniform=True).tolist() == [0]

