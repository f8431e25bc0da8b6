"""Checkpoints and resume under faults: kills at every step of the save and log sequence, damaged
checkpoints, hostile pickles, changed settings, and a new run over an old one's rows.

One tiny reference run (2 iterations, a checkpoint after each) is trained once per module; every
test copies its folder or reruns it with a fault, then checks that resuming reproduces the
uninterrupted metrics and weights bit for bit, or fails in one SeedRLError line."""

from __future__ import annotations

import builtins
import hashlib
import json
import logging
import pickle
import random
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from seedrl.errors import SeedRLError
from seedrl.train import checkpoint as ckpt_mod
from seedrl.train.checkpoint import MANIFEST, latest_checkpoint, load_trainer_state
from seedrl.train.logger import MetricsLogger
from seedrl.train.trainer import Trainer
from tests.helpers import assert_updated, mixed_outcomes, tiny_cfg

pytestmark = pytest.mark.faults

SAVE_POINTS = ("begin", "model", "trainer_state", "state", "manifest", "complete", "commit", "pointer", "rotate")


class Killed(BaseException):
    """A simulated SIGKILL: not an Exception, so no `except Exception` handler can swallow it."""


def cfg(run_dir, **over):
    return tiny_cfg(run_dir, **{"iterations": 2, "save_every": 1, "eval.num_tasks": 0, **over})


def rows(path: Path) -> list[dict]:
    out = [json.loads(x) for x in path.read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in out]


def weights(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def assert_same_run(run_dir: Path, model, reference) -> None:
    _, ref_rows, ref_weights = reference
    assert rows(run_dir / "metrics.jsonl") == ref_rows
    got = weights(model)
    assert got.keys() == ref_weights.keys()
    for k, v in ref_weights.items():
        assert torch.equal(got[k], v), k


@pytest.fixture(scope="module", autouse=True)
def _real_updates():
    """Every run of this module updates with a policy-gradient advantage (the tiny random policy's groups
    would all be lost, see tests.helpers.mixed_outcomes), so a resume that matches compares real updates."""
    with mixed_outcomes():
        yield


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    run = tmp_path_factory.mktemp("reference") / "run"
    tr = Trainer(cfg(run))
    tr.train()
    assert [r["iteration"] for r in rows(run / "metrics.jsonl")] == [1, 2]
    assert_updated(rows(run / "metrics.jsonl"))  # the runs resumed to it (assert_same_run) updated as well
    assert [p.name for p in ckpt_mod.checkpoint_dirs(run / "checkpoints")] == ["iter_000002", "iter_000001"]
    return run, rows(run / "metrics.jsonl"), weights(tr.model)


@pytest.fixture()
def run_copy(reference, tmp_path):
    """A copy of the finished reference run folder (checkpoints iter_000001 and iter_000002)."""
    dst = tmp_path / "run"
    shutil.copytree(reference[0], dst)
    conf = yaml.safe_load((dst / "config.yaml").read_text())
    (dst / "config.yaml").write_text(yaml.safe_dump(conf | {"run_dir": str(dst)}, sort_keys=False))
    return dst


def resume(run: Path, **over) -> Trainer:
    return Trainer(cfg(run, **over), resume=True)


def damaged_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "is damaged" in r.getMessage()]


# ------------------------------------------------------------------------------ kills while saving
@pytest.mark.parametrize("point", SAVE_POINTS)
def test_kill_at_every_step_of_the_save_resumes_to_the_uninterrupted_run(tmp_path, monkeypatch, reference, point):
    run = tmp_path / "run"
    tr = Trainer(cfg(run))

    def fault(p):
        if p == point and tr.iteration == 2:
            raise Killed(p)

    monkeypatch.setattr(ckpt_mod, "_fault", fault)
    with pytest.raises(Killed):
        tr.train()
    monkeypatch.undo()
    # the row of iteration 2 was written (and fsynced) before the checkpoint commit
    assert [r["iteration"] for r in rows(run / "metrics.jsonl")] == [1, 2]
    committed = point in ("commit", "pointer", "rotate")
    assert latest_checkpoint(run / "checkpoints").name == ("iter_000002" if committed else "iter_000001")

    resumed = resume(run)
    assert resumed.iteration == (2 if committed else 1)
    assert not list((run / "checkpoints").glob(".tmp-*"))  # the killed save's folder is gone
    resumed.train()
    assert_same_run(run, resumed.model, reference)
    assert latest_checkpoint(run / "checkpoints").name == "iter_000002"
    assert not list((run / "checkpoints").glob(".*tmp*"))


def test_sigkill_of_a_real_process_during_the_save(tmp_path, reference):
    """A real SIGKILL (no handler runs) after COMPLETE, before the rename: the next run removes the
    dead process's .tmp folder and resumes to the uninterrupted result."""
    run = tmp_path / "run"
    child = (
        "import os, signal, sys, torch\n"
        "torch.set_num_threads(1)\n"
        "from seedrl.train import checkpoint\n"
        "from seedrl.train.trainer import Trainer\n"
        "from tests.train.test_checkpoint_faults import cfg\n"
        "from tests.helpers import mixed_outcomes\n"
        "_mixed = mixed_outcomes()\n"
        "_mixed.__enter__()  # kept referenced: a collected generator would undo it\n"
        "tr = Trainer(cfg(sys.argv[1]))\n"
        "def fault(point):\n"
        "    if point == 'complete' and tr.iteration == 2:\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "checkpoint._fault = fault\n"
        "tr.train()\n")
    proc = subprocess.run([sys.executable, "-c", child, str(run)], cwd=Path(__file__).resolve().parents[2],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == -9, proc.stderr[-2000:]
    orphans = list((run / "checkpoints").glob(".tmp-iter_000002-*"))
    assert len(orphans) == 1 and (orphans[0] / "COMPLETE").exists()
    assert [r["iteration"] for r in rows(run / "metrics.jsonl")] == [1, 2]
    resumed = resume(run)
    assert resumed.iteration == 1 and not orphans[0].exists()
    resumed.train()
    assert_same_run(run, resumed.model, reference)


def test_kill_while_writing_the_metrics_row_drops_the_torn_line(tmp_path, monkeypatch, reference, caplog):
    run = tmp_path / "run"
    tr = Trainer(cfg(run))
    real_log = MetricsLogger.log

    def torn_log(self, metrics):
        if metrics["iteration"] == 2:
            with self.path.open("a") as f:
                f.write(json.dumps(metrics)[:40])  # half a line, then the kill
            raise Killed("metrics")
        real_log(self, metrics)

    monkeypatch.setattr(MetricsLogger, "log", torn_log)
    with pytest.raises(Killed):
        tr.train()
    monkeypatch.undo()
    with pytest.raises(ValueError):
        rows(run / "metrics.jsonl")  # the torn line is really there
    with caplog.at_level(logging.WARNING):
        resumed = resume(run)
    assert resumed.iteration == 1
    assert any("torn last line" in r.getMessage() and "metrics.jsonl" in r.getMessage() for r in caplog.records)
    resumed.train()
    assert_same_run(run, resumed.model, reference)


def test_kill_after_the_commit_loses_no_row(run_copy, reference):
    """A finished run resumed again rewrites nothing and loses nothing."""
    tr = resume(run_copy)
    assert tr.iteration == 2
    tr.train()
    assert_same_run(run_copy, tr.model, reference)


def test_orphaned_tmp_folders_are_removed_unless_their_process_lives(run_copy):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    ck = run_copy / "checkpoints"
    (ck / f".tmp-iter_000009-{dead.pid}").mkdir()
    (ck / f".tmp-iter_000009-{dead.pid}" / "junk").write_text("x")
    (ck / ".latest.tmp999999999").write_text("iter_000009\n")
    live = ck / f".tmp-iter_000008-{1}"  # pid 1 is always alive
    live.mkdir()
    resume(run_copy)
    assert not (ck / f".tmp-iter_000009-{dead.pid}").exists()
    assert not (ck / ".latest.tmp999999999").exists()
    assert live.exists()


# ------------------------------------------------------------------------------ damaged checkpoints
def _flip_bit(path: Path) -> None:
    data = bytearray(path.read_bytes())
    header = int.from_bytes(data[:8], "little")
    i = 8 + header + (len(data) - 8 - header) // 2  # in the tensor data, not the header
    data[i] ^= 0x10
    path.write_bytes(bytes(data))


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _rehash(ckpt: Path, rel: str) -> None:
    """Make MANIFEST.json agree with the file ``rel`` as it is now (damage the manifest cannot see)."""
    manifest = json.loads((ckpt / MANIFEST).read_text())
    data = (ckpt / rel).read_bytes()
    manifest["files"][rel] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (ckpt / MANIFEST).write_text(json.dumps(manifest))


def _broken_state_behind_the_manifest(path: Path) -> None:
    path.write_text('{"iteration": 2, "panel_')
    _rehash(path.parent, "state.json")


def _nan_weights_behind_the_manifest(path: Path) -> None:
    """A diverged run's weights, saved before saves refused them: intact files, NaN values."""
    from safetensors.torch import load_file, save_file

    sd = load_file(str(path))
    first = sorted(sd)[0]
    sd[first] = torch.full_like(sd[first], float("nan"))
    save_file(sd, str(path), metadata={"format": "pt"})
    _rehash(path.parent.parent, "model/model.safetensors")


CORRUPTIONS = {
    "truncated_safetensors": ("model/model.safetensors", _truncate, "model.safetensors"),
    "empty_safetensors": ("model/model.safetensors", lambda p: p.write_bytes(b""), "model.safetensors"),
    "flipped_bit_in_weights": ("model/model.safetensors", _flip_bit, "sha256"),
    "truncated_trainer_pt": ("trainer.pt", _truncate, "trainer.pt"),
    "missing_trainer_pt": ("trainer.pt", lambda p: p.unlink(), "trainer.pt"),
    "broken_state_json": ("state.json", lambda p: p.write_text('{"iteration": 2, "panel_'), "state.json"),
    "broken_state_json_behind_manifest": ("state.json", _broken_state_behind_the_manifest, "state.json"),
    "broken_manifest": (MANIFEST, lambda p: p.write_text('{"format": 1, "files": {"trainer.pt'), MANIFEST),
}


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_damaged_newest_checkpoint_falls_back_to_the_older_intact_one(run_copy, reference, caplog, name):
    rel, corrupt, named = CORRUPTIONS[name]
    newest = run_copy / "checkpoints" / "iter_000002"
    corrupt(newest / rel)
    with caplog.at_level(logging.WARNING):
        assert latest_checkpoint(run_copy / "checkpoints").name == "iter_000001"
        tr = resume(run_copy)
    assert tr.iteration == 1
    warned = damaged_warnings(caplog)
    assert warned and all(named in w and "iter_000002" in w for w in warned), warned
    # the damaged checkpoint is kept aside for inspection, out of the way of the next saves
    assert (run_copy / "checkpoints" / "damaged-iter_000002").is_dir() and not newest.exists()
    assert [r["iteration"] for r in rows(run_copy / "metrics.jsonl")] == [1]
    tr.train()
    assert_same_run(run_copy, tr.model, reference)


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_no_intact_checkpoint_is_one_error_line(run_copy, name):
    rel, corrupt, named = CORRUPTIONS[name]
    for d in ("iter_000001", "iter_000002"):
        corrupt(run_copy / "checkpoints" / d / rel)
    before = (run_copy / "metrics.jsonl").read_text()
    for call in (lambda: resume(run_copy), lambda: latest_checkpoint(run_copy / "checkpoints")):
        with pytest.raises(SeedRLError) as exc:
            call()
        msg = str(exc.value)
        assert "\n" not in msg and "no intact checkpoint" in msg
        assert "iter_000001" in msg and "iter_000002" in msg and named in msg
    assert (run_copy / "metrics.jsonl").read_text() == before  # nothing was cut on the way


def test_broken_middle_metrics_line_is_one_error_line(run_copy):
    lines = (run_copy / "metrics.jsonl").read_text().splitlines()
    (run_copy / "metrics.jsonl").write_text("{broken\n" + "\n".join(lines[1:]) + "\n")
    with pytest.raises(SeedRLError, match=r"metrics.jsonl: line 1 is not JSON") as exc:
        resume(run_copy)
    assert "\n" not in str(exc.value)


def test_torn_last_metrics_line_is_dropped_with_a_warning(run_copy, reference, caplog):
    with (run_copy / "metrics.jsonl").open("a") as f:
        f.write('{"iteration": 3, "rollout/succ')
    with caplog.at_level(logging.WARNING):
        tr = resume(run_copy)
    assert tr.iteration == 2 and any("torn last line" in r.getMessage() for r in caplog.records)
    assert rows(run_copy / "metrics.jsonl") == reference[1]


# ------------------------------------------------------------------------------ hostile pickles
class Payload:
    """Unpickling this creates ``path``: the proof that code from a checkpoint ran."""

    def __init__(self, path: Path):
        self.path = str(path)

    def __reduce__(self):
        return builtins.open, (self.path, "w")


def _plant_payload(ckpt: Path, marker: Path) -> None:
    """Replace trainer.pt by a pickle that runs code, and make the manifest agree with it (an
    attacker can rewrite both), so only the loader itself stands in the way."""
    torch.save({"optimizer": {"state": {}, "param_groups": []}, "rng": {"x": Payload(marker)}}, ckpt / "trainer.pt")
    _rehash(ckpt, "trainer.pt")


def test_a_pickled_payload_in_trainer_pt_never_runs(run_copy, tmp_path, caplog):
    ck = run_copy / "checkpoints"
    marker = tmp_path / "pwned"
    # control: the payload is live (an unsafe load would run it)
    _plant_payload(ck / "iter_000002", tmp_path / "control")
    torch.load(ck / "iter_000002" / "trainer.pt", weights_only=False)
    assert (tmp_path / "control").exists()

    _plant_payload(ck / "iter_000002", marker)
    with caplog.at_level(logging.WARNING):
        tr = resume(run_copy)  # falls back to the older intact checkpoint
    assert tr.iteration == 1 and not marker.exists()
    assert any("trainer.pt" in w for w in damaged_warnings(caplog))

    _plant_payload(ck / "iter_000001", marker)
    with pytest.raises(SeedRLError) as exc:
        load_trainer_state(ck / "iter_000001", tr.model, tr.optimizer, tr.scheduler)
    assert "trainer.pt" in str(exc.value) and "could run code" in str(exc.value) and "\n" not in str(exc.value)
    with pytest.raises(SeedRLError, match="no intact checkpoint"):
        resume(run_copy)
    assert not marker.exists()


@pytest.mark.parametrize("protocol", [0, 2, 4])
def test_a_raw_pickle_in_trainer_pt_is_refused_in_one_line_naming_its_global(run_copy, tmp_path, caplog, protocol):
    """A raw pickle (pickle.dump, not torch's zip format): torch's refusal names an opcode ("Unsupported operand
    149") in three lines of its own text and warns about the protocol; the line names the global (builtins.open
    pickles as io.open)."""
    import warnings

    ck = run_copy / "checkpoints" / "iter_000002"
    marker = tmp_path / "pwned"
    with open(ck / "trainer.pt", "wb") as f:
        pickle.dump({"optimizer": {"state": {}, "param_groups": []}, "rng": {"x": Payload(marker)}}, f,
                    protocol=protocol)
    _rehash(ck, "trainer.pt")
    with warnings.catch_warnings(record=True) as seen, caplog.at_level(logging.WARNING):
        warnings.simplefilter("always")
        tr = resume(run_copy)
    assert tr.iteration == 1 and not marker.exists()
    (line,) = [w for w in damaged_warnings(caplog) if "iter_000002" in w]
    assert "trainer.pt holds more than tensors and plain data (it references io.open); refused" in line, line
    assert "\n" not in line and "Weights only load failed" not in line
    assert not [w for w in seen if "pickle protocol" in str(w.message)]


# ------------------------------------------------------------------------------ pre-manifest checkpoints
def _make_legacy(ckpt: Path) -> None:
    """Rewrite a checkpoint as the code before manifests wrote it: numpy/tuple RNG states, no manifest."""
    blob = torch.load(ckpt / "trainer.pt", weights_only=True)
    rng = blob["rng"]
    npst = rng["numpy"]
    rng["numpy"] = (npst["name"], npst["keys"].numpy().astype(np.uint32), npst["pos"], npst["has_gauss"],
                    npst["cached_gaussian"])
    py = rng["python"]
    rng["python"] = (py["version"], tuple(py["state"]), py["gauss_next"])
    torch.save(blob, ckpt / "trainer.pt")
    (ckpt / MANIFEST).unlink()


def test_checkpoints_without_manifest_still_resume_unverified(run_copy, reference, caplog):
    for d in ckpt_mod.checkpoint_dirs(run_copy / "checkpoints"):
        _make_legacy(d)
    with caplog.at_level(logging.WARNING):
        tr = resume(run_copy)
    assert tr.iteration == 2
    assert any("unverified" in r.getMessage() for r in caplog.records)
    assert_same_run(run_copy, tr.model, reference)
    # the RNG states came back exactly: the next draws equal those after loading the new format
    draws = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    ckpt_mod.set_rng_state(torch.load(reference[0] / "checkpoints" / "iter_000002" / "trainer.pt",
                                      weights_only=True)["rng"])
    assert draws == (random.random(), float(np.random.rand()), float(torch.rand(1)))


@pytest.mark.parametrize("rel", ["model/model.safetensors", "trainer.pt"])
def test_damaged_checkpoint_without_manifest_falls_back(run_copy, reference, caplog, rel):
    for d in ckpt_mod.checkpoint_dirs(run_copy / "checkpoints"):
        _make_legacy(d)
    _truncate(run_copy / "checkpoints" / "iter_000002" / rel)
    with caplog.at_level(logging.WARNING):
        tr = resume(run_copy)
    assert tr.iteration == 1 and any(Path(rel).name in w for w in damaged_warnings(caplog))
    tr.train()
    assert_same_run(run_copy, tr.model, reference)


# ------------------------------------------------------------------------------ changed settings
@pytest.mark.parametrize("key,value,shown", [("optim.lr", 0.5, "optim.lr 0.001 -> 0.5"),
                                             ("rollout.group_size", 4, "rollout.group_size 3 -> 4"),
                                             ("seed", 7, "seed 0 -> 7"),
                                             ("model.name", "tiny-3m", 'model.name "tiny-micro" -> "tiny-3m"')])
def test_resume_refuses_settings_that_change_the_run(run_copy, key, value, shown):
    before = (run_copy / "config.yaml").read_text()
    with pytest.raises(SeedRLError) as exc:
        resume(run_copy, **{key: value})
    msg = str(exc.value)
    assert shown in msg and "\n" not in msg
    assert (run_copy / "config.yaml").read_text() == before
    assert not (run_copy / "config_changes.jsonl").exists()


def test_resume_into_another_model_is_one_line_naming_both_shapes(run_copy):
    """config.yaml edited by hand to name another model, and the matching --set: the resume check sees no
    change, and the checkpoint's weights do not fit: one line with both shapes, nothing touched."""
    conf = yaml.safe_load((run_copy / "config.yaml").read_text())
    conf["model"]["name"] = "tiny-3m"
    (run_copy / "config.yaml").write_text(yaml.safe_dump(conf, sort_keys=False))
    files = {p: p.read_bytes() for p in run_copy.rglob("*") if p.is_file()}
    with pytest.raises(SeedRLError) as exc:
        resume(run_copy, **{"model.name": "tiny-3m"})
    msg = str(exc.value)
    assert "iter_000002 does not fit the configured model: model.embed_tokens.weight is [1024, 64] in the " \
           "checkpoint, [1024, 160] in the model (and 25 more tensors)" in msg and "\n" not in msg, msg
    assert {p: p.read_bytes() for p in run_copy.rglob("*") if p.is_file()} == files


def test_resume_with_a_broken_config_yaml_is_one_error_line(run_copy):
    (run_copy / "config.yaml").write_text("seed: [0,\n")
    with pytest.raises(SeedRLError, match="config.yaml is unreadable") as exc:
        resume(run_copy)
    assert "\n" not in str(exc.value)


def test_resume_records_safe_setting_changes(run_copy, reference):
    before = (run_copy / "config.yaml").read_text()
    tr = resume(run_copy, iterations=3, save_every=3, **{"optim.micro_batch_size": 2})
    assert tr.iteration == 2
    changes = [json.loads(x) for x in (run_copy / "config_changes.jsonl").read_text().splitlines()]
    assert len(changes) == 1 and changes[0]["iteration"] == 2
    assert changes[0]["changes"] == {"iterations": {"old": 2, "new": 3}, "save_every": {"old": 1, "new": 3},
                                     "optim.micro_batch_size": {"old": 4, "new": 2}}
    assert (run_copy / "config.original.yaml").read_text() == before  # the first config is kept
    assert yaml.safe_load((run_copy / "config.yaml").read_text())["iterations"] == 3  # config in effect
    # resuming again with the same settings records nothing new
    resume(run_copy, iterations=3, save_every=3, **{"optim.micro_batch_size": 2})
    assert len((run_copy / "config_changes.jsonl").read_text().splitlines()) == 1
    assert (run_copy / "config.original.yaml").read_text() == before


# ------------------------------------------------------------------------------ non-finite weights
def _nan_after_step(monkeypatch, when) -> None:
    """Every AdamW step for which ``when()`` is true leaves its first weight NaN (as an infinite rate does)."""
    real = torch.optim.AdamW.step

    def step(self, *a, **k):
        out = real(self, *a, **k)
        if when():
            with torch.no_grad():
                self.param_groups[0]["params"][0].fill_(float("nan"))
        return out

    monkeypatch.setattr(torch.optim.AdamW, "step", step)


def test_an_update_that_makes_the_weights_nan_stops_the_run_before_any_save(run_copy, monkeypatch):
    """Iteration 3's optimizer step makes the weights NaN: the command stops with one line naming iteration 3
    (as its metrics row would), writes no checkpoint or row of it, and the newest checkpoint is untouched."""
    from typer.testing import CliRunner

    from seedrl.cli import app

    ckpts = run_copy / "checkpoints"
    before = {p.relative_to(ckpts): p.read_bytes() for p in ckpts.rglob("*") if p.is_file()}
    rows_before = (run_copy / "metrics.jsonl").read_text()
    _nan_after_step(monkeypatch, lambda: True)
    r = CliRunner().invoke(app, ["train", "-c", str(run_copy / "config.yaml"), "--resume", "--set", "iterations=3"])
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in r.output, r.output
    assert lines[0].startswith("error: iteration 3: the optimizer step made the weights non-finite"), lines
    assert "the newest checkpoint, iter_000002, is untouched" in lines[0] and "lower optim.lr" in lines[0]
    assert {p.relative_to(ckpts): p.read_bytes() for p in ckpts.rglob("*") if p.is_file()} == before
    assert (run_copy / "metrics.jsonl").read_text() == rows_before


def test_nan_weights_in_a_checkpoint_are_refused_by_eval_and_skipped_by_resume(run_copy, reference, caplog):
    """A checkpoint whose files are intact but whose weights are NaN (saved before saves refused them):
    `seedrl eval` on it is one line, exit 2; --resume sets it aside as damaged and resumes from the older one."""
    from typer.testing import CliRunner

    from seedrl.cli import app

    newest = run_copy / "checkpoints" / "iter_000002"
    _nan_weights_behind_the_manifest(newest / "model" / "model.safetensors")
    r = CliRunner().invoke(app, ["eval", "--checkpoint", str(newest), "--num-tasks", "1"])
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "holds non-finite weights" in lines[0] and "iter_000002" in lines[0], r.output
    with caplog.at_level(logging.WARNING):
        tr = resume(run_copy)
    assert tr.iteration == 1
    assert any("non-finite weights" in w and "iter_000002" in w for w in damaged_warnings(caplog))
    assert (run_copy / "checkpoints" / "damaged-iter_000002").is_dir()
    tr.train()
    assert_same_run(run_copy, tr.model, reference)


def test_a_full_disk_at_the_save_is_one_line_and_keeps_the_checkpoints(run_copy, monkeypatch):
    """`seedrl train` whose checkpoint write hits a full disk (safetensors' own error text, no errno): one line
    naming the file and the space left, exit 2; the earlier checkpoints stay and no partial folder is left."""
    import os
    from types import SimpleNamespace

    from safetensors import SafetensorError
    from typer.testing import CliRunner

    import seedrl.models.loading as loading
    from seedrl.cli import app

    ckpts = run_copy / "checkpoints"
    before = {p.relative_to(ckpts): p.read_bytes() for p in ckpts.rglob("*") if p.is_file()}

    def full(*a, **k):
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(loading, "save_model", full)
    monkeypatch.setattr(os, "statvfs", lambda p: SimpleNamespace(f_bavail=3, f_frsize=4096))
    r = CliRunner().invoke(app, ["train", "-c", str(run_copy / "config.yaml"), "--resume", "--set", "iterations=3"])
    monkeypatch.undo()
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in r.output, r.output
    assert lines[0].startswith("error: checkpoint iter_000003 not saved: ") and "/model: No space left on device " \
        "(ENOSPC); 12 KB free there" in lines[0] and "iter_000002, is untouched" in lines[0], lines[0]
    assert {p.relative_to(ckpts): p.read_bytes() for p in ckpts.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in ckpts.iterdir()) == ["iter_000001", "iter_000002", "latest"]


def test_save_checkpoint_refuses_non_finite_weights(run_copy, tiny_tokenizer):
    """The guard under the trainer's check: nothing is written, the newest checkpoint stays."""
    from seedrl.models.loading import load_model

    model = load_model("tiny-micro", tokenizer=tiny_tokenizer)
    with torch.no_grad():
        next(model.parameters())[0] = float("inf")
    ckpts = run_copy / "checkpoints"
    with pytest.raises(SeedRLError, match="iteration 3: not saving a checkpoint with non-finite weights") as e:
        ckpt_mod.save_checkpoint(ckpts, 3, model, tiny_tokenizer, torch.optim.AdamW(model.parameters()), {})
    assert "iter_000002, is untouched" in str(e.value)
    assert sorted(p.name for p in ckpts.iterdir()) == ["iter_000001", "iter_000002", "latest"]


def test_a_skipped_step_warns_with_the_iteration_of_its_metrics_row(tmp_path, monkeypatch, caplog):
    """A non-finite gradient norm skips the step; the warning names the iteration its row carries (1, not 0)."""
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", lambda params, c: torch.tensor(float("inf")))
    with caplog.at_level(logging.WARNING):
        Trainer(cfg(tmp_path / "run", iterations=1, save_every=1)).train()
    (row,) = rows(tmp_path / "run" / "metrics.jsonl")
    assert row["iteration"] == 1 and row["skipped_steps"] == 1.0
    warned = [r.getMessage() for r in caplog.records if "non-finite gradient norm" in r.getMessage()]
    assert warned and all("at iteration 1;" in w for w in warned), warned


# ------------------------------------------------------------------------------ new run over an old one
def test_new_run_refuses_a_folder_with_rows_but_no_checkpoint(tmp_path):
    run = tmp_path / "run"
    Trainer(cfg(run, save_every=0, iterations=1)).train()
    assert not ckpt_mod.checkpoint_dirs(run / "checkpoints")
    before = (run / "metrics.jsonl").read_text()
    with pytest.raises(SeedRLError, match="--resume") as exc:
        Trainer(cfg(run, save_every=0, iterations=1))
    assert "metrics.jsonl" in str(exc.value) and "\n" not in str(exc.value)
    assert (run / "metrics.jsonl").read_text() == before  # nothing was deleted
    tr = Trainer(cfg(run, save_every=0, iterations=1), resume=True)  # explicit: restart from scratch in place
    assert tr.iteration == 0 and not (run / "metrics.jsonl").exists()


def test_new_run_refuses_a_folder_with_only_damaged_checkpoints(run_copy):
    for d in ("iter_000001", "iter_000002"):
        (run_copy / "checkpoints" / d / "state.json").write_text("{")
    with pytest.raises(SeedRLError, match="--resume"):
        Trainer(cfg(run_copy))


# ------------------------------------------------------------------------------ what --checkpoint names
def test_resolve_checkpoint_maps_run_checkpoint_sft_folders_and_names(run_copy, tmp_path):
    from seedrl.config import SFTConfig, TrainConfig
    from seedrl.train.checkpoint import resolve_checkpoint

    ckpts = run_copy / "checkpoints"
    path, run_cfg = resolve_checkpoint(str(run_copy))  # a run folder: its latest intact checkpoint
    assert path == str(ckpts / "iter_000002" / "model") and isinstance(run_cfg, TrainConfig)
    assert run_cfg.run_dir == str(run_copy)
    (ckpts / "iter_000002" / "model" / "model.safetensors").write_bytes(b"garbage")
    assert resolve_checkpoint(str(run_copy))[0] == str(ckpts / "iter_000001" / "model")  # as eval reads it
    path, run_cfg = resolve_checkpoint(str(ckpts / "iter_000001"))  # a checkpoint folder: the run's config
    assert path == str(ckpts / "iter_000001" / "model") and run_cfg.run_dir == str(run_copy)

    sft = tmp_path / "sft"
    (sft / "model").mkdir(parents=True)
    (sft / "config.yaml").write_text(yaml.safe_dump(SFTConfig(run_dir=str(sft), env={"name": "sokoban",
                                                                                 "max_steps": 7}).model_dump()))
    path, run_cfg = resolve_checkpoint(str(sft))  # an SFT run folder: its model, env and eval
    assert path == str(sft / "model") and (run_cfg.env.name, run_cfg.env.max_steps) == ("sokoban", 7)

    assert resolve_checkpoint("tiny-micro") == ("tiny-micro", None)  # a name passes through
    assert resolve_checkpoint(str(sft / "model")) == (str(sft / "model"), None)  # a bare model folder
    with pytest.raises(SeedRLError, match="does not exist"):
        resolve_checkpoint(str(tmp_path / "nope" / "model"))
    shutil.rmtree(ckpts)
    ckpts.mkdir()
    with pytest.raises(SeedRLError, match="no complete checkpoint"):
        resolve_checkpoint(str(run_copy))


def test_a_full_disk_during_torch_save_is_enospc_not_a_cpp_traceback(tmp_path, monkeypatch):
    """torch.save's failed write is a RuntimeError from inline_container.cc; on a full disk it is raised as
    OSError(ENOSPC), which the CLI turns into its one line. On a disk with room it stays what it was."""
    import errno
    from types import SimpleNamespace

    import seedrl.train.checkpoint as ck

    def failing_save(obj, path):
        raise RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 64 vs 0 "
                           "PytorchStreamWriter failed writing file data/0: file write failed")

    monkeypatch.setattr(ck.torch, "save", failing_save)
    monkeypatch.setattr(ck.os, "statvfs", lambda p: SimpleNamespace(f_bavail=0, f_frsize=4096))
    with pytest.raises(OSError) as e:
        ck._torch_save({}, tmp_path / "trainer.pt")
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(tmp_path / "trainer.pt")
    from seedrl.errors import describe_os_error

    assert "No space left on device (ENOSPC)" in describe_os_error(e.value)
    monkeypatch.setattr(ck.os, "statvfs", lambda p: SimpleNamespace(f_bavail=1 << 30, f_frsize=4096))
    with pytest.raises(RuntimeError):
        ck._torch_save({}, tmp_path / "trainer.pt")
