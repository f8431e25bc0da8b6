"""What a training iteration's metrics row says about its batch, beside the update's own statistics:
the rollout (success, rewards, invalid actions, advantages, generator drift), where the policy gradient
comes from (:func:`gradient_shares`), whether the teacher signal is alive (:func:`teacher_metrics`,
:func:`skill_metrics`), and one hash per episode (:func:`rollout_digests`). With several processes the
rows describe the whole batch: :func:`whole_batch` gathers every rank's part of it."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import torch

from seedrl.agent.parsing import decision_mask
from seedrl.rollout.types import StepSample, Trajectory
from seedrl.skills.analyzers.base import AnalysisResult
from seedrl.skills.facts import fact_metrics
from seedrl.train.distributed import World, all_gather

#: below this mean NLL (nats) of its sampled action tokens the first iteration warns of a collapsed start
COLLAPSED_NLL = 0.05



def gradient_shares(adv: torch.Tensor, old_logp: list[torch.Tensor], decision: list[list[bool]]) -> dict[str, float]:
    """Where the policy gradient of a batch comes from. A sampled token's PG gradient on its own logit
    is ``A * (1 - p)`` (before clipping), so ``|A| * (1 - p_old)`` per response token weighs what each
    token can move. Shares of that weight: from positive- and negative-advantage samples, and from
    decision tokens (:func:`decision_mask`) against format tokens; ``grad/decision_token_frac`` is the
    plain share of decision tokens. ``rollout/decision_nll``: the mean ``-log p_old`` of the sampled
    decision tokens, an estimate of the policy's entropy where it decides (near 0: a collapsed policy
    whose groups come out uniform). ``adv`` ``[N]``, ``old_logp`` N tensors ``[T_i]``, ``decision`` N
    lists ``[T_i]``. A batch with no weight (every advantage 0) gives no ``grad/*_share``."""
    tot = pos = neg = dec = nll = 0.0
    n_tok = n_dec = 0
    for a, lp, d in zip(adv.tolist(), old_logp, decision):
        w = abs(a) * (1.0 - lp.float().exp())
        dm = torch.tensor(d, dtype=torch.bool)
        s = float(w.sum())
        tot += s
        pos += s if a > 0 else 0.0
        neg += s if a < 0 else 0.0
        dec += float(w[dm].sum()) if len(d) else 0.0
        nll -= float(lp.float()[dm].sum()) if len(d) else 0.0
        n_tok += len(d)
        n_dec += int(dm.sum())
    out = {"grad/decision_token_frac": n_dec / max(1, n_tok)}
    if n_dec:
        out["rollout/decision_nll"] = nll / n_dec
    if tot > 0:
        out |= {"grad/pos_share": pos / tot, "grad/neg_share": neg / tot, "grad/decision_share": dec / tot}
    return out


def _light_sample(s: StepSample) -> StepSample:
    """``s`` without its prompt (ids, messages, observation, images): what the metrics of a batch read,
    cheap to send to the other processes."""
    return replace(s, prompt_ids=[], messages=[], observation="", images=None)


def _light(trajs: list[Trajectory]) -> list[Trajectory]:
    """Trajectories as :func:`_light_sample` (no privileged state): enough for rows and metrics."""
    return [replace(t, steps=[_light_sample(s) for s in t.steps], privileged_state={}) for t in trajs]


def shift_stats(delta: torch.Tensor, old_logp: torch.Tensor, adv_sign: torch.Tensor,
                outcome_sign: torch.Tensor | None = None, adv_abs: torch.Tensor | None = None) -> dict[str, float]:
    """How far the skill moves the teacher, over the response tokens that carry a teacher signal.

    Shapes ``[N]`` each: ``delta = teacher_logp - old_logp`` per token, the token's ``old_logp``, and the
    sign (-1, 0, +1) of its sample's advantage. Besides the shift's mean and quantiles: the share of
    tokens moved by more than one nat; ``delta_abs_gradw``, the mean ``|delta|`` weighted by
    ``1 - p_old`` (a sampled token's log-prob gradient scales with it, so near-certain tokens, most of a
    trained policy's, carry no update whatever the gate says, and the plain quantiles can sit at 0 while
    the tokens that train move a lot); the mean shift on positive- and negative-advantage tokens; and
    ``adv_agree_gradw``, the agreement of the shift's sign with the advantage's, weighted by
    ``|delta| * (1 - p_old)``: -1 always against the outcome, 0 unrelated to it (the teacher says
    something else), +1 it only repeats what the outcome says. ``outcome_sign`` (``[N]``, optional: +1 on
    tokens of won episodes, -1 on lost ones) adds ``outcome_agree_gradw``, the same agreement with the
    episode's outcome instead of its advantage. The two part where GRPO's advantage is not the outcome:
    in a group whose episodes all won or all lost, mean_std normalisation turns the invalid-action
    penalty alone into unit-size advantages of either sign (``adv/uniform_group_mass``), which a skill
    about the task cannot predict. ``adv_abs`` (``[N]``, optional: the size of the token's advantage) adds
    ``adv_agree_pgw``, the agreement with the advantage's sign weighted by the policy gradient's own weight
    ``|A| * (1 - p_old)`` times ``|delta|``: ``adv_agree_gradw`` counts a tiny penalty-made advantage's sign
    (``adv_norm: mean`` in an all-lost group) as fully as a win's, so it can sit near 0 while the teacher
    pushes where GRPO pushes hardest. Empty input: no statistics."""
    if not len(delta):
        return {}
    delta, w = delta.float(), 1.0 - old_logp.float().exp()
    q = torch.quantile(delta, torch.tensor([0.01, 0.1, 0.5, 0.9, 0.99]))
    out = {"teacher/delta_mean": float(delta.mean()), "teacher/delta_p01": float(q[0]),
           "teacher/delta_p10": float(q[1]), "teacher/delta_p50": float(q[2]), "teacher/delta_p90": float(q[3]),
           "teacher/delta_p99": float(q[4]), "teacher/delta_pos_frac": float((delta > 0).float().mean()),
           "teacher/delta_tail_frac": float((delta.abs() > 1.0).float().mean())}
    if float(w.sum()) > 0:
        out["teacher/delta_abs_gradw"] = float((delta.abs() * w).sum() / w.sum())
    for name, side in (("adv_pos", adv_sign > 0), ("adv_neg", adv_sign < 0)):
        if side.any():
            out[f"teacher/delta_mean_{name}"] = float(delta[side].mean())
    mass = delta.abs() * w * adv_sign.abs()
    if float(mass.sum()) > 0:
        out["teacher/adv_agree_gradw"] = float((mass * delta.sign() * adv_sign).sum() / mass.sum())
    if adv_abs is not None:
        mass = delta.abs() * w * adv_abs.float()
        if float(mass.sum()) > 0:
            out["teacher/adv_agree_pgw"] = float((mass * delta.sign() * adv_sign).sum() / mass.sum())
    if outcome_sign is not None:
        mass = delta.abs() * w * outcome_sign.abs()
        if float(mass.sum()) > 0:
            out["teacher/outcome_agree_gradw"] = float((mass * delta.sign() * outcome_sign).sum() / mass.sum())
    return out


def teacher_metrics(results: list[AnalysisResult], samples: list[StepSample], old_logp, teacher_logp,
                    signal: torch.Tensor, adv: torch.Tensor, won: dict[int, bool] | None = None) -> dict[str, Any]:
    """Is the distillation signal alive? Parse rate, coverage, and how far the teacher moves
    (:func:`shift_stats` over the response tokens of samples with a signal; ``adv``: one advantage
    per sample; ``won``: each trajectory's outcome by ``traj_id``, for the agreement with the outcome)."""
    n = max(1, len(results))
    keep = [i for i, (o, m) in enumerate(zip(old_logp, signal.tolist())) if m > 0 and len(o)]
    out = {
        "skills/parse_rate": sum(r.skill is not None for r in results) / n,
        "skills/errors": sum(r.error is not None for r in results),
        "skills/timeouts": sum("timeout" in (r.error or "") for r in results),
        "skills/signal_frac": float(signal.mean()) if len(signal) else 0.0,
        "skills/prompt_tokens": sum(r.prompt_tokens for r in results),
        "skills/completion_tokens": sum(r.completion_tokens for r in results),
    }
    if keep:
        old = torch.cat([old_logp[i] for i in keep])
        delta = torch.cat([teacher_logp[i] for i in keep]) - old
        lens = torch.tensor([len(old_logp[i]) for i in keep])
        sign = torch.sign(adv[keep].float()).repeat_interleave(lens)
        size = adv[keep].float().abs().repeat_interleave(lens)
        outcome = None
        if won is not None:
            outcome = torch.tensor([1.0 if won[samples[i].traj_id] else -1.0 for i in keep]).repeat_interleave(lens)
        out |= shift_stats(delta, old, sign, outcome, size)
    return out


def rollout_digests(trajs: list[Trajectory]) -> list[str]:
    """One 8-hex-digit hash per episode, in ``traj_id`` order, of its task and every response's token
    ids. Two runs of one seed (same task stream) took identical actions in an episode iff its digests
    match (up to a 2^-32 collision). Runs whose rollouts stay equal trained on the same episodes; once
    they differ they follow different sampling branches, which ``seedrl compare``'s report counts."""
    out = []
    for t in sorted(trajs, key=lambda t: t.traj_id):
        h = hashlib.blake2b(t.task_id.encode(), digest_size=4)
        for s in t.steps:
            h.update(b"|" + ",".join(map(str, s.response_ids)).encode())
        out.append(h.hexdigest())
    return out


def rollout_metrics(trajs: list[Trajectory], samples: list[StepSample], old_logp, adv: torch.Tensor) -> dict[str, Any]:
    """What a dead or broken signal looks like: zero-advantage share, all-same groups, logp drift."""
    n = max(1, len(trajs))
    groups: dict[int, list[bool]] = {}
    for t in trajs:
        groups.setdefault(t.group_id, []).append(t.won)
    resp_lens = [len(s.response_ids) for s in samples]
    drift = [float((torch.tensor(s.logprobs) - lp).abs().mean()) for s, lp in zip(samples, old_logp) if len(lp)]
    return {
        "rollout/success_rate": sum(t.won for t in trajs) / n,
        "rollout/episode_reward": sum(t.episode_reward for t in trajs) / n,
        "rollout/steps": sum(len(t.steps) for t in trajs) / n,
        # both invalid-action rules, whichever one the penalty uses (env.invalid_action)
        "rollout/invalid_rate": sum(not s.action_valid for s in samples) / max(1, len(samples)),
        "rollout/invalid_format_rate": sum(not s.format_valid for s in samples) / max(1, len(samples)),
        "rollout/truncated": sum(t.truncated for t in trajs) / n,
        "rollout/env_errors": sum(t.error is not None for t in trajs),
        "rollout/response_tokens": sum(resp_lens) / max(1, len(resp_lens)),
        "rollout/samples": len(samples),
        "adv/mean": float(adv.mean()), "adv/std": float(adv.std()) if len(adv) > 1 else 0.0,
        "adv/zero_frac": float((adv.abs() < 1e-8).float().mean()),
        "adv/uniform_groups": sum(len(set(v)) == 1 for v in groups.values()) / max(1, len(groups)),
        # share of the advantage mass sum|A| on samples of groups whose outcomes are all equal: there it
        # comes only from the invalid-action penalty, which mean_std normalisation blows up to unit size
        "adv/uniform_group_mass": (float(sum(abs(x) for x, s in zip(adv.tolist(), samples)
                                             if len(set(groups[s.group_id])) == 1))
                                   / max(1e-12, float(adv.abs().sum()))) if len(adv) else 0.0,
        # generator log-probs vs the trainer's recomputation: > ~1e-3 means a prompt/position mismatch
        "check/rollout_logp_drift": sum(drift) / max(1, len(drift)),
    }


#: what the skill stages of an iteration give its metrics: (analysis results, per-sample teacher log-probs,
#: [N] signal mask, samples scored with a step skill, step skills found; the last two None without step skills)
Scored = tuple[list[AnalysisResult], list[torch.Tensor], torch.Tensor, "int | None", "int | None"]


def whole_batch(world: World, trajs: list[Trajectory], samples: list[StepSample], old_logp: list[torch.Tensor],
                adv: torch.Tensor, scored: Scored | None):
    """``(trajs, samples, old_logp, adv, scored)`` of the whole batch: with several processes, every
    rank's part of it in rank order (trajectories and samples without their prompts, :func:`_light`);
    a single process's own, unchanged."""
    if not world.active:
        return trajs, samples, old_logp, adv, scored
    parts = all_gather(world, (_light(trajs), [_light_sample(s) for s in samples], old_logp, adv, scored))
    trajs = [t for p in parts for t in p[0]]
    samples = [s for p in parts for s in p[1]]
    old_logp = [x for p in parts for x in p[2]]
    adv = torch.cat([p[3] for p in parts])
    if scored is not None:
        routed, step_total = scored[3], scored[4]
        if routed is not None:
            routed = sum(p[4][3] for p in parts)
            step_total = sum(p[4][4] for p in parts)
        scored = ([r for p in parts for r in p[4][0]], [x for p in parts for x in p[4][1]],
                  torch.cat([p[4][2] for p in parts]), routed, step_total)
    return trajs, samples, old_logp, adv, scored


def skill_metrics(scored: Scored, trajs: list[Trajectory], samples: list[StepSample], old_logp: list[torch.Tensor],
                  adv: torch.Tensor) -> dict[str, Any]:
    """The ``skills/*``, ``teacher/*`` and fact-agreement metrics of a batch (:func:`teacher_metrics`,
    :func:`seedrl.skills.facts.fact_metrics`), and the step-skill routing's share when it ran."""
    results, teacher_logp, signal, routed, step_total = scored
    won = {t.traj_id: t.won for t in trajs}
    out = teacher_metrics(results, samples, old_logp, teacher_logp, signal, adv, won)
    out |= fact_metrics(results, won)
    if routed is not None:
        # share of the samples with a teacher signal that were scored with a step skill
        out["skills/step_skill_frac"] = routed / max(1.0, float(signal.sum()))
        out["skills/step_skills"] = step_total
    return out


def batch_metrics(tokenizer: Any, trajs: list[Trajectory], samples: list[StepSample], old_logp: list[torch.Tensor],
                  adv: torch.Tensor, extra: dict[str, Any]) -> dict[str, Any]:
    """The metrics row of a batch: :func:`rollout_metrics`, then ``extra`` (the skill, update and
    sampling metrics), :func:`gradient_shares` over the decision tokens, and :func:`rollout_digests`."""
    out = rollout_metrics(trajs, samples, old_logp, adv) | extra
    out |= gradient_shares(adv, old_logp, [decision_mask(tokenizer, s.response_ids) for s in samples])
    out["rollout/digests"] = rollout_digests(trajs)
    return out


def stage_timer(timings: dict[str, float]) -> Callable[[str], Any]:
    """``with stage(name):`` adds the seconds the block takes to ``timings[name]``."""
    @contextmanager
    def stage(name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        yield
        timings[name] = timings.get(name, 0.0) + time.perf_counter() - t0
    return stage
