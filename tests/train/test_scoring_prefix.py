"""optim.shared_prefix in the loop's Scorer: the old, reference and teacher log-probs of a real batch
(the tiny SEED run's rollout: groups whose step-0 samples repeat one prompt, teacher prompts that repeat
the student's up to the skill block) are the ones the switch-off path gives."""

from __future__ import annotations

import pytest
import torch

import seedrl.train.scoring as scoring_mod
from seedrl.models.prefix import plan_shared_prefixes, prompt_tree
from seedrl.train.scoring import analyze
from seedrl.train.trainer import Trainer
from tests.helpers import FixedAnalyzer, tiny_cfg

TOL = 1e-5


def _close(a: list[torch.Tensor], b: list[torch.Tensor]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype == torch.float32 and x.shape == y.shape
        if len(x):
            assert (x - y).abs().max().item() <= TOL


def test_shared_prefix_switch_gives_the_same_old_reference_and_teacher_logprobs(tmp_path, monkeypatch):
    """One collected SEED batch scored with optim.shared_prefix off and on: the old (recomputed),
    reference (KL on) and teacher log-probs and the teacher's signal mask agree within 1e-5 per sample,
    and with the switch on the shared path really runs on groups (a spy counts the groups it planned),
    so the equality is not the fallback's."""
    tr = Trainer(tiny_cfg(tmp_path / "run", **{"algo.name": "seed", "eval.num_tasks": 0, "algo.kl_coef": 0.01,
                                              "optim.old_logp": "recompute"}))
    trajs = tr.collect({})
    samples = [s for t in trajs for s in t.steps if s.response_ids]
    skills = {r.traj_id: r.skill for r in analyze(FixedAnalyzer(), trajs) if r.skill}
    assert skills and samples

    def score():
        old = tr.scorer.old_logprobs(samples)
        ref = tr.scorer.reference_logprobs(samples)
        teacher, signal = tr.scorer.teacher_logprobs(samples, skills)
        return old, ref, teacher, signal

    tr.cfg.optim.shared_prefix = False
    off = score()
    planned: list[int] = []
    real = scoring_mod.shared_prefix_logprobs

    def spy(model, prompts, responses, *args, **kwargs):
        planned.append(len(plan_shared_prefixes(prompts, responses)))
        return real(model, prompts, responses, *args, **kwargs)

    monkeypatch.setattr(scoring_mod, "shared_prefix_logprobs", spy)
    tr.cfg.optim.shared_prefix = True
    on = score()
    assert len(planned) == 3 and all(n > 0 for n in planned), planned  # old, reference, teacher
    for a, b in zip(off[:3], on[:3]):
        assert a is not None and b is not None
        _close(a, b)
    assert torch.equal(off[3], on[3])


@pytest.mark.filterwarnings("ignore:Seems like `optimizer.step\\(\\)` has been overridden")
def test_shared_prefix_update_gives_the_plain_update_gradients(tmp_path, monkeypatch):
    """One SEED update (PPO clip, entropy, KL and the OPD term on teacher log-probs, deduplicated samples,
    replayed expert demonstrations)
    of a real batch with optim.shared_prefix off and on, from the same weights, the optimizer step
    skipped so the gradients stay: every parameter's gradient agrees within 1e-5 (fp32) and so do the
    logged losses; with the switch on the update's forwards really ran on shared prefixes (a spy
    counts the prompts its micro-batches' trees saved)."""
    import seedrl.models.prefix as prefix_mod
    from seedrl.train.update import UpdateBatch, sample_keys

    tr = Trainer(tiny_cfg(tmp_path / "run", **{"algo.name": "seed", "eval.num_tasks": 0, "algo.opd_coef": 1.0,
                                              "algo.replay_coef": 1.0, "optim.ppo_epochs": 1, "optim.mini_batch_size": 1024}))
    trajs = tr.collect({})
    samples = [s for t in trajs for s in t.steps if s.response_ids]
    skills = {r.traj_id: r.skill for r in analyze(FixedAnalyzer(), trajs) if r.skill}
    old = tr.scorer.old_logprobs(samples)
    ref = tr.scorer.reference_logprobs(samples)
    teacher, signal = tr.scorer.teacher_logprobs(samples, skills)
    adv = torch.linspace(-1.0, 1.0, len(samples))
    monkeypatch.setattr(tr.updater.optimizer, "step", lambda *a, **k: None)

    def update(shared: bool):
        tr.updater.share_prefix = shared
        ub = UpdateBatch(samples, old, adv, ref, teacher, signal)
        ub.keys = sample_keys(ub)
        stats = tr.update(ub)
        return stats, {n: p.grad.clone() for n, p in tr.model.named_parameters() if p.grad is not None}

    off, g_off = update(False)
    planned: list[int] = []
    real = prefix_mod.shared_prefix_forward

    def spy(model, prompts, responses, *args, **kwargs):
        tree = prompt_tree(prompts, responses)
        planned.append(0 if tree is None else len(prompts) - len(tree[1]) + (tree[0] > 0))
        return real(model, prompts, responses, *args, **kwargs)

    monkeypatch.setattr(prefix_mod, "shared_prefix_forward", spy)
    on, g_on = update(True)
    assert planned and sum(planned) > 0, planned
    assert off["optim_steps"] == on["optim_steps"] == 1 and off["loss/opd"] != 0
    for k in ("loss/pg", "loss/kl", "loss/entropy", "loss/opd", "opd/gate_mean", "loss/replay", "grad_norm"):
        assert abs(on[k] - off[k]) <= TOL * max(1.0, abs(off[k])), (k, on[k], off[k])
    assert g_on.keys() == g_off.keys() and g_off
    assert max((g_on[n] - g_off[n]).abs().max().item() for n in g_off) <= TOL
    assert max(g.abs().max().item() for g in g_off.values()) > 100 * TOL
