"""SEED's self-evolving analyzer: the current rollout policy reads its own trajectories.

It uses the same generation backend and the same weights that produced the trajectories (before
the update), greedy, one attempt: a parse failure or an empty skill means no distillation signal
for that trajectory.
"""

from __future__ import annotations

from seedrl.rollout.backends import GenerationBackend, SamplingParams
from seedrl.rollout.runner import encode_messages
from seedrl.rollout.types import Trajectory
from seedrl.skills.analyzers.base import AnalysisResult
from seedrl.skills.parsing import parse_skill
from seedrl.skills.prompts import analysis_messages


class SelfAnalyzer:
    name = "self"

    def __init__(self, backend: GenerationBackend, tokenizer, max_new_tokens: int = 256,
                 max_prompt_tokens: int = 4096, max_obs_chars: int | None = 2000, min_words: int = 5,
                 batch_size: int = 32, seed: int = 0) -> None:
        self.backend, self.tokenizer = backend, tokenizer
        self.max_new_tokens, self.max_prompt_tokens = max_new_tokens, max_prompt_tokens
        self.max_obs_chars, self.min_words, self.batch_size, self.seed = max_obs_chars, min_words, batch_size, seed

    def analyze(self, trajectories: list[Trajectory]) -> list[AnalysisResult]:
        prompts = []
        for t in trajectories:
            ids = encode_messages(self.tokenizer, analysis_messages(t, self.max_obs_chars))
            prompts.append(ids[-self.max_prompt_tokens:])  # keep the end: the outcome and the request
        # The skill JSON ends with '"}': stopping there saves generating to max_new_tokens when the
        # model does not emit EOS (a Stage-1 SFT target ends at the closing brace).
        params = SamplingParams(max_new_tokens=self.max_new_tokens, greedy=True, stop=['"}'])
        results: list[AnalysisResult] = []
        for start in range(0, len(prompts), self.batch_size):
            gens = self.backend.generate(prompts[start:start + self.batch_size], params, seed=self.seed)
            for t, p, g in zip(trajectories[start:start + self.batch_size], prompts[start:], gens):
                parsed = parse_skill(g.text, self.min_words)
                results.append(AnalysisResult(traj_id=t.traj_id, skill=parsed.skill, summary=parsed.summary,
                                              raw=g.text, error=parsed.error, prompt_tokens=len(p),
                                              completion_tokens=len(g.token_ids)))
        return results
