"""SFT of a vision-language policy on an env that shows images (issue 45): the expert's demonstrations carry
the frames of their states, encoded as a rollout encodes them, and the loss reads the images."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from seedrl.config import SFTConfig, load_config
from seedrl.errors import SeedRLError
from seedrl.eval.evaluate import play_once
from seedrl.models.loading import load_model, load_tokenizer
from seedrl.models.prefix import train_forward
from seedrl.rollout.backends import HFBackend
from seedrl.train.sft import (
    decision_entropy,
    encode_rows,
    expert_demonstrations,
    greedy_responder,
    policy_demonstrations,
    run_sft,
    sft_train,
    tokenize_pairs,
)

PIXELS = {"dim": [5, 5], "mode": "rgb_array"}


@pytest.fixture(scope="module")
def vl():
    tok = load_tokenizer("tiny-qwen2.5-vl")
    return tok, load_model("tiny-qwen2.5-vl", tokenizer=tok)


def test_demonstrations_carry_the_frames_a_rollout_encodes_for_the_same_state(vl):
    tok, model = vl
    rows = expert_demonstrations("sokoban", PIXELS, ["5x5-b1-s0"], max_steps=1, history_length=2, noise=0.0, seed=0)
    assert len(rows) == 1 and len(rows[0]["images"]) == 1 and rows[0]["images"][0].ndim == 3
    pairs, images = encode_rows(tok, rows, 4096)
    (traj,) = play_once(HFBackend(model, tok), tok, "sokoban", PIXELS, ["5x5-b1-s0"], max_steps=1,
                        history_length=2, max_new_tokens=4)
    step = traj.steps[0]
    assert pairs[0][0] == step.prompt_ids  # the same template, placeholders and text as the rollout's prompt
    assert torch.equal(images[0].pixel_values, step.images.pixel_values)
    assert torch.equal(images[0].image_grid_thw, step.images.image_grid_thw)
    with pytest.raises(SeedRLError, match="carry images"):
        tokenize_pairs(tok, rows, 4096)  # the text-only encoder would drop them
    with pytest.raises(SeedRLError, match="never cut"):
        encode_rows(tok, rows, 20)


def test_the_sft_loss_reads_each_examples_images(vl):
    tok, model = vl
    rows = expert_demonstrations("sokoban", PIXELS, ["5x5-b1-s0", "5x5-b1-s1"], max_steps=2, history_length=2,
                                 noise=0.0, seed=0)
    pairs, images = encode_rows(tok, rows, 4096)
    assert images is not None and all(x is not None for x in images)

    def logp(imgs):
        with torch.no_grad():
            b, lp, _ = train_forward(model, [p for p, _ in pairs], [r for _, r in pairs], tok.pad_token_id, "cpu",
                                     False, images=imgs)
        return lp, b.response_mask

    def nll(imgs):
        lp, mask = logp(imgs)
        return float(-(lp.sum() / mask.sum()))

    # frames swapped between examples, or none: other log-probs, so each example's own frames reach the forward
    own = logp(images)[0]
    assert (own - logp(images[1:] + images[:1])[0]).abs().max() > 1e-2
    assert (own - logp(None)[0]).abs().max() > 1e-2 and abs(nll(images) - nll(None)) > 1e-3
    m = load_model("tiny-qwen2.5-vl", tokenizer=tok)
    (first,) = sft_train(m, tok, pairs, epochs=1, lr=0.0, batch_size=len(pairs), micro_batch_size=2, seed=0,
                         images=images, shared_prefix=True)
    assert first == pytest.approx(nll(images), rel=1e-5)
    # the label-smoothed path (a smoothing too small to matter) reads them too
    (smoothed,) = sft_train(load_model("tiny-qwen2.5-vl", tokenizer=tok), tok, pairs, epochs=1, lr=0.0,
                            batch_size=len(pairs), micro_batch_size=2, seed=0, images=images, label_smoothing=1e-7)
    assert smoothed == pytest.approx(nll(images), rel=1e-4)
    # the decision entropy too, each micro-batch with its own rows' frames
    ent = decision_entropy(model, tok, pairs, images=images, micro_batch_size=1)
    # one micro-batch holds every row's frames; another row's frame moves it by ~1e-3, batching by ~1e-7
    assert ent == pytest.approx(decision_entropy(model, tok, pairs, images=images, micro_batch_size=len(pairs)),
                                abs=1e-5)
    assert abs(ent - decision_entropy(model, tok, pairs, images=[images[0]] * len(pairs))) > 1e-4
    assert abs(ent - decision_entropy(model, tok, pairs, micro_batch_size=1)) > 1e-3


def _sft_cfg(tmp_path, **over) -> SFTConfig:
    sets = [f"run_dir={tmp_path / 'sft'}", "model.name=tiny-qwen2.5-vl", "model.precision=fp32", "torch_threads=1",
            "env.name=sokoban", 'env.kwargs={"dim": [5, 5], "mode": "rgb_array"}', "env.max_steps=3",
            "env.history_length=2", "demo_tasks=2", "epochs=1", "batch_size=4", "micro_batch_size=4",
            "eval.num_tasks=2", "eval.batch_size=2"]
    return load_config(SFTConfig, None, sets + [f"{k}={v}" for k, v in over.items()])


@pytest.mark.slow
def test_seedrl_sft_warm_starts_a_vision_language_policy_on_pixel_sokoban(tmp_path):
    summary = run_sft(_sft_cfg(tmp_path))
    assert summary["examples"] > 0 and summary["examples_with_images"] == summary["examples"]
    assert summary["eval_after"]["num_tasks"] == 2
    assert (tmp_path / "sft" / "model" / "processor_config.json").is_file()
    losses = [json.loads(x)["loss"] for x in (tmp_path / "sft" / "sft_losses.jsonl").read_text().splitlines()]
    assert losses and all(x == x for x in losses)


def test_sft_refuses_text_rows_on_an_env_that_shows_images(tmp_path):
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"prompt": "push", "response": "<action>up</action>"}) + "\n")
    with pytest.raises(SeedRLError, match="shows its observations as images"):
        run_sft(_sft_cfg(tmp_path, data=str(data)))


def test_a_text_model_cannot_train_on_frames(tmp_path):
    with pytest.raises(SeedRLError, match="policy is a text model"):
        run_sft(_sft_cfg(tmp_path, **{"model.name": "tiny-micro"}))


def test_the_greedy_responder_sees_the_frames_evaluation_play_saw(vl):
    """skill_demo_prefix_source: start on a pixel env: the start's answer to a step prompt with its frames is
    what its greedy evaluation play answered there (policy_demonstrations' rows carry the frames)."""
    tok, model = vl
    backend = HFBackend(model, tok)
    rows = policy_demonstrations(backend, tok, "sokoban", PIXELS, ["5x5-b1-s0", "5x5-b1-s1", "5x5-b1-s2"],
                                 max_steps=2, history_length=2, seed=3)
    assert rows and all(len(r["images"]) == 1 for r in rows)
    respond = greedy_responder(backend, tok, max_new_tokens=64)
    assert [respond(r["messages"], r["images"]) for r in rows] == [r["response"] for r in rows]


def test_a_policy_prefix_is_asked_with_the_frames_of_its_step():
    asked = []

    def policy(messages, images):
        asked.append((messages[-1]["content"], images))
        return "<think></think><action>up</action>"

    rows = expert_demonstrations("sokoban", PIXELS, [f"5x5-b1-s{i}" for i in range(8)], max_steps=3,
                                 history_length=2, noise=0.0, seed=0, random_prefix=2, prefix_policy=policy)
    assert len(asked) >= 3
    frames = [r["images"][0] for r in rows]  # (the pixel prompt's text is the same in every state)
    for _, images in asked:  # a frame of the states played, as the rows carry them
        assert len(images) == 1 and any(np.array_equal(images[0], f) for f in frames)
    assert len({im[0].tobytes() for _, im in asked}) > 1
