"""Shared-prefix scoring (seedrl/models/prefix.py): the log-probs of batched_logprobs, each shared prompt
prefix computed once. Checked on real step prompts (the tiny tokenizer's chat template over
build_step_prompt) and on two architectures (the built-in Qwen2 tiny model; a Llama-style one with
grouped-query attention), since the KV cache and the position ids are where the two paths could part."""

from __future__ import annotations

import pytest
import torch

from seedrl.agent.prompts import build_step_prompt, step_messages
from seedrl.methods.teacher import teacher_prompt_ids
from seedrl.models.prefix import (
    MIN_SHARED_PREFIX,
    common_prefix_len,
    plan_shared_prefixes,
    plan_tree_scoring,
    prefix_cache,
    prompt_tree,
    shared_prefix_forward,
    shared_prefix_logprobs,
    tokens_run,
)
from seedrl.models.scoring import batched_logprobs, forward_logprobs, pack
from seedrl.rollout.runner import encode_messages
from tests.helpers import SKILL

TOL = 1e-5  # the bound for fp32


def _llama(tokenizer):
    """A Llama-style tiny model built from config: grouped-query attention (4 query heads share 2 KV
    heads), untied embeddings."""
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.for_model("llama", vocab_size=((len(tokenizer) + 63) // 64) * 64, hidden_size=64,
                               intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                               num_key_value_heads=2, max_position_embeddings=2048,
                               pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                               bos_token_id=None, initializer_range=64 ** -0.5)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        return AutoModelForCausalLM.from_config(cfg).eval()


@pytest.fixture(params=["qwen2", "llama"])
def model(request, tiny_model, tiny_tokenizer):
    return tiny_model if request.param == "qwen2" else _llama(tiny_tokenizer)


def _board(task: int, step: int) -> str:
    rows = ["#######", "#  .  #", f"# {'$' if task % 2 else ' '}@{task} #", f"#  {step}  #", "#######"]
    return "\n".join(rows)


def _messages(task: int, step: int) -> list[dict]:
    return step_messages(build_step_prompt("Sokoban", f"push every box onto a target; a box pushed into a corner is lost (level {task})",
                                           _board(task, step), step_index=step))


def _responses(n: int, seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(10, 200, (int(torch.randint(1, 14, (1,), generator=g)),), generator=g).tolist()
            for _ in range(n)]


def _assert_matches_plain(model, prompts, responses, pad_id, mbs):
    # the path under test runs: this model's KV cache is one the module reads (not the silent fallback)
    assert prefix_cache(model, [prompts[0][:MIN_SHARED_PREFIX]], pad_id) is not None
    plain = batched_logprobs(model, prompts, responses, pad_id, mbs)
    shared = shared_prefix_logprobs(model, prompts, responses, pad_id, mbs)
    assert len(shared) == len(plain)
    for i, (p, s) in enumerate(zip(plain, shared)):
        assert s.dtype == p.dtype == torch.float32 and s.shape == p.shape and s.device == p.device, i
        if len(p):
            assert (s - p).abs().max().item() <= TOL, (i, (s - p).abs().max().item())


def test_plan_groups_long_shared_prefixes_and_keeps_each_last_prompt_token():
    """The plan groups samples whose prompts share >= min_prefix tokens, cuts each prefix so every member
    keeps its last prompt token (that position predicts the first response token: without it the
    continuation could not score it), leaves out empty responses and short shared prefixes, and prefers
    the split that saves the most tokens (two whole-prompt groups over one group sharing less)."""
    head = list(range(100, 150))  # 50 tokens every prompt shares
    a, b = head + list(range(300, 340)), head + list(range(400, 440))  # two 90-token prompts
    short = list(range(100, 110)) + list(range(500, 540))  # shares 10 tokens only
    prompts = [a, a, a, b, b, short, a]
    responses = [[1], [2, 3], [4], [5], [6], [7], []]
    groups = plan_shared_prefixes(prompts, responses, 32)
    assert groups == [(89, [0, 1, 2]), (89, [3, 4])]  # not (50, [0, 1, 2, 3, 4]): 3*89 > 4*50
    assert plan_shared_prefixes(prompts, responses, 90) == []  # a whole 90-token prompt is not a 90-token prefix
    assert plan_shared_prefixes([a, b], [[1], [2]], 32) == [(50, [0, 1])]
    assert plan_shared_prefixes([a, b], [[1], [2]], 51) == []
    assert common_prefix_len(a, b) == 50 and common_prefix_len(a, a[:3]) == 3
    assert tokens_run(prompts, responses, groups) == (6 * 90 + 50 + 7, 6 * 90 + 50 + 7 - 2 * 89 - 89)


@pytest.mark.parametrize("mbs", [3, 8])
def test_groups_sharing_whole_prompts_score_as_the_plain_path(model, tiny_tokenizer, mbs):
    """Step 0 of a batch: each group's samples repeat one prompt (4 groups x 4 samples, plus two later
    steps on their own). Shared-prefix log-probs equal batched_logprobs' within 1e-5 (fp32), per sample,
    with micro-batches that split a group (3) and that hold two groups (8)."""
    prompts = [encode_messages(tiny_tokenizer, _messages(t, 0)) for t in range(4) for _ in range(4)]
    prompts += [encode_messages(tiny_tokenizer, _messages(9, 1)), encode_messages(tiny_tokenizer, _messages(8, 2))]
    responses = _responses(len(prompts), 0)
    groups = plan_shared_prefixes(prompts, responses)
    assert len(groups) >= 4 and min(n for n, _ in groups) >= MIN_SHARED_PREFIX  # the path under test is taken
    _assert_matches_plain(model, prompts, responses, tiny_tokenizer.pad_token_id, mbs)


@pytest.mark.parametrize("mbs", [4, 16])
def test_teacher_prompts_mixed_with_student_prompts_score_as_the_plain_path(model, tiny_tokenizer, mbs):
    """Teacher prompts (the student's prompt with the skill block after the task line, and a
    critical-step block before the turn line) beside student prompts of the same steps: they share the
    text up to the block with each other and with the student prompts, and more within a trajectory.
    Every sample's log-probs equal the plain path's within 1e-5, one group a micro-batch (4) or groups
    of different prefix lengths in one (16: each row must read its own group's cache, pads masked)."""
    prompts, responses = [], []
    for t in range(3):
        for step in range(2):
            msgs = _messages(t, step)
            prompts.append(encode_messages(tiny_tokenizer, msgs))
            prompts.append(teacher_prompt_ids("after_task", tiny_tokenizer, msgs, SKILL, 10_000))
            prompts.append(teacher_prompt_ids("after_task", tiny_tokenizer, msgs, SKILL + f" (trajectory {t})", 10_000))
        prompts.append(teacher_prompt_ids("after_task", tiny_tokenizer, _messages(t, 2), SKILL, 10_000, "push right"))
    student = len(prompts)  # a step scored as student and teacher only: the two share up to the skill block
    prompts.append(encode_messages(tiny_tokenizer, _messages(5, 0)))
    prompts.append(teacher_prompt_ids("after_task", tiny_tokenizer, _messages(5, 0), SKILL, 10_000))
    responses = _responses(len(prompts), 1)
    groups = plan_shared_prefixes(prompts, responses)
    assert len({i for _, m in groups for i in m}) == len(prompts)
    assert any(m == [student, student + 1] for _, m in groups)
    _assert_matches_plain(model, prompts, responses, tiny_tokenizer.pad_token_id, mbs)


def test_no_shared_prefix_is_the_plain_path_bit_for_bit(model, tiny_tokenizer):
    """Prompts that share fewer than min_prefix tokens (distinct ones, and ones sharing 20 tokens) form
    no group: the result is batched_logprobs' own, bit for bit (torch.equal), not merely close."""
    g = torch.Generator().manual_seed(2)
    head = torch.randint(10, 200, (20,), generator=g).tolist()
    prompts = [torch.randint(10, 200, (40 + i,), generator=g).tolist() for i in range(5)]
    prompts += [head + torch.randint(10, 200, (30,), generator=g).tolist() for _ in range(3)]
    responses = _responses(len(prompts), 3)
    assert plan_shared_prefixes(prompts, responses) == []
    plain = batched_logprobs(model, prompts, responses, tiny_tokenizer.pad_token_id, 3)
    shared = shared_prefix_logprobs(model, prompts, responses, tiny_tokenizer.pad_token_id, 3)
    assert all(torch.equal(p, s) for p, s in zip(plain, shared))


def test_empty_responses_and_training_mode_survive(tiny_model, tiny_tokenizer):
    """An empty response (a sample cut before its first token) gets an empty tensor as in the plain
    path, and a model in training mode is left in training mode (scoring itself runs in eval mode: no
    dropout in the scores)."""
    p = encode_messages(tiny_tokenizer, _messages(0, 0))
    prompts, responses = [p, p, p], [[11, 12], [], [13]]
    tiny_model.train()
    shared = shared_prefix_logprobs(tiny_model, prompts, responses, tiny_tokenizer.pad_token_id, 4)
    assert tiny_model.training
    plain = batched_logprobs(tiny_model, prompts, responses, tiny_tokenizer.pad_token_id, 4)
    assert [len(x) for x in shared] == [2, 0, 1]
    assert max((s - q).abs().max().item() for s, q in zip(shared, plain) if len(q)) <= TOL


def test_lora_model_with_and_without_its_adapter(tiny_tokenizer):
    """A peft LoRA model (the policy with ``model.lora``; its reference is the base with the adapter off)
    takes the cache through peft's forward: shared-prefix scores equal the plain path's both ways."""
    from seedrl.models.loading import load_model

    model = load_model("tiny-micro", tokenizer=tiny_tokenizer, lora={"r": 4, "init_lora_weights": False})
    prompts = [encode_messages(tiny_tokenizer, _messages(t, 0)) for t in range(2) for _ in range(3)]
    responses = _responses(len(prompts), 4)
    _assert_matches_plain(model, prompts, responses, tiny_tokenizer.pad_token_id, 4)
    with model.disable_adapter():
        _assert_matches_plain(model, prompts, responses, tiny_tokenizer.pad_token_id, 4)


def test_bf16_autocast_runs_every_forward_in_bf16(tiny_model, tiny_tokenizer):
    """With ``bf16`` every forward, the prefix's and each continuation's, runs under bf16 autocast (as
    batched_logprobs' do; a hook records each forward's autocast state), and without it none does; the
    scores stay float32 and near the plain bf16 path's (bf16 rounding, not fp32's 1e-5)."""
    prompts = [encode_messages(tiny_tokenizer, _messages(t, 0)) for t in range(2) for _ in range(3)]
    prompts.append(encode_messages(tiny_tokenizer, _messages(7, 1)))  # on its own: the plain path's share
    responses = _responses(len(prompts), 5)
    pad = tiny_tokenizer.pad_token_id
    seen: list[bool] = []
    hook = tiny_model.register_forward_pre_hook(lambda m, a: seen.append(torch.is_autocast_enabled("cpu")))
    try:
        shared = shared_prefix_logprobs(tiny_model, prompts, responses, pad, 2, bf16=True)
        on, seen[:] = list(seen), []
        shared_prefix_logprobs(tiny_model, prompts, responses, pad, 2)
        off = list(seen)
    finally:
        hook.remove()
    assert len(on) == 7 and all(on)  # 2 prefix waves (groups of 3), 4 continuation micro-batches, 1 plain
    assert len(off) == len(on) and not any(off)
    plain = batched_logprobs(tiny_model, prompts, responses, pad, 4, bf16=True)
    assert all(s.dtype == torch.float32 for s in shared)
    assert max((s - p).abs().max().item() for s, p in zip(shared, plain)) < 0.05


def test_a_cache_it_cannot_read_falls_back_to_the_plain_path_bit_for_bit(tiny_tokenizer):
    """A model whose KV cache is not plain full-attention layers (here a Qwen2 with a sliding-window
    layer, whose cache keeps only the window) is not scored on a cache it would misread: prefix_cache
    says None and the whole batch, shared prompts included, is batched_logprobs' result bit for bit."""
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.for_model("qwen2", vocab_size=((len(tiny_tokenizer) + 63) // 64) * 64, hidden_size=64,
                               intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                               num_key_value_heads=4, use_sliding_window=True, sliding_window=64,
                               layer_types=["sliding_attention", "full_attention"], max_position_embeddings=2048,
                               pad_token_id=tiny_tokenizer.pad_token_id, bos_token_id=None)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        model = AutoModelForCausalLM.from_config(cfg).eval()
    out = model(input_ids=torch.tensor([[5, 6, 7]]), use_cache=True)
    assert {type(layer).__name__ for layer in out.cache.layers} == {"DynamicSlidingWindowLayer", "DynamicLayer"}
    prompts = [encode_messages(tiny_tokenizer, _messages(t, 0)) for t in range(2) for _ in range(3)]
    responses = _responses(len(prompts), 6)
    pad = tiny_tokenizer.pad_token_id
    assert plan_shared_prefixes(prompts, responses)
    assert prefix_cache(model, [prompts[0][:MIN_SHARED_PREFIX]], pad) is None
    plain = batched_logprobs(model, prompts, responses, pad, 4)
    shared = shared_prefix_logprobs(model, prompts, responses, pad, 4)
    assert all(torch.equal(p, s) for p, s in zip(plain, shared))


def _forward_and_grads(model, fn, weights):
    """``fn()``'s log-probs and entropies, and the gradient of every parameter of a loss that weighs
    each token of both (``weights``: two ``[B, R]`` tensors) differently, divided by the token count as the
    update's token-mean is."""
    model.zero_grad(set_to_none=True)
    logp, ent = fn()
    ((logp * weights[0]).sum() + (ent * weights[1]).sum()).div(weights[0].numel()).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logp.detach(), ent.detach(), grads


def _step_batch(tiny_tokenizer):
    """Step-0 prompts of 3 groups x 3 samples, two teacher prompts of one of them (they share the text up to
    the skill block) and two later steps, all beginning with the same instructions; random responses of
    1-13 tokens."""
    prompts = [encode_messages(tiny_tokenizer, _messages(t, 0)) for t in range(3) for _ in range(3)]
    prompts += [teacher_prompt_ids("after_task", tiny_tokenizer, _messages(0, 0), SKILL, 10_000),
                teacher_prompt_ids("after_task", tiny_tokenizer, _messages(0, 0), SKILL + " (again)", 10_000)]
    prompts += [encode_messages(tiny_tokenizer, _messages(9, 1)), encode_messages(tiny_tokenizer, _messages(8, 2))]
    return prompts, _responses(len(prompts), 7)


def test_update_forward_gives_the_plain_logprobs_entropies_and_gradients(model, tiny_tokenizer):
    """The update's forward with shared prefixes (shared_prefix_forward, with gradient) against the plain
    one (forward_logprobs on pack): the same [B, R] log-probs and entropies (fp32, within 1e-5, zero off the
    response mask, each sample in its input row) and, for a loss weighing every token differently, the same
    gradient of every parameter within 1e-5; the model is in training mode, as in the update. The grouped
    path is taken (a head every prompt shares, repeated prompts), so this is not the fallback's equality."""
    prompts, responses = _step_batch(tiny_tokenizer)
    pad = tiny_tokenizer.pad_token_id
    head, distinct, row = prompt_tree(prompts, responses)
    assert head >= MIN_SHARED_PREFIX and len(distinct) < len(prompts)  # the tree's three levels run
    model.train()
    plain_batch = pack(prompts, responses, pad)
    g = torch.Generator().manual_seed(8)
    weights = [torch.randn(plain_batch.response_mask.shape, generator=g) for _ in range(2)]
    lp0, ent0, g0 = _forward_and_grads(model, lambda: forward_logprobs(model, plain_batch, with_entropy=True), weights)
    lp1, ent1, g1 = _forward_and_grads(model, lambda: shared_prefix_forward(model, prompts, responses, pad,
                                                                           with_entropy=True), weights)
    model.eval()
    assert lp1.shape == lp0.shape and ent1.shape == ent0.shape and lp1.dtype == torch.float32
    assert (lp1 - lp0).abs().max().item() <= TOL and (ent1 - ent0).abs().max().item() <= TOL
    assert torch.equal(lp1 != 0, plain_batch.response_mask > 0)
    assert g1.keys() == g0.keys() and len(g0) == len([p for p in model.parameters() if p.requires_grad])
    worst = max((g1[n] - g0[n]).abs().max().item() for n in g0)
    assert worst <= TOL, worst
    assert max(g0[n].abs().max().item() for n in g0) > 100 * TOL  # gradients worth comparing


def test_update_forward_without_shared_prefixes_is_the_plain_forward_bit_for_bit(model, tiny_tokenizer):
    """No group forms (prompts sharing < 32 tokens): shared_prefix_forward is forward_logprobs itself, the
    log-probs, entropies and gradients bit for bit; the same under gradient checkpointing, where
    transformers keeps no cache, with no wasted prefix forward (one forward in all)."""
    g = torch.Generator().manual_seed(9)
    prompts = [torch.randint(10, 200, (40 + i,), generator=g).tolist() for i in range(4)]
    responses = _responses(len(prompts), 9)
    pad = tiny_tokenizer.pad_token_id
    assert plan_shared_prefixes(prompts, responses) == []
    b = pack(prompts, responses, pad)
    weights = [torch.randn(b.response_mask.shape, generator=g) for _ in range(2)]
    a = _forward_and_grads(model, lambda: forward_logprobs(model, b, with_entropy=True), weights)
    c = _forward_and_grads(model, lambda: shared_prefix_forward(model, prompts, responses, pad, with_entropy=True),
                           weights)
    assert torch.equal(a[0], c[0]) and torch.equal(a[1], c[1]) and all(torch.equal(a[2][n], c[2][n]) for n in a[2])
    shared, resp = _step_batch(tiny_tokenizer)
    model.gradient_checkpointing_enable()
    try:
        model.train()
        b = pack(shared, resp, pad)
        weights = [torch.randn(b.response_mask.shape, generator=g) for _ in range(2)]
        a = _forward_and_grads(model, lambda: forward_logprobs(model, b, with_entropy=True), weights)
        calls: list[int] = []
        hook = model.register_forward_pre_hook(lambda m, args: calls.append(1))
        c = _forward_and_grads(model, lambda: shared_prefix_forward(model, shared, resp, pad, with_entropy=True),
                               weights)
        hook.remove()
        assert len(calls) == 1
    finally:
        getattr(model, "activation_checkpointing_disable", model.gradient_checkpointing_disable)()
        model.eval()
    assert torch.equal(a[0], c[0]) and all(torch.equal(a[2][n], c[2][n]) for n in a[2])


def test_prompt_tree_levels_on_a_hand_batch():
    """The tree of the update's forward: the head every prompt shares (cut so each keeps 2 tokens after it),
    the distinct prompts, each sample's row among them (-1: an empty response); no head when it is shorter
    than min_prefix; None when the tree runs no fewer tokens than the plain forward."""
    head = list(range(100, 140))  # 40 tokens
    a, b = head + [1, 2, 3], head + [4, 5]
    prompts, responses = [a, b, a, a, b], [[7], [8, 9], [], [6], [5]]
    assert prompt_tree(prompts, responses, 32) == (40, [tuple(a), tuple(b)], [0, 1, -1, 0, 1])
    assert prompt_tree(prompts, responses, 41) == (0, [tuple(a), tuple(b)], [0, 1, -1, 0, 1])
    assert prompt_tree([a, b], [[7], [8]], 41) is None  # two distinct prompts, no head: nothing saved
    assert prompt_tree([head[:2], head[:2]], [[7], [8]], 1) is None  # too short to split in three


@pytest.mark.parametrize("mbs_head", [True, False])
def test_update_forward_repeated_prompts_without_a_shared_head(model, tiny_tokenizer, mbs_head):
    """Repeated prompts whose distinct prompts share no head (or a short one): the tree's first level is
    the distinct prompts themselves, left-padded; log-probs and gradients equal the plain forward's."""
    g = torch.Generator().manual_seed(11)
    uniq = [torch.randint(10, 200, (40 + 7 * k,), generator=g).tolist() for k in range(3)]
    if mbs_head:
        uniq = [uniq[0][:35] + u for u in uniq]
    prompts = [uniq[k % 3] for k in range(8)]
    responses = _responses(len(prompts), 12)
    responses[5] = []
    pad = tiny_tokenizer.pad_token_id
    tree = prompt_tree(prompts, responses)
    assert tree is not None and (tree[0] > 0) == mbs_head
    b = pack(prompts, responses, pad)
    weights = [torch.randn(b.response_mask.shape, generator=g) for _ in range(2)]
    a = _forward_and_grads(model, lambda: forward_logprobs(model, b, with_entropy=True), weights)
    c = _forward_and_grads(model, lambda: shared_prefix_forward(model, prompts, responses, pad, with_entropy=True),
                           weights)
    assert (a[0] - c[0]).abs().max().item() <= TOL and (a[1] - c[1]).abs().max().item() <= TOL
    assert max((a[2][n] - c[2][n]).abs().max().item() for n in a[2]) <= TOL


def test_zero_pads_clears_only_the_positions_the_mask_leaves_out():
    """A NaN in a pad's cached state survives a zero attention weight (0 * NaN = NaN), so the prefix cache
    zeroes pads; real positions pass through untouched, in every layer, keys and values alike."""
    from seedrl.models.prefix import _zero_pads

    mask = torch.tensor([[0, 0, 1], [1, 1, 1]])
    k, v = torch.randn(2, 2, 3, 4), torch.randn(2, 2, 3, 4)
    k[0, :, :2], v[0, :, :2] = float("nan"), float("inf")
    out = _zero_pads([(k, v), (k + 1, v - 1)], mask)
    assert len(out) == 2
    for (ok, ov), (ik, iv) in zip(out, [(k, v), (k + 1, v - 1)]):
        assert torch.isfinite(ok).all() and torch.isfinite(ov).all()
        assert (ok[0, :, :2] == 0).all() and (ov[0, :, :2] == 0).all()
        assert torch.equal(ok[0, :, 2:], ik[0, :, 2:]) and torch.equal(ov[1], iv[1])


def test_the_tree_scoring_plan_on_a_hand_batch():
    """Prompt-sorted micro-batches, each counted as the update's tree (head once, each distinct prompt
    once, each sample's last prompt token and response); no micro-batches when none forms a tree."""
    head = list(range(100, 150))
    a, b = head + list(range(300, 340)), head + list(range(400, 440))  # 90 tokens, 50 shared
    prompts, responses = [b, a, b, a], [[1], [2, 3], [4], [5]]
    chunks, tokens, trees = plan_tree_scoring(prompts, responses, 4)
    assert chunks == [[1, 3, 0, 2]] and trees == 1  # a's before b's, input order within each
    assert tokens == 50 + 2 * (90 - 1 - 50) + (2 + 3 + 2 + 2)
    assert tokens < tokens_run(prompts, responses, plan_shared_prefixes(prompts, responses))[1] == 4 * 90 + 5 - 89 - 89
    chunks, tokens, trees = plan_tree_scoring(prompts, responses, 2)  # [a, a] and [b, b]: no shared head, trees
    assert chunks == [[1, 3], [0, 2]] and trees == 2 and tokens == 2 * 89 + (3 + 2 + 2 + 2)
    other = [list(range(500 + 90 * i, 590 + 90 * i)) for i in range(4)]  # nothing shared
    assert plan_tree_scoring(other, responses, 4) == ([], 4 * 90 + 5, 0)


@pytest.mark.parametrize("mbs", [16, 20])
def test_two_levels_of_sharing_take_the_tree_and_score_as_the_plain_path(model, tiny_tokenizer, mbs, monkeypatch):
    """A played batch's shape: every prompt begins with the same instructions and each group of four
    repeats its step-0 board, beside later steps. The tree plan runs fewer tokens than one level of groups,
    so the scoring passes take it, and every sample's log-probs equal the plain path's within 1e-5."""
    import seedrl.models.prefix as prefix_mod

    prompts = [encode_messages(tiny_tokenizer, _messages(t, 0)) for t in range(4) for _ in range(4)]
    prompts += [encode_messages(tiny_tokenizer, _messages(t, 1)) for t in range(4)]
    responses = _responses(len(prompts), 3)
    chunks, tokens, _ = plan_tree_scoring(prompts, responses, mbs)
    assert chunks and tokens < tokens_run(prompts, responses, plan_shared_prefixes(prompts, responses))[1]
    assert sorted(i for c in chunks for i in c) == list(range(len(prompts))) and max(map(len, chunks)) <= mbs
    taken, real = [], prefix_mod._tree_logprobs
    monkeypatch.setattr(prefix_mod, "_tree_logprobs", lambda *a, **k: taken.append(1) or real(*a, **k))
    _assert_matches_plain(model, prompts, responses, tiny_tokenizer.pad_token_id, mbs)
    assert taken
