"""The trained model's setup, shared by RL and SFT: tokenizer, precision, weights, optimizer.

One function builds it so the precision rules (``seedrl.models.precision``) hold everywhere an
optimizer updates a model, and the preset tests exercise exactly what a run builds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from seedrl.config import ModelConfig, TrainConfig
from seedrl.models.loading import load_model, load_tokenizer
from seedrl.models.precision import Precision, check_trainable_fp32, resolve_precision
from seedrl.train import distributed, fsdp

log = logging.getLogger(__name__)


@dataclass
class Policy:
    tokenizer: object
    model: torch.nn.Module
    precision: Precision


def build_policy(m: ModelConfig, *, lora: bool = True, what: str = "model",
                 announce: Callable[[str], None] | None = None) -> Policy:
    """Tokenizer, trainable model (LoRA adapters when ``lora`` and ``m.lora``) and resolved precision.

    Refuses (one line) trainable parameters that are not fp32; the resolved precision is logged once
    (``announce`` also receives the line, e.g. to print it)."""
    precision = resolve_precision(m.precision, m.device)
    tokenizer = load_tokenizer(m.name, m.trust_remote_code)
    model = load_model(m.name, m.dtype, m.device, m.lora if lora else None, m.init_seed, tokenizer=tokenizer,
                       trust_remote_code=m.trust_remote_code)
    if m.gradient_checkpointing:  # transformers 5 renamed it activation checkpointing
        (getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable)()
    check_trainable_fp32(model, f"{what} {m.name}")
    log.info("%s", precision.describe())
    if announce is not None:
        announce(precision.describe())
    return Policy(tokenizer, model, precision)


def adamw(model: torch.nn.Module, lr: float, weight_decay: float,
          betas: tuple[float, float] = (0.9, 0.999)) -> torch.optim.AdamW:
    """AdamW over the trainable parameters (all fp32: :func:`build_policy` checked)."""
    return torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=weight_decay,
                             betas=betas)


@dataclass
class Trained(Policy):
    """The RL policy as the run trains it: ``fsdp_plan`` (None: unsharded), ``ddp`` (the DDP wrapper of
    replicas over several processes; None otherwise) and the KL term's frozen ``ref_model`` (None without
    KL, or with LoRA, whose reference is the base with adapters off)."""

    ref_model: torch.nn.Module | None = None
    fsdp_plan: Any = None
    ddp: torch.nn.Module | None = None


def build_trained(cfg: TrainConfig, m: ModelConfig, world: Any) -> Trained:
    """The policy of an RL run (``m``: the run's model config on this rank's device) with its reference
    model, sharded (FSDP, when the accelerate config asks for it and a launcher started a process group)
    before the optimizer is built on it, or wrapped in DDP over several processes."""
    plan = fsdp.requested_plan()
    if plan is not None and not torch.distributed.is_initialized():
        log.warning("FSDP asked for, but no launcher started a process group: training unsharded")
        plan = None
    if plan is not None and plan.activation_checkpointing:
        m = m.model_copy(update={"gradient_checkpointing": True})
    policy = build_policy(m, what="policy")
    ref_model = None
    if cfg.algo.kl_coef > 0 and not m.lora:  # LoRA: the reference is the base with adapters off
        ref_model = load_model(m.name, m.dtype, m.device, None, m.init_seed, tokenizer=policy.tokenizer,
                               trust_remote_code=m.trust_remote_code)
        ref_model.requires_grad_(False).eval()
    if plan is not None:  # before the optimizer, which must hold the sharded parameters
        layers = fsdp.shard(policy.model, plan)
        if ref_model is not None:
            fsdp.shard(ref_model, plan)
        log.info("FSDP: %s sharded over %d processes (layers: %s; reshard after forward: %s)", m.name,
                 world.size, ", ".join(layers) or "root only", plan.reshard_after_forward)
    #: replicas: torch DDP, summing the gradients (seedrl.train.distributed.data_parallel)
    ddp = distributed.data_parallel(policy.model, torch.device(m.device)) if world.active and plan is None else None
    return Trained(policy.tokenizer, policy.model, policy.precision, ref_model, plan, ddp)
