"""The self-analyzer at generation speed: no log-probs asked, a preallocated KV cache, the same skills.

"Before" is the generation the analyzer had until it went faster: transformers' own KV cache and a
log-prob recorded for every token (``benchmarks/analysis_speed.py`` times the two)."""

from __future__ import annotations

import dataclasses

import pytest

from seedrl.rollout.backends import HFBackend
from seedrl.rollout.types import StepSample, Trajectory
from seedrl.skills.analyzers.self_analyzer import SelfAnalyzer


class _Before:
    """The pre-change generation path, recording which params the analyzer asked for."""

    def __init__(self, backend: HFBackend) -> None:
        self.inner, self.model, self.asked = backend, backend.model, []

    def generate(self, prompts, params, seed):
        self.asked.append(params)
        return self.inner.generate(prompts, dataclasses.replace(params, logprobs=True), seed)


def _traj(traj_id: int, n_steps: int) -> Trajectory:
    steps = [StepSample(prompt_ids=[1], response_ids=[2], logprobs=[-0.1], traj_id=traj_id, group_id=0, step=i,
                        reward=0.0, action_valid=True, observation=f"You see a drawer {i} and a shelf {traj_id}.",
                        response_text=f"<action>open drawer {i}</action>", action=f"open drawer {i}")
             for i in range(n_steps)]
    return Trajectory(traj_id=traj_id, group_id=0, task_id=f"t{traj_id}", task_description="find the key",
                      steps=steps, won=traj_id % 2 == 0)


@pytest.mark.parametrize("bf16", [False, True])
def test_self_analysis_is_unchanged_by_the_speedups(tiny_model, tiny_tokenizer, bf16):
    trajs = [_traj(i, n) for i, n in enumerate([1, 4, 2, 3, 1])]  # prompts of different lengths, two batches
    kw = dict(max_new_tokens=24, batch_size=3, seed=1, bf16=bf16)
    before = _Before(HFBackend(tiny_model, tiny_tokenizer, bf16=bf16, preallocate=False))
    old = SelfAnalyzer(before, tiny_tokenizer, **kw).analyze(trajs)
    new = SelfAnalyzer(HFBackend(tiny_model, tiny_tokenizer, bf16=bf16), tiny_tokenizer, **kw).analyze(trajs)
    assert before.asked and all(p.logprobs is False and p.greedy for p in before.asked)
    assert len({r.prompt_tokens for r in new}) > 1
    assert [dataclasses.asdict(r) for r in new] == [dataclasses.asdict(r) for r in old]
    assert all(r.completion_tokens > 0 for r in new)
