"""From step samples to padded tensors, and per-token log-probs of response tokens.

Sequences are left-padded so every response ends at the last column: the model then computes
logits only for the last ``R + 1`` positions (``logits_to_keep``), R = longest response in the
micro-batch. Position ids count real tokens only, as during generation, so the log-probs of a
response are the same whatever padding its batch needed. Per-token tensors have shape [B, R],
right-aligned; ``response_mask`` marks real response tokens — prompt tokens are never in it.

A vision-language policy's rows may carry images (:class:`~seedrl.models.vision.ImageInputs`, the ones
the generator saw): the batch then holds their ``pixel_values`` / ``image_grid_thw`` in row order and
the forward takes the model's own 3-D multimodal positions of the left-padded rows
(:func:`~seedrl.models.vision.mrope_positions`), as during generation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from seedrl.algos.losses import entropy_from_logits, token_logprobs
from seedrl.models.precision import autocast


@dataclass
class Packed:
    input_ids: torch.Tensor  # [B, L] left-padded prompt + response
    attention_mask: torch.Tensor  # [B, L]
    position_ids: torch.Tensor  # [B, L]
    response_mask: torch.Tensor  # [B, R] float, 1 on response tokens
    resp_len: list[int]
    #: the rows' image tensors for the forward (``pixel_values``, ``image_grid_thw``); {}: no images
    images: dict[str, Any] = field(default_factory=dict)

    @property
    def width(self) -> int:
        return self.response_mask.shape[1]


def pack(prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], pad_id: int,
         device: torch.device | str = "cpu", images: Sequence[Any] | None = None) -> Packed:
    """``images``: per row, its :class:`~seedrl.models.vision.ImageInputs` or ``None`` (no images)."""
    seqs = [list(p) + list(r) for p, r in zip(prompts, responses)]
    width = max(len(s) for s in seqs)
    R = max(1, max(len(r) for r in responses))
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    att = torch.zeros((len(seqs), width), dtype=torch.long)
    rmask = torch.zeros((len(seqs), R))
    for i, (s, r) in enumerate(zip(seqs, responses)):
        ids[i, width - len(s):] = torch.tensor(s, dtype=torch.long)
        att[i, width - len(s):] = 1
        if len(r):
            rmask[i, R - len(r):] = 1.0
    pos = (att.cumsum(-1) - 1).clamp(min=0)
    mm: dict[str, Any] = {}
    if images is not None and any(x is not None for x in images):
        from seedrl.models.vision import concat_images

        mm = concat_images(images, device)
    return Packed(ids.to(device), att.to(device), pos.to(device), rmask.to(device), [len(r) for r in responses], mm)


def right_align(values: Sequence[torch.Tensor], width: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """Stack 1-D per-sample tensors into [B, width], right-aligned, zero-padded on the left."""
    out = torch.zeros((len(values), width), dtype=torch.float32)
    for i, v in enumerate(values):
        if len(v):
            out[i, width - len(v):] = v.float()
    return out.to(device)


def unalign(x: torch.Tensor, resp_len: Sequence[int]) -> list[torch.Tensor]:
    """Inverse of :func:`right_align`: per-sample 1-D tensors on CPU."""
    W = x.shape[1]
    return [x[i, W - n:].detach().float().cpu() if n else x.new_zeros(0).cpu() for i, n in enumerate(resp_len)]


def response_logits(model, batch: Packed, bf16: bool = False) -> torch.Tensor:
    """Logits ``[B, R, V]`` of the positions that predict the ``R`` response tokens (position t
    predicts token t+1); ``bf16``: the forward runs under bf16 autocast."""
    R = batch.width
    pos, extra = batch.position_ids, {}
    if batch.images:  # a vision-language batch with images: the model's own multimodal positions
        from seedrl.models.vision import mrope_positions

        pos = mrope_positions(model, batch.input_ids, batch.attention_mask, batch.images["image_grid_thw"])
        extra = batch.images
    with autocast(batch.input_ids.device, bf16):
        out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                    position_ids=pos, logits_to_keep=R + 1, use_cache=False, **extra)
    return out.logits[:, :-1]


def forward_logprobs(model, batch: Packed, with_entropy: bool = False, bf16: bool = False):
    """Log-probs [B, R] (float32) of the response tokens under ``model`` (and entropies if asked);
    ``bf16``: the forward runs under bf16 autocast (the log-softmax is always taken in fp32).

    Gradients flow unless the caller wraps this in ``torch.no_grad()``.
    """
    logits = response_logits(model, batch, bf16)
    labels = batch.input_ids[:, -batch.width:]
    logp = token_logprobs(logits, labels) * batch.response_mask
    ent = entropy_from_logits(logits) * batch.response_mask if with_entropy else None
    return logp, ent


@torch.no_grad()
def batched_logprobs(model, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], pad_id: int,
                     micro_batch_size: int, bf16: bool = False, images: Sequence[Any] | None = None
                     ) -> list[torch.Tensor]:
    """Per-sample 1-D log-prob tensors of each response, computed in micro-batches without grad;
    ``images``: per sample, its image inputs or ``None``.

    Samples are sorted by length so micro-batches waste little padding; results come back in input order.
    """
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]) + len(responses[i]))
    out: list[torch.Tensor | None] = [None] * len(prompts)
    for s in range(0, len(order), micro_batch_size):
        idx = order[s:s + micro_batch_size]
        b = pack([prompts[i] for i in idx], [responses[i] for i in idx], pad_id, device,
                 None if images is None else [images[i] for i in idx])
        lp, _ = forward_logprobs(model, b, bf16=bf16)
        for i, v in zip(idx, unalign(lp, b.resp_len)):
            out[i] = v
    if was_training:
        model.train()
    return out  # type: ignore[return-value]
