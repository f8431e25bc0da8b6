"""``algo.opd_agg`` through the loop (issue 33, item 7): SEED's mean over micro-batches is the
default of every preset, the renormalised token-mean stays a named option, runs saved before the key
existed load as the latter, and the trainer's OPD term is the one the pure function defines."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import torch

from seedrl.config import RUN_CONFIG_VERSION, TrainConfig, load_config, load_run_config, save_config
from seedrl.train.resume import unsafe_in_this_run
from seedrl.train.trainer import Trainer
from seedrl.train.update import UpdateBatch, sample_keys, training_samples
from tests.helpers import tiny_cfg

CONFIGS = Path(__file__).parents[2] / "configs"
SEED_PRESETS = sorted(p for p in CONFIGS.glob("*_seed*.yaml") if not p.stem.endswith("_sft"))
GAP = 0.3  # teacher_logp - old_logp on every token of a sample with a skill


def test_seed_presets_average_opd_as_seeds_code_and_old_runs_keep_theirs(tmp_path):
    assert TrainConfig().algo.opd_agg == "micro_batch_mean"
    assert len(SEED_PRESETS) >= 5
    for p in SEED_PRESETS:
        assert load_config(TrainConfig, p).algo.opd_agg == "micro_batch_mean", p.name
    # a run saved before the key existed: OPD methods averaged over the signal tokens
    for name, expect in (("seed", "signal_token_mean"), ("sdar", "signal_token_mean"), ("grpo", "micro_batch_mean"),
                         ("skill_sd", "signal_token_mean")):
        cfg = tiny_cfg(tmp_path / name, **{"algo.name": name})
        path = tmp_path / f"{name}.yaml"
        save_config(cfg, path)
        text = path.read_text()
        assert "opd_agg: micro_batch_mean\n" in text and text.startswith(f"config_version: {RUN_CONFIG_VERSION}\n")
        # saved before config_version and algo.opd_agg were written
        path.write_text(text.replace("  opd_agg: micro_batch_mean\n", "").replace(f"config_version: {RUN_CONFIG_VERSION}\n", ""))
        assert load_run_config(path).algo.opd_agg == expect, name
        save_config(tiny_cfg(tmp_path / name, **{"algo.name": name, "algo.opd_agg": "signal_token_mean"}), path)
        assert load_run_config(path).algo.opd_agg == "signal_token_mean"  # explicit: kept


def test_micro_batch_size_is_resume_safe_only_without_a_per_micro_batch_opd(tmp_path):
    def pair(**over):
        return (tiny_cfg(tmp_path / "r", **over), tiny_cfg(tmp_path / "r", **(over | {"optim.micro_batch_size": 2})))

    assert "optim.micro_batch_size" in unsafe_in_this_run(*pair(**{"algo.name": "seed"}))
    assert "optim.micro_batch_size" not in unsafe_in_this_run(*pair(**{"algo.name": "seed",
                                                                      "algo.opd_agg": "signal_token_mean"}))
    assert "optim.micro_batch_size" not in unsafe_in_this_run(*pair(**{"algo.name": "grpo"}))
    # Skill-SD's term is averaged as SDAR's compute_sdl_loss is (issue 43): micro-batches shape it too
    assert "optim.micro_batch_size" in unsafe_in_this_run(*pair(**{"algo.name": "skill_sd"}))
    assert "optim.micro_batch_size" not in unsafe_in_this_run(*pair(**{"algo.name": "skill_sd",
                                                                      "algo.opd_agg": "signal_token_mean"}))


def test_skill_sd_averages_its_term_per_micro_batch_as_sdars_compute_sdl_loss_and_old_runs_keep_theirs(tmp_path):
    """SDAR's compute_sdl_loss (verl/trainer/ppo/skillsd_utils.py) is verl's agg_loss token-mean over a
    micro-batch's response tokens, and its dp_actor divides each micro-batch's loss by the micro-batch
    count: ``micro_batch_mean``, now Skill-SD's default through ``algo.opd_agg``. Skill-SD read no key
    before config_version 2 and took a token-mean over the mini-batch's signal tokens: a run saved then
    loads with ``signal_token_mean`` whatever its saved ``opd_agg`` says. Kills: the signal built without
    the run's aggregation, or the legacy rule dropped."""
    import yaml

    from seedrl.methods.runtime import resolved_spec
    from seedrl.methods.signals import SIGNALS

    def agg(c):
        return SIGNALS[resolved_spec(c).signal](c.algo, None).agg

    cfg = tiny_cfg(tmp_path / "s", **{"algo.name": "skill_sd"})
    assert agg(cfg) == "micro_batch_mean"
    assert agg(tiny_cfg(tmp_path / "s", **{"algo.name": "skill_sd", "algo.opd_agg": "signal_token_mean"})) == \
        "signal_token_mean"
    path = tmp_path / "config.yaml"
    save_config(cfg, path)
    assert load_run_config(path).algo.opd_agg == "micro_batch_mean"  # saved today: kept
    data = yaml.safe_load(path.read_text())
    for version in (1, None):
        old = {k: v for k, v in data.items() if k != "config_version"} | ({} if version is None else
                                                                          {"config_version": version})
        path.write_text(yaml.safe_dump(old))
        assert load_run_config(path).algo.opd_agg == "signal_token_mean", version
    seed = tiny_cfg(tmp_path / "o", **{"algo.name": "seed"})  # other methods keep their saved key
    save_config(seed, path)
    data = yaml.safe_load(path.read_text()) | {"config_version": 1}
    path.write_text(yaml.safe_dump(data))
    assert load_run_config(path).algo.opd_agg == "micro_batch_mean"


def _opd_rows(tmp_path, runs):
    """``loss/opd`` and ``opd/gate_mean`` of one update over the whole batch as one mini-batch, for
    each (opd_agg, micro_batch_size) of ``runs``, from the same weights. Samples 0..k-1 have a skill
    whose teacher is ``GAP`` above the old log-probs on every token."""
    tr = Trainer(tiny_cfg(tmp_path / "r", **{"algo.name": "seed", "eval.num_tasks": 0, "save_every": 0,
                                             "model.precision": "fp32", "optim.mini_batch_size": 64}))
    samples = [s for s in training_samples(tr.collect({})) if s.response_ids]
    n = len(samples)
    k = n // 3
    old = tr.scorer.logprobs(tr.model, samples)
    teacher = [o + GAP for o in old]
    signal = torch.tensor([1.0] * k + [0.0] * (n - k))
    state = copy.deepcopy(tr.model.state_dict())
    opt = copy.deepcopy(tr.optimizer.state_dict())
    out = []
    for agg, micro in runs:
        tr.model.load_state_dict(state)
        tr.optimizer.load_state_dict(opt)
        tr.iteration = 0
        tr.method.signal.agg = agg
        tr.cfg.optim.micro_batch_size = micro
        row = tr.update(UpdateBatch(samples, old, torch.zeros(n), None, teacher, signal))
        assert row["optim_steps"] == 1
        out.append(row)
    return out, n, k


def test_the_loops_opd_term_is_seeds_mean_over_micro_batches(tmp_path):
    """One sample per micro-batch: n micro-batches, k with a skill, each with the token-mean
    v = sigmoid(5 GAP) GAP: SEED's term is v k / n (the n - k empty ones count as 0); the
    renormalised term is v whatever the micro-batches; one micro-batch for all: SEED's term is v too."""
    (seed1, seed_all, renorm1), n, k = _opd_rows(tmp_path, [("micro_batch_mean", 1), ("micro_batch_mean", 64),
                                                         ("signal_token_mean", 1)])
    v = GAP / (1 + math.exp(-5 * GAP))
    assert 0 < k < n
    assert seed1["loss/opd"] == pytest.approx(v * k / n, rel=1e-4)
    assert seed_all["loss/opd"] == pytest.approx(v, rel=1e-4)
    assert renorm1["loss/opd"] == pytest.approx(v, rel=1e-4)
    for row in (seed1, seed_all, renorm1):  # the gate is a mean over the term's tokens, as weighted
        assert row["opd/gate_mean"] == pytest.approx(1 / (1 + math.exp(-5 * GAP)), rel=1e-4)


def test_dedupe_keeps_seeds_opd_term(tmp_path):
    """Copies of a sample merged into one forward carry the sum of their weights, even when they
    sit in different micro-batches: the same term and gradient as without merging (float rounding)."""
    tr = Trainer(tiny_cfg(tmp_path / "r", **{"algo.name": "seed", "eval.num_tasks": 0, "save_every": 0,
                                             "model.precision": "fp32", "optim.mini_batch_size": 64,
                                             "optim.micro_batch_size": 3}))
    samples = [s for s in training_samples(tr.collect({})) if s.response_ids]
    samples = samples + samples[:4]
    n = len(samples)
    old = tr.scorer.logprobs(tr.model, samples)
    teacher = [o + GAP * (1 + i % 3) for i, o in enumerate(old[: n - 4])]
    teacher += teacher[:4]
    signal = torch.tensor([float(i % 2) for i in range(n - 4)] + [float(i % 2) for i in range(4)])
    adv = torch.linspace(-1, 1, n - 4)
    adv = torch.cat([adv, adv[:4]])
    state = copy.deepcopy(tr.model.state_dict())
    opt = copy.deepcopy(tr.optimizer.state_dict())
    rows, grads = [], []
    for merge in (False, True):
        tr.model.load_state_dict(state)
        tr.optimizer.load_state_dict(opt)
        tr.iteration = 0
        ub = UpdateBatch(samples, old, adv, None, teacher, signal)
        if merge:
            ub.keys = sample_keys(ub)
            assert len(set(ub.keys)) == n - 4
        rows.append(tr.update(ub))  # one mini-batch: the gradients left are its (clipped) ones
        grads.append({name: p.grad.clone() for name, p in tr.model.named_parameters() if p.grad is not None})
    assert rows[1]["loss/opd"] == pytest.approx(rows[0]["loss/opd"], rel=1e-5)
    assert rows[1]["opd/gate_mean"] == pytest.approx(rows[0]["opd/gate_mean"], rel=1e-5)
    assert rows[1]["grad_norm"] == pytest.approx(rows[0]["grad_norm"], rel=1e-5)
    scale = max(float(g.abs().max()) for g in grads[0].values())
    assert scale > 0 and grads[0].keys() == grads[1].keys()
    assert max(float((grads[0][name] - grads[1][name]).abs().max()) for name in grads[0]) < 1e-5 * scale


def test_the_opd_agg_names_are_written_once():
    """``algo.opd_agg``'s names live in seedrl.methods (torch-free, so the config reads them); the tensor
    math's own tuple must not drift from them (seedrl.algos.OPD_AGGS, imported from there)."""
    import typing

    from seedrl.algos import OPD_AGGS as ALGOS_AGGS
    from seedrl.config import AlgoConfig
    from seedrl.methods import OPD_AGGS

    assert typing.get_args(AlgoConfig.model_fields["opd_agg"].annotation) == OPD_AGGS == ALGOS_AGGS
