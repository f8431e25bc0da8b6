"""Signals: what a method does with the skill-conditioned teacher's log-probs, per micro-batch.

A signal may shift the token advantages before the PPO loss (``advantage``) and/or add a loss term
(``loss``); each is a thin object over a pure function of :mod:`seedrl.algos`. The RL loop calls the
run's signal and names none of them. Shapes: ``[B, T]`` right-aligned response tokens. For
``advantage``, ``tmask`` = response mask x the per-sample teacher-signal mask (samples whose trajectory
has no skill are all zero). For ``loss``, ``tmask`` = response mask x each sample's aggregation weight
(:func:`seedrl.algos.signal_weights` with the signal's ``agg``: 0 without a skill), and the term is the
sum of the weighted tokens (the pure functions' ``denom`` = 1), so the micro-batches' terms add up to
the mini-batch's term as the aggregation defines it: SEED's mean over micro-batches (``micro_batch_mean``, the
default of OPD and Skill-SD, ``algo.opd_agg``) or a token-mean over
the mini-batch's signal tokens (``signal_token_mean``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import Tensor

from seedrl.algos import opd_loss, opid_advantage, rlsd_advantage, rlsd_lambda, skill_sd_loss
from seedrl.methods import MICRO_BATCH_MEAN, SIGNAL_TOKEN_MEAN


@dataclass
class SignalTerm:
    """A loss term of one micro-batch: ``loss`` (coefficient applied) enters the update; ``value``
    (unscaled) is logged as ``loss/<signal>``; ``stats`` are means over this micro-batch's signal
    tokens, logged as ``<signal>/<key>``."""

    loss: Tensor
    value: Tensor
    stats: dict[str, Tensor] = field(default_factory=dict)


class Signal:
    """No signal (GRPO): the advantages and the loss are left alone."""

    name = "none"
    #: how the trainer averages this signal's loss term over a mini-batch (``seedrl.methods.OPD_AGGS``)
    agg = SIGNAL_TOKEN_MEAN

    def begin_update(self, iteration: int) -> None:
        """Called once before each update with the iterations done before it (a signal whose
        strength follows a schedule, as RLSD's lambda, reads the step here)."""

    def update_stats(self) -> dict[str, float]:
        """This update's settings of the signal, logged as ``<signal>/<key>`` (e.g. RLSD's lambda)."""
        return {}

    def advantage(self, adv: Tensor, teacher: Tensor, old: Tensor, tmask: Tensor) -> Tensor:
        return adv

    def loss(self, logp: Tensor, old: Tensor, teacher: Tensor, tmask: Tensor) -> SignalTerm | None:
        return None


@dataclass
class OPD(Signal):
    """SEED/SDAR on-policy distillation: ``coef * opd_loss`` with gate sharpness ``beta`` (0 = uniform),
    averaged over a mini-batch as ``agg`` says (``algo.opd_agg``)."""

    beta: float
    coef: float
    agg: str = MICRO_BATCH_MEAN
    name = "opd"

    def loss(self, logp, old, teacher, tmask):
        term, st = opd_loss(logp, teacher, tmask, beta=self.beta, denom=1.0)
        return SignalTerm(self.coef * term, term.detach(), {k: st[k] for k in ("gate_mean", "delta_mean")})


@dataclass
class OPIDShift(Signal):
    """OPID: ``coef * (teacher - old)`` added into the token advantages, so it passes the PPO clip."""

    coef: float
    name = "opid"

    def advantage(self, adv, teacher, old, tmask):
        return opid_advantage(adv, teacher, old, tmask, self.coef)


@dataclass
class RLSD(Signal):
    """SDAR's RLSD: the sequence advantage re-weighted per token by the teacher's preference
    (:func:`seedrl.algos.rlsd_advantage`), with lambda decaying from ``lam`` to 0 over ``warmdown``
    iterations (:func:`seedrl.algos.rlsd_lambda`; verl counts steps from 1, so the update after
    ``iteration`` iterations is step ``iteration + 1``)."""

    lam: float
    warmdown: int
    clip_eps: float
    #: the training step of the current update (verl's ``global_steps``), set by :meth:`begin_update`
    step: int = 1
    name = "rlsd"

    def begin_update(self, iteration: int) -> None:
        self.step = iteration + 1

    @property
    def current_lambda(self) -> float:
        return rlsd_lambda(self.step, self.lam, self.warmdown)

    def update_stats(self) -> dict[str, float]:
        return {"lambda": self.current_lambda}

    def advantage(self, adv, teacher, old, tmask):
        return rlsd_advantage(adv, teacher, old, tmask, self.current_lambda, self.clip_eps)


@dataclass
class SkillSD(Signal):
    """SDAR's Skill-SD: ``coef * skill_sd_loss`` (importance-weighted reverse KL to the teacher),
    averaged over a mini-batch as ``agg`` says (``algo.opd_agg``; SDAR's ``compute_sdl_loss`` is
    verl's ``agg_loss`` token-mean per micro-batch, divided by the micro-batch count: ``micro_batch_mean``)."""

    coef: float
    agg: str = MICRO_BATCH_MEAN
    name = "skill_sd"

    def loss(self, logp, old, teacher, tmask):
        term, st = skill_sd_loss(logp, old, teacher, tmask, denom=1.0)
        return SignalTerm(self.coef * term, term.detach(), {k: st[k] for k in ("rho_mean", "k3_mean")})


#: signal name (``MethodSpec.signal``) -> how to build it from the run's ``algo`` config and the
#: method's resolved gate
SIGNALS = {
    "none": lambda algo, beta: Signal(),
    "opd": lambda algo, beta: OPD(beta=beta, coef=algo.opd_coef, agg=algo.opd_agg),
    "opid": lambda algo, beta: OPIDShift(coef=algo.opid_coef),
    "skill_sd": lambda algo, beta: SkillSD(coef=algo.skill_sd_coef, agg=algo.opd_agg),
    "rlsd": lambda algo, beta: RLSD(lam=algo.rlsd_lambda, warmdown=algo.rlsd_warmdown, clip_eps=algo.rlsd_clip_eps),
}
#: metric-name prefixes the signals log (``<signal>/<stat>``)
SIGNAL_PREFIXES = tuple(f"{name}/" for name in SIGNALS if name != "none")
