"""rollout.backend=vllm with a vision-language policy: the engine gets each prompt's images as multi-modal
data and the prompt's ids with one placeholder per image, expands them itself, and its log-probs equal the
trainer's scoring of the same token ids and pixel values (the text path's tolerance).

Marker ``vllm`` (``make test-vllm``; skipped where vLLM does not import, failed under
``SEEDRL_REQUIRE_VLLM=1``). The policy is the built-in tiny Qwen2.5-VL with two attention heads instead
of four: vLLM's CPU attention needs a head size that is a multiple of 32."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from seedrl.envs.ezpoints.cards import render_table
from seedrl.errors import SeedRLError
from seedrl.models import vision
from seedrl.models.loading import load_model, load_tokenizer
from seedrl.models.scoring import batched_logprobs
from seedrl.rollout.backends import HFBackend, SamplingParams, make_backend
from seedrl.rollout.runner import encode_step
from tests.helpers import metric_rows, need_vllm

VL = "tiny-qwen2.5-vl"
TOL = 1e-4  # the text path's (tests/rollout/test_vllm_backend.py)

pytestmark = pytest.mark.vllm



@pytest.fixture(scope="module")
def vl():
    """(tokenizer, policy, engine): the tiny Qwen2.5-VL with head size 32."""
    need_vllm()
    kind, text, vis = vision.TINY_VL_CONFIGS[VL]
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(vision.TINY_VL_CONFIGS, VL, (kind, dict(text, num_attention_heads=2), vis))
        tok = load_tokenizer(VL)
        model = load_model(VL, tokenizer=tok, init_seed=1)
    engine = make_backend("vllm", model, tok, seed=0, kv_cache_gb=0.25, max_model_len=2048)
    yield tok, model, engine
    engine.close()


def _batch(tok):
    """Three prompts: two images (a card table, a noise image of another shape), one image, none."""
    rng = np.random.default_rng(0)
    msgs = [[{"role": "user", "content": "Two frames, then act."}],
            [{"role": "user", "content": "One frame and a longer text to pad the other rows."}],
            [{"role": "user", "content": "text only"}]]
    imgs = [[render_table(["H2", "S10"], ["2"]), rng.integers(0, 256, (90, 130, 3), dtype=np.uint8)],
            [render_table(["D6", "C6"], [])], []]
    enc = [encode_step(tok, m, i) for m, i in zip(msgs, imgs)]
    return [e[0] for e in enc], [e[1] for e in enc]


def _worst_gap(gens, model, prompts, mms, tok) -> float:
    ref = batched_logprobs(model, prompts, [g.token_ids for g in gens], tok.pad_token_id, 3, images=mms)
    assert all(len(g.logprobs) == len(g.token_ids) > 0 for g in gens)
    return max(float((torch.tensor(g.logprobs) - r).abs().max()) for g, r in zip(gens, ref))


def test_image_prompts_sample_with_the_trainers_logprobs_before_and_after_a_weight_sync(vl):
    tok, model, engine = vl
    prompts, mms = _batch(tok)
    assert mms[2] is None and len(mms[0].raw) == 2
    for params in (SamplingParams(max_new_tokens=12, stop=[]),
                   SamplingParams(max_new_tokens=12, temperature=0.7, top_p=0.9, stop=[]),
                   SamplingParams(max_new_tokens=12, greedy=True, stop=[])):
        gens = engine.generate(prompts, params, seed=5, images=mms)
        assert _worst_gap(gens, model, prompts, mms, tok) <= TOL
    hf = HFBackend(model, tok).generate(prompts, SamplingParams(max_new_tokens=12, greedy=True, stop=[]), seed=5,
                                        images=mms)
    assert [g.token_ids for g in hf] == [g.token_ids for g in gens]

    # change only the vision tower: the text row cannot tell, the image rows' encodings must be redone
    original = {k: v.clone() for k, v in model.state_dict().items()}
    try:
        with torch.no_grad():
            g = torch.Generator().manual_seed(0)
            for name, p in model.named_parameters():
                if ".visual." in f".{name}":
                    p.add_(0.5 * torch.randn(p.shape, generator=g))
        engine.sync_weights(model)
        params = SamplingParams(max_new_tokens=12, stop=[])
        fresh = engine.generate(prompts, params, seed=5, images=mms)
        assert _worst_gap(fresh, model, prompts, mms, tok) <= TOL
        model.load_state_dict(original)
        stale = engine.generate(prompts, params, seed=5, images=mms)  # the engine still holds the changed tower
        assert _worst_gap(stale[:2], model, prompts[:2], mms[:2], tok) > 1e-3
        assert _worst_gap(stale[2:], model, prompts[2:], mms[2:], tok) <= TOL
    finally:
        model.load_state_dict(original)
        engine.sync_weights(model)


def test_the_engine_expands_the_images_to_the_policys_placeholders(vl):
    tok, model, engine = vl
    prompts, mms = _batch(tok)
    image = model.config.image_token_id
    collapsed = vision.collapse_image_placeholders(prompts[0], image)
    assert collapsed.count(image) == 2 and len(collapsed) < len(prompts[0])
    assert [t for t in collapsed if t != image] == [t for t in prompts[0] if t != image]
    # images whose sizes give other grids than the ids were expanded for: a one-line error, never a silent
    # mismatch between the engine's prompt and the one the trainer scores
    other = vision.ImageInputs(mms[1].pixel_values, mms[1].image_grid_thw, raw=[np.zeros((300, 120, 3), np.uint8)])
    with pytest.raises(SeedRLError, match="placeholder tokens") as e:
        engine.generate([prompts[1]], SamplingParams(max_new_tokens=2, stop=[]), seed=0, images=[other])
    assert "\n" not in str(e.value)
    with pytest.raises(SeedRLError, match="images themselves"):
        bare = vision.ImageInputs(mms[1].pixel_values, mms[1].image_grid_thw)
        engine.generate([prompts[1]], SamplingParams(max_new_tokens=2, stop=[]), seed=0, images=[bare])


def test_images_reach_the_engine_resized_as_the_policys_processor_resizes_them(vl):
    """The built-in processor resizes with PIL, the engine's (transformers' default) with torchvision: they
    differ by more than 1e-3 on a card table, so the engine gets the images resized by the policy's rule."""
    tok, _, engine = vl
    assert engine._image_mode == "resized"
    from transformers import AutoProcessor

    theirs = AutoProcessor.from_pretrained(str(engine._dir)).image_processor
    ours = vision.processor_of(tok).image_processor
    table = render_table(["H2", "S10"], ["2", "*"])
    want = ours(images=[table], return_tensors="pt")["pixel_values"]
    raw = theirs(images=[table], return_tensors="pt")["pixel_values"]
    resized = theirs(images=[vision.resized_like(vision.processor_of(tok), table)], return_tensors="pt")["pixel_values"]
    assert float((raw - want).abs().max()) > 1e-3
    assert float((resized - want).abs().max()) <= 1e-5


def test_a_vision_token_is_never_sampled_and_the_recorded_logprobs_stay_the_policys(vl):
    """A policy made to favour the image placeholder above all else: the HF backend never samples it and
    neither may the engine; the recorded log-probs are still the policy's own (before the ban)."""
    tok, model, engine = vl
    prompts, mms = _batch(tok)
    image = model.config.image_token_id
    emb = model.get_input_embeddings().weight
    original = emb.detach().clone()
    try:
        with torch.no_grad():  # the placeholder's row (tied: its output logit; its input is the image's)
            out = model(input_ids=torch.tensor([prompts[2]]), output_hidden_states=True)
            h = out.hidden_states[-1][0, -1]
            emb[image] = 60 * h / h.norm() ** 2
            assert int(model(input_ids=torch.tensor([prompts[2]])).logits[0, -1].argmax()) == image
        engine.sync_weights(model)
        gens = engine.generate(prompts, SamplingParams(max_new_tokens=8, greedy=True, stop=[]), seed=0, images=mms)
        assert not any(set(g.token_ids) & set(vision.vision_token_ids(model)) for g in gens)
        assert _worst_gap(gens, model, prompts, mms, tok) <= TOL
    finally:
        with torch.no_grad():
            emb.copy_(original)
        engine.sync_weights(model)


def test_torchvision_imports_beside_the_cpu_torch():
    """``make vllm-env`` keeps PyPI's (CUDA) torchvision, whose ops library cannot load beside the CPU
    torch, and installs a ``.pth`` that declares the two ops its import registers unchecked."""
    need_vllm()
    code = ("import torchvision, torch; from transformers import Qwen2VLVideoProcessor; "
            "from seedrl._torchvision_cpu import UNGUARDED_OPS; "
            "print(all(hasattr(torch.ops.torchvision, o) for o in UNGUARDED_OPS))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "True", r.stderr[-2000:]



def test_seed_on_ezpoints_with_vllm_trains_like_hf(vl, tmp_path):
    """The tiny EZPoints SEED preset through the engine: rollouts, the self-analyses over image trajectories
    and the evaluation; the engine follows the trainer's weights after every update (its log-probs within
    the text path's tolerance of the trainer's), and the run logs what the HF run logs."""
    from seedrl.config import TrainConfig, load_config
    from seedrl.models.loading import save_model
    from seedrl.train.trainer import Trainer

    tok, model, _ = vl
    save_model(model, tok, tmp_path / "start")
    sets = [f"model.name={tmp_path / 'start'}", "model.precision=fp32", "torch_threads=1", "log.progress=false",
            "rollout.vllm_kv_cache_gb=0.25", "rollout.vllm_max_model_len=4096"]
    for name, backend in (("hf", "hf"), ("vllm", "vllm")):
        cfg = load_config(TrainConfig, "configs/ezpoints_seed_tiny.yaml",
                          [*sets, f"run_dir={tmp_path / name}", f"rollout.backend={backend}"])
        Trainer(cfg).train()
    hf, full = metric_rows(tmp_path / "hf"), metric_rows(tmp_path / "vllm")
    assert len(full) == 2 and [set(r) for r in full] == [set(r) for r in hf]
    for r in full:
        assert r["check/rollout_logp_drift"] <= TOL, r["check/rollout_logp_drift"]
    skills = [json.loads(line) for line in (tmp_path / "vllm" / "skills.jsonl").read_text().splitlines()]
    assert sorted({s["iteration"] for s in skills}) == [1, 2]
    assert len(skills) == len((tmp_path / "hf" / "skills.jsonl").read_text().splitlines())
