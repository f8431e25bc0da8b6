"""Hand-computed reference values for the edges of seedrl.algos that the reference tests in
test_algos.py / test_group_filters.py / test_opd_agg.py leave open: integer and bool inputs (``won``
flags, token counts), dtypes the docstrings promise (float64 stays float64, a bf16 advantage stays
bf16, ``signal_weights`` is float64 even when empty), the clamps written in the docstrings, strict
vs non-strict inequalities at their boundary, documented defaults (``beta = 5``, ``coef = 1e-3``)
and error messages.

Each test here kills mutants that survived ``make mutants`` (mutmut over seedrl/algos); the ones
left alive are listed, each with its reason, in tests/algos/equivalent_mutants.txt.
"""

from __future__ import annotations

import math
import re

import pytest
import torch

from seedrl.algos import (
    broadcast_to_tokens,
    group_reward_std,
    grpo_advantages,
    invalid_action_penalty,
    kl_k3,
    length_discount,
    masked_mean,
    masked_sum,
    opd_loss,
    opid_advantage,
    ppo_clip_loss,
    select_groups,
    signal_weights,
    skill_sd_loss,
    smoothed_nll,
    token_mean,
)
from seedrl.algos.advantages import _group_stats

F64 = torch.float64
F32 = torch.float32


def t64(*rows):
    return torch.tensor(rows, dtype=F64)


# --------------------------------------------------------------------------- #
# invalid_action_penalty / length_discount                                    #
# --------------------------------------------------------------------------- #
def test_invalid_action_penalty_takes_bool_won_flags():
    """``R = won`` as a bool tensor is promoted to float (bool tensors cannot be subtracted)."""
    won = torch.tensor([True, True, False])
    valid = torch.tensor([True, False, False])
    out = invalid_action_penalty(won, valid, 0.25)
    assert out.dtype == F32
    assert out.tolist() == [1.0, 0.75, -0.25]


def test_invalid_action_penalty_is_exact_in_float64():
    """The penalty is applied in the reward's dtype: float64 in, ``R - coef`` exactly in float64 out
    (not a float32-rounded ``coef``)."""
    out = invalid_action_penalty(t64(10.0, 0.0, 3.0), torch.tensor([0, 1, 0]), 0.1)
    assert out.dtype == F64
    assert out.tolist() == [10.0 - 0.1, 0.0, 3.0 - 0.1]


@pytest.mark.parametrize("gamma", [0.0, -0.5, 1.5, 2.0])
def test_length_discount_rejects_gamma_outside_0_1(gamma):
    with pytest.raises(ValueError, match=re.escape(f"gamma must be in (0, 1], got {gamma}")):
        length_discount(t64(1.0), torch.tensor([1]), gamma)


def test_length_discount_float64_by_hand():
    """``R * gamma ** (steps - 1)`` in float64 for float64 rewards and int64 step counts."""
    out = length_discount(t64(10.0, 10.0, 3.0, -2.0), torch.tensor([3, 5, 1, 2]), 0.8)
    assert out.dtype == F64
    expected = t64(10.0 * 0.8**2, 10.0 * 0.8**4, 3.0, -2.0 * 0.8)
    torch.testing.assert_close(out, expected, rtol=1e-15, atol=0.0)
    # gamma = 1 is the identity
    assert length_discount(t64(1.5, 2.5), torch.tensor([4, 9]), 1.0).tolist() == [1.5, 2.5]


def test_length_discount_takes_bool_won_flags():
    out = length_discount(torch.tensor([True, False, True]), torch.tensor([3, 2, 5]), 0.5)
    assert out.dtype == F32
    assert out.tolist() == [0.25, 0.0, 0.0625]


# --------------------------------------------------------------------------- #
# grpo_advantages                                                             #
# --------------------------------------------------------------------------- #
def test_group_stats_stay_on_the_input_device():
    """The per-group sums are allocated on the values' device (CUDA in training): the meta device
    stands in for it here, as it shares CUDA's rule that a CPU tensor of rank >= 1 cannot mix in."""
    values = torch.tensor([1.0, 2.0, 4.0], device="meta")
    group = torch.tensor([0, 0, 1], device="meta")
    mean, std = _group_stats(values, group, 2)
    assert mean.device.type == "meta" and std.device.type == "meta"
    assert mean.shape == (2,) and std.shape == (2,)
    # and the values, on the CPU: group 0 = {1, 2}, group 1 = {4} (a single element: mean 0, std 1)
    mean, std = _group_stats(t64(1.0, 2.0, 4.0), torch.tensor([0, 0, 1]), 2)
    assert mean.tolist() == [1.5, 0.0]
    assert std.tolist() == pytest.approx([math.sqrt(0.5), 1.0], rel=1e-12, abs=0)  # sqrt rounds per CPU kind


def test_grpo_bad_modes_name_themselves():
    s, g = t64(1.0, 2.0), torch.tensor([0, 0])
    with pytest.raises(ValueError, match=r"^unknown norm 'std'$"):
        grpo_advantages(s, g, None, norm="std")
    with pytest.raises(ValueError, match=r"^unknown stats 'episodes'$"):
        grpo_advantages(s, g, None, stats="episodes")
    with pytest.raises(ValueError, match=r'^stats="trajectories" needs traj_index$'):
        grpo_advantages(s, g, None, stats="trajectories")


@pytest.mark.parametrize("stats", ["steps", "trajectories"])
def test_grpo_integer_and_bool_scores_are_promoted_to_float(stats):
    """``won`` as 0/1 int64 (or bool): group 0 = {1, 0} -> mean 0.5, unbiased std sqrt(0.5); group 1
    = {1, 1} -> advantage 0."""
    group = torch.tensor([0, 0, 1, 1])
    traj = torch.tensor([0, 1, 0, 1])
    a = 0.5 / (math.sqrt(0.5) + 1e-6)
    for scores in (torch.tensor([1, 0, 1, 1]), torch.tensor([True, False, True, True])):
        out = grpo_advantages(scores, group, traj, stats=stats)
        assert out.dtype == F32
        torch.testing.assert_close(out, torch.tensor([a, -a, 0.0, 0.0]))
        out = grpo_advantages(scores, group, traj, norm="mean", stats=stats)
        assert out.tolist() == [0.5, -0.5, 0.0, 0.0]


@pytest.mark.parametrize("stats", ["steps", "trajectories"])
def test_grpo_one_sample_batch_and_empty_batch(stats):
    """A batch of a single step sample is a group of one: ``s / (1 + eps)`` (``mean_std``) or ``s``
    (``mean``). An empty batch gives an empty result."""
    one = grpo_advantages(t64(2.0), torch.tensor([7]), torch.tensor([3]), stats=stats, eps=0.5)
    assert one.tolist() == [2.0 / 1.5]
    one = grpo_advantages(t64(2.0), torch.tensor([7]), torch.tensor([3]), norm="mean", stats=stats)
    assert one.tolist() == [2.0]
    empty = grpo_advantages(torch.zeros(0, dtype=F64), torch.zeros(0, dtype=torch.long),
                            torch.zeros(0, dtype=torch.long), stats=stats)
    assert empty.shape == (0,) and empty.dtype == F64


# --------------------------------------------------------------------------- #
# broadcast_to_tokens                                                         #
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, F32])
def test_broadcast_to_tokens_keeps_the_advantage_dtype(dtype):
    """The result is in ``adv``'s dtype whatever the mask's (here a float64 mask)."""
    adv = torch.tensor([1.5, -2.0], dtype=dtype)
    mask = torch.tensor([[0, 1, 1], [1, 1, 0]], dtype=F64)
    out = broadcast_to_tokens(adv, mask)
    assert out.dtype == dtype
    assert out.tolist() == [[0.0, 1.5, 1.5], [-2.0, -2.0, 0.0]]


# --------------------------------------------------------------------------- #
# group_reward_std / select_groups                                            #
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("dtype", [torch.long, F32, torch.bool])
def test_group_reward_std_is_float64_for_any_reward_dtype(dtype):
    """Groups 5 = {0, 1} (population std 0.5), 9 = {1, 1} and 2 = {1, 1} (0), as 0/1 rewards."""
    rewards = torch.tensor([0, 1, 1, 1, 1, 1]).to(dtype)
    groups, std = group_reward_std(rewards, torch.tensor([5, 5, 9, 9, 2, 2]))
    assert groups.tolist() == [2, 5, 9]
    assert std.dtype == F64
    assert std.tolist() == [0.0, 0.5, 0.0]


def test_group_reward_std_of_tenths_is_exactly_zero():
    """float32 rewards are summed in float64: a group of seven 0.1 has std <= 1e-9 and is dropped as
    uniform (summed in float32 its std is 7.5e-9)."""
    rewards = torch.tensor([0.1] * 7 + [0.7, 0.1], dtype=F32)
    gidx = torch.tensor([0] * 7 + [1, 1])
    _, std = group_reward_std(rewards, gidx)
    assert float(std[0]) <= 1e-9
    assert select_groups(rewards, gidx, drop_uniform=True).tolist() == [1]


def test_select_groups_drops_a_group_whose_std_equals_tol():
    """``drop_uniform`` drops std <= tol: group 0 = {0, 1} has std exactly 0.5."""
    rewards = t64(0.0, 1.0, 0.0, 2.0, 3.0, 3.0)
    gidx = torch.tensor([0, 0, 1, 1, 2, 2])
    assert select_groups(rewards, gidx, drop_uniform=True, tol=0.5).tolist() == [1]
    assert select_groups(rewards, gidx, drop_uniform=True, tol=0.49).tolist() == [0, 1]


def test_select_groups_returns_int64_even_when_empty():
    rewards = t64(1.0, 1.0, 0.0, 0.0)
    gidx = torch.tensor([3, 3, 4, 4])
    out = select_groups(rewards, gidx, drop_uniform=True)
    assert out.dtype == torch.int64 and out.shape == (0,)
    out = select_groups(rewards, gidx)
    assert out.dtype == torch.int64 and out.tolist() == [3, 4]


# --------------------------------------------------------------------------- #
# masked_sum / token_mean / masked_mean                                       #
# --------------------------------------------------------------------------- #
def test_masked_sum_of_integer_counts_is_exact():
    """Integer ``x`` sums in int64: 2**24 + 1 would round to 2**24 in float32."""
    x = torch.tensor([[2**24, 1, 7]])
    out = masked_sum(x, torch.tensor([[1, 1, 0]]))
    assert out.dtype == torch.int64 and int(out) == 2**24 + 1


def test_losses_keep_xs_dtype_under_a_float64_weight_mask():
    """The trainer multiplies the response mask by float64 ``signal_weights``; the loss stays in the
    log-probs' dtype (float32 here) rather than being promoted to float64."""
    x = torch.tensor([[1.0, 3.0, 100.0]], dtype=F32)
    w = torch.tensor([[0.25, 0.25, 0.0]], dtype=F64)
    assert masked_sum(x, w).dtype == F32 and float(masked_sum(x, w)) == 1.0
    assert token_mean(x, w).dtype == F32 and float(token_mean(x, w)) == 1.0  # denominator clamped to 1
    assert masked_mean(x, w).dtype == F32
    loss, stats = opd_loss(x, x + 1.0, w, denom=1)
    assert loss.dtype == F32
    assert all(v.dtype == F32 for v in stats.values())


def test_masked_mean_divides_by_a_fractional_weight_sum():
    """Weights 0.25 + 0.25 = 0.5 (< 1): the weighted mean is (1 * 0.25 + 3 * 0.25) / 0.5 = 2."""
    x = t64(1.0, 3.0, 100.0).unsqueeze(0)
    w = t64(0.25, 0.25, 0.0).unsqueeze(0)
    assert float(masked_mean(x, w)) == 2.0
    assert float(masked_mean(x, torch.zeros_like(w))) == 0.0


def test_token_mean_explicit_denominator_is_exact_in_float64():
    x = t64(1.0, 2.0, 4.0).unsqueeze(0)
    mask = torch.tensor([[1, 1, 0]])
    assert float(token_mean(x, mask, denom=torch.tensor(3.3, dtype=F64))) == 3.0 / 3.3
    assert float(token_mean(x, mask, denom=4)) == 0.75
    assert token_mean(x.float(), mask, denom=torch.tensor(4.0, dtype=F64)).dtype == F32


# --------------------------------------------------------------------------- #
# signal_weights                                                              #
# --------------------------------------------------------------------------- #
def test_signal_weights_unknown_aggregation_lists_the_valid_ones():
    one = torch.tensor([1])
    msg = "unknown aggregation 'mean'; valid: micro_batch_mean, signal_token_mean"
    with pytest.raises(ValueError, match="^" + re.escape(msg) + "$"):
        signal_weights(one, one, one, "mean")


@pytest.mark.parametrize("agg", ["micro_batch_mean", "signal_token_mean"])
def test_signal_weights_are_float64_zeros_without_signal_tokens(agg):
    """No sample with a signal, or signal samples with 0 response tokens: all weights 0, float64."""
    lengths = torch.tensor([0, 3, 0, 5])
    mb = torch.tensor([0, 0, 1, 1])
    for signal in (torch.tensor([0, 0, 0, 0]), torch.tensor([1, 0, 1, 0])):
        w = signal_weights(lengths, signal, mb, agg)
        assert w.dtype == F64
        assert w.tolist() == [0.0, 0.0, 0.0, 0.0]


def test_signal_weights_single_one_token_signal():
    """One signal sample of 1 token: ``signal_token_mean`` gives it weight 1 / S = 1;
    ``micro_batch_mean`` 1 / (K * S_k) = 1 / 2 (K = 2 micro-batches, the other without signal)."""
    lengths = torch.tensor([1, 4, 2])
    signal = torch.tensor([1, 0, 0])
    mb = torch.tensor([0, 0, 1])
    assert signal_weights(lengths, signal, mb, "signal_token_mean").tolist() == [1.0, 0.0, 0.0]
    assert signal_weights(lengths, signal, mb, "micro_batch_mean").tolist() == [0.5, 0.0, 0.0]


# --------------------------------------------------------------------------- #
# ppo_clip_loss                                                               #
# --------------------------------------------------------------------------- #
def test_ppo_log_ratio_is_clamped_below_at_minus_20():
    """``r = exp(clamp(logp - old, -20, 20))``: a log-ratio of -50 counts as -20 in the ratio and in
    ``approx_kl``. A > 0: pg1 = -e^-20, pg2 = -0.8 -> loss max = -e^-20 (pg1: not clipped)."""
    loss, stats = ppo_clip_loss(t64([-50.0]), t64([0.0]), t64([1.0]), torch.ones(1, 1))
    assert float(stats["approx_kl"]) == 20.0
    assert float(stats["ratio_mean"]) == math.exp(-20.0)
    assert float(loss) == -math.exp(-20.0)
    assert float(stats["clipfrac"]) == 0.0


def test_ppo_clipfrac_counts_only_strictly_clipped_tokens():
    """Inside the clip range pg2 == pg1: not clipped. Tokens: r = 1 (A = 1), r = 1 (A = -1),
    r = 2 (A = 1: pg2 = -1.2 > pg1 = -2, clipped), r = 1 with A = 0."""
    logp = t64([0.0, -1.0, math.log(2.0), 0.3])
    old = t64([0.0, -1.0, 0.0, 0.3])
    adv = t64([1.0, -1.0, 1.0, 0.0])
    loss, stats = ppo_clip_loss(logp, old, adv, torch.ones(1, 4))
    assert float(stats["clipfrac"]) == 0.25
    assert float(stats["clipfrac_lower"]) == 0.0
    torch.testing.assert_close(loss, t64(-1.0 + 1.0 - 1.2 + 0.0).squeeze() / 4, rtol=1e-15, atol=0)
    zero, stats = ppo_clip_loss(old, old, t64([1.0, -1.0, 2.0, 0.0]), torch.ones(1, 4))
    assert float(stats["clipfrac"]) == 0.0


def test_ppo_dual_clip_is_active_only_strictly_above_c_abs_a():
    """A = -1, c = r of the first token exactly: max(pg1, pg2) = r = c is not above -c A, so that
    token is not dual-clipped; the second token (r = e > c) is. Loss: min(r, c) per token."""
    c = float(torch.exp(torch.tensor(0.5, dtype=F64)))
    logp = t64([0.5, 1.0])
    loss, stats = ppo_clip_loss(logp, t64([0.0, 0.0]), t64([-1.0, -1.0]), torch.ones(1, 2), dual_clip_c=c)
    assert float(stats["clipfrac_lower"]) == 0.5
    assert float(loss) == (c + c) / 2


# --------------------------------------------------------------------------- #
# kl_k3 / smoothed_nll                                                        #
# --------------------------------------------------------------------------- #
def test_kl_k3_is_finite_for_a_zero_probability_token():
    """logp = -inf (a token the policy gives probability 0): d = ref - logp = +inf is clamped to 20
    before exp, so k3 = clamp(e^20 - 21, -10, 10) = 10, not inf - inf = NaN."""
    out = kl_k3(t64([float("-inf"), -1000.0]), t64([0.0, 0.0]))
    assert out.tolist() == [[10.0, 10.0]]


def test_smoothed_nll_eps_one_is_the_uniform_target():
    """eps = 1: the target is uniform, the loss ``logsumexp(z) - mean(z)`` whatever the label."""
    z = t64([0.0, 1.0, 3.0]).unsqueeze(0)  # [1, 1, 3]
    lse = math.log(1 + math.e + math.e**3)
    for label in range(3):
        out = smoothed_nll(z, torch.tensor([[label]]), 1.0)
        assert math.isclose(float(out), lse - 4.0 / 3.0, rel_tol=1e-15)


# --------------------------------------------------------------------------- #
# opd_loss / skill_sd_loss / opid_advantage: defaults, clamps, stats          #
# --------------------------------------------------------------------------- #
def test_opd_default_beta_is_five():
    """delta = teacher - logp = 0.2: gate = sigmoid(5 * 0.2) = sigmoid(1)."""
    logp, teacher = t64([-1.2]), t64([-1.0])
    loss, stats = opd_loss(logp, teacher, torch.ones(1, 1))
    gate = 1.0 / (1.0 + math.exp(-1.0))
    assert math.isclose(float(stats["gate_mean"]), gate, rel_tol=1e-15)
    assert math.isclose(float(loss), gate * 0.2, rel_tol=1e-12)
    assert stats["signal_tokens"].dtype == F64 and float(stats["signal_tokens"]) == 1.0


def test_skill_sd_rho_is_clamped_at_e_10_and_stats_by_hand():
    """logp - old = 10.5 -> rho = e^10; teacher - logp = -1 -> k3 = e^-1 - 1 + 1 = e^-1;
    loss = e^10 * e^-1 = e^9."""
    loss, stats = skill_sd_loss(t64([10.5]), t64([0.0]), t64([9.5]), torch.ones(1, 1))
    assert set(stats) == {"rho_mean", "k3_mean"}
    assert math.isclose(float(stats["rho_mean"]), math.exp(10.0), rel_tol=1e-15)
    assert math.isclose(float(stats["k3_mean"]), math.exp(-1.0), rel_tol=1e-15)
    assert math.isclose(float(loss), math.exp(9.0), rel_tol=1e-14)


def test_skill_sd_teacher_gap_is_clamped_at_20():
    """teacher - logp = 20.5 -> exp(min(20.5, 20)) - 1 + (0 - 20.5); rho = 1."""
    _, stats = skill_sd_loss(t64([0.0]), t64([0.0]), t64([20.5]), torch.ones(1, 1))
    assert math.isclose(float(stats["k3_mean"]), math.exp(20.0) - 1.0 - 20.5, rel_tol=1e-15)


def test_skill_sd_explicit_denominator():
    """Two masked tokens with k3 = e^-1 each (rho = 1), one masked out: sum = 2 e^-1, / denom 5."""
    logp = t64([0.0, 0.0, 0.0])
    teacher = t64([-1.0, -1.0, 50.0])
    mask = torch.tensor([[1, 1, 0]])
    loss, _ = skill_sd_loss(logp, logp, teacher, mask, denom=5)
    assert math.isclose(float(loss), 2 * math.exp(-1.0) / 5, rel_tol=1e-15)
    loss, _ = skill_sd_loss(logp, logp, teacher, mask)
    assert math.isclose(float(loss), math.exp(-1.0), rel_tol=1e-15)


def test_opid_default_coef_is_one_thousandth():
    adv = t64([1.0, 1.0])
    out = opid_advantage(adv, t64([-1.0, -1.0]), t64([-3.0, -3.0]), torch.tensor([[1, 0]]))
    assert out.tolist() == [[1.0 + 1e-3 * 2.0, 1.0]]


# --------------------------------------------------------------------------- #
# CUDA                                                                        #
# --------------------------------------------------------------------------- #
@pytest.mark.gpu
@pytest.mark.parametrize("stats", ["steps", "trajectories"])
def test_grpo_advantages_on_cuda_match_the_cpu(stats):
    """The per-trajectory buffers of ``stats="trajectories"`` are allocated on the scores' device:
    CUDA in, CUDA out, the CPU's values. (Groups 4 = trajectories {1, 0.5} and {0}, 9 = {2} and {2},
    2 = {3}.)"""
    group = torch.tensor([4, 4, 4, 9, 9, 2])
    traj = torch.tensor([0, 0, 1, 0, 1, 0])
    scores = t64(1.0, 0.5, 0.0, 2.0, 2.0, 3.0)
    cpu = grpo_advantages(scores, group, traj, stats=stats)
    cuda = grpo_advantages(scores.cuda(), group.cuda(), traj.cuda(), stats=stats)
    assert cuda.device.type == "cuda"
    torch.testing.assert_close(cuda.cpu(), cpu, rtol=1e-12, atol=0.0)
