"""One live process per run folder (seedrl.train.runlock; issue 34 item 1): a second run or a --resume on a
folder a live run holds is one line naming the holder; a run killed with SIGKILL leaves no stale lock."""

from __future__ import annotations

import shlex
import subprocess
import sys

import pytest

from seedrl.errors import SeedRLError
from seedrl.train.runlock import LOCK_NAME, lock_run_dir
from seedrl.train.trainer import Trainer
from tests.helpers import tiny_cfg

HOLD = ("import sys, time; from seedrl.train.runlock import lock_run_dir; lock_run_dir(sys.argv[1]); "
        "print('locked', flush=True); time.sleep(60)")


def _holder(run_dir):
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(run_dir)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "locked"
    return p


def test_a_folder_held_by_a_live_process_is_refused_and_freed_by_its_death(tmp_path):
    run = tmp_path / "run"
    p = _holder(run)
    try:
        for resume in (False, True):
            with pytest.raises(SeedRLError) as e:
                Trainer(tiny_cfg(run), resume=resume)
            msg = str(e.value)
            assert "\n" not in msg and "in use by another live seedrl process" in msg and f"pid {p.pid}" in msg
        assert not (run / "metrics.jsonl").exists() and not (run / "config.yaml").exists()  # nothing written
    finally:
        p.kill()  # SIGKILL: no clean-up code runs in the holder
        p.wait()
    t = Trainer(tiny_cfg(run, iterations=1, save_every=1))  # the kernel dropped the lock with the process
    t.train()
    assert (run / LOCK_NAME).exists()
    q = _holder(run)  # train() released it at its end: another process may take the folder now
    q.kill()
    q.wait()


def test_one_process_may_reopen_its_own_folder_and_a_release_frees_it(tmp_path):
    a = lock_run_dir(tmp_path)
    b = lock_run_dir(tmp_path)  # counted: a script builds a second trainer on the folder after the first
    a.release()
    a.release()  # idempotent
    r = subprocess.run([sys.executable, "-c", HOLD, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "in use by another live seedrl process" in r.stderr  # still held by b
    b.release()
    q = _holder(tmp_path)
    q.kill()
    q.wait()


def test_the_holders_command_is_cut_between_whole_arguments(tmp_path):
    """A holder whose command is longer than the line shows: the line ends at a whole argument and says
    how many are left out (it cut "run_dir=runs/exp" mid-argument at 200 characters)."""
    args = ["--set", "run_dir=runs/a long experiment name/seed 3"] + [f"--set=optim.lr_{i}=1.0e-5" for i in range(12)]
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path), *args], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "locked"
        with pytest.raises(SeedRLError) as e:
            lock_run_dir(tmp_path)
    finally:
        p.kill()
        p.wait()
    msg = str(e.value)
    argv = ["-c", str(tmp_path), *args]  # the holder's sys.argv
    shown, rest = msg.split(f"pid {p.pid}: ", 1)[1].split(" … (+", 1)
    words = shlex.split(shown)
    assert words == argv[: len(words)] and rest.startswith(f"{len(argv) - len(words)} more arguments)"), msg
    assert "'run_dir=runs/a long experiment name/seed 3'" in shown  # quoted whole, as a shell takes it
