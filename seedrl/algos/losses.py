"""Token-level policy losses: PPO clip (dual clip), k3 KL, entropy, SEED OPD, Skill-SD, OPID.

Shapes: ``B`` samples (one per environment step), ``T`` response tokens, ``V``
vocabulary. ``mask`` is the response mask (1 on generated tokens, 0 on prompt and
padding). Values at ``mask == 0`` never influence a loss or a statistic, even
when they are huge. Semantics follow verl ``core_algos.py``
(``compute_policy_loss``, ``kl_penalty(..., "low_var_kl")``) and SEED
``compute_opd_loss``.

Aggregation is token-mean: ``sum(x * mask) / denom``. By default ``denom`` is the
number of masked tokens of the tensor passed in; a trainer that accumulates
gradients over micro-batches should pass ``denom`` = the token count of the whole
mini-batch, so that the sum of the micro-batch losses equals the mini-batch
token-mean exactly. A teacher-signal term (OPD, Skill-SD) is aggregated by
per-sample weights instead (:func:`signal_weights`: SEED's mean over micro-batches,
or a token-mean over the mini-batch's signal tokens), carried in its ``mask`` with
``denom=1``.
"""

from __future__ import annotations

import torch
from torch import Tensor

# how a teacher-signal loss term is averaged over a mini-batch (``algo.opd_agg``, :func:`signal_weights`):
# the names live once, in the method table
from seedrl.methods import OPD_AGGS

__all__ = [
    "masked_sum",
    "token_mean",
    "ppo_clip_loss",
    "kl_k3",
    "entropy_from_logits",
    "token_logprobs",
    "smoothed_nll",
    "masked_mean",
    "OPD_AGGS",
    "signal_weights",
    "opd_loss",
    "skill_sd_loss",
    "opid_advantage",
]

_LOG_RATIO_CLAMP = 20.0
_KL_CLAMP = 10.0


def masked_sum(x: Tensor, mask: Tensor) -> Tensor:
    """Scalar ``sum(x * mask)``; entries where ``mask == 0`` are dropped, not multiplied
    (so inf/garbage there cannot leak in). ``x`` and ``mask`` broadcast, e.g. ``[B, T]``."""
    kept = torch.where(mask != 0, x * mask.to(x.dtype), torch.zeros((), dtype=x.dtype, device=x.device))
    return kept.sum()


def _denominator(mask: Tensor, denom: float | Tensor | None, like: Tensor) -> Tensor:
    if denom is None:
        d = mask.sum()
    else:
        d = torch.as_tensor(denom)
    return d.to(dtype=like.dtype, device=like.device).clamp(min=1)


def token_mean(x: Tensor, mask: Tensor, denom: float | Tensor | None = None) -> Tensor:
    """Scalar token-mean ``sum(x * mask) / denom``.

    Args:
        x: ``[B, T]`` values.
        mask: ``[B, T]`` 0/1 mask (bool, int or float).
        denom: divisor. ``None`` -> ``mask.sum()``. Pass the mini-batch token count
            to make micro-batch gradient accumulation exact. Any divisor below 1 is
            raised to 1 (token counts are integers, so this only matters when the
            mask is empty: the result is then 0, not NaN).
    """
    return masked_sum(x, mask) / _denominator(mask, denom, x)


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Scalar ``sum(x * mask) / sum(mask)``, the mask-weighted mean (weights may be fractional, e.g.
    :func:`signal_weights`); an exact 0 for an empty mask. ``x`` and ``mask`` ``[B, T]``."""
    total = mask.to(x.dtype).sum()
    return masked_sum(x, mask) / torch.where(total > 0, total, torch.ones_like(total))




def signal_weights(lengths: Tensor, signal: Tensor, micro_batch: Tensor, agg: str) -> Tensor:
    """Per-sample weights that aggregate a teacher-signal loss term over one mini-batch: the term is
    ``sum_i w_i * sum_t x[i, t]`` over the response tokens of the mini-batch's samples ``i``.

    ``micro_batch_mean`` (SEED / verl, ``compute_opd_loss`` + ``dp_actor.update_policy``): each
    micro-batch's term is a token-mean over its signal tokens, and 0 for a micro-batch without one;
    the mini-batch's term is the mean of the ``K`` micro-batch terms, the empty ones included:
    ``w_i = s_i / (K * S_k)`` for sample ``i`` of micro-batch ``k`` with ``S_k`` signal tokens. With
    sparse skills it is up to 1/coverage smaller than the next one.

    ``signal_token_mean``: a token-mean over the mini-batch's ``S`` signal tokens, samples without a
    signal left out: ``w_i = s_i / S`` (micro-batches play no part).

    Args:
        lengths: ``[N]`` response-token count of each sample of the mini-batch.
        signal: ``[N]`` 1 where the sample has a teacher signal (its trajectory has a skill), else 0.
        micro_batch: ``[N]`` integer label of the micro-batch each sample is in (``K`` = the number of
            distinct labels); ignored by ``signal_token_mean``.
        agg: one of :data:`OPD_AGGS`.

    Returns:
        ``[N]`` float64 weights, 0 for samples without a signal; all 0 when no sample has a signal token.
    """
    if agg not in OPD_AGGS:
        raise ValueError(f"unknown aggregation {agg!r}; valid: {', '.join(OPD_AGGS)}")
    has = (signal != 0).to(torch.float64)
    tokens = lengths.to(torch.float64) * has
    if agg == "signal_token_mean":
        total = tokens.sum()
        return has / total if total > 0 else torch.zeros_like(has)
    labels, k = torch.unique(micro_batch, return_inverse=True)
    s_k = torch.zeros(len(labels), dtype=torch.float64).index_add_(0, k, tokens)[k]  # S_k of each sample
    return torch.where(s_k > 0, has / (len(labels) * s_k.clamp(min=1)), torch.zeros_like(s_k))


def ppo_clip_loss(
    logp: Tensor,
    old_logp: Tensor,
    adv: Tensor,
    mask: Tensor,
    clip_ratio: float = 0.2,
    clip_ratio_low: float | None = None,
    clip_ratio_high: float | None = None,
    dual_clip_c: float | None = 3.0,
    denom: float | Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO clipped surrogate with dual clip (verl ``compute_policy_loss``), token-mean.

    With ``r = exp(clamp(logp - old_logp, -20, 20))``::

        pg1 = -A * r
        pg2 = -A * clip(r, 1 - low, 1 + high)
        L   = max(pg1, pg2)                   if A >= 0
        L   = min(max(pg1, pg2), -c * A)      if A <  0   (dual clip)

    e.g. ``A > 0, r = 2`` gives ``-1.2 A``; ``A < 0, r`` huge gives ``-c A = c |A|``.

    Args:
        logp: ``[B, T]`` current-policy log-probs of the sampled tokens (with grad).
        old_logp: ``[B, T]`` rollout-policy log-probs (treated as constants).
        adv: ``[B, T]`` advantages, already broadcast to tokens.
        mask: ``[B, T]`` response mask.
        clip_ratio: default for both clip ranges.
        clip_ratio_low, clip_ratio_high: asymmetric ranges (default ``clip_ratio``).
        dual_clip_c: dual-clip constant ``c > 1``; ``None`` disables dual clip.
        denom: token-mean divisor (see :func:`token_mean`).

    Returns:
        ``(loss, stats)``: scalar loss and detached scalar stats, each a masked mean
        over this call's tokens (independent of ``denom``): ``clipfrac`` (pg2 > pg1),
        ``clipfrac_lower`` (dual clip active: ``A < 0`` and ``max(pg1, pg2) > -c A``),
        ``approx_kl`` (mean of ``old_logp - logp``, verl ``ppo_kl``), ``ratio_mean``.
    """
    low = clip_ratio if clip_ratio_low is None else clip_ratio_low
    high = clip_ratio if clip_ratio_high is None else clip_ratio_high
    adv = adv.detach()
    log_ratio = (logp - old_logp.detach()).clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    pg1 = -adv * ratio
    pg2 = -adv * ratio.clamp(1.0 - low, 1.0 + high)
    clipped = torch.maximum(pg1, pg2)
    if dual_clip_c is not None:
        pg3 = -adv * dual_clip_c
        per_token = torch.where(adv < 0, torch.minimum(clipped, pg3), clipped)
        lower = (clipped > pg3) & (adv < 0)
    else:
        per_token = clipped
        lower = torch.zeros_like(adv, dtype=torch.bool)
    loss = token_mean(per_token, mask, denom)
    with torch.no_grad():
        stats = {
            "clipfrac": token_mean((pg2 > pg1).to(logp.dtype), mask),
            "clipfrac_lower": token_mean(lower.to(logp.dtype), mask),
            "approx_kl": token_mean(-log_ratio, mask),
            "ratio_mean": token_mean(ratio, mask),
        }
    return loss, {k: v.detach() for k, v in stats.items()}


def kl_k3(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """Per-token low-variance KL estimate k3 (verl ``kl_penalty(..., "low_var_kl")``).

    ``d = clamp(ref_logp - logp, -20, 20)``; returns ``clamp(exp(d) - d - 1, -10, 10)``.
    Shapes ``[B, T]`` -> ``[B, T]``; aggregate with :func:`token_mean`.
    """
    d = (ref_logp - logp).clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
    return (torch.exp(d) - d - 1.0).clamp(-_KL_CLAMP, _KL_CLAMP)


def _compute_dtype(x: Tensor) -> torch.dtype:
    return torch.promote_types(x.dtype, torch.float32)


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Per-position entropy of ``softmax(logits)``: ``logsumexp(z) - sum(softmax(z) * z)``.

    ``[B, T, V]`` -> ``[B, T]``. Half/bf16 inputs are computed (and returned) in
    float32; float64 stays float64.
    """
    z = logits.to(_compute_dtype(logits))
    p = torch.softmax(z, dim=-1)
    return torch.logsumexp(z, dim=-1) - (p * z).sum(dim=-1)


def token_logprobs(logits: Tensor, labels: Tensor) -> Tensor:
    """Log-probability of ``labels`` under ``log_softmax(logits)``.

    ``logits`` ``[B, T, V]``, ``labels`` ``[B, T]`` (int64) -> ``[B, T]``, computed as
    ``z[label] - logsumexp(z)`` in at least float32 (no full log_softmax tensor is
    built; half/bf16 logits are upcast once for the logsumexp).
    """
    dtype = _compute_dtype(logits)
    picked = logits.gather(-1, labels.long().unsqueeze(-1)).squeeze(-1).to(dtype)
    return picked - torch.logsumexp(logits.to(dtype), dim=-1)


def smoothed_nll(logits: Tensor, labels: Tensor, eps: float) -> Tensor:
    """Per-position label-smoothed cross-entropy (Szegedy et al. 2016; ``torch.nn.CrossEntropyLoss``'s
    ``label_smoothing``): the target is ``1 - eps`` on ``labels`` plus ``eps / V`` on every token, so
    the loss is ``(1 - eps) * -log p[label] + eps * mean_v(-log p[v])``. ``eps = 0`` is the plain NLL.
    A warm start trained with it keeps probability on the moves it was not shown, which RL needs to
    sample them. ``logits`` ``[B, T, V]``, ``labels`` ``[B, T]`` -> ``[B, T]`` in at least float32."""
    dtype = _compute_dtype(logits)
    z = logits.to(dtype)
    lse = torch.logsumexp(z, dim=-1)
    nll = lse - z.gather(-1, labels.long().unsqueeze(-1)).squeeze(-1)
    if eps == 0:
        return nll
    return (1.0 - eps) * nll + eps * (lse - z.mean(dim=-1))


def opd_loss(
    logp: Tensor,
    teacher_logp: Tensor,
    mask: Tensor,
    beta: float = 5.0,
    denom: float | Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """SEED on-policy distillation term (SEED/SDAR ``compute_opd_loss``), token-mean.

    ``Delta = sg(teacher_logp - logp)``, ``g = sigmoid(beta * Delta)`` (detached),
    per-token ``g * (sg(teacher_logp) - logp)``. The gradient w.r.t. ``logp`` is
    ``-g / denom`` per masked token: a gate-weighted NLL on the sampled tokens that
    pushes hardest where the skill-conditioned teacher is more confident than the
    student. ``beta = 0`` gives the uniform gate 0.5 (GRPO+OPSD baseline).

    Args:
        logp: ``[B, T]`` current-policy log-probs of the sampled tokens (with grad).
        teacher_logp: ``[B, T]`` log-probs of the same tokens under theta_old with the
            skill in context (constant).
        mask: ``[B, T]`` response mask x per-sample ``teacher_signal_mask``. Rows
            without a skill are all zero: they add nothing and do not count in the
            default denominator. With an explicit ``denom`` pass the number of OPD
            signal tokens of the mini-batch (not the response-token count). The
            trainer passes response mask x the per-sample weights of
            :func:`signal_weights` (``algo.opd_agg``) with ``denom=1``.
        beta: gate sharpness (SEED: 5).
        denom: token-mean divisor (see :func:`token_mean`).

    Returns:
        ``(loss, stats)``; stats are detached scalars over this call's masked tokens
        (means weighted by ``mask``):
        ``gate_mean``, ``delta_mean`` (mean of ``teacher_logp - logp``),
        ``signal_tokens`` (mask sum). With an empty mask the loss is an exact 0
        still attached to ``logp``'s graph (zero gradients, no NaN).
    """
    teacher = teacher_logp.detach()
    delta = teacher - logp.detach()
    gate = torch.sigmoid(beta * delta)
    loss = token_mean(gate * (teacher - logp), mask, denom)
    with torch.no_grad():
        stats = {
            "gate_mean": masked_mean(gate, mask),
            "delta_mean": masked_mean(delta, mask),
            "signal_tokens": (mask != 0).sum().to(logp.dtype),
        }
    return loss, stats


def skill_sd_loss(
    logp: Tensor,
    old_logp: Tensor,
    teacher_logp: Tensor,
    mask: Tensor,
    denom: float | Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Skill-SD term: importance-weighted reverse KL to the skill-conditioned teacher, token-mean.

    Per token ``rho * k3`` with ``rho = exp(min(logp - old_logp, 10))`` and
    ``k3 = exp(min(teacher - logp, 20)) - 1 + (logp - teacher)``, exactly SDAR's reimplementation
    (``compute_sdl_loss`` in ``verl/trainer/ppo/skillsd_utils.py``): **rho keeps its gradient**. The
    per-token gradient w.r.t. ``logp`` is then ``rho * (logp - teacher)`` (where no clamp is active),
    whose expectation over tokens sampled from the rollout policy is the gradient of the reverse KL
    ``KL(pi_theta || pi_teacher)``. (With rho detached it would be ``rho * (1 - exp(teacher - logp))``,
    a forward-KL-like gradient: a different objective.)

    Args: ``[B, T]`` tensors; ``logp`` with grad, ``old_logp`` and ``teacher_logp`` constants;
    ``mask`` = response mask x teacher signal mask; ``denom`` as in :func:`opd_loss`.
    Returns ``(loss, stats)`` with ``rho_mean`` and ``k3_mean``.
    """
    teacher = teacher_logp.detach()
    rho = torch.exp(torch.clamp(logp - old_logp.detach(), max=10.0))
    k3 = torch.exp(torch.clamp(teacher - logp, max=20.0)) - 1.0 + (logp - teacher)
    loss = token_mean(rho * k3, mask, denom)
    with torch.no_grad():
        stats = {"rho_mean": masked_mean(rho, mask), "k3_mean": masked_mean(k3, mask)}
    return loss, stats


def opid_advantage(adv: Tensor, teacher_logp: Tensor, old_logp: Tensor, mask: Tensor, coef: float = 1e-3) -> Tensor:
    """OPID token advantage: ``A + coef * (teacher_logp - old_logp) * mask``, both log-probs under
    theta_old, so the skill's shift enters the PPO advantage (and its clipping) rather than a loss.

    Args: ``adv`` ``[B, T]`` (already broadcast over response tokens), the rest ``[B, T]``;
    ``mask`` = response mask x teacher signal mask. Returns ``[B, T]``.
    """
    return adv + coef * (teacher_logp - old_logp).detach() * mask


def rlsd_lambda(step: int, lam: float = 0.5, warmdown: int = 100) -> float:
    """RLSD's mixing coefficient at training step ``step`` (counted from 1, verl's ``global_steps``):
    ``lam`` decaying linearly to 0 over ``warmdown`` steps, ``lam * (1 - step / warmdown)`` while
    ``step < warmdown``, then 0 (SDAR's ``RLSDRayTrainer._get_rlsd_lambda``); 0 makes RLSD plain GRPO."""
    if step >= warmdown:
        return 0.0
    return lam * (1.0 - step / warmdown)


def rlsd_advantage(adv: Tensor, teacher_logp: Tensor, old_logp: Tensor, mask: Tensor, lam: float = 0.5,
                   clip_eps: float = 0.2) -> Tensor:
    """RLSD token advantage (SDAR's ``compute_rlsd_token_advantage``): each token's sequence advantage
    ``A`` re-weighted by how much the skill-conditioned teacher prefers that token,

    ``A_t = A * ((1 - lam) + lam * w_t)``, ``w_t = clip(exp(sign(A) * (teacher_logp - old_logp)),
    1 - clip_eps, 1 + clip_eps)``,

    so in a winning episode (A > 0) the tokens the teacher likes more than the student get more credit,
    and in a losing one (A < 0) the tokens the teacher likes less get more blame; ``lam = 0`` is GRPO.
    Both log-probs are under theta_old (constants). SDAR reads ``A`` at each sequence's first response
    token (its advantage is constant over the sequence, as GRPO's is here); this takes each token's own
    ``adv``, the same for a per-sequence advantage.

    Args: ``adv`` ``[B, T]`` (already broadcast over response tokens), the rest ``[B, T]``;
    ``mask`` = response mask x teacher signal mask: tokens outside it keep ``adv`` unchanged (a sample
    without a skill). Returns ``[B, T]``, no gradient.
    """
    with torch.no_grad():
        w = torch.clamp(torch.exp(torch.sign(adv) * (teacher_logp - old_logp)), 1.0 - clip_eps, 1.0 + clip_eps)
        shaped = adv * ((1.0 - lam) + lam * w)
        return torch.where(mask != 0, shaped, adv)
