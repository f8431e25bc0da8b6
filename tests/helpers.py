"""Helpers shared by test modules (fixtures live in conftest.py)."""

from __future__ import annotations

import importlib.util
import json
import os
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

from seedrl.config import TrainConfig, load_config
from seedrl.skills.analyzers.base import AnalysisResult

ROOT = Path(__file__).parents[1]


def load_script(relpath: str) -> ModuleType:
    """Import a script that is not a package module (``benchmarks/x.py``, ``tools/x.py``) by its path in the repo."""
    path = ROOT / relpath
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


HAVE_VLLM = importlib.util.find_spec("vllm") is not None


def need_vllm() -> None:
    """Skip a vLLM test where vLLM does not import, except under ``SEEDRL_REQUIRE_VLLM=1`` (``make test-vllm``),
    where that is a failure."""
    import pytest

    if not HAVE_VLLM:
        if os.environ.get("SEEDRL_REQUIRE_VLLM"):
            pytest.fail("SEEDRL_REQUIRE_VLLM=1 but vllm does not import here; build it with `make vllm-env`")
        pytest.skip("vllm is not installed (make vllm-env; make test-vllm)")


def metric_rows(run_dir) -> list[dict]:
    """A run's metrics rows without their timings (which differ between any two runs)."""
    rows = [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


def tiny_cfg(run_dir, **over) -> TrainConfig:
    sets = [f"run_dir={run_dir}", "model.name=tiny-micro", "model.precision=fp32", "env.name=sokoban", "env.max_steps=3",
            "env.history_length=1", "env.workers=2", "rollout.tasks_per_batch=2", "rollout.group_size=3",
            "rollout.max_new_tokens=10", "optim.lr=1e-3", "optim.mini_batch_size=8", "optim.micro_batch_size=4",
            "iterations=4", "save_every=2", "eval.num_tasks=2", "eval.batch_size=2", "log.progress=false",
            "algo.kl_coef=0.01", "algo.entropy_coef=0.001"]
    sets += [f"{k}={v}" for k, v in over.items()]
    return load_config(TrainConfig, None, sets)


SKILL = "When the box is left of the target, walk to its left side and push right."


class FixedAnalyzer:
    """Gives a skill to even trajectory ids, garbage to odd ones (as a real analyzer might)."""

    name = "fixed"

    def __init__(self):
        self.calls = 0

    def analyze(self, trajectories):
        self.calls += 1
        return [AnalysisResult(t.traj_id, SKILL if t.traj_id % 2 == 0 else None,
                               error=None if t.traj_id % 2 == 0 else "parse: no JSON object") for t in trajectories]


@contextmanager
def mixed_outcomes():
    """Trainer rollouts whose episodes are won by a rule on what the policy wrote: the parity of the first
    token it sampled. A random tiny policy loses every real episode, so all its groups are uniform and its
    updates carry no policy-gradient advantage (only the KL and entropy terms move the weights); under this
    rule its groups come out mixed and a resume test compares real updates. A pure function of the sampled
    tokens, so an uninterrupted and a resumed run see the same outcomes. (A subprocess installs it with
    ``m = mixed_outcomes(); m.__enter__()``, keeping ``m``: a collected generator would undo it.)"""
    import seedrl.train.collect as collect_mod

    real = collect_mod.rollout

    def rollout(*args, **kwargs):
        trajs = real(*args, **kwargs)
        for t in trajs:
            if t.steps and t.error is None:
                first = t.steps[0].response_ids
                won = bool(first) and first[0] % 2 == 1
                for s in t.steps:
                    s.reward = 0.0
                t.steps[-1].reward = 1.0 if won else 0.0
                t.won = won
        return trajs

    collect_mod.rollout = rollout
    try:
        yield
    finally:
        collect_mod.rollout = real


def assert_updated(rows: list[dict], *, signal: bool = True) -> None:
    """Every metrics row made a real update: not skipped (dynamic sampling kept a group), optimizer steps
    taken and applied (not all skipped for a non-finite gradient), a non-zero gradient, and (``signal``)
    advantages that are not all zero, so the policy-gradient term took part."""
    assert rows, "no metrics row"
    for r in rows:
        it = r.get("iteration")
        assert not r.get("update/skipped"), f"iteration {it} made no update (dynamic sampling kept no group)"
        assert r.get("optim_steps", 0) > 0 and r.get("skipped_steps", 0) < 1, f"iteration {it}: no step applied"
        assert r.get("grad_norm", 0) > 0, f"iteration {it}: a zero gradient"
        if signal:
            assert r["adv/zero_frac"] < 1, f"iteration {it}: every advantage was 0 (all groups uniform)"
