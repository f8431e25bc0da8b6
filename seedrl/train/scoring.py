"""What the loop computes from a batch before its update: the log-probs of the sampled responses (the
rollout policy's, the reference's, and the teacher's with a skill in the prompt), the hindsight analysis
that gives the skills, and the advantages.

:class:`Scorer` scores with the policy (and the reference model, when there is one); :func:`analyze`
runs a method's analyzer, never failing the run."""

from __future__ import annotations

import logging
from typing import Any

import torch

from seedrl.algos import (
    anchor_state_groups,
    grpo_advantages,
    invalid_action_penalty,
    length_discount,
    scale_by_sign,
    step_group_advantages,
    step_returns,
)
from seedrl.config import TrainConfig
from seedrl.methods.teacher import teacher_prompt_ids
from seedrl.models.prefix import shared_prefix_logprobs
from seedrl.models.scoring import batched_logprobs
from seedrl.rollout.types import StepSample, Trajectory, penalized
from seedrl.skills.analyzers.base import AnalysisResult
from seedrl.skills.facts import check_facts
from seedrl.train import fsdp

log = logging.getLogger(__name__)


def unique_pairs(samples: list[StepSample]) -> tuple[list[int], list[int]]:
    """``(where, unique)``: ``unique`` the index of the first sample of each distinct (prompt ids,
    response ids) pair, ``where[i]`` the position in ``unique`` of sample ``i``'s pair."""
    first: dict[tuple, int] = {}
    where, unique = [], []
    for i, s in enumerate(samples):  # with images, their digest too: same-sized images share placeholder ids
        key = (tuple(s.prompt_ids), tuple(s.response_ids), s.image_digest)
        if key not in first:
            first[key] = len(unique)
            unique.append(i)
        where.append(first[key])
    return where, unique


def routed_step_skill(sample: StepSample, skills: dict[int, str],
                      step_skills: dict[int, dict[int, str]] | None) -> str | None:
    """The step-level skill that "critical-first" routing gives this sample (None: the episode skill,
    or no skill at all). A step skill is only used when its trajectory also has an episode skill."""
    if not step_skills or not skills.get(sample.traj_id):
        return None
    return (step_skills.get(sample.traj_id) or {}).get(sample.step) or None


def analyze(analyzer: Any, trajs: list[Trajectory]) -> list[AnalysisResult]:
    """Hindsight skills for every trajectory. A failing analyzer costs the batch its OPD signal,
    never the run: the failure is recorded per trajectory and counted in the metrics."""
    try:
        results = analyzer.analyze(trajs)
        if len(results) != len(trajs):
            raise RuntimeError(f"analyzer returned {len(results)} results for {len(trajs)} trajectories")
        return results
    except Exception as exc:
        log.warning("analyzer %s failed on the whole batch: %s", analyzer.name, exc)
        return [AnalysisResult(traj_id=t.traj_id, skill=None, error=f"exception: {exc}") for t in trajs]


class Scorer:
    """Scores step samples with ``model`` (the policy) and ``ref_model`` (None: no separate reference; with
    LoRA the reference is the base with adapters off), as ``cfg`` and ``method`` (the skill placement) say."""

    def __init__(self, cfg: TrainConfig, model: torch.nn.Module, ref_model: torch.nn.Module | None, tokenizer: Any,
                 precision: Any, method: Any) -> None:
        self.cfg, self.model, self.ref_model = cfg, model, ref_model
        self.tokenizer, self.precision, self.method = tokenizer, precision, method

    def logprobs(self, model, samples: list[StepSample]) -> list[torch.Tensor]:
        """Per-sample response log-probs under ``model``. Samples with the same prompt and response
        (a peaked policy's group replays the same steps) are scored once and share the result
        (``optim.dedupe``; the same values up to the float rounding of another batch shape)."""
        where, unique = (unique_pairs(samples) if self.cfg.optim.dedupe
                         else (list(range(len(samples))), list(range(len(samples)))))
        scored = self.score(model, [samples[i].prompt_ids for i in unique], [samples[i].response_ids for i in unique],
                            [samples[i].images for i in unique])
        return [scored[j] for j in where]

    def score(self, model, prompts: list[list[int]], responses: list[list[int]],
              images: list | None = None) -> list[torch.Tensor]:
        """Per-sample response log-probs of (prompt, response) token ids under ``model``, without grad:
        each shared prompt prefix computed once with ``optim.shared_prefix``
        (:func:`~seedrl.models.prefix.shared_prefix_logprobs`), else :func:`batched_logprobs`.
        ``images``: per sample, the image inputs its generation saw (or ``None``); a batch with images is
        scored by :func:`batched_logprobs` (placeholders of different images share token ids)."""
        if images is not None and any(x is not None for x in images):
            return batched_logprobs(model, prompts, responses, self.tokenizer.pad_token_id,
                                    self.cfg.optim.micro_batch_size, bf16=self.precision.bf16, images=images)
        fn = shared_prefix_logprobs if self.cfg.optim.shared_prefix else batched_logprobs
        return fn(model, prompts, responses, self.tokenizer.pad_token_id, self.cfg.optim.micro_batch_size,
                  bf16=self.precision.bf16)

    def old_logprobs(self, samples: list[StepSample]) -> list[torch.Tensor]:
        """The rollout policy's log-probs of the sampled tokens, the PPO ratio's denominator:
        recomputed by a forward pass (``optim.old_logp: recompute``) or the ones the generator
        recorded while sampling (``rollout``: the same weights, untempered; they differ from the
        recomputation by ``check/rollout_logp_drift``, ~1e-4 on the hf backend)."""
        if self.cfg.optim.old_logp == "rollout":
            return [torch.tensor(s.logprobs, dtype=torch.float32) for s in samples]
        return self.logprobs(self.model, samples)

    def reference_logprobs(self, samples: list[StepSample]) -> list[torch.Tensor] | None:
        """The reference policy's log-probs of the sampled tokens (the KL term's); None without it."""
        if self.cfg.algo.kl_coef <= 0:
            return None
        if self.ref_model is not None:
            with fsdp.gathered(self.ref_model):
                return self.logprobs(self.ref_model, samples)
        with self.model.disable_adapter():
            return self.logprobs(self.model, samples)

    def teacher_logprobs(self, samples: list[StepSample], skills: dict[int, str],
                         step_skills: dict[int, dict[int, str]] | None = None):
        """Re-score each sampled response with its trajectory's skill in the prompt.

        Routing ("critical-first", OPID): a sample whose step has a step-level skill in
        ``step_skills`` ({traj_id: {0-based step: skill}}) is scored with only that
        ``**Critical-Step Skill**`` block; every other sample of a trajectory with a skill gets the
        episode skill, placed as the method says (see :meth:`teacher_prompt_ids`). The chat template
        is re-applied; the response token ids are the sampled ones, unchanged. Scored by the
        rollout-time weights (called before the update), without gradient. Returns per-sample
        teacher log-probs and a [N] 0/1 signal mask (1 = this sample's trajectory has an episode
        skill; step skills never give a signal on their own)."""
        idx = [i for i, s in enumerate(samples) if skills.get(s.traj_id)]
        teacher: list[torch.Tensor] = [torch.zeros(len(s.response_ids)) for s in samples]
        signal = torch.zeros(len(samples))
        if idx:
            prompts = [self.teacher_prompt_ids(samples[i], skills[samples[i].traj_id],
                                               routed_step_skill(samples[i], skills, step_skills)) for i in idx]
            scored = self.score(self.model, prompts, [samples[i].response_ids for i in idx],
                                [samples[i].images for i in idx])  # the same images as the student's
            for i, lp in zip(idx, scored):
                teacher[i] = lp
                signal[i] = 1.0
        return teacher, signal

    def skill_signal(self, analyzer: Any, trajs: list[Trajectory], samples: list[StepSample], stage: Any):
        """The stages of a method with skills: ``analysis`` (``analyzer``'s skill per trajectory, checked
        against the facts of this rank's own privileged states) and ``rescore`` (:meth:`teacher_logprobs`;
        ``stage(name)`` times each). Returns (results, teacher log-probs, signal mask, samples routed to a
        step skill, step skills found), the last two None without ``skills.step_skills``."""
        with stage("analysis"):
            results = analyze(analyzer, trajs)
            check_facts(self.cfg.env.name, trajs, results)  # on this rank's own privileged states
        skills = {r.traj_id: r.skill for r in results if r.skill}
        # OPID critical-step skills: only with skills.step_skills, only beside an episode skill
        step_skills = ({r.traj_id: r.step_skills for r in results if r.skill and r.step_skills}
                       if self.cfg.skills.step_skills else None)
        with stage("rescore"):
            teacher_logp, signal = self.teacher_logprobs(samples, skills, step_skills)
        routed = step_total = None
        if step_skills is not None:
            routed = sum(1 for s, m in zip(samples, signal.tolist())
                         if m > 0 and routed_step_skill(s, skills, step_skills))
            step_total = sum(len(v) for v in step_skills.values())
        return results, teacher_logp, signal, routed, step_total

    def teacher_prompt_ids(self, sample: StepSample, skill: str | None, step_skill: str | None = None) -> list[int]:
        """The teacher prompt of one step sample, as the method places the skill
        (:mod:`seedrl.methods.teacher`), left-truncated to ``rollout.max_prompt_tokens``."""
        return teacher_prompt_ids(self.method.spec.placement, self.tokenizer, sample.messages, skill,
                                  self.cfg.rollout.max_prompt_tokens, step_skill, images=sample.images)

    def returns(self, trajs: list[Trajectory]) -> torch.Tensor:
        """``[M]`` the return of each episode that the advantages normalise (and dynamic sampling's
        filter compares): the episode reward, discounted by its length (``algo.episode_discount``)."""
        return length_discount(torch.tensor([t.episode_reward for t in trajs], dtype=torch.float64),
                               torch.tensor([max(1, len(t.steps)) for t in trajs]), self.cfg.algo.episode_discount)

    def advantages(self, trajs: list[Trajectory], samples: list[StepSample]) -> torch.Tensor:
        """One GRPO advantage per step sample (the caller broadcasts it over response tokens)."""
        a = self.cfg.algo
        ep_reward = dict(zip((t.traj_id for t in trajs), self.returns(trajs).tolist()))
        traj_ids = sorted(ep_reward)
        tindex = {tid: i for i, tid in enumerate(traj_ids)}
        rule = self.cfg.env.invalid_action
        scores = invalid_action_penalty(
            torch.tensor([ep_reward[s.traj_id] for s in samples], dtype=torch.float64),
            torch.tensor([not penalized(s, rule) for s in samples]), a.invalid_penalty)
        groups = torch.tensor([s.group_id for s in samples])
        adv = grpo_advantages(scores, groups, torch.tensor([tindex[s.traj_id] for s in samples]), norm=a.adv_norm,
                              stats=a.adv_stats)
        if a.step_advantage_w > 0 and samples:  # GiGPO's step-level credit over anchor-state groups
            adv = adv + a.step_advantage_w * self.step_advantages(trajs, samples)
        return scale_by_sign(adv, a.pos_adv_coef, a.neg_adv_coef).float()

    def step_advantages(self, trajs: list[Trajectory], samples: list[StepSample]) -> torch.Tensor:
        """``[N]`` GiGPO's step-relative advantage of each step sample (verl-agent ``gigpo/core_gigpo.py``):
        each trajectory's discounted step returns (``algo.step_gamma``, over all its steps), less the
        invalid-action penalty at a penalised step, normalised within anchor-state groups (the samples
        of one task group that acted on the same observation, ``algo.step_similarity``) as
        ``algo.adv_norm`` says."""
        a = self.cfg.algo
        ret = {}
        for t in trajs:
            g = step_returns(torch.tensor([s.reward for s in t.steps], dtype=torch.float64), a.step_gamma)
            ret.update({(t.traj_id, s.step): float(v) for s, v in zip(t.steps, g)})
        rule = self.cfg.env.invalid_action
        step_scores = invalid_action_penalty(torch.tensor([ret[(s.traj_id, s.step)] for s in samples], dtype=torch.float64),
                                             torch.tensor([not penalized(s, rule) for s in samples]), a.invalid_penalty)
        step_group = anchor_state_groups([s.group_id for s in samples], [s.observation for s in samples],
                                         a.step_similarity)
        return step_group_advantages(step_scores, step_group, a.adv_norm)
