"""SEED's self-evolving analyzer: the current rollout policy reads its own trajectories.

It uses the same generation backend and the same weights that produced the trajectories (before
the update), greedy, one attempt: a parse failure or an empty skill means no distillation signal
for that trajectory.

With ``bf16`` (the run's compute precision, ``model.precision``) the generation runs under bf16
autocast on the model's device: only the skill *text* is used (never the generator's log-probs), so
the lower precision cannot bias a gradient, and where bf16 is native it is about twice as fast for
the long analysis answers.
"""

from __future__ import annotations

from seedrl.models.precision import autocast
from seedrl.rollout.backends import Generation, GenerationBackend, SamplingParams
from seedrl.rollout.runner import encode_messages
from seedrl.rollout.types import Trajectory
from seedrl.skills.analyzers.base import AnalysisResult
from seedrl.skills.parsing import parse_skill
from seedrl.skills.prompts import analysis_messages


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
                 max_prompt_tokens: int = 4096, max_obs_chars: int | None = 2000, min_words: int = 5,
                 batch_size: int = 32, seed: int = 0, bf16: bool = False, step_skills: bool = False,
                 max_step_skills: int = 5) -> None:
        self.backend, self.tokenizer = backend, tokenizer
        self.max_new_tokens, self.max_prompt_tokens = max_new_tokens, max_prompt_tokens
        self.max_obs_chars, self.min_words, self.batch_size, self.seed = max_obs_chars, min_words, batch_size, seed
        self.bf16 = bf16
        self.step_skills, self.max_step_skills = step_skills, max_step_skills

    def _precision(self):
        return autocast(_device_type(self.backend), self.bf16)

    def analyze(self, trajectories: list[Trajectory]) -> list[AnalysisResult]:
        msgs = [analysis_messages(t, self.max_obs_chars, self.step_skills, self.max_step_skills) for t in trajectories]
        keep_steps = self.max_step_skills if self.step_skills else 0
        results: list[AnalysisResult] = []
        for t, (p, g) in zip(trajectories, self.answer(msgs)):
            parsed = parse_skill(g.text, self.min_words, max_step_skills=keep_steps)
            steps = {i: s for i, s in parsed.step_skills.items() if i < len(t.steps)}
            results.append(AnalysisResult(traj_id=t.traj_id, skill=parsed.skill, summary=parsed.summary,
                                          raw=g.text, error=parsed.error, prompt_tokens=len(p),
                                          completion_tokens=len(g.token_ids), step_skills=steps))
        return results

    def answer(self, messages: list[list[dict[str, str]]]) -> list[tuple[list[int], Generation]]:
        """The greedy answers to analysis prompts (chat messages), each with its prompt's token ids."""
        # a long prompt keeps its end: the outcome and the request
        prompts = [encode_messages(self.tokenizer, m)[-self.max_prompt_tokens:] for m in messages]
        # The skill JSON ends with '"}' (with step skills: ']}'): stopping there saves generating to
        # max_new_tokens when the model does not emit EOS (a Stage-1 SFT target ends at the closing
        # brace). '"}' would cut a step_skills list after its first entry, hence the other stop.
        params = SamplingParams(max_new_tokens=self.max_new_tokens, greedy=True,
                                stop=[']}'] if self.step_skills else ['"}'])
        gens: list[Generation] = []
        for start in range(0, len(prompts), self.batch_size):
            with self._precision():
                gens += self.backend.generate(prompts[start:start + self.batch_size], params, seed=self.seed)
        return list(zip(prompts, gens))
