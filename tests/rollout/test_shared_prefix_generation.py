"""``rollout.shared_prefix`` on the hf backend: the instructions every prompt begins with run once and
their KV cache is copied into every row; tokens and recorded log-probs are the plain generate's."""

from __future__ import annotations

import pytest
import torch

from seedrl.models.kvcache import layer_class
from seedrl.rollout.backends import HFBackend, SamplingParams, backend_options, make_backend

pytestmark = pytest.mark.skipif(layer_class() is None, reason="transformers without per-layer caches")

HEAD = ("You are an expert agent playing sokoban. Your task is to push every box onto a target. "
        "Now it's your turn to take an action; answer within <action> </action> tags. Your observation is: ")


def _prompts(tok) -> list[list[int]]:
    rests = ["# P X O #", "# # X P O # # and a much longer board with more rows", "#", "# O X P #"]
    return [tok.encode(HEAD + r) for r in rests]


@pytest.mark.parametrize("preallocate", [True, False])
@pytest.mark.parametrize("greedy", [True, False])
def test_shared_head_generates_the_plain_tokens_and_logprobs(tiny_model, tiny_tokenizer, greedy, preallocate,
                                                              monkeypatch):
    torch.manual_seed(0)
    prompts = _prompts(tiny_tokenizer)
    params = SamplingParams(max_new_tokens=16, greedy=greedy, stop=["e"])
    plain = HFBackend(tiny_model, tiny_tokenizer, preallocate=preallocate).generate(prompts, params, seed=5)
    shared = HFBackend(tiny_model, tiny_tokenizer, preallocate=preallocate, shared_prefix=True)
    head = shared._shared_head(prompts)
    assert head >= 32 and all(p[:head] == prompts[0][:head] for p in prompts)
    widths: list[int] = []  # what generate is handed: the head once plus the longest rest, not the longest prompt
    generate = tiny_model.generate

    def spy(**kw):
        widths.append(kw["input_ids"].shape[1])
        assert torch.equal(kw["input_ids"][:, :head], torch.tensor([prompts[0][:head]] * len(prompts)))
        return generate(**kw)

    monkeypatch.setattr(tiny_model, "generate", spy)
    got = shared.generate(prompts, params, seed=5)
    assert widths == [max(len(p) for p in prompts)]
    for a, b in zip(plain, got):
        assert a.token_ids == b.token_ids and a.text == b.text and a.finish_reason == b.finish_reason
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5)


def test_the_head_is_run_once_not_once_a_row(tiny_model, tiny_tokenizer, monkeypatch):
    prompts = _prompts(tiny_tokenizer)
    shared = HFBackend(tiny_model, tiny_tokenizer, shared_prefix=True)
    head = shared._shared_head(prompts)
    seen: list[tuple[int, int]] = []
    forward = tiny_model.forward

    def spy(*a, **kw):
        seen.append(tuple(kw["input_ids"].shape))
        return forward(*a, **kw)

    monkeypatch.setattr(tiny_model, "forward", spy)
    shared.generate(prompts, SamplingParams(max_new_tokens=2, greedy=True), seed=0)
    width = max(len(p) for p in prompts)
    assert seen[0] == (1, head)  # the head, once
    assert seen[1] == (len(prompts), width - head)  # then only the rests, on top of its cache


def test_no_shared_head_is_the_plain_path_bit_for_bit(tiny_model, tiny_tokenizer):
    prompts = [tiny_tokenizer.encode(t) for t in ("push the box left", "go north", "take the key")]
    shared = HFBackend(tiny_model, tiny_tokenizer, shared_prefix=True)
    assert shared._shared_head(prompts) == 0 and shared._shared_head(_prompts(tiny_tokenizer)[:1]) == 0
    params = SamplingParams(max_new_tokens=12, greedy=False)
    a = HFBackend(tiny_model, tiny_tokenizer).generate(prompts, params, seed=2)
    b = shared.generate(prompts, params, seed=2)
    assert [g.token_ids for g in a] == [g.token_ids for g in b] and [g.logprobs for g in a] == [g.logprobs for g in b]


def test_rollout_shared_prefix_reaches_the_hf_backend(tiny_model, tiny_tokenizer):
    from seedrl.config import RolloutConfig

    assert backend_options(RolloutConfig()) == {}
    opts = backend_options(RolloutConfig(shared_prefix=True))
    assert make_backend("hf", tiny_model, tiny_tokenizer, **opts).shared_prefix
    assert not make_backend("hf", tiny_model, tiny_tokenizer, **backend_options(RolloutConfig())).shared_prefix


def test_a_sliding_window_model_is_not_shared(tiny_tokenizer):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(vocab_size=len(tiny_tokenizer) + 64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=2, use_sliding_window=True, sliding_window=8,
                      max_window_layers=0, layer_types=["sliding_attention", "sliding_attention"])
    model = Qwen2ForCausalLM(cfg).eval()
    shared = HFBackend(model, tiny_tokenizer, shared_prefix=True)
    assert shared._shared_head(_prompts(tiny_tokenizer)) == 0
