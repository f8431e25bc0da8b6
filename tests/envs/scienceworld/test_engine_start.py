"""A ScienceWorld JVM that never comes up fails its start in bounded time, in one line.

py4j's ``launch_gateway`` reads the gateway's port with a blocking ``readline``: a JVM that hangs
before printing it would hang the episode (and a test run) forever. These tests stand a script in
for ``java`` (through ``JAVA_HOME``), so they need the scienceworld package but no JVM.
"""

from __future__ import annotations

import os
import stat
import threading
import time

import pytest

from seedrl.envs.scienceworld import engine as swe
from seedrl.errors import SeedRLError

pytest.importorskip("scienceworld")
pytest.importorskip("py4j")


def _fake_java(tmp_path, monkeypatch, body: str) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    java = bin_dir / "java"
    java.write_text(f"#!/bin/sh\n{body}\n")
    java.chmod(java.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))


def _start_in_thread(engine: swe.Engine, limit: float) -> BaseException | None:
    out: list[BaseException | None] = [None]

    def run() -> None:
        try:
            engine.start()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out[0] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(limit)
    assert not t.is_alive(), f"the engine's start still waits after {limit}s"
    return out[0]


def test_a_jvm_that_never_prints_its_port_is_killed_after_the_start_timeout(tmp_path, monkeypatch) -> None:
    _fake_java(tmp_path, monkeypatch, "exec sleep 600")
    monkeypatch.setattr(swe, "START_TIMEOUT_S", 1.0)
    engine = swe.Engine([], label="#t")
    t0 = time.monotonic()
    err = _start_in_thread(engine, 30.0)
    assert isinstance(err, SeedRLError) and "did not start within 1s" in str(err) and "\n" not in str(err), err
    assert time.monotonic() - t0 < 15
    assert engine.dead and engine.ready.is_set() and engine.proc.poll() is not None  # killed, and waiters wake


def test_a_jvm_that_exits_before_its_port_fails_at_once_with_what_it_said(tmp_path, monkeypatch) -> None:
    _fake_java(tmp_path, monkeypatch, 'echo "Error: Could not create the Java Virtual Machine." >&2; exit 1')
    engine = swe.Engine([], label="#t")
    err = _start_in_thread(engine, 30.0)
    assert isinstance(err, SeedRLError) and "\n" not in str(err), err
    assert "printed no gateway port" in str(err) and "exit code 1" in str(err), err
    assert "java said: Error: Could not create the Java Virtual Machine." in str(err), err
    assert "pip install" in str(err)  # names the fix
    assert engine.dead and engine.ready.is_set() and engine.proc.poll() is not None


def test_java_home_is_the_java_that_runs(tmp_path, monkeypatch) -> None:
    _fake_java(tmp_path, monkeypatch, "exit 3")
    assert swe._java_path() == os.path.join(str(tmp_path), "bin", "java")
