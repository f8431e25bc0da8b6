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


def test_calls_by_size_take_prompts_longest_first_within_the_budget():
    from seedrl.skills.analyzers.self_analyzer import plan_calls

    lengths = [5, 30, 12, 30, 7, 20, 1]
    assert plan_calls(lengths, 3, None, 10) == [[0, 1, 2], [3, 4, 5], [6]]  # no budget: in order
    calls = plan_calls(lengths, 8, 100, 10)
    # longest first, ties in order; a call's rows x (its longest prompt + 10) <= 100
    assert [i for c in calls for i in c] == [1, 3, 5, 2, 4, 0, 6]
    assert calls == [[1, 3], [5, 2, 4], [0, 6]]
    assert all(len(c) * (lengths[c[0]] + 10) <= 100 and lengths[c[0]] == max(lengths[i] for i in c) for c in calls)
    assert plan_calls(lengths, 2, 10_000, 10) == [[1, 3], [5, 2], [4, 0], [6]]  # batch_size still caps the rows
    assert plan_calls([500, 3], 4, 100, 10) == [[0], [1]]  # a prompt alone over the budget is a call of its own
    assert plan_calls([], 4, 100, 10) == []


class _Calls:
    """A backend whose answer names the prompt it answers (its length), recording each call's rows."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer, self.calls, self.model = tokenizer, [], None

    def generate(self, prompts, params, seed):
        from seedrl.rollout.backends import Generation

        self.calls.append([len(p) for p in prompts])
        text = '{"episode_summary": "it went", "episode_skill": "prompt of %d tokens: look in drawer one first"}'
        return [Generation([1], [], text % len(p), "stop") for p in prompts]


def test_the_analyzer_answers_each_trajectory_in_order_whatever_its_calls(tiny_tokenizer):
    trajs = [_traj(i, n) for i, n in enumerate([1, 4, 2, 3, 1, 6])]
    plain, by_size = _Calls(tiny_tokenizer), _Calls(tiny_tokenizer)
    a = SelfAnalyzer(plain, tiny_tokenizer, batch_size=4).analyze(trajs)
    lengths = [r.prompt_tokens for r in a]
    budget = 3 * (max(lengths) + 256)
    b = SelfAnalyzer(by_size, tiny_tokenizer, batch_size=4, batch_tokens=budget).analyze(trajs)
    assert plain.calls == [lengths[:4], lengths[4:]]
    assert by_size.calls[0] == sorted(lengths, reverse=True)[:len(by_size.calls[0])] and len(by_size.calls) >= 2
    assert all(len(c) * (c[0] + 256) <= budget for c in by_size.calls)
    assert [dataclasses.asdict(r) for r in b] == [dataclasses.asdict(r) for r in a]
    assert [r.skill for r in b] == [f"prompt of {n} tokens: look in drawer one first" for n in lengths]


def test_the_calls_budget_reaches_the_analyzer_from_the_config():
    from seedrl.config import TrainConfig, load_config
    from seedrl.methods.sources import make_analyzer

    for extra, want in (([], None), (["skills.batch_tokens=24000"], 24000)):
        cfg = load_config(TrainConfig, None, ["algo.name=seed", "skills.analyzer=self", *extra])
        assert make_analyzer(cfg, None, None).batch_tokens == want
