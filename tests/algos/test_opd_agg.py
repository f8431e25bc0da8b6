"""How the OPD term is averaged over a mini-batch (issue 33, item 7), by hand and against a loop
reference. SEED's ``compute_opd_loss`` returns 0 for a micro-batch without signal tokens and
``dp_actor.update_policy`` still divides by the number of micro-batches, so SEED's term is the mean
over micro-batches of each one's token-mean over its signal tokens (``micro_batch_mean``); the
renormalised variant is a token-mean over the mini-batch's signal tokens (``signal_token_mean``)."""

from __future__ import annotations

import math
import random

import pytest
import torch

from seedrl.algos import OPD_AGGS, masked_mean, opd_loss, signal_weights

F64 = torch.float64


def _v(d: float, beta: float = 5.0) -> float:
    """One token's OPD value for the gap d = teacher_logp - logp: sigmoid(beta d) * d."""
    return d / (1.0 + math.exp(-beta * d))


def test_a_micro_batch_without_signal_counts_as_zero_in_seeds_mean():
    """Micro-batch A: two samples with a skill (gaps 0.2, -0.4 | 1.0); micro-batch B: two samples
    without. SEED = (A's token-mean + 0) / 2; renormalised = A's token-mean."""
    gaps = torch.tensor([[0.2, -0.4], [1.0, 0.0], [0.7, 0.3], [-2.0, 0.5]], dtype=F64)
    resp = torch.tensor([[1, 1], [1, 0], [1, 1], [1, 1]], dtype=F64)
    logp = torch.full((4, 2), -1.0, dtype=F64, requires_grad=True)
    teacher = logp.detach() + gaps
    lengths, signal, micro = torch.tensor([2, 1, 2, 2]), torch.tensor([1, 1, 0, 0]), torch.tensor([0, 0, 1, 1])

    a_mean = (_v(0.2) + _v(-0.4) + _v(1.0)) / 3  # micro-batch A's token-mean over its 3 signal tokens
    # micro-batch B alone: no signal token, the term is an exact 0
    b_loss, _ = opd_loss(logp[2:], teacher[2:], resp[2:] * signal[2:, None], beta=5.0)
    assert b_loss.item() == 0.0

    w_seed = signal_weights(lengths, signal, micro, "micro_batch_mean")
    assert w_seed.tolist() == [1 / 6, 1 / 6, 0.0, 0.0]  # 1 / (K=2 micro-batches x S_A=3 tokens)
    seed, _ = opd_loss(logp, teacher, resp * w_seed[:, None], beta=5.0, denom=1.0)
    assert seed.item() == pytest.approx(a_mean / 2, rel=1e-12)

    w_renorm = signal_weights(lengths, signal, micro, "signal_token_mean")
    assert w_renorm.tolist() == [1 / 3, 1 / 3, 0.0, 0.0]
    renorm, _ = opd_loss(logp, teacher, resp * w_renorm[:, None], beta=5.0, denom=1.0)
    assert renorm.item() == pytest.approx(a_mean, rel=1e-12)
    assert seed.item() == pytest.approx(renorm.item() / 2, rel=1e-12)

    # gradient: -gate / (K S_A) on A's tokens, 0 on B's
    seed.backward()
    gate = torch.sigmoid(5.0 * gaps)
    assert torch.allclose(logp.grad[:2], -gate[:2] * resp[:2] / 6, atol=1e-15)
    assert torch.all(logp.grad[2:] == 0)


def test_signal_weights_by_hand():
    lengths = torch.tensor([3, 1, 4, 2, 5])
    signal = torch.tensor([1, 0, 1, 1, 0])
    micro = torch.tensor([0, 0, 1, 1, 2])  # K = 3; S = 3, 6, 0
    w = signal_weights(lengths, signal, micro, "micro_batch_mean")
    assert w.tolist() == pytest.approx([1 / 9, 0, 1 / 18, 1 / 18, 0])
    # the weight over the mini-batch's tokens: the share of micro-batches with a signal (2 of 3)
    assert float((w * lengths).sum()) == pytest.approx(2 / 3)
    assert signal_weights(lengths, signal, micro, "signal_token_mean").tolist() == pytest.approx([1 / 9, 0, 1 / 9, 1 / 9, 0])
    # one micro-batch: the two aggregations agree
    one = torch.zeros(5, dtype=torch.long)
    assert torch.allclose(signal_weights(lengths, signal, one, "micro_batch_mean"),
                          signal_weights(lengths, signal, one, "signal_token_mean"))
    for agg in OPD_AGGS:
        assert torch.all(signal_weights(lengths, torch.zeros(5), micro, agg) == 0)
    with pytest.raises(ValueError, match="micro_batch_mean"):
        signal_weights(lengths, signal, micro, "mean")


def _ref_micro_batch_mean(logp, teacher, resp, signal, micro, beta):
    """Loop reference straight from SEED's code: per micro-batch, masked token-mean of
    gate * (teacher - logp) over response x signal tokens (0 if none); mean over micro-batches."""
    terms = []
    for k in sorted(set(micro)):
        tot, n = 0.0, 0
        for b in range(logp.shape[0]):
            if micro[b] != k or not signal[b]:
                continue
            for t in range(logp.shape[1]):
                if resp[b, t]:
                    d = float(teacher[b, t] - logp[b, t])
                    tot += _v(d, beta)
                    n += 1
        terms.append(tot / n if n else 0.0)
    return sum(terms) / len(terms)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("beta", [0.0, 5.0])
def test_micro_batch_mean_matches_the_loop_reference(seed, beta):
    rng = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    B, T, size = rng.randint(3, 12), 6, rng.randint(1, 4)
    lengths = torch.tensor([rng.randint(1, T) for _ in range(B)])
    resp = (torch.arange(T)[None, :] < lengths[:, None]).to(F64)
    signal = torch.tensor([rng.random() < 0.4 for _ in range(B)])
    micro = torch.arange(B) // size
    logp = -torch.rand(B, T, generator=g, dtype=F64) * 3
    teacher = logp + torch.randn(B, T, generator=g, dtype=F64)
    w = signal_weights(lengths, signal, micro, "micro_batch_mean")
    # the trainer's way: each micro-batch's own call with its rows' weights, summed
    total = sum(opd_loss(logp[m], teacher[m], resp[m] * w[m][:, None], beta=beta, denom=1.0)[0]
                for m in (micro == k for k in micro.unique()))
    ref = _ref_micro_batch_mean(logp, teacher, resp, signal.tolist(), micro.tolist(), beta)
    assert float(total) == pytest.approx(ref, rel=1e-12, abs=1e-15)
    # the renormalised variant is the plain token-mean over every signal token
    wr = signal_weights(lengths, signal, micro, "signal_token_mean")
    renorm = opd_loss(logp, teacher, resp * wr[:, None], beta=beta, denom=1.0)[0]
    full = opd_loss(logp, teacher, resp * signal[:, None].to(F64), beta=beta)[0]
    assert float(renorm) == pytest.approx(float(full), rel=1e-12, abs=1e-15)


def test_masked_mean_takes_fractional_weights_and_is_zero_when_empty():
    x = torch.tensor([[1.0, 3.0], [5.0, 100.0]])
    w = torch.tensor([[0.25, 0.25], [0.5, 0.0]])
    assert masked_mean(x, w).item() == pytest.approx((0.25 + 0.75 + 2.5) / 1.0)
    assert masked_mean(x, torch.zeros(2, 2)).item() == 0.0
