"""Every method is a configuration of the one RL loop: which skills, where they go, which signal.

This table is the only place a method is defined (``algo.name`` is validated against it); it is pure
data, so the config can read it. What the names mean at run time lives beside it:
:mod:`seedrl.methods.signals` (a signal = what teacher log-probs do to the update, built on the pure
functions of ``seedrl.algos``), :mod:`seedrl.methods.teacher` (where the skill goes in the teacher
prompt), :mod:`seedrl.methods.sources` (who writes the skill) and :mod:`seedrl.methods.runtime`
(the three put together for a run). A new method = a pure function in ``algos`` (if its signal is
new) + a signal object + one entry here + its tests. Sources: ``../shared/research/seed_algorithm.md``
and the public SEED, SDAR and OPID code.

| method        | skills                          | placement  | signal                               | paper              |
|---------------|---------------------------------|------------|--------------------------------------|--------------------|
| `grpo`        | none                            | -          | none                                 | GRPO (verl-agent)  |
| `gigpo`       | none                            | -          | none; + step-group advantage         | GiGPO (verl-agent) |
| `seed`        | hindsight, the policy's own     | after_task | OPD, gate sigmoid(5 (teacher-logp))  | SEED               |
| `seed_nogate` | hindsight                       | after_task | OPD, uniform gate (beta 0)           | ablation of SEED   |
| `sdar`        | static file per task type       | prefix     | OPD, gate sigmoid(5 (teacher-logp))  | SDAR               |
| `grpo_opsd`   | static file per task type       | prefix     | OPD, uniform gate (beta 0)           | SDAR's GRPO+OPSD   |
| `opsd`        | static file per task type       | prefix     | OPD gate beta 5, no PG term          | SDAR's OPSD        |
| `rlsd`        | static file per task type       | prefix     | A (1-l + l clip(e^(sgn A (t-old))))  | SDAR's RLSD        |
| `skill_sd`    | static file per task type       | prefix     | rho * k3 reverse KL (rho with grad)  | SDAR's Skill-SD    |
| `opid`        | hindsight + critical-step skills | after_task | opid_coef (teacher - old) in the adv | OPID               |

Placements (``seedrl.skills.injection``): ``after_task`` = SEED's ``**Episode-Level Skill**`` block
right after the task line of the step's user message, then the chat template; ``prefix`` = SDAR's
``[Privileged Skill Information]`` text prepended to the already-templated prompt, left-truncated to
the rollout prompt limit (``rollout.max_prompt_tokens``) so an overlong prompt loses the skill first.

``defaults`` are the method's own settings, applied to config fields the user did not set (an
explicit value always wins): OPID normalises advantages by the mean only and labels trajectories with
an external (API) analyzer that also names critical steps; GiGPO adds the step-relative advantage
of anchor-state groups (``algo.step_advantage_w`` 1; its mode is ``algo.adv_norm``); OPSD sets the policy-gradient weight
``algo.pg_coef`` to 0 (SDAR's ``pg_loss_coef=0``: ``sdar`` without its GRPO term, the KL term kept).
RLSD's token weights ``w = clip(exp(sign(A) (teacher - old)), 1 +- algo.rlsd_clip_eps)`` are mixed in
with ``l = algo.rlsd_lambda``, decaying to 0 over ``algo.rlsd_warmdown`` iterations.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass(frozen=True)
class MethodSpec:
    #: who writes the skill: nobody, a hindsight analyzer (``skills.analyzer``) or static files
    skills: Literal["none", "hindsight", "static"]
    #: what the teacher log-probs do: a key of ``seedrl.methods.signals.SIGNALS``
    signal: Literal["none", "opd", "opid", "skill_sd", "rlsd"]
    #: the gate sharpness of the OPD signal: None = ``algo.opd_beta`` (SEED/SDAR: 5), 0 = uniform gate
    opd_beta: float | None = None
    #: where the skill goes: a key of ``seedrl.methods.teacher.PLACEMENTS``
    placement: Literal["after_task", "prefix"] = "after_task"
    #: {"section.key": value} defaults of this method for fields the config leaves unset
    defaults: dict[str, Any] = field(default_factory=dict)
    summary: str = ""

    @property
    def uses_skills(self) -> bool:
        return self.skills != "none"


METHODS: dict[str, MethodSpec] = {
    "grpo": MethodSpec("none", "none", summary="GRPO: episode-outcome advantages only"),
    "gigpo": MethodSpec("none", "none", defaults={"algo.step_advantage_w": 1.0},
                        summary="GiGPO: episode-group plus anchor-state step-group advantages (verl-agent)"),
    "seed": MethodSpec("hindsight", "opd", summary="SEED: gated OPD from the policy's own hindsight skills"),
    "seed_nogate": MethodSpec("hindsight", "opd", opd_beta=0.0,
                              summary="ablation: SEED with a uniform gate (beta 0), not a published baseline"),
    "sdar": MethodSpec("static", "opd", placement="prefix",
                       summary="SDAR: gated OPD from static task-type skills, privileged prefix"),
    "grpo_opsd": MethodSpec("static", "opd", opd_beta=0.0, placement="prefix",
                            summary="SDAR's GRPO+OPSD baseline: static skills, privileged prefix, uniform gate"),
    "opsd": MethodSpec("static", "opd", placement="prefix", defaults={"algo.pg_coef": 0.0},
                       summary="SDAR's OPSD: the gated OPD term alone (no policy-gradient term), static skills"),
    "rlsd": MethodSpec("static", "rlsd", placement="prefix",
                       summary="SDAR's RLSD: GRPO advantages re-weighted per token by the static-skill teacher"),
    "skill_sd": MethodSpec("static", "skill_sd", placement="prefix",
                           summary="SDAR's Skill-SD: importance-weighted reverse KL to the static-skill teacher"),
    "opid": MethodSpec("hindsight", "opid",
                       defaults={"algo.adv_norm": "mean", "skills.analyzer": "api", "skills.step_skills": True},
                       summary="OPID: the teacher shift added into the advantage, with critical-step skills"),
}
METHOD_NAMES = tuple(METHODS)

#: how an OPD (or Skill-SD) term is averaged over a mini-batch (``algo.opd_agg``, :func:`seedrl.algos.signal_weights`),
#: the one place these names are written: SEED's mean over micro-batches (the default), or a token-mean
#: over the mini-batch's signal tokens (what runs saved before ``algo.opd_agg`` existed used)
OPD_AGGS = ("micro_batch_mean", "signal_token_mean")
MICRO_BATCH_MEAN, SIGNAL_TOKEN_MEAN = OPD_AGGS
#: the signals whose loss term ``algo.opd_agg`` aggregates (OPD's gated term, Skill-SD's reverse KL)
AGGREGATED_SIGNALS = ("opd", "skill_sd")


def method_spec_for(name: str) -> MethodSpec:
    from seedrl.errors import unknown_name

    if name not in METHODS:
        raise unknown_name("method (algo.name)", name, METHOD_NAMES)
    return METHODS[name]
