"""The preallocated KV cache (seedrl.models.kvcache) and log-prob-free generation: faster, same tokens."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from seedrl.models.kvcache import layer_class, preallocated_cache
from seedrl.rollout.backends import HFBackend, SamplingParams

pytestmark = pytest.mark.skipif(layer_class() is None, reason="transformers without per-layer caches")


def _prompts(tok) -> list[list[int]]:
    texts = ["push the box left", "a much longer prompt about a room, a sink, a mug and a kettle on the stove",
             "go", "take the key from the drawer and open the door"]
    return [tok.encode(t) for t in texts]


def test_layer_returns_what_cat_returns_and_writes_in_place():
    torch.manual_seed(0)
    layer = layer_class()(capacity=12)
    steps = [torch.randn(3, 2, 5, 4)] + [torch.randn(3, 2, 1, 4) for _ in range(6)]
    keys = vals = None
    for i, k in enumerate(steps):
        v = k * 2
        keys = k if keys is None else torch.cat([keys, k], dim=-2)
        vals = v if vals is None else torch.cat([vals, v], dim=-2)
        got_k, got_v = layer.update(k, v)
        assert torch.equal(got_k, keys) and torch.equal(got_v, vals)
        if i == 0:
            start = got_k.data_ptr()
        assert got_k.data_ptr() == start, "a step copied the cache instead of writing into its buffer"
    assert layer.get_seq_length() == 11
    layer.batch_select_indices(torch.tensor([2, 0]))  # a copy: the next update moves to new buffers
    k = torch.randn(2, 2, 1, 4)
    got_k, _ = layer.update(k, k)
    assert torch.equal(got_k, torch.cat([keys[[2, 0]], k], dim=-2))
    more = [torch.randn(2, 2, 1, 4) for _ in range(3)]  # past the capacity of 12: grows once, still right
    for k in more:
        got_k, _ = layer.update(k, k)
    assert torch.equal(got_k[:, :, -3:], torch.cat(more, dim=-2)) and got_k.shape[-2] == 15


def test_preallocated_cache_fits_the_model(tiny_model):
    cache = preallocated_cache(tiny_model, 40)
    assert len(cache.layers) == tiny_model.config.num_hidden_layers
    assert all(type(x) is layer_class() and x.capacity == 40 for x in cache.layers)


@pytest.mark.parametrize("greedy", [True, False])
def test_generation_is_bit_identical_with_the_preallocated_cache(tiny_model, tiny_tokenizer, greedy, monkeypatch):
    prompts = _prompts(tiny_tokenizer)
    # a common one-character stop: rows end at different steps, the batch decodes on
    params = SamplingParams(max_new_tokens=24, greedy=greedy, stop=["e"])
    old = HFBackend(tiny_model, tiny_tokenizer, preallocate=False).generate(prompts, params, seed=3)
    caches = []
    generate = tiny_model.generate

    def spy(*args, **kw):
        caches.append(kw.get("cache", kw.get("past_key_values")))
        return generate(*args, **kw)

    monkeypatch.setattr(tiny_model, "generate", spy)
    new = HFBackend(tiny_model, tiny_tokenizer).generate(prompts, params, seed=3)
    assert caches and caches[0] is not None and type(caches[0].layers[0]) is layer_class()
    assert caches[0].layers[0].capacity == max(map(len, prompts)) + 24
    assert len({len(g.token_ids) for g in old}) > 1  # rows finished at different steps
    assert [dataclasses.asdict(g) for g in new] == [dataclasses.asdict(g) for g in old]


def test_logprobs_off_gives_the_same_tokens_and_no_logprobs(tiny_model, tiny_tokenizer):
    prompts = _prompts(tiny_tokenizer)
    params = SamplingParams(max_new_tokens=16, greedy=True, stop=["e"])
    backend = HFBackend(tiny_model, tiny_tokenizer)
    with_lp = backend.generate(prompts, params, seed=0)
    without = backend.generate(prompts, dataclasses.replace(params, logprobs=False), seed=0)
    assert all(len(g.logprobs) == len(g.token_ids) > 0 for g in with_lp)
    assert [g.logprobs for g in without] == [[]] * len(prompts)
    assert [(g.token_ids, g.text, g.finish_reason) for g in without] == \
        [(g.token_ids, g.text, g.finish_reason) for g in with_lp]
