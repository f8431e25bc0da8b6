"""Data-parallel training: N processes compute the update of one process with the same global batch.

The slow tests launch the real ``seedrl train`` CLI as 2 CPU processes with ``accelerate launch
--multi_gpu`` (gloo) and compare the parameters with a single in-process run. HF sampling of a
prompt depends on the other prompts of its ``generate`` batch, so the single-process reference
plays the batch as the same 2 task blocks with the same per-block seeds (``rollout_shards=2``);
everything after the rollout (log-probs, advantages, mini-batches, loss normalisation, optimizer)
is the ordinary single-process path.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from seedrl.config import save_config
from seedrl.errors import SeedRLError
from seedrl.train import distributed as D
from seedrl.train.trainer import Trainer
from tests.helpers import tiny_cfg

ROOT = Path(__file__).resolve().parents[2]
ACCELERATE = shutil.which("accelerate", path=str(Path(sys.executable).parent)) or "accelerate"
LAUNCH = [ACCELERATE, "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
          "--mixed_precision", "no", "--dynamo_backend", "no"]
#: the same launch with FSDP2 (each decoder layer and the root sharded over the 2 processes)
FSDP = ["--use_fsdp", "--fsdp_version", "2"]
#: one iteration of the tiny config; eval small, a checkpoint every iteration. Micro-batches of one
#: sample: a padded micro-batch's numbers depend (in the last fp32 bits) on which samples share it,
#: and Adam's first steps turn such noise on near-zero gradients into ~3e-5 parameter differences
#: (measured with micro_batch_size=4; the naive scheme below differs by ~5e-3).
SETS = {"iterations": 1, "save_every": 1, "eval.num_tasks": 2, "optim.micro_batch_size": 1}


def _env(port: int) -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1",
               PYTHONPATH=str(ROOT))
    env.pop("WORLD_SIZE", None)
    env.pop("RANK", None)
    return env | {"MASTER_PORT": str(port)}


def _launch(args: list[str], port: int, cwd: Path, fsdp: bool = False) -> subprocess.CompletedProcess:
    launch = [a for a in LAUNCH if a != "--multi_gpu"] + FSDP if fsdp else LAUNCH
    cmd = launch + ["--main_process_port", str(port)] + args
    out = subprocess.run(cmd, cwd=cwd, env=_env(port), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out


def _cli_train(tmp_path: Path, run_dir: Path, port: int, resume: bool = False, fsdp: bool = False,
               **over) -> subprocess.CompletedProcess:
    cfg = tiny_cfg(run_dir, **(SETS | over))
    path = tmp_path / f"{run_dir.name}.yaml"
    save_config(cfg, path)
    return _launch(["-m", "seedrl.cli", "train", "--config", str(path)] + (["--resume"] if resume else []), port,
                   tmp_path, fsdp=fsdp)


def _weights(run_dir: Path, iteration: int) -> dict[str, torch.Tensor]:
    folder = run_dir / "checkpoints" / f"iter_{iteration:06d}"
    files = sorted(folder.rglob("*.safetensors"))
    assert files, f"no weights in {folder}: {sorted(p.name for p in folder.rglob('*'))}"
    out: dict[str, torch.Tensor] = {}
    for f in files:
        out |= load_file(str(f))
    return out


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    keys = a.keys() & b.keys()  # a saved checkpoint leaves out tied copies
    assert len(keys) > 0.9 * max(len(a), len(b))
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in keys)


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _reference(run_dir: Path, iterations: int, **over) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(initial, final) parameters of a single process that plays the 2 blocks as 2 ranks do."""
    tr = Trainer(tiny_cfg(run_dir, **(SETS | {"iterations": iterations} | over)), rollout_shards=2)
    init = {k: v.detach().clone() for k, v in tr.model.state_dict().items()}
    tr.train()
    return init, _weights(run_dir, iterations)


# ------------------------------------------------------------------ quick: the pieces


def test_task_blocks_are_contiguous_and_refuse_a_batch_that_does_not_divide():
    assert [D.task_block(6, D.World(r, 3)) for r in range(3)] == [(0, 2), (2, 4), (4, 6)]
    assert D.task_block(4, D.SINGLE) == (0, 4)
    with pytest.raises(SeedRLError, match="tasks_per_batch=3 must be divisible by the number of processes"):
        D.task_block(3, D.World(1, 2))
    assert D.shard_seed(17, 0) == 17 and D.shard_seed(17, 1) != 17


def test_sample_layout_maps_global_mini_batches_to_local_indices():
    lay = D.SampleLayout(lengths=[3, 1, 4, 1, 5], signal=None, offset=2, count=2)
    assert lay.local([4, 2, 0, 3, 1]) == [0, 1]  # global 2 and 3, in mini-batch order
    assert lay.own([4, 2, 0, 3, 1], ["a", "b", "c", "d", "e"]) == ["b", "d"]  # their values, aligned with local()
    single = D.sample_layout(D.SINGLE, [3, 1], [True, False])
    assert (single.lengths, single.signal, single.offset, single.count) == ([3, 1], [True, False], 0, 2)
    assert single.local([1, 0]) == [1, 0]


def test_sample_layout_counts_the_micro_batches_of_the_busiest_rank():
    lay = D.SampleLayout(lengths=[1] * 7, signal=None, offset=0, count=5, counts=(5, 2))
    assert lay.most_micro_batches([0, 1, 2, 5, 6], 2) == 2  # rank 0: 3 samples -> 2; rank 1: 2 -> 1
    assert lay.most_micro_batches([5, 6, 0], 1) == 2  # rank 1 is the busiest here
    assert lay.most_micro_batches([4], 4) == 1


def test_single_process_never_forms_a_group_and_refuses_sharded_launches(monkeypatch, caplog):
    for k in ("WORLD_SIZE", "RANK", "ACCELERATE_USE_FSDP", "ACCELERATE_USE_DEEPSPEED"):
        monkeypatch.delenv(k, raising=False)
    assert D.setup("cpu") is D.SINGLE
    monkeypatch.setenv("ACCELERATE_USE_CPU", "True")  # `accelerate launch --cpu --num_processes 2`: one process
    with caplog.at_level("WARNING"):
        assert D.setup("cpu") is D.SINGLE
    assert "starts ONE process" in caplog.text
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    with pytest.raises(SeedRLError, match="DeepSpeed"):
        D.setup("cpu")
    assert D.rank_device(D.World(1, 2, 1), "cuda") == "cuda:1"
    assert D.rank_device(D.SINGLE, "cuda") == "cuda"


def test_trainer_refuses_tasks_that_do_not_split_into_blocks(tmp_path):
    with pytest.raises(SeedRLError, match="must be divisible"):
        Trainer(tiny_cfg(tmp_path / "r", **{"rollout.tasks_per_batch": 3}), rollout_shards=2)


@pytest.mark.slow
def test_sharded_rollout_keeps_the_batch_ids(tmp_path):
    """Blocks keep the global traj/group ids a single-block rollout gives, in the same order."""
    one = Trainer(tiny_cfg(tmp_path / "a")).collect({})
    two = Trainer(tiny_cfg(tmp_path / "b"), rollout_shards=2).collect({})
    assert [(t.traj_id, t.group_id, t.task_id) for t in one] == [(t.traj_id, t.group_id, t.task_id) for t in two]
    assert all(s.group_id == t.group_id for t in two for s in t.steps)


# ------------------------------------------------------------------ slow: 2 processes vs 1


@pytest.mark.slow
def test_two_processes_compute_the_one_process_update(tmp_path):
    init, ref = _reference(tmp_path / "ref", 1)
    _cli_train(tmp_path, tmp_path / "dp", port=29611)
    got = _weights(tmp_path / "dp", 1)
    update = _max_diff(init, ref)
    assert update > 1e-4  # the step moved the parameters ...
    assert _max_diff(got, ref) < 1e-5  # ... and 2 processes moved them exactly as 1 did
    # rank 0 logged the whole batch (both ranks' episodes): the rows match the single process
    a, b = _rows(tmp_path / "dp" / "metrics.jsonl"), _rows(tmp_path / "ref" / "metrics.jsonl")
    assert len(a) == len(b) == 1
    assert a[0]["dist/world_size"] == 2 and a[0]["dist/ddp"] == 1 and a[0]["dist/fsdp"] == 0
    for k in ("rollout/samples", "rollout/success_rate", "rollout/steps", "rollout/response_tokens",
              "adv/mean", "adv/zero_frac", "optim_steps"):
        assert a[0][k] == pytest.approx(b[0][k], abs=1e-6), k
    for k in ("loss/pg", "loss/kl", "loss/entropy", "grad_norm"):
        assert a[0][k] == pytest.approx(b[0][k], rel=1e-4, abs=1e-6), k
    assert len(_rows(tmp_path / "dp" / "eval.jsonl")) == 2  # rank 0 alone evaluated (before and after)


NAIVE_DDP = """
import sys
import torch
import seedrl.train.update as U
from seedrl.train import distributed as D

# the usual mistake: each rank normalises by its own tokens over its own mini-batches, and plain DDP
# averages the gradients
U.sample_layout = lambda world, lengths, signal: D.SampleLayout(lengths, signal, 0, len(lengths))
D.data_parallel = lambda model, device: torch.nn.parallel.DistributedDataParallel(model, broadcast_buffers=False)
from seedrl.cli import main
sys.argv = ["seedrl"] + sys.argv[1:]
main()
"""


@pytest.mark.slow
def test_negative_control_per_rank_normalisation_is_detected(tmp_path):
    """The comparison above can fail: per-rank token means with averaged gradients (plain DDP over
    local mini-batches) give an update the tolerance tells apart."""
    init, ref = _reference(tmp_path / "ref", 1, **{"eval.num_tasks": 0})
    script = tmp_path / "naive.py"
    script.write_text(NAIVE_DDP)
    cfg = tiny_cfg(tmp_path / "naive", **(SETS | {"eval.num_tasks": 0}))
    save_config(cfg, tmp_path / "naive.yaml")
    _launch([str(script), "train", "--config", str(tmp_path / "naive.yaml")], 29621, tmp_path)
    got = _weights(tmp_path / "naive", 1)
    assert _max_diff(got, ref) > 100 * 1e-5
    assert _max_diff(got, ref) > 0.1 * _max_diff(init, ref)


@pytest.mark.slow
def test_resumed_two_process_run_matches_two_straight_iterations_of_one_process(tmp_path):
    _, ref = _reference(tmp_path / "ref", 2, **{"eval.num_tasks": 0})
    run = tmp_path / "dp"
    _cli_train(tmp_path, run, port=29631, **{"eval.num_tasks": 0})  # iteration 1, checkpoint, "killed"
    _cli_train(tmp_path, run, port=29632, resume=True, **{"eval.num_tasks": 0, "iterations": 2})
    assert _max_diff(_weights(run, 2), ref) < 1e-5
    rows = _rows(run / "metrics.jsonl")
    assert [r["iteration"] for r in rows] == [1, 2]
    changes = _rows(run / "config_changes.jsonl")
    assert changes[0]["changes"] == {"iterations": {"old": 1, "new": 2}}


# ------------------------------------------------------------------ slow: FSDP, 2 processes vs 1


@pytest.mark.slow
def test_fsdp_two_processes_compute_the_one_process_update_and_resume(tmp_path):
    """FSDP2 over 2 processes (each decoder layer and the root sharded): the same parameters as one
    process with the same global batch after iteration 1, and after a resumed iteration 2 (the
    checkpoint holds the full weights and the one-process optimizer state)."""
    _, ref = _reference(tmp_path / "ref", 2)
    run = tmp_path / "fsdp"
    _cli_train(tmp_path, run, port=29641, fsdp=True)
    assert _max_diff(_weights(run, 1), _weights(tmp_path / "ref", 1)) < 1e-5
    a, b = _rows(run / "metrics.jsonl"), _rows(tmp_path / "ref" / "metrics.jsonl")
    assert a[0]["dist/fsdp"] == 1 and a[0]["dist/ddp"] == 0 and a[0]["dist/world_size"] == 2
    for k in ("rollout/samples", "optim_steps"):
        assert a[0][k] == b[0][k], k
    for k in ("loss/pg", "loss/kl", "grad_norm"):
        assert a[0][k] == pytest.approx(b[0][k], rel=1e-4, abs=1e-6), k
    assert len(_rows(run / "eval.jsonl")) == 2  # rank 0 evaluated on gathered weights, before and after
    # the checkpoint is a plain one-process checkpoint: a single process resumes it unsharded too
    state = torch.load(run / "checkpoints" / "iter_000001" / "trainer.pt", weights_only=True)
    assert sorted(state["optimizer"]["state"]) == list(range(len(state["optimizer"]["state"])))
    _cli_train(tmp_path, run, port=29642, resume=True, fsdp=True, iterations=2)
    assert _max_diff(_weights(run, 2), ref) < 1e-5
