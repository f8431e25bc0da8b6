"""Tests for seedrl.algos: every function against a slow, loop-based reference
written straight from the formulas (verl-agent / SEED semantics), plus hand cases."""

from __future__ import annotations

import math
import random

import pytest
import torch

from seedrl.algos import (
    broadcast_to_tokens,
    entropy_from_logits,
    grpo_advantages,
    invalid_action_penalty,
    kl_k3,
    masked_sum,
    opd_loss,
    ppo_clip_loss,
    token_logprobs,
    token_mean,
)

SEEDS = [0, 1, 2, 3, 4, 5]
F64 = torch.float64


# --------------------------------------------------------------------------- #
# Random layouts and slow references                                          #
# --------------------------------------------------------------------------- #
def random_layout(seed: int, local_traj_ids: bool = False):
    """Random batch of step samples: groups of 1..4 trajectories of 1..6 steps, some
    single-step single-trajectory groups, shuffled order, non-contiguous ids."""
    rng = random.Random(seed)
    rows = []  # (group_id, traj_id, episode_reward, valid)
    n_groups = rng.randint(2, 6)
    group_ids = rng.sample(range(100, 1000), n_groups)
    next_traj = 0
    for gi, g in enumerate(group_ids):
        n_traj = 1 if gi == 0 else rng.randint(1, 4)
        for k in range(n_traj):
            tid = k if local_traj_ids else rng.randint(0, 10**6) * 10 + next_traj % 10
            next_traj += 1
            length = 1 if (gi == 0 and seed % 2 == 0) else rng.randint(1, 6)
            reward = rng.choice([0.0, 10.0, rng.uniform(-3, 3)])
            for _ in range(length):
                rows.append((g, tid, reward, rng.random() > 0.3))
    rng.shuffle(rows)
    group = torch.tensor([r[0] for r in rows], dtype=torch.long)
    traj = torch.tensor([r[1] for r in rows], dtype=torch.long)
    reward = torch.tensor([r[2] for r in rows], dtype=F64)
    valid = torch.tensor([r[3] for r in rows], dtype=torch.bool)
    return group, traj, reward, valid


def ref_penalty(reward, valid, coef):
    return [float(reward[j]) - (coef if not bool(valid[j]) else 0.0) for j in range(len(reward))]


def ref_grpo(scores, group, traj, norm, stats, eps=1e-6):
    s = [float(x) for x in scores]
    g = [int(x) for x in group]
    t = [int(x) for x in traj]
    values: dict[int, list[float]] = {}
    if stats == "steps":
        for j in range(len(s)):
            values.setdefault(g[j], []).append(s[j])
    else:
        per_traj: dict[tuple[int, int], list[float]] = {}
        for j in range(len(s)):
            per_traj.setdefault((g[j], t[j]), []).append(s[j])
        for (gg, _), v in per_traj.items():
            values.setdefault(gg, []).append(sum(v) / len(v))
    mu, sd = {}, {}
    for gg, v in values.items():
        if len(v) == 1:
            mu[gg], sd[gg] = 0.0, 1.0
        else:
            m = sum(v) / len(v)
            mu[gg] = m
            sd[gg] = math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1))
    out = []
    for j in range(len(s)):
        if norm == "mean":
            out.append(s[j] - mu[g[j]])
        else:
            out.append((s[j] - mu[g[j]]) / (sd[g[j]] + eps))
    return out, mu


def random_tokens(seed: int, B: int = 5, T: int = 7):
    gen = torch.Generator().manual_seed(seed)
    logp = -torch.rand(B, T, generator=gen, dtype=F64) * 3
    old = logp + torch.randn(B, T, generator=gen, dtype=F64) * 0.4
    adv = torch.randn(B, T, generator=gen, dtype=F64)
    mask = (torch.rand(B, T, generator=gen) > 0.35).to(F64)
    mask[0, 0] = 1.0
    if B > 2:
        mask[2] = 0.0  # a fully masked row
    return logp, old, adv, mask


def ref_ppo(logp, old, adv, mask, low=0.2, high=0.2, c=3.0):
    B, T = logp.shape
    tot, n = 0.0, 0
    for b in range(B):
        for t in range(T):
            if mask[b, t] == 0:
                continue
            lr = max(-20.0, min(20.0, float(logp[b, t] - old[b, t])))
            r = math.exp(lr)
            a = float(adv[b, t])
            pg1 = -a * r
            pg2 = -a * min(max(r, 1 - low), 1 + high)
            loss = max(pg1, pg2)
            if a < 0 and c is not None:
                loss = min(loss, -c * a)
            tot += loss
            n += 1
    return tot / max(n, 1)


def ref_opd(logp, teacher, mask, beta):
    tot, n = 0.0, 0
    B, T = logp.shape
    for b in range(B):
        for t in range(T):
            if mask[b, t] == 0:
                continue
            d = float(teacher[b, t] - logp[b, t])
            gate = 1.0 / (1.0 + math.exp(-beta * d))
            tot += gate * d
            n += 1
    return tot / max(n, 1)


# --------------------------------------------------------------------------- #
# Advantages                                                                  #
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("seed", SEEDS)
def test_invalid_action_penalty_matches_reference(seed):
    _, _, reward, valid = random_layout(seed)
    out = invalid_action_penalty(reward, valid, 0.1)
    assert out.shape == reward.shape and out.dtype == F64
    assert torch.allclose(out, torch.tensor(ref_penalty(reward, valid, 0.1), dtype=F64))
    # int 0/1 validity flags work too
    assert torch.equal(invalid_action_penalty(reward, valid.long(), 0.1), out)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("norm", ["mean_std", "mean"])
@pytest.mark.parametrize("stats", ["steps", "trajectories"])
@pytest.mark.parametrize("local_ids", [False, True])
def test_grpo_advantages_match_reference(seed, norm, stats, local_ids):
    group, traj, reward, valid = random_layout(seed, local_traj_ids=local_ids)
    scores = invalid_action_penalty(reward, valid, 0.1)
    adv = grpo_advantages(scores, group, traj, norm=norm, stats=stats)
    ref, _ = ref_grpo(scores, group, traj, norm, stats)
    assert adv.shape == scores.shape
    assert torch.allclose(adv, torch.tensor(ref, dtype=F64), atol=1e-9, rtol=1e-9)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("norm", ["mean_std", "mean"])
@pytest.mark.parametrize("stats", ["steps", "trajectories"])
def test_grpo_advantages_float32_and_permutation_invariance(seed, norm, stats):
    group, traj, reward, valid = random_layout(seed)
    scores = invalid_action_penalty(reward, valid, 0.1)
    adv = grpo_advantages(scores, group, traj, norm=norm, stats=stats)
    adv32 = grpo_advantages(scores.float(), group, traj, norm=norm, stats=stats)
    assert adv32.dtype == torch.float32
    assert torch.allclose(adv32.double(), adv, atol=1e-4)
    perm = torch.randperm(len(scores), generator=torch.Generator().manual_seed(seed))
    adv_p = grpo_advantages(scores[perm], group[perm], traj[perm], norm=norm, stats=stats)
    assert torch.allclose(adv_p, adv[perm], atol=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("norm", ["mean_std", "mean"])
@pytest.mark.parametrize("stats", ["steps", "trajectories"])
def test_grpo_broadcast_invariant(seed, norm, stats):
    """Each step's advantage is a function of its own score and its group's stats:
    zero exactly where s_j == mu_g, nonzero elsewhere, and equal scores in a group
    give equal advantages (so all steps of a penalty-free trajectory agree)."""
    group, traj, reward, valid = random_layout(seed)
    for scores in (reward.clone(), invalid_action_penalty(reward, valid, 0.1)):
        adv = grpo_advantages(scores, group, traj, norm=norm, stats=stats)
        _, mu = ref_grpo(scores, group, traj, norm, stats)
        for j in range(len(scores)):
            m = mu[int(group[j])]
            if abs(float(scores[j]) - m) > 1e-9:
                assert abs(float(adv[j])) > 1e-9, (j, float(scores[j]), m)
                assert (float(adv[j]) > 0) == (float(scores[j]) > m)
            for k in range(len(scores)):
                if group[j] == group[k] and scores[j] == scores[k]:
                    assert adv[j] == adv[k]
        # penalty-free: every step of a trajectory shares one advantage
        if torch.equal(scores, reward):
            for j in range(len(scores)):
                same = (group == group[j]) & (traj == traj[j])
                assert torch.all(adv[same] == adv[j])


@pytest.mark.parametrize("norm", ["mean_std", "mean"])
@pytest.mark.parametrize("stats", ["steps", "trajectories"])
def test_grpo_equal_scores_in_group_give_zero(norm, stats):
    # group 0: three trajectories of unequal length, all failed -> all zero
    # group 1: two trajectories, both won -> all zero
    group = torch.tensor([0, 0, 0, 0, 0, 0, 1, 1, 1])
    traj = torch.tensor([0, 0, 1, 2, 2, 2, 3, 4, 4])
    scores = torch.tensor([0, 0, 0, 0, 0, 0, 10, 10, 10], dtype=F64)
    adv = grpo_advantages(scores, group, traj, norm=norm, stats=stats)
    assert torch.all(adv == 0)
    # one differing trajectory makes every step in that group nonzero
    scores2 = scores.clone()
    scores2[[2]] = 10.0
    adv2 = grpo_advantages(scores2, group, traj, norm=norm, stats=stats)
    assert torch.all(adv2[:6] != 0)
    assert torch.all(adv2[6:] == 0)


def test_grpo_hand_case_steps_vs_trajectories():
    # traj 0: 1 step, won (10); traj 1: 3 steps, failed (0)
    group = torch.zeros(4, dtype=torch.long)
    traj = torch.tensor([0, 1, 1, 1])
    s = torch.tensor([10.0, 0.0, 0.0, 0.0], dtype=F64)
    # steps: mu = 2.5, unbiased std = sqrt((7.5^2 + 3 * 2.5^2) / 3) = 5
    a = grpo_advantages(s, group, traj, stats="steps", eps=0.0)
    assert torch.allclose(a, torch.tensor([1.5, -0.5, -0.5, -0.5], dtype=F64))
    assert torch.allclose(grpo_advantages(s, group, traj, norm="mean"), s - 2.5)
    # trajectories: values [10, 0], mu = 5, std = sqrt(50)
    a = grpo_advantages(s, group, traj, stats="trajectories", eps=0.0)
    r = 5 / math.sqrt(50)
    assert torch.allclose(a, torch.tensor([r, -r, -r, -r], dtype=F64))
    # unbiased std, as torch.std
    assert torch.allclose(grpo_advantages(s, group, traj, eps=0.0), (s - s.mean()) / s.std())


def test_grpo_size_one_groups():
    # group 7: a single step sample; group 8: one trajectory of 3 steps
    group = torch.tensor([7, 8, 8, 8])
    traj = torch.tensor([0, 1, 1, 1])
    s = torch.tensor([10.0, 10.0, 9.9, 10.0], dtype=F64)
    eps = 1e-6
    # steps mode: group 7 has size 1 -> mu=0, sigma=1; group 8 has 3 samples
    a = grpo_advantages(s, group, traj, stats="steps", eps=eps)
    assert a[0] == 10.0 / (1 + eps)
    m = (10 + 9.9 + 10) / 3
    sd = math.sqrt(((10 - m) ** 2 * 2 + (9.9 - m) ** 2) / 2)
    assert torch.allclose(a[1:], (s[1:] - m) / (sd + eps))
    # trajectories mode: both groups have one trajectory -> mu=0, sigma=1
    a = grpo_advantages(s, group, traj, stats="trajectories", eps=eps)
    assert torch.allclose(a, s / (1 + eps))
    assert torch.equal(grpo_advantages(s, group, traj, norm="mean", stats="trajectories"), s)
    assert torch.equal(grpo_advantages(s[:1], group[:1], None, norm="mean"), s[:1])


def test_grpo_local_traj_ids_do_not_merge_across_groups():
    # traj id 0 is reused in two groups; trajectories are (group, traj) pairs
    group = torch.tensor([0, 0, 0, 1, 1])
    traj = torch.tensor([0, 0, 1, 0, 1])
    s = torch.tensor([1.0, 3.0, 0.0, 5.0, 1.0], dtype=F64)
    a = grpo_advantages(s, group, traj, norm="mean", stats="trajectories")
    # group 0: traj means [2, 0] -> mu 1 ; group 1: [5, 1] -> mu 3
    assert torch.allclose(a, torch.tensor([0.0, 2.0, -1.0, 2.0, -2.0], dtype=F64))


def test_grpo_has_no_grad_and_rejects_bad_modes():
    s = torch.tensor([1.0, 2.0], requires_grad=True)
    g = torch.tensor([0, 0])
    assert not grpo_advantages(s, g, g).requires_grad
    with pytest.raises(ValueError):
        grpo_advantages(s, g, g, norm="std")
    with pytest.raises(ValueError):
        grpo_advantages(s, g, None, stats="trajectories")


def test_broadcast_to_tokens():
    adv = torch.tensor([1.5, -2.0, 0.0], dtype=F64)
    mask = torch.tensor([[0, 1, 1, 0], [1, 1, 1, 1], [0, 0, 1, 1]], dtype=torch.bool)
    out = broadcast_to_tokens(adv, mask)
    assert out.shape == (3, 4) and out.dtype == F64
    for i in range(3):
        for t in range(4):
            assert out[i, t] == (adv[i] if mask[i, t] else 0.0)


# --------------------------------------------------------------------------- #
# token_mean / masking                                                        #
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("seed", SEEDS)
def test_token_mean_reference_and_masked_garbage(seed):
    x, _, _, mask = random_tokens(seed)
    ref = sum(float(x[b, t]) for b in range(x.shape[0]) for t in range(x.shape[1]) if mask[b, t]) / float(
        mask.sum()
    )
    assert math.isclose(float(token_mean(x, mask)), ref, rel_tol=1e-12)
    assert math.isclose(float(token_mean(x, mask.bool())), ref, rel_tol=1e-12)
    garbage = torch.where(mask.bool(), x, torch.full_like(x, 1e6))
    assert torch.equal(token_mean(garbage, mask), token_mean(x, mask))
    inf = torch.where(mask.bool(), x, torch.full_like(x, float("inf")))
    assert torch.equal(masked_sum(inf, mask), masked_sum(x, mask))
    assert math.isclose(float(token_mean(x, mask, denom=100)), ref * float(mask.sum()) / 100, rel_tol=1e-12)


def test_token_mean_empty_mask_is_zero():
    x = torch.randn(3, 4, dtype=F64, requires_grad=True)
    out = token_mean(x, torch.zeros(3, 4))
    assert out.item() == 0.0
    out.backward()
    assert torch.all(x.grad == 0)


@pytest.mark.parametrize("seed", SEEDS)
def test_microbatch_accumulation_equals_full_batch(seed):
    logp, old, adv, mask = random_tokens(seed, B=8, T=6)
    total = mask.sum()
    full = token_mean(logp, mask)
    parts = [token_mean(logp[i : i + 3], mask[i : i + 3], denom=total) for i in range(0, 8, 3)]
    assert torch.allclose(sum(parts), full, atol=1e-14)

    # gradient accumulation through the PPO loss is exact too
    lp = logp.clone().requires_grad_(True)
    ppo_clip_loss(lp, old, adv, mask)[0].backward()
    g_full = lp.grad.clone()
    lp.grad = None
    acc = 0.0
    for i in range(0, 8, 3):
        sl = slice(i, i + 3)
        loss, _ = ppo_clip_loss(lp[sl], old[sl], adv[sl], mask[sl], denom=total)
        loss.backward()
        acc = acc + loss.detach()
    assert torch.allclose(lp.grad, g_full, atol=1e-14)
    assert torch.allclose(acc, ppo_clip_loss(logp, old, adv, mask)[0], atol=1e-14)


# --------------------------------------------------------------------------- #
# PPO clip                                                                    #
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("clip", [(0.2, 0.2, 3.0), (0.2, 0.28, 3.0), (0.1, 0.3, None)])
def test_ppo_clip_loss_matches_reference(seed, clip):
    low, high, c = clip
    logp, old, adv, mask = random_tokens(seed)
    # make large ratios (both sides) common so every branch is exercised
    logp = logp + torch.where(
        torch.rand(logp.shape, generator=torch.Generator().manual_seed(seed)) > 0.5, 1.5, -1.5
    )
    loss, stats = ppo_clip_loss(logp, old, adv, mask, clip_ratio_low=low, clip_ratio_high=high, dual_clip_c=c)
    assert math.isclose(
        float(loss), ref_ppo(logp, old, adv, mask, low, high, c), rel_tol=1e-10, abs_tol=1e-12
    )

    # stats vs loops
    n = clipped = lower = 0
    kl = rsum = 0.0
    for b in range(logp.shape[0]):
        for t in range(logp.shape[1]):
            if not mask[b, t]:
                continue
            r = math.exp(float(logp[b, t] - old[b, t]))
            a = float(adv[b, t])
            pg1, pg2 = -a * r, -a * min(max(r, 1 - low), 1 + high)
            n += 1
            clipped += pg2 > pg1
            lower += c is not None and a < 0 and max(pg1, pg2) > -c * a
            kl += float(old[b, t] - logp[b, t])
            rsum += r
    assert math.isclose(float(stats["clipfrac"]), clipped / n, abs_tol=1e-12)
    assert math.isclose(float(stats["clipfrac_lower"]), lower / n, abs_tol=1e-12)
    assert math.isclose(float(stats["approx_kl"]), kl / n, rel_tol=1e-10)
    assert math.isclose(float(stats["ratio_mean"]), rsum / n, rel_tol=1e-10)
    assert all(not v.requires_grad and v.dim() == 0 for v in stats.values())


def _one(logp, old, a):
    t = lambda v: torch.tensor([[v]], dtype=F64)  # noqa: E731
    lp = t(logp).requires_grad_(True)
    loss, stats = ppo_clip_loss(lp, t(old), t(a), t(1.0))
    loss.backward()
    return float(loss.detach()), float(lp.grad), stats


def test_ppo_hand_cases_sign_conventions():
    ln2 = math.log(2.0)
    # A > 0, r = 2 -> clipped at 1.2: loss = -1.2 A, no gradient
    loss, grad, st = _one(ln2, 0.0, 1.5)
    assert math.isclose(loss, -1.2 * 1.5) and grad == 0.0 and st["clipfrac"] == 1.0
    # A > 0, r = 0.5 -> unclipped (pessimistic side): loss = -0.5 A, d/dlogp = -A r
    loss, grad, st = _one(-ln2, 0.0, 1.5)
    assert math.isclose(loss, -0.75) and math.isclose(grad, -0.75) and st["clipfrac"] == 0.0
    # A < 0, r = 0.5 -> clipped at 0.8: loss = -A * 0.8, no gradient
    loss, grad, st = _one(-ln2, 0.0, -1.0)
    assert math.isclose(loss, 0.8) and grad == 0.0 and st["clipfrac"] == 1.0
    # A < 0, r = 1.5 -> unclipped: loss = -A r = 1.5, d/dlogp = -A r = 1.5
    loss, grad, st = _one(math.log(1.5), 0.0, -1.0)
    assert math.isclose(loss, 1.5) and math.isclose(grad, 1.5) and st["clipfrac_lower"] == 0.0
    # A < 0, r huge -> dual clip: loss = -c A = 3 |A|, no gradient
    loss, grad, st = _one(8.0, 0.0, -2.0)
    assert math.isclose(loss, 6.0) and grad == 0.0 and st["clipfrac_lower"] == 1.0
    # A < 0, log-ratio beyond the clamp: still finite and dual-clipped
    loss, grad, _ = _one(500.0, 0.0, -2.0)
    assert math.isclose(loss, 6.0) and grad == 0.0
    # A > 0, r = 1 -> loss = -A, gradient -A
    loss, grad, st = _one(-1.0, -1.0, 0.7)
    assert math.isclose(loss, -0.7) and math.isclose(grad, -0.7) and st["approx_kl"] == 0.0


@pytest.mark.parametrize("seed", SEEDS)
def test_ppo_ignores_masked_positions(seed):
    logp, old, adv, mask = random_tokens(seed)
    loss, stats = ppo_clip_loss(logp, old, adv, mask)
    off = ~mask.bool()
    for big in (1e6, -1e6):
        lp = torch.where(off, torch.full_like(logp, big), logp).requires_grad_(True)
        l2, s2 = ppo_clip_loss(
            lp,
            torch.where(off, torch.full_like(old, -big), old),
            torch.where(off, torch.full_like(adv, big), adv),
            mask,
        )
        assert torch.equal(l2, loss)
        for k in stats:
            assert torch.equal(s2[k], stats[k]), k
        l2.backward()
        assert torch.all(lp.grad[off] == 0) and torch.isfinite(lp.grad).all()


def test_ppo_empty_mask():
    lp = torch.randn(2, 3, dtype=F64, requires_grad=True)
    loss, stats = ppo_clip_loss(lp, lp.detach() + 0.3, torch.ones(2, 3, dtype=F64), torch.zeros(2, 3))
    assert loss.item() == 0.0
    loss.backward()
    assert torch.all(lp.grad == 0)
    assert all(torch.isfinite(v) for v in stats.values())


# --------------------------------------------------------------------------- #
# KL, entropy, log-probs                                                      #
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("seed", SEEDS)
def test_kl_k3_matches_reference(seed):
    gen = torch.Generator().manual_seed(seed)
    logp = -torch.rand(4, 6, generator=gen, dtype=F64) * 4
    ref = logp + torch.randn(4, 6, generator=gen, dtype=F64)
    out = kl_k3(logp, ref)
    for b in range(4):
        for t in range(6):
            d = max(-20.0, min(20.0, float(ref[b, t] - logp[b, t])))
            k3 = min(10.0, math.exp(d) - d - 1)
            assert math.isclose(float(out[b, t]), k3, rel_tol=1e-12, abs_tol=1e-15)
    assert torch.all(out >= 0)
    assert torch.all(kl_k3(logp, logp) == 0)


def test_kl_k3_clamping():
    logp = torch.zeros(1, 6, dtype=F64)
    ref = torch.tensor([[30.0, 3.0, 2.0, -9.0, -30.0, -1000.0]], dtype=F64)
    out = kl_k3(logp, ref)
    expect = [
        min(10.0, math.exp(max(-20.0, min(20.0, d))) - max(-20.0, min(20.0, d)) - 1) for d in ref[0].tolist()
    ]
    assert torch.allclose(out[0], torch.tensor(expect, dtype=F64))
    assert out[0, 0] == 10.0 and out[0, 1] == 10.0 and out[0, 4] == 10.0 and out[0, 5] == 10.0
    assert math.isclose(float(out[0, 2]), math.exp(2) - 3)
    assert math.isclose(float(out[0, 3]), math.exp(-9) + 8)
    # gradient is finite even for extreme log-ratios
    lp = torch.tensor([[0.0, 0.0]], dtype=F64, requires_grad=True)
    kl_k3(lp, torch.tensor([[500.0, -500.0]], dtype=F64)).sum().backward()
    assert torch.isfinite(lp.grad).all()


@pytest.mark.parametrize("seed", SEEDS)
def test_entropy_matches_categorical(seed):
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(3, 5, 11, generator=gen, dtype=F64) * 4
    logits[0, 0, 3] = 200.0  # near one-hot, large logits stay stable
    out = entropy_from_logits(logits)
    ref = torch.distributions.Categorical(logits=logits).entropy()
    assert out.shape == (3, 5) and out.dtype == F64
    assert torch.allclose(out, ref, atol=1e-12)
    # bf16 input: computed in float32
    bf = logits.to(torch.bfloat16)
    out_bf = entropy_from_logits(bf)
    assert out_bf.dtype == torch.float32
    ref_bf = torch.distributions.Categorical(logits=bf.double()).entropy()
    assert torch.allclose(out_bf.double(), ref_bf, atol=1e-5)


@pytest.mark.parametrize("seed", SEEDS)
def test_token_logprobs_matches_log_softmax(seed):
    gen = torch.Generator().manual_seed(seed)
    logits = (torch.randn(3, 5, 13, generator=gen, dtype=F64) * 5).requires_grad_(True)
    labels = torch.randint(0, 13, (3, 5), generator=gen)
    out = token_logprobs(logits, labels)
    ref = torch.log_softmax(logits, -1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    assert out.shape == (3, 5) and out.dtype == F64
    assert torch.allclose(out, ref, atol=1e-12)
    (g1,) = torch.autograd.grad(out.sum(), logits)
    (g2,) = torch.autograd.grad(ref.sum(), logits)
    assert torch.allclose(g1, g2, atol=1e-12)
    bf = logits.detach().to(torch.bfloat16)
    out_bf = token_logprobs(bf, labels)
    assert out_bf.dtype == torch.float32
    ref_bf = torch.log_softmax(bf.double(), -1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(out_bf.double(), ref_bf, atol=1e-4)


# --------------------------------------------------------------------------- #
# SEED OPD                                                                    #
# --------------------------------------------------------------------------- #
def random_opd(seed: int, B: int = 6, T: int = 8):
    logp, _, _, mask = random_tokens(seed, B, T)
    gen = torch.Generator().manual_seed(seed + 100)
    teacher = logp + torch.randn(B, T, generator=gen, dtype=F64)
    signal = (torch.rand(B, 1, generator=gen) > 0.3).to(F64)  # per-sample teacher_signal_mask
    signal[0] = 1.0
    return logp, teacher, mask * signal


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("beta", [5.0, 1.0, 0.0])
def test_opd_loss_matches_reference(seed, beta):
    logp, teacher, mask = random_opd(seed)
    loss, stats = opd_loss(logp, teacher, mask, beta=beta)
    assert math.isclose(float(loss), ref_opd(logp, teacher, mask, beta), rel_tol=1e-10, abs_tol=1e-14)
    n = int(mask.sum())
    assert stats["signal_tokens"] == n
    deltas = [float(teacher[b, t] - logp[b, t]) for b in range(6) for t in range(8) if mask[b, t]]
    gates = [1 / (1 + math.exp(-beta * d)) for d in deltas]
    assert math.isclose(float(stats["delta_mean"]), sum(deltas) / n, rel_tol=1e-10, abs_tol=1e-14)
    assert math.isclose(float(stats["gate_mean"]), sum(gates) / n, rel_tol=1e-10)
    assert all(not v.requires_grad for v in stats.values())


@pytest.mark.parametrize("seed", SEEDS)
def test_opd_gradient_direction_and_magnitude(seed):
    logp, teacher, mask = random_opd(seed)
    lp = logp.clone().requires_grad_(True)
    loss, _ = opd_loss(lp, teacher, mask, beta=5.0)
    loss.backward()
    n = float(mask.sum())
    gate = torch.sigmoid(5.0 * (teacher - logp))
    on = mask.bool()
    # gradient = -gate / n on signal tokens (minimising raises logp), 0 elsewhere
    assert torch.allclose(lp.grad[on], -gate[on] / n, atol=1e-15)
    assert torch.all(lp.grad[~on] == 0)
    up = on & (teacher > logp)
    assert up.any() and torch.all(lp.grad[up] < 0)
    assert torch.all(lp.grad[up].abs() > 0.5 / n - 1e-15)  # gate > 1/2 where teacher is above


def test_opd_gradient_vanishes_when_teacher_far_below():
    logp = torch.tensor([[-1.0, -1.0]], dtype=F64, requires_grad=True)
    teacher = torch.tensor([[-11.0, 1.0]], dtype=F64)  # Delta = -10 and +2
    loss, _ = opd_loss(logp, teacher, torch.ones(1, 2), beta=5.0)
    loss.backward()
    scale = 1.0 / 2
    assert abs(float(logp.grad[0, 0])) < 1e-6 * scale
    assert math.isclose(float(logp.grad[0, 1]), -scale / (1 + math.exp(-10.0)), rel_tol=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
def test_opd_masked_rows_excluded(seed):
    logp, teacher, mask = random_opd(seed)
    loss, stats = opd_loss(logp, teacher, mask)
    gen = torch.Generator().manual_seed(seed)
    extra_lp = torch.randn(1, 8, generator=gen, dtype=F64) * 1e3
    extra_t = torch.randn(1, 8, generator=gen, dtype=F64) * 1e3
    loss2, stats2 = opd_loss(
        torch.cat([logp, extra_lp]), torch.cat([teacher, extra_t]), torch.cat([mask, torch.zeros(1, 8)])
    )
    assert torch.equal(loss, loss2)
    for k in stats:
        assert torch.equal(stats[k], stats2[k])
    # the skill-less rows are not counted as zeros in the denominator
    resp_tokens = float(torch.cat([mask, torch.ones(1, 8)]).sum())
    assert not math.isclose(float(loss2), float(loss) * float(mask.sum()) / resp_tokens)


def test_opd_beta_zero_gate_is_half():
    logp, teacher, mask = random_opd(3)
    lp = logp.clone().requires_grad_(True)
    loss, stats = opd_loss(lp, teacher, mask, beta=0.0)
    assert stats["gate_mean"] == 0.5
    loss.backward()
    n = float(mask.sum())
    on = mask.bool()
    assert torch.all(lp.grad[on] == -0.5 / n)
    assert math.isclose(float(loss.detach()), 0.5 * float(token_mean(teacher - logp, mask)), rel_tol=1e-12)


def test_opd_empty_mask_is_finite_zero():
    lp = torch.randn(3, 4, dtype=F64, requires_grad=True)
    teacher = torch.full((3, 4), float("-inf"), dtype=F64)  # garbage where there is no signal
    loss, stats = opd_loss(lp, teacher, torch.zeros(3, 4), beta=5.0)
    assert loss.item() == 0.0 and loss.requires_grad
    loss.backward()
    assert torch.all(lp.grad == 0)
    assert all(torch.isfinite(v) for v in stats.values()) and stats["signal_tokens"] == 0


@pytest.mark.parametrize("seed", SEEDS)
def test_opd_ignores_masked_garbage_and_explicit_denom(seed):
    logp, teacher, mask = random_opd(seed)
    off = ~mask.bool()
    loss, stats = opd_loss(logp, teacher, mask)
    lp = torch.where(off, torch.full_like(logp, 1e6), logp).requires_grad_(True)
    l2, s2 = opd_loss(lp, torch.where(off, torch.full_like(teacher, -1e6), teacher), mask)
    assert torch.equal(l2, loss)
    for k in stats:
        assert torch.equal(s2[k], stats[k])
    l2.backward()
    assert torch.all(lp.grad[off] == 0)
    # micro-batches with denom = mini-batch signal tokens sum to the full loss
    total = mask.sum()
    parts = sum(
        opd_loss(logp[i : i + 2], teacher[i : i + 2], mask[i : i + 2], denom=total)[0] for i in range(0, 6, 2)
    )
    assert torch.allclose(parts, loss, atol=1e-14)


def _ref_skill_sd(logp, old, teacher, mask):
    num, den = 0.0, 0.0
    for b in range(logp.shape[0]):
        for t in range(logp.shape[1]):
            if mask[b, t]:
                rho = math.exp(min(float(logp[b, t] - old[b, t]), 10.0))
                k3 = math.exp(min(float(teacher[b, t] - logp[b, t]), 20.0)) - 1 + float(logp[b, t] - teacher[b, t])
                num += rho * k3
                den += 1
    return num / max(den, 1.0)


@pytest.mark.parametrize("seed", range(4))
def test_skill_sd_loss_matches_reference_and_keeps_rhos_gradient(seed):
    from seedrl.algos import skill_sd_loss

    g = torch.Generator().manual_seed(seed)
    logp = (-torch.rand(3, 6, generator=g, dtype=torch.float64) * 3).requires_grad_()
    old = logp.detach() + 0.3 * torch.randn(3, 6, generator=g, dtype=torch.float64)
    teacher = logp.detach() + torch.randn(3, 6, generator=g, dtype=torch.float64)
    mask = (torch.rand(3, 6, generator=g) > 0.3).double()
    loss, st = skill_sd_loss(logp, old, teacher, mask)
    assert float(loss.detach()) == pytest.approx(_ref_skill_sd(logp.detach(), old, teacher, mask), rel=1e-9)
    loss.backward()
    # SDAR's compute_sdl_loss keeps rho's gradient: d/dlogp (rho * k3) = rho * (logp - teacher)
    n = mask.sum()
    rho = torch.exp(torch.clamp(logp.detach() - old, max=10))
    torch.testing.assert_close(logp.grad, rho * (logp.detach() - teacher) * mask / n)


@pytest.mark.parametrize("seed", range(4))
def test_skill_sd_expected_gradient_is_the_reverse_kl_gradient(seed):
    """Over tokens sampled from the rollout policy (enumerated exactly on a small vocabulary), the
    expected Skill-SD gradient equals autograd of KL(pi_theta || pi_teacher), the published
    objective; the detached-rho variant does not."""
    from seedrl.algos import skill_sd_loss

    V = 7
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(V, generator=g, dtype=torch.float64).requires_grad_()  # student logits
    z_old = z.detach() + 0.3 * torch.randn(V, generator=g, dtype=torch.float64)  # rollout policy
    z_t = torch.randn(V, generator=g, dtype=torch.float64)  # skill-conditioned teacher
    logp_all = torch.log_softmax(z, -1)
    old_all, t_all = torch.log_softmax(z_old, -1), torch.log_softmax(z_t, -1)
    p_old = old_all.exp()

    def expected_grad(loss_fn):
        # E_{y ~ pi_old}[grad of the per-token loss at y]: one "sample" per vocabulary entry, weighted
        per_token = torch.stack([loss_fn(logp_all[y:y + 1][None], old_all[y:y + 1][None], t_all[y:y + 1][None],
                                         torch.ones(1, 1, dtype=torch.float64))[0] for y in range(V)])
        return torch.autograd.grad((p_old * per_token).sum(), z, retain_graph=True)[0]

    kl = (logp_all.exp() * (logp_all - t_all)).sum()
    reference = torch.autograd.grad(kl, z, retain_graph=True)[0]
    torch.testing.assert_close(expected_grad(skill_sd_loss), reference)

    def detached_rho(logp, old, teacher, mask):  # the former variant: rho as a constant weight
        rho = torch.exp(torch.clamp(logp.detach() - old, max=10.0))
        k3 = torch.exp(torch.clamp(teacher - logp, max=20.0)) - 1.0 + (logp - teacher)
        return ((rho * k3 * mask).sum() / mask.sum(), {})

    assert not torch.allclose(expected_grad(detached_rho), reference, atol=1e-6)


def test_opid_advantage_adds_the_teacher_shift_only_where_masked():
    from seedrl.algos import opid_advantage

    adv = torch.tensor([[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]])
    teacher = torch.tensor([[-0.1, -2.0, -1.0], [-0.5, -0.5, -0.5]])
    old = torch.tensor([[-1.1, -1.0, -1.0], [-1.0, -1.0, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    out = opid_advantage(adv, teacher, old, mask, coef=0.5)
    torch.testing.assert_close(out, torch.tensor([[1.5, 0.5, 1.0], [-1.0, -1.0, -1.0]]))


# --------------------------------------------------------------------------- #
# smoothed_nll (SFT label smoothing)                                           #
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("eps", [0.0, 0.1, 0.5])
def test_smoothed_nll_matches_torch_cross_entropy_label_smoothing(eps):
    from seedrl.algos import smoothed_nll

    g = torch.Generator().manual_seed(3)
    logits = torch.randn(2, 5, 7, generator=g) * 3
    labels = torch.randint(0, 7, (2, 5), generator=g)
    ref = torch.nn.functional.cross_entropy(logits.reshape(-1, 7), labels.reshape(-1), reduction="none",
                                            label_smoothing=eps).reshape(2, 5)
    assert torch.allclose(smoothed_nll(logits, labels, eps), ref, atol=1e-5)


def test_smoothed_nll_by_hand_on_two_tokens():
    from seedrl.algos import smoothed_nll

    # p = softmax([0, log 3]) = [1/4, 3/4]; label 1: (1-e) * -log(3/4) + e * (-log(1/4) - log(3/4)) / 2
    logits = torch.tensor([[[0.0, math.log(3.0)]]])
    e = 0.2
    want = (1 - e) * -math.log(0.75) + e * (-math.log(0.25) - math.log(0.75)) / 2
    assert smoothed_nll(logits, torch.tensor([[1]]), e).item() == pytest.approx(want, abs=1e-6)
    # a bf16 input is computed in float32
    assert smoothed_nll(logits.bfloat16(), torch.tensor([[1]]), e).dtype == torch.float32
