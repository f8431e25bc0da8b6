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
import shlex
import sys
from pathlib import Path
from typing import IO

from seedrl.errors import SeedRLError

LOCK_NAME = ".lock"
_held: dict[Path, tuple[IO[str], int]] = {}
#: the holder's command in the error line is cut at about this many characters, between two arguments
SHOWN_CHARS = 160


def command_line(argv: list[str], limit: int = SHOWN_CHARS) -> str:
    """``argv`` as a shell would take it (each argument quoted as needed; the program by its name),
    cut only between whole arguments once past ``limit`` characters: ``seedrl train -c a.yaml … (+3 more
    arguments)``."""
    parts = [shlex.quote(Path(argv[0]).name if i == 0 and argv[0] else a) for i, a in enumerate(argv)]
    shown: list[str] = []
    for i, part in enumerate(parts):
        if shown and len(" ".join(shown + [part])) > limit:
            rest = len(parts) - i
            return " ".join(shown) + f" … (+{rest} more argument{'s' if rest > 1 else ''})"
        shown.append(part)
    return " ".join(shown)


def _holder_text(recorded: str) -> str:
    """The error line's account of the holder from the lock file (``pid N: <argv, shell-quoted>``)."""
    pid, sep, cmd = recorded.partition(": ")
    if not sep or not pid.startswith("pid "):
        return recorded or "unknown"
    try:
        return f"{pid}: {command_line(shlex.split(cmd))}" if cmd else pid
    except ValueError:  # a file an older version wrote (plain join, cut at 200 characters)
        return recorded


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
        holder = _holder_text(f.read().strip())
        f.close()
        raise SeedRLError(f"{d} is in use by another live seedrl process ({holder}); wait for it to end "
                          f"(or stop it) and then --resume, or choose another run_dir") from None
    f.seek(0)
    f.truncate()
    f.write(f"pid {os.getpid()}: {shlex.join(sys.argv)}\n")  # whole: the error line shortens it
    f.flush()
    _held[path] = (f, 1)
    return RunLock(path)
