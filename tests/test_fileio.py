"""A full disk under every writer: the previous file stays whole, and the error is one line naming the
file and the space left, whichever writer failed and however it said so (an errno, safetensors' text,
torch's zip writer's text)."""

from __future__ import annotations

import errno
import json
import os
from types import SimpleNamespace

import pytest
import torch
from safetensors import SafetensorError

import seedrl.fileio as fileio
from seedrl.cli import user_error_message
from seedrl.errors import SeedRLError, describe_os_error
from seedrl.fileio import atomic_write, os_error_of

pytestmark = pytest.mark.faults

SAFETENSORS_TEXT = "Error while serializing: I/O error: No space left on device (os error 28)"
#: torch 2.13's zip writer on a full disk: no errno, and not even the word "write"
TORCH_TEXT = "[enforce fail at inline_container.cc:672] . unexpected pos 1472 vs 1366"


def full_disk_errors() -> dict[str, Exception]:
    """What each writer raises on a full disk (a fresh instance per call)."""
    return {"errno": OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)),  # file.write's: no filename
            "safetensors": SafetensorError(SAFETENSORS_TEXT),
            "safetensors_debug": SafetensorError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, '
                                                 'message: "No space left on device" })'),
            "torch": RuntimeError(TORCH_TEXT)}


KINDS = sorted(full_disk_errors())


@pytest.fixture()
def nearly_full(monkeypatch):
    """The disk has 4 KB left (torch's text is taken for a full disk only then)."""
    monkeypatch.setattr(os, "statvfs", lambda p: SimpleNamespace(f_bavail=1, f_frsize=4096))


def assert_one_line(msg: str, path) -> None:
    assert "\n" not in msg and str(path) in msg, msg
    assert "No space left on device (ENOSPC); 4.0 KB free there; free some disk space" in msg, msg


# -- recognising the fault ------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_every_writers_full_disk_is_enospc_naming_the_file(kind, tmp_path, nearly_full):
    err = os_error_of(full_disk_errors()[kind], tmp_path / "f.bin")
    assert err.errno == errno.ENOSPC and err.filename == str(tmp_path / "f.bin")
    assert_one_line(describe_os_error(err), tmp_path / "f.bin")


def test_what_is_not_a_full_disk_stays_what_it_was(tmp_path, monkeypatch):
    assert os_error_of(RuntimeError("mat1 and mat2 shapes cannot be multiplied"), tmp_path) is None
    assert os_error_of(ValueError("bad value"), tmp_path) is None
    # torch's text on a disk with room: some other zip-writer failure, kept as it is
    monkeypatch.setattr(os, "statvfs", lambda p: SimpleNamespace(f_bavail=1 << 30, f_frsize=4096))
    assert os_error_of(RuntimeError(TORCH_TEXT), tmp_path / "x") is None
    named = OSError(errno.EROFS, "Read-only file system", "/already/named")
    assert os_error_of(named, tmp_path) is named


def test_the_cli_turns_a_writers_full_disk_into_one_line():
    """A full disk raised by a writer that was not wrapped (no path known): still one line, not a traceback."""
    line = user_error_message(SafetensorError(SAFETENSORS_TEXT))
    assert line is not None and line.startswith("a file: No space left on device (ENOSPC)")
    assert user_error_message(RuntimeError("a bug")) is None


# -- atomic writes leave the previous file whole ---------------------------------------------------------
def _failing_write(monkeypatch, exc: Exception, after: int = 5) -> None:
    """The write puts ``after`` bytes on disk, then fails as ``exc`` (a disk that filled mid-write)."""

    def write_all(fd, data):
        os.write(fd, bytes(data[:after]))
        raise exc

    monkeypatch.setattr(fileio, "_write_all", write_all)


@pytest.mark.parametrize("kind", KINDS)
def test_atomic_write_that_fails_leaves_the_previous_file_whole(kind, tmp_path, monkeypatch, nearly_full):
    path = tmp_path / "results.json"
    path.write_text('{"success_rate": 0.5}')
    _failing_write(monkeypatch, full_disk_errors()[kind])
    with pytest.raises(OSError) as e:
        atomic_write(path, json.dumps({"success_rate": 0.7, "pad": "x" * 10_000}))
    assert path.read_text() == '{"success_rate": 0.5}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]  # no temporary file left
    assert e.value.errno == errno.ENOSPC
    assert_one_line(describe_os_error(e.value), path)


def test_atomic_write_replaces_the_file_whole(tmp_path):
    path = tmp_path / "a.json"
    atomic_write(path, "one")
    atomic_write(path, b"two")
    assert path.read_text() == "two" and sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]


@pytest.mark.parametrize("kind", KINDS)
def test_eval_out_onto_a_full_disk_keeps_the_earlier_results(kind, tmp_path, monkeypatch, nearly_full):
    """`seedrl eval --out` over an earlier results file: it stays valid JSON, the new results go to a spare
    file the one line names."""
    from seedrl.cli import _write_out

    out = tmp_path / "eval.json"
    out.write_text(json.dumps({"panels": {"valid_seen": {"success_rate": 0.5}}}))
    before = out.read_text()
    _failing_write(monkeypatch, full_disk_errors()[kind], after=8192)
    res = {"panels": {"valid_seen": {"success_rate": 0.75}}, "pad": "x" * 20_000}
    with pytest.raises(SeedRLError) as e:
        _write_out(out, res)
    msg = str(e.value)
    assert out.read_text() == before and json.loads(out.read_text())
    assert_one_line(msg, out)
    spare = msg.rsplit("the results are in ", 1)[1]
    try:
        assert json.loads(open(spare).read()) == res
    finally:
        os.unlink(spare)


@pytest.mark.parametrize("kind", KINDS)
def test_saved_config_and_eval_snapshots_are_never_half_written(kind, tmp_path, monkeypatch, nearly_full):
    from seedrl.config import TrainConfig, save_config

    path = tmp_path / "config.yaml"
    save_config(TrainConfig(), path)
    before = path.read_text()
    _failing_write(monkeypatch, full_disk_errors()[kind])
    with pytest.raises(OSError) as e:
        save_config(TrainConfig(seed=3), path)
    assert path.read_text() == before
    assert_one_line(describe_os_error(e.value), path)


def test_a_metrics_row_that_cannot_be_appended_names_the_file(tmp_path, monkeypatch, nearly_full):
    from seedrl.config import LogConfig
    from seedrl.train.logger import MetricsLogger

    logger = MetricsLogger(tmp_path, LogConfig(progress=False))
    logger.log({"iteration": 1})
    real_open = type(logger.path).open

    class FullFile:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *a):
            self.f.close()

        def write(self, text):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(type(logger.path), "open", lambda self, *a, **k: FullFile(real_open(self, *a, **k)))
    with pytest.raises(OSError) as e:
        logger.log({"iteration": 2})
    assert_one_line(describe_os_error(e.value), logger.path)


# -- checkpoints ----------------------------------------------------------------------------------------
#: (writer, how it fails): the model folder (transformers -> safetensors, tokenizer files) and trainer.pt
#: (torch's zip writer) in every way; state.json (a text write) with the errno file.write gives
CASES = [(w, k) for w in ("model", "trainer_pt") for k in KINDS] + [("state_json", "errno")]


def _break_writer(monkeypatch, writer: str, exc: Exception) -> None:
    from pathlib import Path

    import seedrl.models.loading as loading
    import seedrl.train.checkpoint as ck

    def fail(*a, **k):
        raise exc

    if writer == "model":
        monkeypatch.setattr(loading, "save_model", fail)
    elif writer == "trainer_pt":
        monkeypatch.setattr(ck.torch, "save", fail)
    else:
        real = Path.write_text
        monkeypatch.setattr(Path, "write_text", lambda self, *a, **k: fail() if self.name == "state.json"
                            else real(self, *a, **k))


@pytest.mark.parametrize("writer,kind", CASES, ids=[f"{w}-{k}" for w, k in CASES])
def test_a_checkpoint_save_onto_a_full_disk_keeps_the_older_checkpoints(writer, kind, tmp_path, monkeypatch,
                                                                       tiny_model, tiny_tokenizer):
    from seedrl.train.checkpoint import latest_checkpoint, save_checkpoint

    root = tmp_path / "checkpoints"
    opt = torch.optim.AdamW(tiny_model.parameters())
    save_checkpoint(root, 1, tiny_model, tiny_tokenizer, opt, {})
    before = {p.relative_to(root): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    monkeypatch.setattr(os, "statvfs", lambda p: SimpleNamespace(f_bavail=1, f_frsize=4096))
    _break_writer(monkeypatch, writer, full_disk_errors()[kind])
    with pytest.raises(SeedRLError) as e:
        save_checkpoint(root, 2, tiny_model, tiny_tokenizer, opt, {})
    msg = str(e.value)
    assert msg.startswith("checkpoint iter_000002 not saved: ") and "iter_000001, is untouched" in msg, msg
    assert "No space left on device (ENOSPC); 4.0 KB free there" in msg and "\n" not in msg, msg
    named = {"model": "/model:", "trainer_pt": "/trainer.pt:", "state_json": "/state.json:"}[writer]
    assert named in msg, msg
    monkeypatch.undo()
    assert {p.relative_to(root): p.read_bytes() for p in root.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in root.iterdir()) == ["iter_000001", "latest"]  # the partial save is gone
    assert latest_checkpoint(root).name == "iter_000001"
