"""Response log-probs with each shared prompt prefix computed once: the no-gradient scoring passes
(:func:`shared_prefix_logprobs`) and, with gradient, the update's and SFT's forwards (:func:`train_forward`).

The samples of one group at step 0 repeat the same prompt, and teacher prompts repeat the text up to
their skill block; :func:`batched_logprobs` pays for every copy. :func:`shared_prefix_logprobs` returns
exactly what it returns (per-sample 1-D float32 CPU tensors, input order), grouping samples whose prompts
share a prefix of at least ``min_prefix`` tokens, running that prefix once per group (its KV cache), and
running only each sample's continuation (the rest of its prompt, then its response) on top of the cache.

One level of sharing: each sample belongs to at most one group, whose prefix is the longest common
prefix of its members' prompts, cut so that every member keeps at least its last prompt token in the
continuation (that position predicts the first response token). The grouping maximises the prompt tokens
saved, ``sum over groups (size - 1) * prefix length`` (:func:`plan_shared_prefixes`). Samples in no group,
and every sample when no group forms, go through :func:`batched_logprobs` itself, so a batch with no
shared prefix gets its result bit for bit.

Where it runs fewer tokens, the scoring passes instead cut the prompt-sorted samples into micro-batches
that each run as the update's tree (:func:`plan_tree_scoring`, :func:`prompt_tree`): two levels of
sharing, the instructions every prompt begins with and then each distinct prompt (a group's step-0
board, a trajectory's teacher prompt up to its response).

Several groups' prefixes run as one left-padded batch (a "wave" of at most ``micro_batch_size``
samples, groups taken in order of their longest continuation so that a wave's continuations pad little);
a continuation micro-batch gathers its samples' rows of the wave's cache. The cache is a
transformers ``DynamicCache`` of plain full-attention layers; a model whose cache is anything else
(sliding-window or linear-attention layers, an older cache API) is scored by the plain path.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch

from seedrl.algos.losses import entropy_from_logits, token_logprobs
from seedrl.models.kvcache import cache_kwarg
from seedrl.models.precision import autocast
from seedrl.models.scoring import Packed, batched_logprobs, forward_logprobs, pack, unalign

log = logging.getLogger(__name__)

#: below this many shared tokens a group is not worth its extra forward
MIN_SHARED_PREFIX = 32
_WARNED: set[str] = set()  # model classes already warned about (once a process)


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    """The number of leading tokens ``a`` and ``b`` share."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def plan_shared_prefixes(prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]],
                         min_prefix: int = MIN_SHARED_PREFIX) -> list[tuple[int, list[int]]]:
    """Groups of samples that share a prompt prefix: ``[(prefix_len, [sample index, ...]), ...]``.

    Every group has at least two samples and ``prefix_len >= max(1, min_prefix)``; ``prefix_len`` is at most
    ``len(prompt) - 1`` of each member (its last prompt token stays in the continuation). A sample is in at
    most one group; samples with an empty response are in none. The partition of the prompts' sorted order
    into contiguous groups maximises ``sum (len(group) - 1) * prefix_len`` (dynamic programming, O(N^2) at
    worst); groups come in sorted-prompt order, members ascending.
    """
    min_prefix = max(1, min_prefix)
    cand = sorted((i for i in range(len(prompts)) if len(responses[i]) and len(prompts[i]) > min_prefix),
                  key=lambda i: tuple(prompts[i]))
    n = len(cand)
    cap = [len(prompts[i]) - 1 for i in cand]
    adj = [common_prefix_len(prompts[cand[k]], prompts[cand[k + 1]]) for k in range(n - 1)]
    best = [0] * (n + 1)  # best[j]: the most tokens saved over the first j sorted samples
    cut: list[tuple[int, int]] = [(0, 0)] * (n + 1)  # (start of the last group, its prefix length; 0 = single)
    for j in range(1, n + 1):
        best[j], cut[j] = best[j - 1], (j - 1, 0)
        shared = cap[j - 1]
        for i in range(j - 2, -1, -1):  # the group cand[i:j]
            shared = min(shared, adj[i], cap[i])
            if shared < min_prefix:
                break
            gain = best[i] + (j - i - 1) * shared
            if gain > best[j]:
                best[j], cut[j] = gain, (i, shared)
    groups = []
    j = n
    while j > 0:
        i, shared = cut[j]
        if shared:
            groups.append((shared, sorted(cand[i:j])))
        j = i
    return groups[::-1]


def tokens_run(prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]],
               groups: Sequence[tuple[int, Sequence[int]]]) -> tuple[int, int]:
    """``(plain, shared)``: the tokens the forwards run without sharing (every prompt and response) and
    with ``groups`` (:func:`plan_shared_prefixes`: each group's prefix once), padding not counted."""
    plain = sum(len(p) + len(r) for p, r in zip(prompts, responses))
    return plain, plain - sum((len(m) - 1) * n for n, m in groups)


def pack_continuations(prefix_mask: torch.Tensor, rests: Sequence[Sequence[int]],
                       responses: Sequence[Sequence[int]], pad_id: int) -> Packed:
    """The continuation batch that runs on top of a prefix cache.

    ``prefix_mask`` ``[B, P]`` marks each row's real cached prefix tokens (left-padded, as the cache);
    ``rests[i]`` is the rest of sample i's prompt after its cached prefix (at least one token: the one
    that predicts the first response token). Returns a
    :class:`Packed` whose ``input_ids`` ``[B, W]`` are the left-padded continuations, ``attention_mask``
    ``[B, P + W]`` covers cache and continuation (so pads sit between the two), ``position_ids`` ``[B, W]``
    count the real tokens before each one, cached prefix included (as in :func:`pack`), and
    ``response_mask`` ``[B, R]`` is :func:`pack`'s.
    """
    b = pack(rests, responses, pad_id, prefix_mask.device)
    att = torch.cat([prefix_mask.to(b.attention_mask.dtype), b.attention_mask], dim=1)
    pos = (att.cumsum(-1) - 1).clamp(min=0)[:, prefix_mask.shape[1]:]
    return Packed(b.input_ids, att, pos, b.response_mask, b.resp_len)


def _cache_tensors(cache) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
    """Per-layer ``(keys, values)`` ``[B, H, L, D]`` of a cache of plain full-attention layers; None
    for any other cache (sliding-window or linear-attention layers, another cache API)."""
    try:
        from transformers.cache_utils import DynamicCache, DynamicLayer
    except ImportError:
        return None
    if type(cache) is not DynamicCache or not getattr(cache, "layers", None):
        return None
    if any(type(layer) is not DynamicLayer or layer.keys is None or layer.keys.dim() != 4 for layer in cache.layers):
        return None
    return [(layer.keys, layer.values) for layer in cache.layers]


def _zero_pads(kv: Sequence[tuple[torch.Tensor, torch.Tensor]], mask: torch.Tensor):
    """``kv`` with the positions ``mask`` ``[B, L]`` leaves out set to 0 (a pad's states are never attended,
    but a NaN there would survive a zero attention weight)."""
    keep = mask.bool()[:, None, :, None]
    return [(torch.where(keep, k, 0), torch.where(keep, v, 0)) for k, v in kv]


def prefix_cache(model, prefixes: Sequence[Sequence[int]], pad_id: int, bf16: bool = False):
    """Run ``G`` prefixes as one left-padded batch and keep their KV cache.

    Returns ``(kv, mask)``: ``kv`` per layer ``(keys, values)`` ``[G, H, P, D]``, zero at pad positions
    (a pad position's states are never attended, but a NaN there would survive a zero attention weight),
    and ``mask`` ``[G, P]`` (1 on real tokens); ``None`` when the model's cache is not one
    :func:`_cache_tensors` reads.
    """
    device = next(model.parameters()).device
    width = max(len(p) for p in prefixes)
    ids = torch.full((len(prefixes), width), pad_id, dtype=torch.long)
    att = torch.zeros((len(prefixes), width), dtype=torch.long)
    for i, p in enumerate(prefixes):
        ids[i, width - len(p):] = torch.tensor(list(p), dtype=torch.long)
        att[i, width - len(p):] = 1
    ids, att = ids.to(device), att.to(device)
    pos = (att.cumsum(-1) - 1).clamp(min=0)
    with autocast(device, bf16):
        out = model(input_ids=ids, attention_mask=att, position_ids=pos, use_cache=True, logits_to_keep=1)
    cache = getattr(out, "cache", None)
    if cache is None:
        cache = getattr(out, "past_key_values", None)
    kv = _cache_tensors(cache)
    return None if kv is None else (_zero_pads(kv, att), att)


def continuation_logits(model, batch: Packed, kv: Sequence[tuple[torch.Tensor, torch.Tensor]],
                        bf16: bool = False) -> torch.Tensor:
    """Logits ``[B, R, V]`` of the positions that predict the response tokens of ``batch``
    (:func:`pack_continuations`) run on top of the prefix cache ``kv`` (per layer ``[B, H, P, D]``), as
    :func:`~seedrl.models.scoring.response_logits` gives them for the whole sequence. Gradients flow
    into ``kv`` (and so into the prefix's forward) unless the caller disables them."""
    from transformers import DynamicCache

    cache = DynamicCache(ddp_cache_data=[(k, v) for k, v in kv])
    R = batch.width
    with autocast(batch.input_ids.device, bf16):
        out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids,
                    use_cache=True, logits_to_keep=R + 1, **{cache_kwarg(model): cache})
    return out.logits[:, :-1]


def continuation_logprobs(model, batch: Packed, kv: Sequence[tuple[torch.Tensor, torch.Tensor]],
                          bf16: bool = False) -> torch.Tensor:
    """Log-probs ``[B, R]`` (float32, zero off ``response_mask``) of the response tokens of ``batch``
    (:func:`pack_continuations`) run on top of the prefix cache ``kv`` (per layer ``[B, H, P, D]``)."""
    logits = continuation_logits(model, batch, kv, bf16)
    return token_logprobs(logits, batch.input_ids[:, -batch.width:]) * batch.response_mask


def _waves(groups: list[tuple[int, list[int]]], micro_batch_size: int) -> list[list[tuple[int, list[int]]]]:
    """Consecutive groups, at most ``micro_batch_size`` samples a wave (a bigger group is a wave alone)."""
    waves: list[list[tuple[int, list[int]]]] = []
    size = 0
    for g in groups:
        if waves and size + len(g[1]) <= micro_batch_size:
            waves[-1].append(g)
            size += len(g[1])
        else:
            waves.append([g])
            size = len(g[1])
    return waves


@torch.no_grad()
def shared_prefix_logprobs(model, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], pad_id: int,
                           micro_batch_size: int, bf16: bool = False,
                           min_prefix: int = MIN_SHARED_PREFIX) -> list[torch.Tensor]:
    """Per-sample 1-D log-prob tensors of each response (float32, CPU, input order), as
    :func:`batched_logprobs` returns them, with each shared prompt prefix of at least ``min_prefix``
    tokens computed once (see the module docstring). The same values up to float rounding (fp32:
    within 1e-5); bit for bit :func:`batched_logprobs`'s when no group forms.
    ``micro_batch_size`` bounds every forward's batch (prefix waves and continuations); ``bf16``: the
    forwards run under bf16 autocast, as in :func:`batched_logprobs`.
    """
    groups = plan_shared_prefixes(prompts, responses, min_prefix)
    chunks, tree_cost, _ = plan_tree_scoring(prompts, responses, micro_batch_size, min_prefix)
    if chunks and (not groups or tree_cost < tokens_run(prompts, responses, groups)[1]):
        return _tree_logprobs(model, prompts, responses, pad_id, chunks, bf16, min_prefix)
    if not groups:
        return batched_logprobs(model, prompts, responses, pad_id, micro_batch_size, bf16=bf16)
    # groups with continuations of like length share waves (a wave's continuations pad to its longest)
    groups.sort(key=lambda g: max(len(prompts[i]) + len(responses[i]) for i in g[1]) - g[0])
    out: list[torch.Tensor | None] = [None] * len(prompts)
    grouped = {i for _, members in groups for i in members}
    single = [i for i in range(len(prompts)) if i not in grouped]
    was_training = model.training
    model.eval()
    try:
        for wave in _waves(groups, micro_batch_size):
            cached = prefix_cache(model, [prompts[m[0]][:n] for n, m in wave], pad_id, bf16)
            if cached is None:  # a cache this module does not read: the plain path for everything
                if type(model).__name__ not in _WARNED:
                    _WARNED.add(type(model).__name__)
                    log.warning("optim.shared_prefix: %s's KV cache is not plain full-attention DynamicCache "
                                "layers; scoring without sharing", type(model).__name__)
                return batched_logprobs(model, prompts, responses, pad_id, micro_batch_size, bf16=bf16)
            kv, mask = cached
            items = sorted(((w, i) for w, (_, members) in enumerate(wave) for i in members),
                           key=lambda t: len(prompts[t[1]]) + len(responses[t[1]]) - wave[t[0]][0])
            for s in range(0, len(items), micro_batch_size):
                chunk = items[s:s + micro_batch_size]
                rows = torch.tensor([w for w, _ in chunk], device=mask.device)
                b = pack_continuations(mask[rows], [prompts[i][wave[w][0]:] for w, i in chunk],
                                       [responses[i] for _, i in chunk], pad_id)
                lp = continuation_logprobs(model, b, [(k[rows], v[rows]) for k, v in kv], bf16)
                for (_, i), v in zip(chunk, unalign(lp, b.resp_len)):
                    out[i] = v
    finally:
        if was_training:
            model.train()
    if single:
        for i, v in zip(single, batched_logprobs(model, [prompts[i] for i in single], [responses[i] for i in single],
                                                 pad_id, micro_batch_size, bf16=bf16)):
            out[i] = v
    return out  # type: ignore[return-value]


def _checkpointing(model) -> bool:
    """Whether the model runs under gradient (activation) checkpointing (its name from transformers 5.x)."""
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):
        if hasattr(type(model), name) or hasattr(model, name):
            return bool(getattr(model, name))
    return False


def extend_cache(model, kv: Sequence[tuple[torch.Tensor, torch.Tensor]], mask: torch.Tensor,
                 rests: Sequence[Sequence[int]], pad_id: int, bf16: bool = False):
    """Run ``rests[i]`` (each at least one token) on top of row i of the cache ``kv`` (per layer
    ``[B, H, P, D]``, real positions ``mask`` ``[B, P]``) and return the grown cache and its mask
    (``[B, H, P + W, D]``, ``[B, P + W]``; the left pads of the rests sit between the two parts), or None
    when the model's cache is not one :func:`_cache_tensors` reads. The graph is kept: a loss on what
    attends to the grown cache reaches every token of it."""
    from transformers import DynamicCache

    b = pack_continuations(mask, rests, [[] for _ in rests], pad_id)
    cache = DynamicCache(ddp_cache_data=[(k, v) for k, v in kv])
    with autocast(b.input_ids.device, bf16):
        model(input_ids=b.input_ids, attention_mask=b.attention_mask, position_ids=b.position_ids, use_cache=True,
              logits_to_keep=1, **{cache_kwarg(model): cache})
    grown = _cache_tensors(cache)
    return None if grown is None else (_zero_pads(grown, b.attention_mask), b.attention_mask)


def plan_tree_scoring(prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], micro_batch_size: int,
                      min_prefix: int = MIN_SHARED_PREFIX) -> tuple[list[list[int]], int, int]:
    """The scoring passes' other plan: the samples in prompt-sorted order, cut into micro-batches that each
    run as the update's tree (:func:`prompt_tree`: the head they all share once, each distinct prompt once,
    each sample's last prompt token and response). ``(micro-batches of sample indices, tokens run, how many
    of them run as a tree)``, padding not counted (a micro-batch with no tree counts its plain tokens); no
    micro-batches when none forms a tree. It beats :func:`plan_shared_prefixes` where the samples share more than one level (the
    instructions of every prompt, then a group's board), which one level of groups cannot use."""
    order = sorted(range(len(prompts)), key=lambda i: tuple(prompts[i]))
    chunks = [order[k:k + micro_batch_size] for k in range(0, len(order), micro_batch_size)]
    tokens, trees = 0, 0
    for c in chunks:
        ps, rs = [prompts[i] for i in c], [responses[i] for i in c]
        t = prompt_tree(ps, rs, min_prefix)
        trees += t is not None
        tokens += tree_tokens(rs, t[0], t[1]) if t else sum(len(p) + len(r) for p, r in zip(ps, rs))
    return (chunks if trees else []), tokens, trees


def tree_tokens(responses: Sequence[Sequence[int]], head: int, distinct: Sequence[Sequence[int]]) -> int:
    """The tokens :func:`shared_prefix_forward` runs for :func:`prompt_tree`'s ``(head, distinct)``: the head
    once, each distinct prompt's rest less its last token once, each sample's last prompt token and response
    (samples with an empty response run nothing)."""
    return head + sum(len(u) - 1 - head for u in distinct) + sum(1 + len(r) for r in responses if len(r))


@torch.no_grad()
def _tree_logprobs(model, prompts, responses, pad_id: int, chunks: list[list[int]], bf16: bool,
                   min_prefix: int) -> list[torch.Tensor]:
    """:func:`shared_prefix_logprobs` through :func:`plan_tree_scoring`'s micro-batches, each run by
    :func:`shared_prefix_forward` without gradient."""
    out: list[torch.Tensor | None] = [None] * len(prompts)
    was_training = model.training
    model.eval()
    try:
        for c in chunks:
            rs = [responses[i] for i in c]
            lp, _ = shared_prefix_forward(model, [prompts[i] for i in c], rs, pad_id, bf16=bf16, min_prefix=min_prefix)
            for i, v in zip(c, unalign(lp, [len(r) for r in rs])):
                out[i] = v
    finally:
        if was_training:
            model.train()
    return out  # type: ignore[return-value]


def prompt_tree(prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]],
                min_prefix: int = MIN_SHARED_PREFIX) -> tuple[int, list[tuple[int, ...]], list[int]] | None:
    """The three levels :func:`shared_prefix_forward` runs: ``(head, distinct, row)``.

    ``head``: the tokens every prompt shares (0 when fewer than ``min_prefix``), cut so each prompt keeps
    at least two tokens after it; ``distinct``: the distinct prompts; ``row[i]``: sample i's index in
    ``distinct`` (-1 for an empty response, which gets a zero row). The head runs once, each distinct prompt
    (less its last token) once on top of it, and each sample's last prompt token and response on top of
    its prompt. None when that runs no fewer tokens than the plain forward (nothing shared), or a prompt
    is shorter than 3 tokens.
    """
    live = [i for i in range(len(prompts)) if len(responses[i])]
    if not live or any(len(prompts[i]) < 3 for i in live):
        return None
    index: dict[tuple[int, ...], int] = {}
    row = [index.setdefault(tuple(prompts[i]), len(index)) if len(responses[i]) else -1 for i in range(len(prompts))]
    distinct = list(index)
    head = min(len(u) for u in distinct) - 2
    for u in distinct[1:]:
        head = min(head, common_prefix_len(distinct[0], u))
    head = head if head >= max(1, min_prefix) and len(distinct) > 1 else 0
    plain = sum(len(prompts[i]) + len(responses[i]) for i in live)
    return (head, distinct, row) if tree_tokens(responses, head, distinct) < plain else None


def _left_pad(x: torch.Tensor, width: int) -> torch.Tensor:
    """``x`` ``[B, R]`` right-aligned in ``[B, width]`` (zeros on the left)."""
    return torch.nn.functional.pad(x, (width - x.shape[1], 0))


def shared_prefix_forward(model, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], pad_id: int,
                          with_entropy: bool = False, bf16: bool = False, min_prefix: int = MIN_SHARED_PREFIX,
                          plain: Packed | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:func:`~seedrl.models.scoring.forward_logprobs` of ``pack(prompts, responses)``, with gradient, each
    shared prompt prefix run once: log-probs ``[B, R]`` (float32, right-aligned, zero off the response
    mask, R = the longest response) and the entropies when ``with_entropy`` (else None).

    The update's micro-batch as a tree of three levels (:func:`prompt_tree`): the instructions every
    prompt begins with, once; each distinct prompt's rest on top of them (:func:`extend_cache`); each
    sample's last prompt token and response on top of its prompt. The caches keep their graph, so the
    loss's gradient reaches each shared token once, through everything that attends to it: the same
    log-probs and gradients as the plain forward up to float rounding (fp32: within 1e-5). Nothing
    shared, a model under gradient checkpointing (transformers then keeps no cache) or a cache
    :func:`_cache_tensors` does not read: the plain forward itself. ``plain``: ``pack(prompts, responses)``
    where the caller has it already.
    """
    device = next(model.parameters()).device
    plain = pack(prompts, responses, pad_id, device) if plain is None else plain
    tree = None if _checkpointing(model) else prompt_tree(prompts, responses, min_prefix)
    cached = None
    if tree is not None:
        head, distinct, row = tree
        if head:
            top = prefix_cache(model, [distinct[0][:head]], pad_id, bf16)
            if top is not None:
                kv, mask = top
                n = len(distinct)
                cached = extend_cache(model, [(k.expand(n, -1, -1, -1), v.expand(n, -1, -1, -1)) for k, v in kv],
                                      mask.expand(n, -1), [u[head:-1] for u in distinct], pad_id, bf16)
        else:
            cached = prefix_cache(model, [u[:-1] for u in distinct], pad_id, bf16)
    if cached is None:
        return forward_logprobs(model, plain, with_entropy=with_entropy, bf16=bf16)
    kv, mask = cached
    live = [i for i in range(len(prompts)) if row[i] >= 0]
    rows = torch.tensor([row[i] for i in live], device=mask.device)
    b = pack_continuations(mask[rows], [prompts[i][-1:] for i in live], [responses[i] for i in live], pad_id)
    logits = continuation_logits(model, b, [(k[rows], v[rows]) for k, v in kv], bf16)
    W = plain.width
    where = torch.full((len(prompts),), len(live), dtype=torch.long, device=device)  # the zero row: no response
    where[torch.tensor(live, device=device)] = torch.arange(len(live), device=device)
    zero = torch.zeros(1, W, device=device)

    def place(x: torch.Tensor) -> torch.Tensor:  # [len(live), R'] -> every sample's row, [B, W]
        return torch.cat([_left_pad(x * b.response_mask, W), zero])[where]

    logp = place(token_logprobs(logits, b.input_ids[:, -b.width:]))
    return logp, place(entropy_from_logits(logits)) if with_entropy else None


def train_forward(model, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], pad_id: int,
                  device: torch.device | str, shared: bool, with_entropy: bool = False,
                  bf16: bool = False, images: Sequence[Any] | None = None
                  ) -> tuple[Packed, torch.Tensor, torch.Tensor | None]:
    """The forward of a gradient step (the update's micro-batch, its replay, SFT): ``pack(prompts,
    responses)`` and its log-probs ``[B, R]`` (and entropies), through :func:`shared_prefix_forward` when
    ``shared`` (``optim.shared_prefix`` / SFT's ``shared_prefix``), else
    :func:`~seedrl.models.scoring.forward_logprobs`. ``images``: per row, its image inputs or ``None``;
    a batch with images always takes the plain forward (placeholder tokens of different images agree, so
    a shared token prefix is not a shared input)."""
    b = pack(prompts, responses, pad_id, device, images)
    if shared and not b.images:
        logp, ent = shared_prefix_forward(model, prompts, responses, pad_id, with_entropy, bf16, plain=b)
    else:
        logp, ent = forward_logprobs(model, b, with_entropy=with_entropy, bf16=bf16)
    return b, logp, ent
