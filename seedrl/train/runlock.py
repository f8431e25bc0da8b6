"""One live process per run folder.

Two ``seedrl train`` (or a ``--resume``) on one ``run_dir`` at once would both append every iteration to
``metrics.jsonl`` and race on its checkpoints. :func:`lock_run_dir` takes an exclusive ``flock`` on
``<run_dir>/.lock``: the kernel holds it for the live process and drops it when the process ends, however it
ends (``kill -9`` included), so a killed run never leaves a stale lock that blocks ``--resume``. The file
records the holder's pid and command for the error message; its presence alone means nothing.

Within one process the lock is shared (counted): a script or test may build a second trainer on the same
folder after the first, as the Python API always allowed.
"""

from __future__ import annotations

import fcntl
import os
import sys
from pathlib import Path
from typing import IO

from seedrl.errors import SeedRLError

LOCK_NAME = ".lock"
_held: dict[Path, tuple[IO[str], int]] = {}


class RunLock:
    """A held run-folder lock; :meth:`release` (or the end of the process) lets it go."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._released = False

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        f, n = _held[self.path]
        if n > 1:
            _held[self.path] = (f, n - 1)
            return
        del _held[self.path]
        f.close()  # closing the descriptor drops the flock


def lock_run_dir(run_dir: str | Path) -> RunLock:
    """Create ``run_dir`` if needed and lock it for this process; a folder another live process holds is
    one line naming that process."""
    d = Path(run_dir)
    d.mkdir(parents=True, exist_ok=True)
    path = (d / LOCK_NAME).resolve()
    if path in _held:
        f, n = _held[path]
        _held[path] = (f, n + 1)
        return RunLock(path)
    f = open(path, "a+")
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip() or "unknown"
        f.close()
        raise SeedRLError(f"{d} is in use by another live seedrl process ({holder}); wait for it to end "
                          f"(or stop it) and then --resume, or choose another run_dir") from None
    f.seek(0)
    f.truncate()
    f.write(f"pid {os.getpid()}: {' '.join(sys.argv)[:200]}\n")
    f.flush()
    _held[path] = (f, 1)
    return RunLock(path)
