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

``seed_visual`` (a vision-language policy on an env with images): the policy reads each step's image
where the prompt marks it, through its processor (:func:`seedrl.models.vision.encode_chat`); a prompt
over the limit loses its oldest steps with their images, never a part of one.
"""

from __future__ import annotations

from collections.abc import Sequence

from seedrl.models.precision import autocast
from seedrl.rollout.backends import Generation, GenerationBackend, SamplingParams
from seedrl.rollout.runner import encode_messages
from seedrl.rollout.types import Trajectory
from seedrl.skills.analyzers.base import AnalysisResult
from seedrl.skills.parsing import parse_skill
from seedrl.skills.prompts import IMAGE_MARK, STEP_BASE, analysis_images, analysis_messages


def _device_type(backend: GenerationBackend) -> str:
    """The device type of the backend's model ("cpu" when it has none, e.g. a remote server)."""
    model = getattr(backend, "model", None)
    try:
        return next(model.parameters()).device.type
    except (AttributeError, StopIteration, TypeError):
        return "cpu"


def plan_calls(lengths: Sequence[int], batch_size: int, batch_tokens: int | None,
               max_new_tokens: int) -> list[list[int]]:
    """The analyzer's ``generate`` calls for prompts of ``lengths`` tokens, each a list of prompt indices.

    ``batch_tokens`` None: ``batch_size`` prompts a call, in trajectory order. Otherwise the prompts are
    taken longest first and a call grows while its rows x (its longest prompt + ``max_new_tokens``), the
    positions its left-padded batch computes, stays within ``batch_tokens`` (and at most ``batch_size``
    rows; a prompt alone over the budget is a call of its own): prompts of like length share a call, so
    little is padding, and a call stops decoding at its own longest answer."""
    n = len(lengths)
    if batch_tokens is None:
        return [list(range(i, min(i + batch_size, n))) for i in range(0, n, batch_size)]
    calls: list[list[int]] = []
    for i in sorted(range(n), key=lambda j: (-lengths[j], j)):
        call = calls[-1] if calls else []
        width = lengths[call[0]] + max_new_tokens if call else 0  # the call's first prompt is its longest
        if not call or len(call) == batch_size or (len(call) + 1) * width > batch_tokens:
            calls.append([i])
        else:
            call.append(i)
    return calls


class SelfAnalyzer:
    name = "self"

    def __init__(self, backend: GenerationBackend, tokenizer, max_new_tokens: int = 256,
                 max_prompt_tokens: int = 4096, max_obs_chars: int | None = None, min_words: int = 5,
                 batch_size: int = 32, seed: int = 0, bf16: bool = False, step_skills: bool = False,
                 max_step_skills: int = 5, analysis_prompt: str = "seed", batch_tokens: int | None = None) -> None:
        self.backend, self.tokenizer = backend, tokenizer
        self.max_new_tokens, self.max_prompt_tokens = max_new_tokens, max_prompt_tokens
        self.max_obs_chars, self.min_words, self.batch_size, self.seed = max_obs_chars, min_words, batch_size, seed
        self.batch_tokens = batch_tokens
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

    def _encode(self, t: Trajectory, first_step: int = 0):
        """(ids, image inputs or None) of the analysis prompt of ``t`` from ``first_step`` on."""
        messages = self._messages(t, first_step)
        images = analysis_images(t, first_step) if self.analysis_prompt == "seed_visual" else []
        if not images:
            return encode_messages(self.tokenizer, messages), None
        from seedrl.models.vision import encode_text_with_images, require_processor, with_image_marks

        proc = require_processor(self.tokenizer)
        text = proc.apply_chat_template(with_image_marks(messages, IMAGE_MARK), tokenize=False,
                                        add_generation_prompt=True)
        return encode_text_with_images(self.tokenizer, text, images)

    def prompt_ids(self, t: Trajectory) -> list[int]:
        """The analysis prompt of ``t`` as token ids, within ``max_prompt_tokens`` (module docstring)."""
        return self.prompt_inputs(t)[0]

    def prompt_inputs(self, t: Trajectory):
        """The analysis prompt of ``t`` as (token ids, image inputs or None), within ``max_prompt_tokens``
        (module docstring); a prompt with images is never cut inside (only whole steps are left out)."""
        limit = self.max_prompt_tokens
        ids, mm = self._encode(t)
        if len(ids) <= limit or self.analysis_prompt == "legacy":
            return (ids[-limit:], None) if mm is None else (ids, mm)
        fits: dict[int, tuple | None] = {}

        def fit(k: int):
            if k not in fits:
                p = self._encode(t, first_step=k)
                fits[k] = p if len(p[0]) <= limit else None
            return fits[k]

        whole = (ids[-limit:], None) if mm is None else (ids, mm)
        lo, hi = 1, len(t.steps)
        if not t.steps or fit(hi) is None:
            return whole  # even the instructions alone are over the limit
        while lo < hi:  # the fewest left-out steps that fit
            mid = (lo + hi) // 2
            if fit(mid) is not None:
                hi = mid
            else:
                lo = mid + 1
        return fit(lo) or fit(len(t.steps)) or whole

    def analyze(self, trajectories: list[Trajectory]) -> list[AnalysisResult]:
        keep_steps = self.max_step_skills if self.step_skills else 0
        inputs = [self.prompt_inputs(t) for t in trajectories]
        prompts = [p for p, _ in inputs]
        images = [mm for _, mm in inputs]
        results: list[AnalysisResult] = []
        for t, p, g in zip(trajectories, prompts, self.generate(prompts, images)):
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

    def generate(self, prompts: list[list[int]], images: list | None = None) -> list[Generation]:
        """The greedy answers to analysis prompts given as token ids (``images``: per prompt, its image
        inputs or ``None``)."""
        # The skill JSON ends with '"}' (with step skills: ']}'): stopping there saves generating to
        # max_new_tokens when the model does not emit EOS (a Stage-1 SFT target ends at the closing
        # brace). '"}' would cut a step_skills list after its first entry, hence the other stop.
        # Only the text is read: no per-step log-probs (SamplingParams.logprobs).
        params = SamplingParams(max_new_tokens=self.max_new_tokens, greedy=True,
                                stop=[']}'] if self.step_skills else ['"}'], logprobs=False)
        gens: list[Generation | None] = [None] * len(prompts)
        for call in plan_calls([len(p) for p in prompts], self.batch_size, self.batch_tokens, self.max_new_tokens):
            batch = [prompts[i] for i in call]
            with self._precision():
                if images is not None and any(images[i] is not None for i in call):
                    out = self.backend.generate(batch, params, seed=self.seed, images=[images[i] for i in call])
                else:
                    out = self.backend.generate(batch, params, seed=self.seed)
            for i, g in zip(call, out):
                gens[i] = g
        return gens
