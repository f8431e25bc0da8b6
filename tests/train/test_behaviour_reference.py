"""A behaviour reference for the trainer: fixed-seed tiny runs whose every logged number and final weight
must stay bit for bit what they were when ``tests/train/behaviour_reference.json`` was recorded.

It guards refactors of :mod:`seedrl.train.trainer` that must not change what a run computes (issue 42:
the trainer split into modules). Two runs, two iterations each:

- ``grpo``: GRPO on mixed outcomes (:func:`tests.helpers.mixed_outcomes`, so the policy-gradient term is
  live), KL and entropy, dedupe, replay of expert demonstrations (PPO-ptx), a warm-up stepped per
  optimizer step (``optim.warmup_steps``), an evaluation after each iteration and a checkpoint each.
- ``seed``: SEED with oracle skills (analysis, teacher re-scoring, the OPD term), dynamic sampling,
  a warm-up stepped per iteration (``optim.warmup_ratio``), stopped after 2 of 3 iterations.

Compared exactly: every numeric value of every metrics.jsonl and eval.jsonl row (``time/*`` and other
wall-clock keys left out), the rollout digests, and a sha256 of the final state dict's tensors.
Bit for bit holds only on the machine kind that recorded (``machine``: torch, the CPU's model and
instruction set; one thread, as conftest sets): another CPU kind sums floats in another order (an AMX
Xeon and an avx512 EPYC differ in the 7th digit), so there the integers, flags and digests are still
compared exactly, every float within 1e-3 relative (1e-5 absolute), and the weights by each tensor's
sum and absolute sum within 1e-3: a changed behaviour (a term skipped, a coefficient ignored) moves
them by far more. Record again (only when a change of behaviour is intended, and say so in the commit) with
``SEEDRL_RECORD_REFERENCE=1 python -m pytest -q tests/train/test_behaviour_reference.py``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path

import pytest
import torch

from seedrl.train.trainer import Trainer
from tests.helpers import mixed_outcomes, tiny_cfg

REFERENCE = Path(__file__).with_name("behaviour_reference.json")
RECORD = os.environ.get("SEEDRL_RECORD_REFERENCE") == "1"

RUNS: dict[str, tuple[dict, int | None]] = {
    "grpo": ({"algo.name": "grpo", "iterations": 2, "save_every": 1, "eval.every": 1, "optim.warmup_steps": 2,
              "algo.replay_coef": 0.1, "algo.replay_demo_tasks": 2, "algo.episode_discount": 0.9}, None),
    "seed": ({"algo.name": "seed", "skills.analyzer": "oracle", "skills.min_words": 1, "iterations": 3,
              "save_every": 1, "eval.num_tasks": 0, "optim.warmup_ratio": 0.9, "algo.dynamic_sampling": True,
              "algo.dynamic_sampling_rounds": 2}, 2),
}



def _volatile(key: str) -> bool:
    """Wall-clock values (``time/<stage>`` of a metrics row, ``time_s`` of an evaluation): differ every run."""
    return key.startswith("time/") or key.rsplit(".", 1)[-1] in {"time", "time_s", "elapsed_s", "wall_s"}


def _numbers(row: dict) -> dict:
    """The numeric values of a row (nested dicts flattened), without wall-clock keys; digests kept."""
    out: dict = {}

    def walk(d: dict, prefix: str) -> None:
        for k, v in d.items():
            key = prefix + k
            if _volatile(key):
                continue
            if isinstance(v, dict):
                walk(v, key + ".")
            elif isinstance(v, bool) or isinstance(v, (int, float)):
                out[key] = v
            elif key.endswith("digests"):
                out[key] = v
    walk(row, "")
    return out


def _machine() -> dict:
    """What decides the float summation order of these runs: torch, the CPU kind, the thread count."""
    from seedrl.experiments.compare import machine_info

    info = machine_info()
    return {k: info[k] for k in ("torch", "cpu_model", "cpu_bf16", "torch_threads")} | {
        "cpu_isa": torch.backends.cpu.get_cpu_capability()}


def _weights_sums(model: torch.nn.Module) -> dict[str, list[float]]:
    return {name: [float(t.double().sum()), float(t.double().abs().sum())]
            for name, t in sorted(model.state_dict().items()) if t.is_floating_point()}


def _close(got, want) -> bool:
    if isinstance(want, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        return math.isclose(got, want, rel_tol=1e-3, abs_tol=1e-5)
    return got == want


def _weights_sha256(model: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(str(t.dtype).encode())
        h.update(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def _rows(path: Path) -> list[dict]:
    return [_numbers(json.loads(x)) for x in path.read_text().splitlines()] if path.exists() else []


def _run(tmp_path: Path, name: str) -> dict:
    over, stop_after = RUNS[name]
    run_dir = tmp_path / name
    with mixed_outcomes():
        tr = Trainer(tiny_cfg(run_dir, **over))
        tr.train(stop_after=stop_after)
    return {"metrics": _rows(run_dir / "metrics.jsonl"), "eval": _rows(run_dir / "eval.jsonl"),
            "weights_sha256": _weights_sha256(tr.model), "weights_sums": _weights_sums(tr.model)}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(RUNS))
def test_a_fixed_seed_run_logs_and_trains_exactly_as_recorded(tmp_path, name):
    got = _run(tmp_path, name)
    if RECORD:
        ref = json.loads(REFERENCE.read_text()) if REFERENCE.exists() else {}
        if ref.get("machine", _machine()) != _machine():
            ref = {}  # one machine kind per reference: record every run again
        ref[name], ref["machine"] = got, _machine()
        REFERENCE.write_text(json.dumps(ref, indent=1, sort_keys=True) + "\n")
        return
    ref = json.loads(REFERENCE.read_text())
    want, exact = ref[name], ref["machine"] == _machine()
    same = (lambda g, w: g == w) if exact else _close
    assert len(got["metrics"]) == len(want["metrics"]) and len(got["eval"]) == len(want["eval"])
    for kind in ("metrics", "eval"):
        for i, (g, w) in enumerate(zip(got[kind], want[kind])):
            assert sorted(g) == sorted(w), f"{name} {kind} row {i}: keys differ: {sorted(set(g) ^ set(w))}"
            diff = {k: (w[k], g[k]) for k in w if not same(g[k], w[k])}
            assert not diff, f"{name} {kind} row {i}: (recorded, now) {diff}" + ("" if exact else " (another CPU kind)")
    if exact:
        assert got["weights_sha256"] == want["weights_sha256"], f"{name}: final weights differ"
    else:
        diff = [k for k, w in want["weights_sums"].items() if not all(map(_close, got["weights_sums"][k], w))]
        assert not diff, f"{name}: final weights differ beyond another CPU kind's rounding in {diff}"
