"""A vision-language policy through the one loop (issue 45): SEED on visual Sokoban and EZPoints with the tiny
Qwen2.5-VL, the teacher re-scoring with the student's images, dedupe that tells images apart, and the policy
reading an image trajectory with SEED's visual analysis prompt."""

from __future__ import annotations

import json
import math

import pytest
import torch

from seedrl.config import TrainConfig, load_config
from seedrl.models.vision import ImageInputs
from seedrl.rollout.types import StepSample
from seedrl.train.scoring import unique_pairs
from seedrl.train.trainer import Trainer
from seedrl.train.update import UpdateBatch, sample_keys
from tests.helpers import FixedAnalyzer


def _cfg(preset: str, run_dir, **over) -> TrainConfig:
    sets = [f"run_dir={run_dir}", "iterations=1", "model.precision=fp32", "eval.num_tasks=0", "log.progress=false",
            "env.max_steps=2", "rollout.max_new_tokens=8", "torch_threads=1"]
    return load_config(TrainConfig, preset, sets + [f"{k}={v}" for k, v in over.items()])


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["configs/sokoban_visual_seed_tiny.yaml", "configs/ezpoints_seed_tiny.yaml"])
def test_seed_iteration_with_images_rescores_with_the_same_images_and_updates(tmp_path, preset):
    tr = Trainer(_cfg(preset, tmp_path / "run"))
    tr.analyzer = FixedAnalyzer()  # a skill for even trajectories: the teacher path runs
    seen = []
    score = tr.scorer.score

    def spy(model, prompts, responses, images=None):
        seen.append(images)
        return score(model, prompts, responses, images)

    tr.scorer.score = spy
    tr.train()
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    (row,) = rows
    assert 0 < row["skills/signal_frac"] < 1 and math.isfinite(row["loss/opd"])
    assert row["grad_norm"] > 0 and row["optim_steps"] > 0
    # old, reference and teacher scoring: every sample with its images
    assert len(seen) == 3 and all(imgs and all(isinstance(x, ImageInputs) for x in imgs) for imgs in seen)
    assert (tmp_path / "run" / "checkpoints" / "iter_000001" / "model" / "processor_config.json").is_file()


def _sample(pixels: torch.Tensor) -> StepSample:
    mm = ImageInputs(pixels, torch.tensor([[1, 2, 2]]))
    return StepSample(prompt_ids=[1, 5, 5, 2], response_ids=[7], logprobs=[-1.0], traj_id=0, group_id=0, step=0,
                      reward=0.0, action_valid=True, images=mm)


def test_samples_with_the_same_token_ids_but_other_images_are_never_merged():
    """Same-sized images share their placeholder ids: scoring's dedupe and the update's merge keys tell them
    apart by the image digest (and still merge true copies)."""
    a, b, c = _sample(torch.zeros(4, 8)), _sample(torch.ones(4, 8)), _sample(torch.zeros(4, 8))
    assert a.prompt_ids == b.prompt_ids and a.image_digest != b.image_digest == _sample(torch.ones(4, 8)).image_digest
    where, unique = unique_pairs([a, b, c])
    assert unique == [0, 1] and where == [0, 1, 0]
    old = [torch.tensor([-1.0])] * 3
    keys = sample_keys(UpdateBatch([a, b, c], old, torch.zeros(3)))
    assert keys[0] != keys[1] and keys[0] == keys[2]


def test_the_policy_reads_an_image_trajectory_with_the_seed_visual_prompt(tmp_path):
    from seedrl.models.loading import load_model, load_tokenizer
    from seedrl.rollout.backends import HFBackend
    from seedrl.skills.analyzers.self_analyzer import SelfAnalyzer
    from seedrl.skills.prompts import IMAGE_MARK, analysis_prompt
    from tests.models.test_vision import _visual_rollout

    tok = load_tokenizer("tiny-qwen2.5-vl")
    model = load_model("tiny-qwen2.5-vl", tokenizer=tok)
    traj = _visual_rollout(tok, model)[0]
    assert len(traj.steps) == 2
    traj.steps[0].response_text += " <image>"  # a response cannot add a placeholder
    text = analysis_prompt(traj, variant="seed_visual")
    # SEED's seed_visual: each step's observation is its image, the rest is the seed prompt
    assert text.count(IMAGE_MARK) == len(traj.steps) and text.count(f"Observation: {IMAGE_MARK}\n") == len(traj.steps)
    assert "[image]" in text
    assert text.replace(f"Observation: {IMAGE_MARK}", "Observation: x").split("Episode:")[0] == \
        analysis_prompt(traj, variant="seed").split("Episode:")[0]
    backend = HFBackend(model, tok)
    calls = []
    generate = backend.generate

    def spy(prompts, params, seed, images=None):
        calls.append((prompts, images))
        return generate(prompts, params, seed, images=images)

    backend.generate = spy
    analyzer = SelfAnalyzer(backend, tok, max_new_tokens=4, analysis_prompt="seed_visual", min_words=0)
    (result,) = analyzer.analyze([traj])
    ((prompts, images),) = calls
    (mm,) = images
    # every step's frame, in step order, with its placeholders in the prompt
    expect = torch.cat([s.images.pixel_values for s in traj.steps])
    assert torch.equal(mm.pixel_values, expect)
    assert prompts[0].count(model.config.image_token_id) == int(mm.image_grid_thw.prod(-1).sum()) // 4
    assert result.prompt_tokens == len(prompts[0])
    # a prompt over the limit loses whole steps with their images, never a part of one
    small = SelfAnalyzer(backend, tok, max_new_tokens=4, analysis_prompt="seed_visual", min_words=0,
                         max_prompt_tokens=len(prompts[0]) - 1)
    ids, kept = small.prompt_inputs(traj)
    assert len(ids) < len(prompts[0]) and kept.image_grid_thw.shape[0] == len(traj.steps) - 1
    assert ids.count(model.config.image_token_id) == int(kept.image_grid_thw.prod(-1).sum()) // 4


_FSDP_SCRIPT = r'''
import copy, os, sys
import numpy as np, torch, torch.distributed as dist
dist.init_process_group("gloo", rank=0, world_size=1, init_method="tcp://127.0.0.1:" + sys.argv[1])
from seedrl.models.loading import load_model, load_tokenizer
from seedrl.models.prefix import train_forward
from seedrl.models.scoring import batched_logprobs
from seedrl.models.vision import encode_chat
from seedrl.train import fsdp
from seedrl.train.fsdp import FsdpPlan
tok = load_tokenizer("tiny-qwen2.5-vl")
model = load_model("tiny-qwen2.5-vl", tokenizer=tok)
plain = copy.deepcopy(model)
ids, mm = encode_chat(tok, [{"role": "user", "content": "go"}], [np.full((64, 64, 3), 90, np.uint8)])
wrapped = fsdp.shard(model, FsdpPlan())
with fsdp.gathered(model):
    a = batched_logprobs(model, [ids], [[5, 6, 7]], tok.pad_token_id, 1, images=[mm])[0]
b = batched_logprobs(plain, [ids], [[5, 6, 7]], tok.pad_token_id, 1, images=[mm])[0]
_, lp, _ = train_forward(model, [ids], [[5, 6, 7]], tok.pad_token_id, "cpu", False, images=[mm])
lp.sum().backward()
grads = [n for n, p in model.named_parameters() if "visual" in n and p.grad is not None]
print("RESULT", ",".join(wrapped), float((a - b).abs().max()), len(grads))
dist.destroy_process_group()
'''


@pytest.mark.slow
def test_fsdp_shards_the_vision_tower_block_by_block(tmp_path):
    """FSDP wraps each vision block as it wraps each decoder layer (the model's ``_no_split_modules``); the
    gathered model scores an image prompt as the unsharded one does, and gradients reach the tower."""
    import os
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = tmp_path / "fsdp_vl.py"
    script.write_text(_FSDP_SCRIPT)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.getcwd()}
    out = subprocess.run([sys.executable, str(script), str(port)], capture_output=True, text=True, env=env,
                         timeout=300)
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT")), None)
    assert line is not None, out.stderr[-2000:]
    _, wrapped, diff, grads = line.split()
    assert set(wrapped.split(",")) == {"Qwen2_5_VLDecoderLayer", "Qwen2_5_VLVisionBlock"}
    assert float(diff) < 1e-6 and int(grads) > 0


@pytest.mark.slow
def test_a_vl_run_resumes_from_its_checkpoint_as_if_never_stopped(tmp_path):
    """The checkpoint's model folder holds the hub layout of the names (``visual.*``, ``model.layers.*``):
    resume maps them back onto the model and goes on exactly as the uninterrupted run."""
    preset = "configs/ezpoints_seed_tiny.yaml"
    whole = Trainer(_cfg(preset, tmp_path / "a", iterations=2, save_every=1))
    whole.train()
    first = Trainer(_cfg(preset, tmp_path / "b", iterations=1, save_every=1))
    first.train()
    again = Trainer(_cfg(preset, tmp_path / "b", iterations=2, save_every=1), resume=True)
    assert again.iteration == 1
    again.train()
    a, b = whole.model.state_dict(), again.model.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    rows = [(tmp_path / d / "metrics.jsonl").read_text().splitlines()[-1] for d in ("a", "b")]
    strip = [{k: v for k, v in json.loads(r).items() if not k.startswith("time/")} for r in rows]
    assert strip[0] == strip[1]


@pytest.mark.slow
def test_two_processes_with_images_compute_the_one_process_update(tmp_path):
    """DDP over 2 processes (each plays its block of tasks with their images) gives the update of one
    process that plays the same 2 blocks (``rollout_shards=2``), as for text envs."""
    import socket

    from seedrl.config import save_config
    from tests.train.test_distributed import _launch, _max_diff, _weights

    over = {"iterations": 1, "save_every": 1, "optim.micro_batch_size": 1}
    ref_dir, run_dir = tmp_path / "ref", tmp_path / "ddp"
    ref = Trainer(_cfg("configs/ezpoints_seed_tiny.yaml", ref_dir, **over), rollout_shards=2)
    init = {k: v.detach().clone() for k, v in ref.model.state_dict().items()}
    ref.train()
    cfg = _cfg("configs/ezpoints_seed_tiny.yaml", run_dir, **over)
    save_config(cfg, tmp_path / "ddp.yaml")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    _launch(["-m", "seedrl.cli", "train", "--config", str(tmp_path / "ddp.yaml")], port, tmp_path)
    from seedrl.models.vision import saved_to_model_keys

    moved = _max_diff(init, saved_to_model_keys(_weights(ref_dir, 1), ref.model))
    assert moved > 1e-4  # the update moved the weights by far more than the tolerance below
    assert _max_diff(_weights(ref_dir, 1), _weights(run_dir, 1)) < 1e-5


def test_replaying_text_demonstrations_to_a_vl_policy_is_refused_in_one_line(tmp_path):
    from seedrl.errors import SeedRLError
    from seedrl.models.loading import load_tokenizer
    from seedrl.train.update import replay_pool

    cfg = _cfg("configs/sokoban_visual_seed_tiny.yaml", tmp_path / "run", **{"algo.replay_coef": 0.1})
    with pytest.raises(SeedRLError, match="replays text demonstrations, which carry no images"):
        replay_pool(cfg, load_tokenizer("tiny-qwen2.5-vl"))
