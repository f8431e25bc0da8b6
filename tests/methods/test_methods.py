"""Methods as data: the table, the signals, the teacher placements, and what a new method takes."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
import torch

from seedrl.algos import token_mean
from seedrl.config import TrainConfig, load_config
from seedrl.methods import METHODS, MethodSpec
from seedrl.methods import signals as sig
from seedrl.methods.runtime import build_method
from seedrl.train.trainer import Trainer
from tests.helpers import FixedAnalyzer, tiny_cfg


@pytest.mark.parametrize("name", sorted(METHODS))
def test_every_method_builds_its_signal_from_the_table(name):
    cfg = load_config(TrainConfig, None, [f"algo.name={name}", "algo.opd_beta=3.0"])
    m = build_method(cfg)  # no backend: only the self analyzer would need one
    spec = METHODS[name]
    assert m.name == name and m.signal.name == spec.signal and m.spec.skills == spec.skills
    assert (m.analyzer is None) is (spec.skills == "none")
    if spec.signal == "opd":  # the table's gate, else the config's
        assert m.signal.beta == (spec.opd_beta if spec.opd_beta is not None else 3.0)


def test_signals_shift_the_advantage_or_add_a_loss_only_where_masked():
    g = torch.Generator().manual_seed(0)
    logp = (-torch.rand(2, 4, generator=g)).requires_grad_()
    old, teacher = logp.detach() - 0.1, logp.detach() + torch.randn(2, 4, generator=g)
    tmask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    adv = torch.ones(2, 4)
    assert sig.Signal().loss(logp, old, teacher, tmask) is None
    assert torch.equal(sig.Signal().advantage(adv, teacher, old, tmask), adv)
    shifted = sig.OPIDShift(coef=0.5).advantage(adv, teacher, old, tmask)
    torch.testing.assert_close(shifted, adv + 0.5 * (teacher - old) * tmask)
    assert sig.OPIDShift(coef=0.5).loss(logp, old, teacher, tmask) is None
    for s in (sig.OPD(beta=5.0, coef=0.01), sig.SkillSD(coef=0.001)):
        term = s.loss(logp, old, teacher, tmask)
        torch.testing.assert_close(term.loss, s.coef * term.value)
        logp.grad = None
        term.loss.backward()
        assert torch.all(logp.grad[tmask == 0] == 0) and torch.any(logp.grad[tmask > 0] != 0)


@pytest.mark.slow
def test_a_new_method_is_a_pure_function_a_signal_and_one_table_entry(tmp_path, monkeypatch):
    """The recipe of docs/architecture.md, end to end: a toy method (hindsight skills after the task
    line, a loss pulling the policy toward the tokens it sampled where a skill exists) runs through the
    unchanged loop with nothing but its signal object and its entry in the table."""

    @dataclass
    class Imitate(sig.Signal):  # a signal object over a pure function of seedrl.algos
        coef: float
        name = "imitate"

        def loss(self, logp, old, teacher, tmask):
            term = token_mean(-logp, tmask, 1.0)
            return sig.SignalTerm(self.coef * term, term.detach(), {"tokens": tmask.sum()})

    monkeypatch.setitem(METHODS, "toy_imitate", MethodSpec("hindsight", "imitate"))  # the table entry
    monkeypatch.setitem(sig.SIGNALS, "imitate", lambda algo, beta: Imitate(coef=0.5))
    tr = Trainer(tiny_cfg(tmp_path / "run", **{"algo.name": "toy_imitate", "eval.num_tasks": 0, "iterations": 1}))
    tr.analyzer = FixedAnalyzer()
    tr.train()
    row = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert row["loss/imitate"] > 0 and row["imitate/tokens"] > 0 and "loss/opd" not in row


def test_opsd_is_sdar_without_the_policy_gradient_term_and_an_explicit_weight_wins():
    """SDAR's examples/opsd_trainer: main_sdar (gate beta 5, coef 0.01, static skills, privileged
    prefix) with ``actor.pg_loss_coef=0``."""
    opsd, sdar = (load_config(TrainConfig, None, [f"algo.name={n}"]) for n in ("opsd", "sdar"))
    assert opsd.algo.pg_coef == 0.0 and sdar.algo.pg_coef == 1.0
    a, b = build_method(opsd), build_method(sdar)
    assert a.spec.skills == b.spec.skills == "static" and a.spec.placement == b.spec.placement == "prefix"
    assert a.signal == b.signal  # the same OPD term: beta 5, coef 0.01, SEED's micro-batch mean
    assert load_config(TrainConfig, None, ["algo.name=opsd", "algo.pg_coef=0.5"]).algo.pg_coef == 0.5


def test_rlsd_signal_reweights_the_advantage_with_the_lambda_of_its_step():
    from seedrl.algos import rlsd_advantage

    cfg = load_config(TrainConfig, None, ["algo.name=rlsd", "algo.rlsd_warmdown=10"])
    m = build_method(cfg)
    assert m.spec.skills == "static" and m.spec.placement == "prefix" and m.signal.name == "rlsd"
    assert m.signal.loss(None, None, None, None) is None  # an advantage signal: no loss term
    g = torch.Generator().manual_seed(0)
    adv = torch.tensor([[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]])
    old, teacher = -torch.rand(2, 3, generator=g), -torch.rand(2, 3, generator=g)
    tmask = torch.ones(2, 3)
    m.signal.begin_update(3)  # the 4th update: lambda 0.5 (1 - 4/10) = 0.3
    assert m.signal.update_stats() == {"lambda": pytest.approx(0.3)}
    torch.testing.assert_close(m.signal.advantage(adv, teacher, old, tmask),
                               rlsd_advantage(adv, teacher, old, tmask, lam=0.3, clip_eps=0.2))
    m.signal.begin_update(9)  # step 10: the warm-down is over, GRPO's advantage
    torch.testing.assert_close(m.signal.advantage(adv, teacher, old, tmask), adv)
