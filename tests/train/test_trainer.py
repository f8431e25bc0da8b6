"""The RL loop: advantage broadcast, gradient accumulation, smoke run, checkpoints and resume."""

from __future__ import annotations

import json
import math

import pytest
import torch

from seedrl.errors import SeedRLError
from seedrl.train import checkpoint as ckpt_mod
from seedrl.train.checkpoint import latest_checkpoint
from seedrl.train.metrics import rollout_metrics
from seedrl.train.trainer import Trainer
from seedrl.train.update import UpdateBatch
from tests.helpers import assert_updated, mixed_outcomes, tiny_cfg


def rollout_batch(tr: Trainer):
    trajs = tr.collect({})
    samples = [s for t in trajs for s in t.steps if s.response_ids]
    return trajs, samples


def test_every_step_sample_gets_its_trajectory_advantage(tmp_path):
    tr = Trainer(tiny_cfg(tmp_path / "r", **{"algo.invalid_penalty": 0.0, "rollout.group_size": 4}))
    trajs, samples = rollout_batch(tr)
    # give trajectories different outcomes so the group has signal
    for i, t in enumerate(trajs):
        for s in t.steps:
            s.reward = 0.0
        t.steps[-1].reward = 10.0 if i % 2 == 0 else 0.0
    adv = tr.scorer.advantages(trajs, samples)
    by_traj: dict[int, set[float]] = {}
    for s, a in zip(samples, adv.tolist()):
        by_traj.setdefault(s.traj_id, set()).add(round(a, 6))
    assert all(len(v) == 1 for v in by_traj.values())  # one value per trajectory, on every step
    won = {t.traj_id: t.episode_reward > 0 for t in trajs}
    for s, a in zip(samples, adv.tolist()):
        assert a != 0.0  # no step silently gets zero when its group has mixed outcomes
        assert (a > 0) == won[s.traj_id]


def test_prompt_tokens_never_carry_loss(tmp_path):
    from seedrl.models.scoring import pack

    b = pack([[5, 6, 7], [8]], [[1, 2], [3, 4, 9]], pad_id=0)
    # response mask covers exactly the response tokens at the end of each row
    assert b.response_mask.tolist() == [[0, 1, 1], [1, 1, 1]]
    assert b.input_ids[:, -3:].tolist() == [[7, 1, 2], [3, 4, 9]]
    assert b.attention_mask.sum(1).tolist() == [5, 4]


@pytest.mark.slow
def test_gradient_accumulation_matches_one_big_batch(tmp_path):
    tr = Trainer(tiny_cfg(tmp_path / "r", **{"algo.invalid_penalty": 0.5}))
    trajs, samples = rollout_batch(tr)
    idx = list(range(min(8, len(samples))))
    old = tr.scorer.logprobs(tr.model, samples)
    ref = tr.scorer.reference_logprobs(samples)
    adv = tr.scorer.advantages(trajs, samples) + torch.linspace(-1, 1, len(samples))  # nonzero everywhere
    # perturb weights so ratio != 1 and the clip/KL terms are active
    with torch.no_grad():
        for p in tr.model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    tr.optimizer.step = lambda *a, **k: None  # compare gradients, not Adam steps
    denom = float(sum(len(samples[i].response_ids) for i in idx))

    def grads(micro: int):
        tr.cfg.optim.micro_batch_size = micro
        tr.updater.minibatch_step(UpdateBatch(samples, old, adv, ref), idx, denom)
        return torch.cat([p.grad.flatten() for p in tr.model.parameters() if p.grad is not None]).clone()

    g_big, g_acc = grads(len(idx)), grads(1)
    assert g_big.abs().max() > 0
    torch.testing.assert_close(g_acc, g_big, rtol=1e-4, atol=1e-6)


def _metrics(path):
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


@pytest.mark.slow
def test_smoke_training_changes_parameters_with_finite_losses(tmp_path):
    tr = Trainer(tiny_cfg(tmp_path / "r", iterations=2, **{"eval.num_tasks": 0}))
    before = {k: v.clone() for k, v in tr.model.state_dict().items()}
    tr.train()
    rows = _metrics(tmp_path / "r" / "metrics.jsonl")
    assert [r["iteration"] for r in rows] == [1, 2]
    for r in rows:
        for k in ("loss/pg", "loss/kl", "loss/entropy", "grad_norm"):
            assert math.isfinite(r[k]), k
        assert r["check/rollout_logp_drift"] < 1e-3
    changed = sum(not torch.equal(before[k], v) for k, v in tr.model.state_dict().items())
    assert changed > len(before) // 2


@pytest.mark.slow
@pytest.mark.parametrize("lora", [None, "{r: 4}"])  # tiny-micro ties its embeddings, as Qwen2.5 <= 3B do
def test_resume_gives_the_same_metrics_as_an_uninterrupted_run(tmp_path, lora):
    # groups of 4 (tiny_cfg: 3), so that no iteration's groups all come out uniform (LoRA's 3rd did)
    over = {"rollout.group_size": 4} | ({"model.lora": lora} if lora else {})
    with mixed_outcomes():  # every iteration updates with a real advantage (tests.helpers)
        full = Trainer(tiny_cfg(tmp_path / "full", **over))
        full_summary = full.train()

        part = Trainer(tiny_cfg(tmp_path / "part", **over))
        part.train(stop_after=2)  # "killed" after iteration 2 (a checkpoint is written at 2)
        assert latest_checkpoint(tmp_path / "part" / "checkpoints").name == "iter_000002"
        resumed = Trainer(tiny_cfg(tmp_path / "part", **over), resume=True)
        assert resumed.iteration == 2
        resumed_summary = resumed.train()

    assert_updated(_metrics(tmp_path / "full" / "metrics.jsonl"))
    assert _metrics(tmp_path / "part" / "metrics.jsonl") == _metrics(tmp_path / "full" / "metrics.jsonl")
    assert resumed_summary["eval_after"]["tasks"] == full_summary["eval_after"]["tasks"]
    for (k, a), b in zip(full.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), k


@pytest.mark.slow
def test_existing_run_needs_resume_flag(tmp_path):
    Trainer(tiny_cfg(tmp_path / "r", iterations=2, **{"eval.num_tasks": 0})).train()
    with pytest.raises(SeedRLError, match="--resume"):
        Trainer(tiny_cfg(tmp_path / "r", iterations=2))


@pytest.mark.slow
def test_kill_during_save_leaves_latest_intact(tmp_path, monkeypatch):
    with mixed_outcomes():  # every iteration updates with a real advantage (tests.helpers)
        tr = Trainer(tiny_cfg(tmp_path / "r", iterations=2, save_every=1, **{"eval.num_tasks": 0}))
        tr.train(stop_after=1)
        good = latest_checkpoint(tmp_path / "r" / "checkpoints")
        assert good.name == "iter_000001"

        def killed(*a, **k):
            raise KeyboardInterrupt("killed while writing optimizer state")

        monkeypatch.setattr(ckpt_mod.torch, "save", killed)
        with pytest.raises(KeyboardInterrupt):
            tr.train(stop_after=1)
        monkeypatch.undo()
        assert latest_checkpoint(tmp_path / "r" / "checkpoints") == good  # the torn write is invisible
        resumed = Trainer(tiny_cfg(tmp_path / "r", iterations=2, save_every=1, **{"eval.num_tasks": 0}), resume=True)
        assert resumed.iteration == 1
        resumed.train()
    assert latest_checkpoint(tmp_path / "r" / "checkpoints").name == "iter_000002"
    assert_updated(_metrics(tmp_path / "r" / "metrics.jsonl"))  # the resumed iteration updated


def test_update_raises_logp_of_positive_advantage_responses(tmp_path):
    """End-to-end sign check of the update path: same prompt, two responses, opposite advantages."""
    from seedrl.rollout.types import StepSample

    tr = Trainer(tiny_cfg(tmp_path / "r", **{"algo.kl_coef": 0.0, "algo.entropy_coef": 0.0, "optim.lr": 1e-3}))
    tok = tr.tokenizer
    prompt = tok("<|im_start|>user\nchoose<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
    good = tok("<action>up</action>", add_special_tokens=False)["input_ids"]
    bad = tok("<action>down</action>", add_special_tokens=False)["input_ids"]
    samples = [StepSample(prompt, r, [], traj_id=i, group_id=0, step=0, reward=0.0, action_valid=True)
               for i, r in enumerate([good, bad] * 4)]
    adv = torch.tensor([1.0, -1.0] * 4)

    def logps():
        return [float(x.sum()) for x in tr.scorer.logprobs(tr.model, samples[:2])]

    before = logps()
    for _ in range(3):
        old = tr.scorer.logprobs(tr.model, samples)
        tr.update(UpdateBatch(samples, old, adv))
    after = logps()
    assert after[0] > before[0] + 0.1 and after[1] < before[1] - 0.1


@pytest.mark.slow
@pytest.mark.parametrize("arch,lora", [("llama", None), ("qwen2", {"r": 4})])
def test_any_hf_causal_lm_folder_trains(tmp_path, tiny_tokenizer, arch, lora):
    """The path real users take: a model folder (here a tiny Llama/Qwen2 written by transformers)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.for_model(arch, vocab_size=len(tiny_tokenizer), hidden_size=64, intermediate_size=128,
                               num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                               pad_token_id=tiny_tokenizer.pad_token_id, eos_token_id=tiny_tokenizer.eos_token_id)
    AutoModelForCausalLM.from_config(cfg).save_pretrained(tmp_path / "hf")
    tiny_tokenizer.save_pretrained(tmp_path / "hf")
    over = {"model.name": str(tmp_path / "hf"), "iterations": 1, "eval.num_tasks": 0}
    if lora:
        over["model.lora"] = "{r: 4}"
    tr = Trainer(tiny_cfg(tmp_path / "run", **over))
    trainable = {n: p.detach().clone() for n, p in tr.model.named_parameters() if p.requires_grad}
    assert all("lora_" in n for n in trainable) == bool(lora)
    tr.train()
    row = _metrics(tmp_path / "run" / "metrics.jsonl")[0]
    assert math.isfinite(row["loss/pg"]) and row["check/rollout_logp_drift"] < 1e-3
    if lora:
        assert tr.ref_model is None and math.isfinite(row["loss/kl"])  # reference = adapters disabled
    assert any(not torch.equal(v, dict(tr.model.named_parameters())[n]) for n, v in trainable.items())
    assert (latest_checkpoint(tmp_path / "run" / "checkpoints") / "model" / "config.json").exists()


def test_env_crashes_are_left_out_of_the_update():
    from seedrl.rollout.types import StepSample, Trajectory
    from seedrl.train.update import training_samples

    def traj(i, error=None, resp=(1,)):
        t = Trajectory(traj_id=i, group_id=0, task_id="t", error=error)
        t.steps = [StepSample([5], list(resp), [0.0] * len(resp), i, 0, 0, 0.0, True)]
        return t

    kept = training_samples([traj(0), traj(1, error="RuntimeError: boom"), traj(2, resp=())])
    assert [s.traj_id for s in kept] == [0]


def test_invalid_action_penalty_follows_env_invalid_action_and_both_rates_are_logged(tmp_path, tiny_tokenizer):
    """Turns alternate between an admissible move without a <think> block and a well-formed but
    inadmissible command: the format rule penalises only the former, the admissible rule only the
    latter; both rates are in the metrics whatever the rule."""
    from seedrl.rollout.backends import Generation

    class Scripted:
        turn = 0

        def generate(self, prompts, params, seed):
            # "upward" names a move word (sokoban_projection accepts it) but the env does not
            t = "<action>up</action>" if self.turn % 2 == 0 else "<think>x</think><action>upward</action>"
            self.turn += 1
            return [Generation(tiny_tokenizer(t, add_special_tokens=False)["input_ids"], [0.0], t, "stop")
                    for _ in prompts]

    scores = {}
    for rule in ("format", "admissible"):
        tr = Trainer(tiny_cfg(tmp_path / rule, **{"env.invalid_action": rule, "algo.invalid_penalty": 1.0,
                                                  "algo.adv_norm": "mean", "rollout.group_size": 2}))
        tr.backend = Scripted()
        trajs = tr.collect({})
        samples = [s for t in trajs for s in t.steps]
        m = rollout_metrics(trajs, samples, [torch.zeros(len(s.response_ids)) for s in samples],
                            tr.scorer.advantages(trajs, samples))
        malformed = [not s.format_valid for s in samples]
        rejected = [not s.action_valid for s in samples]
        assert any(malformed) and any(rejected) and not any(a and b for a, b in zip(malformed, rejected))
        assert m["rollout/invalid_format_rate"] == pytest.approx(sum(malformed) / len(samples))
        assert m["rollout/invalid_rate"] == pytest.approx(sum(rejected) / len(samples))
        adv = tr.scorer.advantages(trajs, samples)
        hit = malformed if rule == "format" else rejected
        # mean-only advantages: within a trajectory a penalised step sits exactly 1.0 below the others
        pairs = 0
        for t in trajs:
            by = {k: {round(float(a), 5) for a, s, h in zip(adv, samples, hit) if s.traj_id == t.traj_id and h == k}
                  for k in (False, True)}
            if by[False] and by[True]:
                assert len(by[False]) == len(by[True]) == 1
                assert by[False].pop() - by[True].pop() == pytest.approx(1.0, abs=1e-4)
                pairs += 1
        assert pairs
        scores[rule] = adv
    assert not torch.equal(scores["format"], scores["admissible"])
