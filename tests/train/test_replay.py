"""Replay of expert demonstrations (PPO-ptx, ``algo.replay_coef`` > 0) through a real tiny Trainer: the
replayed NLL reaches the weights, with the weight ``algo.replay_coef`` gives it, and the demonstrations are
the ``train`` split's, never those of a split the runs are evaluated on.

tests/train/test_stabilisers.py checks the draw (which examples, what token share, the logged NLL); a
replay term that is logged but never back-propagated, a coefficient that is ignored or demonstrations
from another split all passed it. Each test below names the broken version it was seen to fail on.
"""

from __future__ import annotations

import pytest
import torch

from seedrl.envs.panels import build_panel
from seedrl.train.sft import expert_demonstrations, tokenize_pairs
from seedrl.train.trainer import Trainer
from tests.helpers import tiny_cfg

CHEAP = {"eval.num_tasks": 0, "save_every": 0, "iterations": 1, "rollout.tasks_per_batch": 2,
         "rollout.group_size": 2, "env.max_steps": 2, "algo.replay_demo_tasks": 2}
#: no gradient from the RL terms: advantages scaled to 0 (every sign), no KL, no entropy bonus; GRPO has no
#: signal of its own. What moves the weights is the replay alone.
ZERO_RL = {"algo.pos_adv_coef": 0, "algo.neg_adv_coef": 0, "algo.kl_coef": 0, "algo.entropy_coef": 0}


def _replay_only_iteration(tmp_path, monkeypatch, coef: float):
    """One iteration of a tiny trainer whose only gradient is the replay's at ``coef`` (0: no replay).
    Returns (the gradients before clipping at the first optimizer step, the weights after the
    iteration, its metrics). Every run has the same model init, rollouts and draws (same seed)."""
    tr = Trainer(tiny_cfg(tmp_path / f"coef{coef}", **(CHEAP | ZERO_RL | {"algo.replay_coef": coef})))
    assert bool(tr.replay_pairs) == (coef > 0)
    first: list[list[torch.Tensor]] = []
    clip = torch.nn.utils.clip_grad_norm_

    def recording(params, *a, **k):
        params = list(params)
        if not first:
            first.append([torch.zeros_like(p) if p.grad is None else p.grad.detach().clone() for p in params])
        return clip(params, *a, **k)

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", recording)
    m = tr.train_iteration()
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", clip)
    assert first and m["optim_steps"] >= 1
    return first[0], [p.detach().clone() for p in tr.model.parameters()], m


def _norm(grads: list[torch.Tensor]) -> float:
    return float(torch.sqrt(sum((g.double() ** 2).sum() for g in grads)))


def test_replay_alone_moves_the_weights_with_a_gradient_proportional_to_replay_coef(tmp_path, monkeypatch):
    """Seen red on two broken versions of ``Updater._replay_loss`` (seedrl/train/update.py):
    (a) the NLL computed and logged but never back-propagated (``(replay_coef * nll).backward()`` deleted,
    the ``loss/replay`` metric unchanged): the replay run's gradient is 0 and its weights end where the
    baseline's do; (b) ``algo.replay_coef`` ignored (``nll.backward()``, a coefficient of 1): the gradients
    at 0.25 and 0.5 are equal instead of one twice the other."""
    base_g, base_w, base_m = _replay_only_iteration(tmp_path, monkeypatch, 0.0)
    assert _norm(base_g) == 0.0  # the premise: without replay nothing here has a gradient
    g1, w1, m1 = _replay_only_iteration(tmp_path, monkeypatch, 0.25)
    g2, _, m2 = _replay_only_iteration(tmp_path, monkeypatch, 0.5)
    assert m1["optim_steps"] == m2["optim_steps"] == base_m["optim_steps"]
    # the same demonstrations were replayed at the same weights: the logged NLL does not depend on the weight
    assert m1["loss/replay"] == pytest.approx(m2["loss/replay"], rel=1e-6) and m1["loss/replay"] > 0
    # (a) the replay reaches the weights
    assert _norm(g1) > 0
    assert max(float((a - b).abs().max()) for a, b in zip(w1, base_w)) > 0
    # (b) ... in proportion to its coefficient: the first step's gradient doubles with replay_coef
    assert _norm(g2) == pytest.approx(2 * _norm(g1), rel=1e-5)
    for a, b in zip(g1, g2):
        torch.testing.assert_close(b, 2 * a, rtol=1e-5, atol=1e-9)


def _demo_pairs(cfg, tokenizer, split: str) -> list[tuple[list[int], list[int]]]:
    """The replay pool's demonstrations as they would be drawn from ``split``: the expert on the first
    ``algo.replay_demo_tasks`` tasks of its panel, with the replay's noise and seed."""
    e, a = cfg.env, cfg.algo
    ids = list(build_panel(e.name, split, a.replay_demo_tasks, **e.kwargs).task_ids)
    rows = expert_demonstrations(e.name, e.kwargs, ids, max_steps=e.max_steps, history_length=e.history_length,
                                 noise=a.replay_demo_noise, seed=cfg.seed)
    return tokenize_pairs(tokenizer, rows, cfg.rollout.max_prompt_tokens + cfg.rollout.max_new_tokens)


def test_replay_demonstrations_are_the_train_splits_even_in_a_fit_check_on_an_evaluated_split(tmp_path):
    """A fit check trains on part of the evaluated panel (``env.train_split=valid_seen``); the replayed
    demonstrations must still be the ``train`` split's. Seen red on two broken versions of
    ``replay_pool``/``replay_demonstrations`` (seedrl/train/update.py): demonstrations drawn from the
    evaluation split (``build_panel(..., cfg.eval.split, ...)``) and from ``env.train_split``
    (``build_panel(..., e.train_split, ...)``): the pool then equals the valid_seen demonstrations."""
    cfg = tiny_cfg(tmp_path / "run", **(CHEAP | {"algo.replay_coef": 0.5, "algo.replay_demo_tasks": 3,
                                                 "env.train_split": "valid_seen", "env.train_size": 4,
                                                 "eval.split": "valid_seen"}))
    tr = Trainer(cfg)
    train, held = _demo_pairs(cfg, tr.tokenizer, "train"), _demo_pairs(cfg, tr.tokenizer, "valid_seen")
    assert train and held and train != held  # the two splits' demonstrations can be told apart
    assert not {tuple(p) for p, _ in train} & {tuple(p) for p, _ in held}  # ... by every prompt
    assert tr.replay_pairs == train
