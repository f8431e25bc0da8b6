"""Generation backends: turn a batch of prompt token ids into sampled responses with log-probs.

The Hugging Face backend calls ``model.generate`` once per batch (left padding, a KV cache that fills
preallocated buffers: :mod:`seedrl.models.kvcache`) and records, for every sampled token, its log-prob
under the *untempered* policy (temperature 1, no top-p), which is what the PPO ratio needs. The vLLM backend (:mod:`seedrl.rollout.vllm_backend`,
``rollout.backend=vllm``) implements the same methods with an in-process engine whose weights the
trainer syncs after every update.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch

from seedrl.errors import SeedRLError, unknown_name
from seedrl.models.kvcache import cache_kwarg, full_attention_cache, preallocated_cache
from seedrl.models.precision import autocast
from seedrl.models.vision import is_vision_policy, vision_token_ids


@dataclass
class SamplingParams:
    max_new_tokens: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    greedy: bool = False
    stop: list[str] = field(default_factory=lambda: ["</action>"])
    #: record each token's log-prob (the PPO ratio reads them); False: ``Generation.logprobs`` is empty
    #: and the HF backend skips a full-vocabulary log_softmax per step (the analyzer reads only text)
    logprobs: bool = True


@dataclass
class Generation:
    token_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str  # "stop" (stop string), "eos", or "length"


class GenerationBackend(Protocol):
    def generate(self, prompts: list[list[int]], params: SamplingParams, seed: int,
                 images: list | None = None) -> list[Generation]:
        """Sample one response per prompt; deterministic for a given ``seed`` on CPU. ``images``: per
        prompt, its :class:`~seedrl.models.vision.ImageInputs` (placeholders already in the prompt's ids)
        or ``None``; ``None`` for all: a text batch."""

    def sync_weights(self, model) -> None:
        """Make the next ``generate`` use ``model``'s current weights (the trainer calls it after
        every optimizer update and after loading a checkpoint)."""

    def sleep(self) -> None:
        """The trainer is about to update: free what generation holds (vLLM's CUDA sleep mode)."""

    def close(self) -> None:
        """Release the engine (end of the run)."""


class _RecordLogprobs:
    """A logits processor placed *before* temperature/top-p: it sees the raw logits of step t and,
    at step t+1, reads which token was sampled, so it stores one [B, V] row at a time."""

    def __init__(self) -> None:
        self.prev: torch.Tensor | None = None
        self.logprobs: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.prev is not None:
            self.logprobs.append(self.prev.gather(-1, input_ids[:, -1:]).squeeze(-1))
        self.prev = torch.log_softmax(scores.float(), dim=-1)
        return scores

    def finish(self, last_tokens: torch.Tensor) -> torch.Tensor:
        """[B, T_new] log-probs once generation is over (``last_tokens``: the final column)."""
        if self.prev is not None:
            self.logprobs.append(self.prev.gather(-1, last_tokens[:, None]).squeeze(-1))
            self.prev = None
        return torch.stack(self.logprobs, dim=1) if self.logprobs else torch.zeros(len(last_tokens), 0)


class HFBackend:
    """``transformers`` generate on CPU or CUDA, sharing the policy's weights (no sync needed).

    ``bf16``: generate under bf16 autocast (the run's compute precision, ``model.precision``), so
    rollouts, analysis and evaluation compute as the trainer's scoring passes do. ``preallocate``:
    hand ``generate`` a cache that fills preallocated buffers (:mod:`seedrl.models.kvcache`; the same
    tokens, faster); False keeps transformers' own (``benchmarks/analysis_speed.py`` times both).
    ``shared_prefix`` (``rollout.shared_prefix``): the tokens every prompt of a call begins with run once,
    their KV cache copied into each row's (:meth:`_shared_head`); the rest of each prompt follows after
    its left pads. The same logits up to float rounding (the head's attention is the same; its matmuls
    run at batch size 1)."""

    def __init__(self, model, tokenizer, bf16: bool = False, preallocate: bool = True,
                 shared_prefix: bool = False) -> None:
        self.model = model
        self.bf16, self.preallocate, self.shared_prefix = bf16, preallocate, shared_prefix
        self.tokenizer = tokenizer
        self.pad_id = tokenizer.pad_token_id
        self.eos_ids = {tokenizer.eos_token_id}
        gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        if gen_eos is not None:
            self.eos_ids |= set(gen_eos if isinstance(gen_eos, list) else [gen_eos])
        self.eos_ids.discard(None)
        self._token_text: dict[int, str] = {}

    def sync_weights(self, model) -> None:
        self.model = model

    def sleep(self) -> None:
        pass

    def close(self) -> None:
        pass

    def _piece(self, tid: int) -> str:
        if tid not in self._token_text:
            self._token_text[tid] = self.tokenizer.decode([tid])
        return self._token_text[tid]

    def _cut(self, ids: list[int], stop: list[str]) -> tuple[int, str]:
        """Length of the real response: through the first EOS or the token completing a stop string."""
        text = ""
        for i, tid in enumerate(ids):
            if tid in self.eos_ids:
                return i + 1, "eos"
            text += self._piece(tid)
            if stop and any(s in text[-(len(s) + 16):] for s in stop):
                return i + 1, "stop"
        return len(ids), "length"

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], params: SamplingParams, seed: int,
                 images: list | None = None) -> list[Generation]:
        from transformers import (
            LogitsProcessorList,
            StoppingCriteria,
            StoppingCriteriaList,
            TemperatureLogitsWarper,
            TopPLogitsWarper,
        )

        if not prompts:
            return []
        device = next(self.model.parameters()).device
        head = self._shared_head(prompts) if self.shared_prefix and not is_vision_policy(self.model) else 0
        width = head + max(len(p) - head for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):  # [head, left pads, the rest of the prompt]
            input_ids[i, :head] = torch.tensor(p[:head], dtype=torch.long)
            attention[i, :head] = 1
            input_ids[i, width - len(p) + head:] = torch.tensor(p[head:], dtype=torch.long)
            attention[i, width - len(p) + head:] = 1
        recorder = _RecordLogprobs() if params.logprobs else None
        processors = [recorder] if recorder is not None else []
        if is_vision_policy(self.model):  # a vision token in a response would read as an image placeholder
            processors.append(_Suppress(vision_token_ids(self.model)))
        if not params.greedy:
            if params.temperature <= 0:
                raise SeedRLError("temperature must be > 0 when sampling; set greedy for argmax decoding")
            if params.temperature != 1.0:
                processors.append(TemperatureLogitsWarper(params.temperature))
            if params.top_p < 1.0:
                processors.append(TopPLogitsWarper(params.top_p))
        stop = list(params.stop)
        outer = self

        class _StopStrings(StoppingCriteria):  # per-row: done at EOS or once a stop string appears
            def __init__(self) -> None:
                self.text = [""] * len(prompts)

            def __call__(self, ids: torch.Tensor, scores, **kw) -> torch.Tensor:
                done = torch.zeros(ids.shape[0], dtype=torch.bool, device=ids.device)
                for r, tid in enumerate(ids[:, -1].tolist()):
                    self.text[r] = (self.text[r] + outer._piece(tid))[-64:]
                    done[r] = any(s in self.text[r] for s in stop)
                return done

        mm: dict = {}
        if images is not None and any(x is not None for x in images):
            from seedrl.models.vision import concat_images

            mm = concat_images(images, device)
            # which tokens are image placeholders: the model's multimodal positions read it
            mm["mm_token_type_ids"] = (input_ids == self.model.config.image_token_id).long().to(device)
        # a vision-language model keeps transformers' own cache (its multimodal positions carry a
        # per-row offset the preallocated cache was not written for)
        cache = (preallocated_cache(self.model, width + params.max_new_tokens)
                 if self.preallocate and not is_vision_policy(self.model) else None)
        was_training = self.model.training
        self.model.eval()
        devices = [device] if device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices), autocast(device, self.bf16):
            torch.manual_seed(seed)
            if head:
                cache = self._head_cache(prompts[0][:head], len(prompts), cache)
            # Explicit values override the model's generation_config (Qwen ships top_k=20,
            # temperature 0.7, repetition_penalty 1.05): any processor HF adds would run before the
            # recorder and bias the recorded log-probs. Temperature/top-p are ours, after it.
            sampling = {"temperature": 1.0, "top_p": 1.0, "top_k": 0} if not params.greedy else {}
            out = self.model.generate(
                input_ids=input_ids.to(device), attention_mask=attention.to(device),
                do_sample=not params.greedy, repetition_penalty=1.0, no_repeat_ngram_size=0, **sampling,
                max_new_tokens=params.max_new_tokens, logits_processor=LogitsProcessorList(processors),
                stopping_criteria=StoppingCriteriaList([_StopStrings()]) if stop else None,
                pad_token_id=self.pad_id, eos_token_id=sorted(self.eos_ids),
                return_dict_in_generate=True, **({cache_kwarg(self.model): cache} if cache is not None else {}),
                # each process generates on its own: HF would otherwise step an FSDP-sharded model's
                # processes in lockstep; seedrl gathers the full weights first (seedrl.train.fsdp)
                synced_gpus=False, **mm,
            )
        if was_training:
            self.model.train()
        new = out.sequences[:, width:].cpu()
        logps = recorder.finish(out.sequences[:, -1]).cpu() if recorder is not None else None
        results = []
        for r in range(len(prompts)):
            ids = new[r].tolist()
            n, reason = self._cut(ids, stop)
            ids = ids[:n]
            lp = logps[r, :n].tolist() if logps is not None else []
            results.append(Generation(ids, lp, self.tokenizer.decode(ids), reason))
        return results

    def _shared_head(self, prompts: list[list[int]]) -> int:
        """How many leading tokens every prompt shares and :meth:`generate` runs once: 0 for a single
        prompt, fewer than ``MIN_SHARED_PREFIX`` shared tokens, or a model whose cache has other than
        full-attention layers (a sliding window would not keep the head); each prompt keeps at least
        one token after it (the first forward of ``generate`` needs one)."""
        from seedrl.models.prefix import MIN_SHARED_PREFIX, common_prefix_len

        if len(prompts) < 2 or full_attention_cache(self.model) is None:
            return 0
        head = min(len(p) for p in prompts) - 1
        for p in prompts[1:]:
            head = min(head, common_prefix_len(prompts[0], p))
        return head if head >= MIN_SHARED_PREFIX else 0

    def _head_cache(self, head: list[int], rows: int, cache):
        """A cache holding the forward of ``head`` once (:func:`~seedrl.models.prefix.prefix_cache`), copied
        into each of ``rows`` rows (into ``cache`` when given: the preallocated one)."""
        from seedrl.models.prefix import prefix_cache

        kv, _ = prefix_cache(self.model, [head], self.pad_id, self.bf16)  # a full-attention cache: _shared_head
        cache = full_attention_cache(self.model) if cache is None else cache
        for layer, (k, v) in zip(cache.layers, kv):
            layer.update(k.expand(rows, -1, -1, -1).contiguous(), v.expand(rows, -1, -1, -1).contiguous())
        return cache


class _Suppress:
    """Never sample ``ids`` (a VL model's image/video placeholders and vision brackets): a response holds
    text only. Placed after the recorder, so the recorded log-probs are the policy's own, the ones scoring
    recomputes (the mass it takes away is the policy's on tokens that cannot be a response's)."""

    def __init__(self, ids: list[int]) -> None:
        self.ids = ids

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        scores = scores.clone()
        scores[:, [i for i in self.ids if i < scores.shape[-1]]] = float("-inf")
        return scores


BACKENDS = ("hf", "vllm")


def backend_options(rollout) -> dict:
    """The backend's keyword options from a run's ``rollout`` config section (its ``vllm_*`` keys; for hf,
    ``shared_prefix``: vLLM caches shared prefixes itself)."""
    if getattr(rollout, "backend", "hf") != "vllm":
        return {"shared_prefix": True} if getattr(rollout, "shared_prefix", False) else {}
    return {k[len("vllm_"):]: v for k, v in rollout.model_dump().items() if k.startswith("vllm_")}


def make_backend(name: str, model, tokenizer, bf16: bool = False, seed: int = 0, **options) -> GenerationBackend:
    """``options``: :func:`backend_options` (the vLLM engine's settings); ``seed``: the engine's."""
    if name == "hf":
        return HFBackend(model, tokenizer, bf16=bf16, **options)
    if name == "vllm":
        from seedrl.rollout.vllm_backend import VLLMBackend

        return VLLMBackend(model, tokenizer, Generation, bf16=bf16, seed=seed, **options)
    raise unknown_name("generation backend", name, BACKENDS)
