"""Vision-language policies (issue 45): the tiny Qwen2.5-VL / Qwen2-VL built from config with the shipped
processor, and the invariants of the image path: what generation saw is what scoring sees, scored log-probs
equal a plain full forward, the teacher's prompt is the student's plus the skill block with the same images,
LoRA only on the language model, the real presets' architecture builds tiny."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from seedrl.envs.registry import make_env
from seedrl.models.loading import load_model, load_tokenizer, save_model
from seedrl.models.scoring import batched_logprobs
from seedrl.models.vision import (
    IMAGE_TOKEN,
    TINY_VL_CONFIGS,
    VISION_TOKENS,
    encode_chat,
    is_vision_model,
    model_class,
    processor_of,
    tiny_vl_config,
    vl_model_type,
)
from seedrl.rollout.backends import HFBackend, SamplingParams
from seedrl.rollout.runner import RolloutSettings, encode_step, rollout
from seedrl.skills.injection import inject_into_messages

VL = "tiny-qwen2.5-vl"


@pytest.fixture(scope="module")
def vl():
    tok = load_tokenizer(VL)
    return tok, load_model(VL, tokenizer=tok)


def _copy(v):
    return v.detach().clone() if isinstance(v, torch.Tensor) else v


class Recorder:
    """Keeps the inputs of every forward of a VL model (``calls``: its keyword arguments) and of its vision
    tower (``pixels``: (pixel values, grid) per call; generation encodes the images before its first step,
    scoring inside the forward, both through the tower)."""

    def __init__(self, model):
        self.calls, self.pixels = [], []

        def hook(module, args, kw):
            self.calls.append({k: _copy(v) for k, v in kw.items()})

        def tower(module, args, kw):
            self.pixels.append((_copy(args[0] if args else kw["hidden_states"]), _copy(kw.get("grid_thw"))))

        visual = next(m for n, m in model.named_modules() if n.endswith("visual"))
        self._handles = [model.register_forward_pre_hook(hook, with_kwargs=True),
                         visual.register_forward_pre_hook(tower, with_kwargs=True)]

    def clear(self):
        self.calls.clear()
        self.pixels.clear()

    def restore(self):
        for h in self._handles:
            h.remove()


def _images(n, size=96, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (size, size, 3), dtype=np.uint8) for _ in range(n)]


@pytest.mark.parametrize("name", list(TINY_VL_CONFIGS))
def test_tiny_vl_builds_from_config_with_the_shipped_processor(name):
    tok = load_tokenizer(name)
    proc = processor_of(tok)
    assert proc is not None and tok.padding_side == "left"
    assert all(tok.convert_tokens_to_ids(t) != tok.unk_token_id for t in VISION_TOKENS)
    model = load_model(name, tokenizer=tok)
    assert type(model).__name__ == model_class(TINY_VL_CONFIGS[name][0]).__name__
    assert sum(p.numel() for p in model.parameters()) < 400_000  # tiny: a CPU test
    ids, mm = encode_chat(tok, [{"role": "user", "content": "the board"}], _images(2))
    # transformers' processor expanded each placeholder to its image's merged patches
    merge = proc.image_processor.merge_size ** 2
    assert ids.count(model.config.image_token_id) == int(mm.image_grid_thw.prod(-1).sum()) // merge
    assert mm.pixel_values.shape[0] == int(mm.image_grid_thw.prod(-1).sum())
    assert tok.decode(ids).count("<|vision_start|>") == 2


@pytest.mark.parametrize("name", list(TINY_VL_CONFIGS))
def test_scored_logprobs_equal_a_plain_full_forward_and_the_generator(name):
    """Left-padded rows with two images, one image and none, scored in one micro-batch: each row's log-probs
    equal those of an unpadded forward of that row alone (fp32, 1e-5) and the generator's recorded ones; a
    batch without images (a VL policy on a text env) too."""
    tok = load_tokenizer(name)
    model = load_model(name, tokenizer=tok)
    msgs = [[{"role": "user", "content": "Two frames, then act."}],
            [{"role": "user", "content": "One frame and a much longer text to pad the other rows."}],
            [{"role": "user", "content": "text only"}]]
    imgs = [_images(2, seed=1), _images(1, 80, seed=2), []]
    enc = [encode_step(tok, m, i) for m, i in zip(msgs, imgs)]
    prompts, mms = [e[0] for e in enc], [e[1] for e in enc]
    assert mms[2] is None
    gens = HFBackend(model, tok).generate(prompts, SamplingParams(max_new_tokens=6, stop=[]), seed=3, images=mms)
    responses = [g.token_ids for g in gens]
    scored = batched_logprobs(model, prompts, responses, tok.pad_token_id, micro_batch_size=3, images=mms)
    for p, mm, r, lp, g in zip(prompts, mms, responses, scored, gens):
        ids = torch.tensor([p + r])
        kw = {} if mm is None else {"pixel_values": mm.pixel_values, "image_grid_thw": mm.image_grid_thw,
                                   "mm_token_type_ids": (ids == model.config.image_token_id).long()}
        with torch.no_grad():
            logits = model(input_ids=ids, **kw).logits[0].float().log_softmax(-1)
        full = logits[len(p) - 1:-1].gather(-1, torch.tensor(r)[:, None])[:, 0]
        assert torch.allclose(lp, full, atol=1e-5), (lp - full).abs().max()
        assert torch.allclose(lp, torch.tensor(g.logprobs), atol=1e-5)
        assert not set(r) & {model.config.image_token_id, model.config.video_token_id}  # text responses only
    alone = batched_logprobs(model, [prompts[2], prompts[2]], [responses[2], responses[0]], tok.pad_token_id, 2)
    assert torch.allclose(alone[0], scored[2], atol=1e-5)


def test_an_image_prompt_for_a_text_policy_is_a_one_line_error(tiny_tokenizer):
    from seedrl.errors import SeedRLError

    with pytest.raises(SeedRLError, match="has images but the policy is a text model; use a vision-language model"):
        encode_step(tiny_tokenizer, [{"role": "user", "content": "x"}], _images(1))


def _visual_rollout(tok, model, env="sokoban", kwargs=None, history=2):
    kwargs = kwargs or {"dim": [5, 5], "mode": "rgb_array"}
    from seedrl.envs.registry import env_class

    settings = RolloutSettings(env_title=env_class(env).title, max_steps=2, history_length=history,
                               sampling=SamplingParams(max_new_tokens=6, stop=[]), env_workers=1)
    ids = make_env(env, **kwargs).panel_task_ids("train", 2, **kwargs)
    return rollout(HFBackend(model, tok), tok, lambda: make_env(env, **kwargs), ids, 2, settings, seed=0)


def test_generation_and_scoring_see_the_same_image_tokens_and_pixels(vl, tmp_path):
    """The rollout's generate calls and the loop's scoring (old log-probs, the update's forward) get the same
    placeholder tokens and bit-identical pixel values, per sample."""
    from seedrl.methods.runtime import build_method
    from seedrl.train.scoring import Scorer
    from tests.helpers import tiny_cfg

    tok, model = vl
    rec = Recorder(model)
    try:
        trajs = _visual_rollout(tok, model)
        gen_calls, gen_pixels = list(rec.calls), list(rec.pixels)
        rec.clear()
        samples = [s for t in trajs for s in t.steps]
        assert all(s.images is not None for s in samples)
        cfg = tiny_cfg(tmp_path, **{"model.name": VL, "optim.micro_batch_size": 64, "optim.dedupe": "false"})
        scorer = Scorer(cfg, model, None, tok, type("P", (), {"bf16": False})(), build_method(cfg))
        scorer.old_logprobs(samples)
        score_calls, score_pixels = list(rec.calls), list(rec.pixels)
    finally:
        rec.restore()
    image_id, pad = model.config.image_token_id, tok.pad_token_id
    # generation: one prompt pass per turn (the cache's first forward), its images through the tower once
    prefill = [c for c in gen_calls if c["input_ids"].shape[1] > 1]  # later steps feed one token
    turns = max(s.step for s in samples) + 1
    assert len(prefill) == len(gen_pixels) == turns and len(score_calls) == len(score_pixels) == 1
    seen_rows = []
    for c in prefill:
        for row in c["input_ids"].tolist():
            k = next(i for i, t in enumerate(row) if t != pad)  # left pads off
            seen_rows.append(row[k:])
    by_turn = [[s for s in samples if s.step == t] for t in range(turns)]  # a turn's rows in episode order
    assert seen_rows == [s.prompt_ids for turn in by_turn for s in turn]
    for s in samples:  # each image's placeholders, expanded by the processor: one per merged patch
        assert s.prompt_ids.count(image_id) == int(s.images.image_grid_thw.prod(-1).sum()) // 4
    for (px, grid), turn in zip(gen_pixels, by_turn):
        assert torch.equal(px, torch.cat([s.images.pixel_values for s in turn]))
        assert torch.equal(grid, torch.cat([s.images.image_grid_thw for s in turn]))
    # scoring: the rows (sorted by length) hold the same prompt ids, the batch the same pixels in row order
    sc = score_calls[0]
    order = sorted(range(len(samples)), key=lambda i: len(samples[i].prompt_ids) + len(samples[i].response_ids))
    for row, att, i in zip(sc["input_ids"], sc["attention_mask"], order):
        real = row[att.bool()].tolist()
        assert real[:len(samples[i].prompt_ids)] == samples[i].prompt_ids
    assert torch.equal(sc["pixel_values"], torch.cat([samples[i].images.pixel_values for i in order]))
    assert torch.equal(sc["image_grid_thw"], torch.cat([samples[i].images.image_grid_thw for i in order]))
    assert torch.equal(score_pixels[0][0], sc["pixel_values"])
    assert sc["position_ids"].shape[0] == 3  # the model's multimodal positions, not 1-D ones


def test_teacher_prompt_is_the_student_prompt_plus_the_skill_block_with_the_same_images(vl, tmp_path):
    from seedrl.methods.runtime import build_method
    from seedrl.train.scoring import Scorer
    from tests.helpers import tiny_cfg

    tok, model = vl
    trajs = _visual_rollout(tok, model)
    sample = trajs[0].steps[-1]
    skill = "Push the box toward the target from the opposite side."
    cfg = tiny_cfg(tmp_path, **{"model.name": VL, "algo.name": "seed"})
    scorer = Scorer(cfg, model, None, tok, type("P", (), {"bf16": False})(), build_method(cfg))
    teacher = scorer.teacher_prompt_ids(sample, skill)
    # the same prompt with the skill block after the task line, encoded with the same images
    expected, again = encode_step(tok, inject_into_messages(sample.messages, skill), sample.images.raw)
    assert teacher == expected
    assert torch.equal(again.pixel_values, sample.images.pixel_values)
    assert torch.equal(again.image_grid_thw, sample.images.image_grid_thw)
    student_text, teacher_text = tok.decode(sample.prompt_ids), tok.decode(teacher)
    assert skill in teacher_text and skill not in student_text
    assert teacher_text.count(IMAGE_TOKEN) == student_text.count(IMAGE_TOKEN) > 0
    # the teacher's text is the student's with one block inserted, the skill's, after the images
    p = next(k for k, (a, b) in enumerate(zip(student_text, teacher_text)) if a != b)
    q = next(k for k, (a, b) in enumerate(zip(reversed(student_text), reversed(teacher_text))) if a != b)
    q = min(q, len(student_text) - p)  # the common head and tail must not overlap
    inserted = teacher_text[p:len(teacher_text) - q]
    assert student_text[:p] + inserted + student_text[p:] == teacher_text
    assert skill in inserted and IMAGE_TOKEN not in inserted and IMAGE_TOKEN in student_text[:p]
    # re-scoring hands the model the student's own image tensors
    rec = Recorder(model)
    try:
        scorer.teacher_logprobs([sample], {sample.traj_id: skill})
    finally:
        rec.restore()
    (call,) = rec.calls
    assert torch.equal(call["pixel_values"], sample.images.pixel_values)
    assert call["input_ids"][0][call["attention_mask"][0].bool()].tolist()[:len(teacher)] == teacher


def test_lora_adapts_the_language_model_only(vl):
    tok, _ = vl
    model = load_model(VL, tokenizer=tok, lora={"r": 2})
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    assert names and all("lora_" in n for n in names)
    assert all("language_model" in n for n in names)
    assert not any("visual" in n for n in names)


def test_a_saved_vl_policy_loads_back_with_its_processor(vl, tmp_path):
    tok, model = vl
    save_model(model, tok, tmp_path / "m")
    assert is_vision_model(str(tmp_path / "m"))
    tok2 = load_tokenizer(str(tmp_path / "m"))
    model2 = load_model(str(tmp_path / "m"), tokenizer=tok2)
    a = encode_chat(tok, [{"role": "user", "content": "go"}], _images(1))
    b = encode_chat(tok2, [{"role": "user", "content": "go"}], _images(1))
    assert a[0] == b[0] and torch.equal(a[1].pixel_values, b[1].pixel_values)
    r = [[5, 6, 7]]
    assert torch.allclose(batched_logprobs(model, [a[0]], r, tok.pad_token_id, 1, images=[a[1]])[0],
                          batched_logprobs(model2, [b[0]], r, tok2.pad_token_id, 1, images=[b[1]])[0], atol=1e-6)


@pytest.mark.parametrize("preset,tiny", [("configs/sokoban_visual_seed_qwen2.5vl_3b.yaml", "tiny-qwen2.5-vl"),
                                         ("configs/ezpoints_grpo_qwen2.5vl_3b.yaml", "tiny-qwen2.5-vl")])
def test_the_3b_presets_architecture_builds_from_a_tiny_config(preset, tiny, vl):
    """The real presets name Qwen2.5-VL-3B; its class (the one ``load_model`` picks for that name) builds from
    the tiny config of the same model type and runs a forward with an image."""
    from seedrl.config import TrainConfig, load_config

    cfg = load_config(TrainConfig, preset, [])
    assert is_vision_model(cfg.model.name)
    kind = vl_model_type(cfg.model.name)
    assert kind == TINY_VL_CONFIGS[tiny][0] == "qwen2_5_vl"
    tok, _ = vl
    tiny_cfg = tiny_vl_config(tiny, tok)
    assert tiny_cfg.model_type == kind
    model = model_class(kind)(tiny_cfg)
    ids, mm = encode_chat(tok, [{"role": "user", "content": "x"}], _images(1))
    out = model(input_ids=torch.tensor([ids]), pixel_values=mm.pixel_values, image_grid_thw=mm.image_grid_thw,
                mm_token_type_ids=(torch.tensor([ids]) == tiny_cfg.image_token_id).long())
    assert out.logits.shape[:2] == (1, len(ids))
