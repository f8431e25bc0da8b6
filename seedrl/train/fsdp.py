"""Fully sharded data parallel (FSDP2: torch's ``fully_shard``) for the RL loop.

Chosen in the accelerate config (``accelerate launch --use_fsdp --fsdp_version 2 ...`` or
``distributed_type: FSDP`` with ``fsdp_version: 2``), read from the variables ``accelerate launch``
sets (:func:`requested_plan`). Each decoder layer (the model's ``_no_split_modules``, or
``fsdp_transformer_layer_cls_to_wrap``) and the root are sharded over the ranks: parameters,
gradients and AdamW states each hold 1/N of the model per rank.

How the loop runs on sharded weights (see :class:`seedrl.train.trainer.Trainer`):

- **Free-running forwards** (rollout generation, old/reference/teacher log-probs, self-analysis,
  evaluation) happen inside :func:`gathered`: every rank gathers the full parameters once
  (collective), then each rank runs as many forwards as its own trajectories need, with no
  collective per forward; leaving the block frees the gathered copies. This is how verl and TRL
  generate from FSDP weights; the price is one full (unsharded) copy of the weights during those
  stages, never the gradients or optimizer states.
- **The update** runs sharded: each forward gathers a layer, each backward reduce-scatters its
  gradients, so every rank must issue the same number of forward/backward passes. Ranks hold
  different numbers of micro-batches of a mini-batch; the short ones run zero-weighted passes
  (:func:`seedrl.train.distributed.dummy_loss`, exactly zero gradient) so the collectives pair up. Gradients are
  *summed* over ranks (divide factor 1, sum reduction), because every loss term is already divided
  by the mini-batch's global token count: the update is the one-process update of the global batch.
- **Checkpoints** are written in the one-process format (full weights as a plain HF folder; the
  optimizer state keyed by parameter index, :func:`plain_optimizer_state`), so a checkpoint of a
  sharded run resumes sharded or not, and ``seedrl eval`` loads it as any other.

Not supported (refused in one line by :func:`requested_plan`): FSDP1 (``fsdp_version 1``), CPU
offload, size-based wrapping, FSDP1's sharding-strategy names, and LoRA adapters with
FSDP (their merge for saving needs the unsharded base; LoRA's trainable state is small enough for
plain data parallelism).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from seedrl.errors import SeedRLError

log = logging.getLogger(__name__)

_TRUE = ("1", "true", "yes")
#: accelerate's auto-wrap policies and what seedrl does with them
WRAP_POLICIES = ("TRANSFORMER_BASED_WRAP", "NO_WRAP")


@dataclass(frozen=True)
class FsdpPlan:
    """How to shard the policy: ``reshard_after_forward`` (FSDP2's knob: full vs grad-op sharding),
    ``layer_classes`` to shard one by one (empty: the model's ``_no_split_modules``; ``wrap_layers``
    False: only the root), and whether to checkpoint activations."""

    reshard_after_forward: bool = True
    wrap_layers: bool = True
    layer_classes: tuple[str, ...] = ()
    activation_checkpointing: bool = False


def requested_plan(env: dict[str, str] | None = None) -> FsdpPlan | None:
    """The FSDP plan the launcher asks for (``ACCELERATE_USE_FSDP``), None when it asks for none;
    a one-line SeedRLError for an option seedrl does not run as asked."""
    env = os.environ if env is None else env
    if env.get("ACCELERATE_USE_FSDP", "").lower() not in _TRUE:
        return None
    version = env.get("FSDP_VERSION", "1").strip()
    if version != "2":
        raise SeedRLError(f"the launcher asks for FSDP version {version}; seedrl shards with FSDP2 (torch "
                          f"fully_shard): relaunch with `--fsdp_version 2` (accelerate config: fsdp_version: 2)")
    if env.get("FSDP_OFFLOAD_PARAMS", "false").lower() in _TRUE:
        raise SeedRLError("FSDP_OFFLOAD_PARAMS=true (CPU offload) is not supported by seedrl train; "
                          "relaunch with --fsdp_offload_params false")
    wrap = (env.get("FSDP_AUTO_WRAP_POLICY") or "TRANSFORMER_BASED_WRAP").strip().upper()
    if wrap not in WRAP_POLICIES:
        raise SeedRLError(f"FSDP_AUTO_WRAP_POLICY={wrap} is not supported; valid: {', '.join(WRAP_POLICIES)}")
    reshard = (env.get("FSDP_RESHARD_AFTER_FORWARD") or "true").strip().lower()
    if reshard not in ("true", "false"):  # FSDP2's knob is a boolean (FSDP1's strategy names are refused)
        raise SeedRLError(f"FSDP_RESHARD_AFTER_FORWARD={reshard} is not supported; valid: true, false")
    classes = tuple(c.strip() for c in env.get("FSDP_TRANSFORMER_CLS_TO_WRAP", "").split(",") if c.strip())
    return FsdpPlan(reshard_after_forward=reshard == "true", wrap_layers=wrap != "NO_WRAP",
                    layer_classes=classes,
                    activation_checkpointing=env.get("FSDP_ACTIVATION_CHECKPOINTING", "").lower() in _TRUE)


def shard(model: torch.nn.Module, plan: FsdpPlan) -> list[str]:
    """Shard ``model`` in place: each module of the plan's layer classes, then the root. Gradients
    are summed over the ranks (not averaged). Returns the names of the sharded layer classes."""
    from torch.distributed.fsdp import FSDPModule, fully_shard

    if hasattr(model, "peft_config"):
        raise SeedRLError("model.lora with FSDP is not supported: LoRA's trainable state is small, so train "
                          "it data-parallel (accelerate launch --multi_gpu), or turn LoRA off to shard the model")
    wrapped: list[str] = []
    if plan.wrap_layers:
        wanted = set(plan.layer_classes or getattr(model, "_no_split_modules", None) or ())
        found = {type(m).__name__ for m in model.modules()}
        missing = sorted(wanted - found)
        if plan.layer_classes and missing:
            layers = sorted(n for n in found if "Layer" in n or "Block" in n) or sorted(found)
            raise SeedRLError(f"FSDP_TRANSFORMER_CLS_TO_WRAP names {', '.join(missing)}, which this model does not "
                              f"have; its layer classes: {', '.join(layers)}")
        for m in list(model.modules()):
            if type(m).__name__ in wanted and m is not model:
                fully_shard(m, reshard_after_forward=plan.reshard_after_forward)
        wrapped = sorted(wanted & found)
    fully_shard(model, reshard_after_forward=plan.reshard_after_forward)
    for m in model.modules():
        if isinstance(m, FSDPModule):
            # every loss term is divided by the global token count: the ranks' gradients add up
            # (a sum reduction: gloo has no pre-multiplied sum, and NCCL's costs the same)
            m.set_gradient_divide_factor(1.0)
            m.set_force_sum_reduction_for_comms(True)
    model._seedrl_reshard_after_forward = plan.reshard_after_forward  # restored by gathered()
    return wrapped


def is_sharded(model: torch.nn.Module | None) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def _fsdp_modules(model: torch.nn.Module) -> list[Any]:
    from torch.distributed.fsdp import FSDPModule

    return [m for m in model.modules() if isinstance(m, FSDPModule)]


@contextmanager
def gathered(*models: torch.nn.Module | None) -> Iterator[None]:
    """Full parameters of the sharded ``models`` for the duration of the block (a collective on
    entry: every rank must enter it together); forwards inside issue no collectives, so ranks may
    run different numbers of them. Leaving frees the gathered copies. A no-op for unsharded models."""
    mods = [m for m in models if is_sharded(m)]
    for model in mods:
        model.set_reshard_after_forward(False)
        for m in _fsdp_modules(model):
            m.unshard()
    try:
        yield
    finally:
        for model in mods:
            for m in _fsdp_modules(model):
                m.reshard()
            model.set_reshard_after_forward(getattr(model, "_seedrl_reshard_after_forward", True))


def full_model_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The full (unsharded) state dict on CPU, on rank 0 (empty on the others). Collective."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def trainable_names(model: torch.nn.Module) -> list[str]:
    """Names of the trainable parameters, in the order :func:`seedrl.train.policy.adamw` lists them."""
    return [n for n, p in model.named_parameters() if p.requires_grad]


def plain_optimizer_state(full: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """A full optimizer state keyed by parameter name (torch.distributed.checkpoint's form) in the
    one-process form ``torch.optim.Optimizer.state_dict()`` gives: parameters by their index in
    ``names``. Pure."""
    index = {n: i for i, n in enumerate(names)}
    unknown = [n for n in full.get("state", {}) if n not in index]
    if unknown:
        raise SeedRLError(f"the optimizer state names parameters the model does not train: {unknown[:3]}")
    groups = [dict(g, params=[index[n] for n in g["params"]]) for g in full["param_groups"]]
    return {"state": {index[n]: s for n, s in full["state"].items()}, "param_groups": groups}


def named_optimizer_state(plain: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """Inverse of :func:`plain_optimizer_state`. Pure."""
    def name(i: Any) -> str:
        if not isinstance(i, int) or not 0 <= i < len(names):
            raise SeedRLError(f"the optimizer state has parameter {i!r}; the model trains {len(names)} parameters")
        return names[i]

    groups = [dict(g, params=[name(i) for i in g["params"]]) for g in plain["param_groups"]]
    return {"state": {name(int(i)): s for i, s in plain["state"].items()}, "param_groups": groups}


def full_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The optimizer state of the whole model on rank 0, in the one-process form. Collective."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    full = get_optimizer_state_dict(model, optimizer,
                                    options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return plain_optimizer_state(full, trainable_names(model)) if full.get("param_groups") else {}


def load_full_state(model: torch.nn.Module, sd: dict[str, torch.Tensor]) -> tuple[list[str], list[str]]:
    """Load a full state dict (every rank holds it) into the sharded ``model``; (missing, unexpected)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    res = set_model_state_dict(model, sd, options=StateDictOptions(full_state_dict=True, strict=False))
    return list(res.missing_keys), list(res.unexpected_keys)


def load_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, plain: dict[str, Any]) -> None:
    """Load a one-process optimizer state (every rank holds it) into the optimizer of a sharded model."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    set_optimizer_state_dict(model, optimizer, named_optimizer_state(plain, trainable_names(model)),
                             options=StateDictOptions(full_state_dict=True))
