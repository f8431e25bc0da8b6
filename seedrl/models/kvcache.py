"""A KV cache for ``model.generate`` that does not copy itself at every step.

transformers' default ``DynamicCache`` grows each layer with ``torch.cat([keys, new], dim=-2)``: every
decoding step copies the whole cache, a cost quadratic in the length. With ~700-token analysis
prompts on a CPU that copy was a third of the self-analyzer's time. :func:`preallocated_cache` hands
``generate`` a ``DynamicCache`` whose full-attention layers write each step into buffers allocated
once and return views of their filled part: attention reads the same keys and values, of the same
length, so greedy text and recorded log-probs are bit-identical (``tests/rollout/test_kvcache.py``).

Where it does not apply (a transformers without per-layer caches, sliding-window or linear-attention
layers) it returns None and ``generate`` keeps its own cache.
"""

from __future__ import annotations

import functools
import inspect

import torch


def cache_kwarg(model) -> str:
    """The name under which this transformers version's forward takes a KV cache (``cache`` from 5.x)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    params = inspect.signature(type(base).forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _buffer(like: torch.Tensor, old: torch.Tensor | None, kept: int, capacity: int) -> torch.Tensor:
    """A ``[B, H, capacity, D]`` buffer shaped like ``like`` holding ``old``'s first ``kept`` positions."""
    b, h, _, d = like.shape
    buf = like.new_empty(b, h, capacity, d)
    if kept:
        buf[:, :, :kept] = old[:, :, :kept]
    return buf


@functools.cache
def layer_class():
    """``PreallocatedLayer``, a ``DynamicLayer`` subclass (built on first use: transformers is imported
    lazily), or None for a transformers without per-layer caches."""
    try:
        from transformers.cache_utils import DynamicLayer
    except ImportError:  # transformers without per-layer caches (< 4.56)
        return None

    class PreallocatedLayer(DynamicLayer):
        """A full-attention layer that writes into buffers of ``capacity`` positions and returns views
        of the filled part (the tensors a ``DynamicLayer`` returns, without its per-step copy). A
        layer whose keys were replaced (batch selection, a different batch) or that outgrows its
        buffers copies once into new ones."""

        def __init__(self, capacity: int) -> None:
            super().__init__()
            self.capacity = capacity
            self._k: torch.Tensor | None = None
            self._v: torch.Tensor | None = None

        def _fits(self, new: torch.Tensor, n: int, m: int) -> bool:
            buf = self._k
            return (buf is not None and buf.shape[-2] >= m and buf.dtype == new.dtype and buf.device == new.device
                    and (buf.shape[0], buf.shape[1], buf.shape[3]) == (new.shape[0], new.shape[1], new.shape[3])
                    and (n == 0 or self.keys.data_ptr() == buf.data_ptr()))

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            n = self.get_seq_length()
            m = n + key_states.shape[-2]
            if not self._fits(key_states, n, m):
                capacity = max(m, self.capacity)
                self._k = _buffer(key_states, self.keys, n, capacity)
                self._v = _buffer(value_states, self.values, n, capacity)
            self._k[:, :, n:m] = key_states
            self._v[:, :, n:m] = value_states
            self.keys, self.values = self._k[:, :, :m], self._v[:, :, :m]
            return self.keys, self.values

    return PreallocatedLayer


def full_attention_cache(model):
    """transformers' ``DynamicCache`` for ``model`` when every layer of it is a plain full-attention
    ``DynamicLayer`` (what :func:`preallocated_cache` and a shared prompt head rely on: every position
    is kept); None for sliding-window or linear-attention layers or a transformers without per-layer caches."""
    if layer_class() is None:
        return None
    from transformers.cache_utils import DynamicCache, DynamicLayer

    try:
        cache = DynamicCache(config=model.config)
    except (TypeError, ValueError, AttributeError):
        return None
    if not getattr(cache, "layers", None) or any(type(x) is not DynamicLayer for x in cache.layers):
        return None
    return cache


def preallocated_cache(model, capacity: int):
    """A ``DynamicCache`` for ``model`` whose layers hold ``capacity`` positions (prompt width plus
    ``max_new_tokens``) without copying as they fill; None where it does not apply (module docstring)."""
    cache = full_attention_cache(model)
    if cache is not None:
        cache.layers = [layer_class()(capacity) for _ in cache.layers]
    return cache
