"""SEED's self-evolving analyzer: the current rollout policy reads its own trajectories.

It uses the same generation backend and the same weights that produced the trajectories (before
the update), greedy, one attempt: a parse failure or an empty skill means no distillation signal
for that trajectory.

With ``bf16`` (the run's compute precision, ``model.precision``) the generation runs under bf16
autocast on the model's device: only the skill *text* is used (never the generator's log-probs), so
the lower precision cannot bias a gradient, and where bf16 is native it is about twice as fast for
the long analysis answers.

A prompt over ``max_prompt_tokens``: the ``seed`` prompt (instructions first, the episode last) is
rendered again without its oldest steps, as few as fit, so the instructions are never cut; the
``legacy`` prompt (the request last) keeps its last ``max_prompt_tokens`` tokens, as it always did.
"""

from __future__ import annotations

from seedrl.models.precision import autocast
from seedrl.rollout.backends import Generation, GenerationBackend, SamplingParams
from seedrl.rollout.runner import encode_messages
from seedrl.rollout.types import Trajectory
from seedrl.skills.analyzers.base import AnalysisResult
from seedrl.skills.parsing import parse_skill
from seedrl.skills.prompts import STEP_BASE, analysis_messages


def _device_type(backend: GenerationBackend) -> str:
    """The device type of the backend's model ("cpu" when it has none, e.g. a remote server)."""
    model = getattr(backend, "model", None)
    try:
        return next(model.parameters()).device.type
    except (AttributeError, StopIteration, TypeError):
        return "cpu"


class SelfAnalyzer:
    name = "self"

    def __init__(self, backend: GenerationBackend, tokenizer, max_new_tokens: int = 256,
                 max_prompt_tokens: int = 4096, max_obs_chars: int | None = None, min_words: int = 5,
                 batch_size: int = 32, seed: int = 0, bf16: bool = False, step_skills: bool = False,
                 max_step_skills: int = 5, analysis_prompt: str = "seed") -> None:
        self.backend, self.tokenizer = backend, tokenizer
        self.max_new_tokens, self.max_prompt_tokens = max_new_tokens, max_prompt_tokens
        self.max_obs_chars, self.min_words, self.batch_size, self.seed = max_obs_chars, min_words, batch_size, seed
        self.bf16 = bf16
        self.step_skills, self.max_step_skills = step_skills, max_step_skills
        if analysis_prompt not in STEP_BASE:
            raise ValueError(f"unknown analysis prompt {analysis_prompt!r}; valid: {', '.join(STEP_BASE)}")
        self.analysis_prompt = analysis_prompt

    def _precision(self):
        return autocast(_device_type(self.backend), self.bf16)

    def _messages(self, t: Trajectory, first_step: int = 0) -> list[dict[str, str]]:
        return analysis_messages(t, self.max_obs_chars, self.step_skills, self.max_step_skills,
                                 variant=self.analysis_prompt, first_step=first_step)

    def prompt_ids(self, t: Trajectory) -> list[int]:
        """The analysis prompt of ``t`` as token ids, within ``max_prompt_tokens`` (module docstring)."""
        limit = self.max_prompt_tokens
        ids = encode_messages(self.tokenizer, self._messages(t))
        if len(ids) <= limit or self.analysis_prompt == "legacy":
            return ids[-limit:]
        fits: dict[int, list[int] | None] = {}

        def fit(k: int) -> list[int] | None:
            if k not in fits:
                p = encode_messages(self.tokenizer, self._messages(t, first_step=k))
                fits[k] = p if len(p) <= limit else None
            return fits[k]

        lo, hi = 1, len(t.steps)
        if not t.steps or fit(hi) is None:
            return ids[-limit:]  # even the instructions alone are over the limit
        while lo < hi:  # the fewest left-out steps that fit
            mid = (lo + hi) // 2
            if fit(mid) is not None:
                hi = mid
            else:
                lo = mid + 1
        return fit(lo) or fit(len(t.steps)) or ids[-limit:]

    def analyze(self, trajectories: list[Trajectory]) -> list[AnalysisResult]:
        keep_steps = self.max_step_skills if self.step_skills else 0
        prompts = [self.prompt_ids(t) for t in trajectories]
        results: list[AnalysisResult] = []
        for t, p, g in zip(trajectories, prompts, self.generate(prompts)):
            parsed = parse_skill(g.text, self.min_words, max_step_skills=keep_steps,
                                 step_base=STEP_BASE[self.analysis_prompt])
            steps = {i: s for i, s in parsed.step_skills.items() if i < len(t.steps)}
            results.append(AnalysisResult(traj_id=t.traj_id, skill=parsed.skill, summary=parsed.summary,
                                          raw=g.text, error=parsed.error, prompt_tokens=len(p),
                                          completion_tokens=len(g.token_ids), step_skills=steps))
        return results

    def answer(self, messages: list[list[dict[str, str]]]) -> list[tuple[list[int], Generation]]:
        """The greedy answers to analysis prompts (chat messages), each with its prompt's token ids.
        A long prompt keeps its end (the legacy prompt's request)."""
        prompts = [encode_messages(self.tokenizer, m)[-self.max_prompt_tokens:] for m in messages]
        return list(zip(prompts, self.generate(prompts)))

    def generate(self, prompts: list[list[int]]) -> list[Generation]:
        """The greedy answers to analysis prompts given as token ids."""
        # The skill JSON ends with '"}' (with step skills: ']}'): stopping there saves generating to
        # max_new_tokens when the model does not emit EOS (a Stage-1 SFT target ends at the closing
        # brace). '"}' would cut a step_skills list after its first entry, hence the other stop.
        # Only the text is read: no per-step log-probs (SamplingParams.logprobs).
        params = SamplingParams(max_new_tokens=self.max_new_tokens, greedy=True,
                                stop=[']}'] if self.step_skills else ['"}'], logprobs=False)
        gens: list[Generation] = []
        for start in range(0, len(prompts), self.batch_size):
            with self._precision():
                gens += self.backend.generate(prompts[start:start + self.batch_size], params, seed=self.seed)
        return gens
