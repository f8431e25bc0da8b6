"""The trained model's setup, shared by RL and SFT: tokenizer, precision, weights, optimizer.

One function builds it so the precision rules (``seedrl.models.precision``) hold everywhere an
optimizer updates a model, and the preset tests exercise exactly what a run builds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import torch

from seedrl.config import ModelConfig
from seedrl.models.loading import load_model, load_tokenizer
from seedrl.models.precision import Precision, check_trainable_fp32, resolve_precision

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


def adamw(model: torch.nn.Module, lr: float, weight_decay: float) -> torch.optim.AdamW:
    """AdamW over the trainable parameters (all fp32: :func:`build_policy` checked)."""
    return torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=weight_decay)
