"""Writing files so that a failed write never replaces a good one, and an OS fault is one line.

:func:`atomic_write` writes a temporary file in the target's own folder, fsyncs it and renames it over
the target (``os.replace``): a full disk, a kill or any other failure leaves the previous file as it was.
:func:`os_error_of` recognises the OS fault inside the errors writers raise without an errno (a
safetensors ``SafetensorError`` quoting ``os error 28``, torch's zip writer's C++ ``RuntimeError``
``unexpected pos``, a message saying ``No space left on device``), and :func:`writing` raises it as the
``OSError`` it is, naming the file: the CLI then prints :func:`seedrl.errors.describe_os_error`'s one line
(the path, the reason, the space left).
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from seedrl.errors import free_bytes

#: the errno a Rust io::Error quotes (safetensors, tokenizers): "... (os error 28)" or its Debug form
#: "IoError(Os { code: 28, kind: StorageFull, ... })"
_RUST_OS_ERROR = re.compile(r"\bos error (\d+)\b|\bOs \{ code: (\d+)")
#: strerror texts of a full disk or quota, quoted by writers that keep no errno
_FULL_TEXTS = {"no space left on device": errno.ENOSPC, "disk quota exceeded": errno.EDQUOT}
#: torch's zip writer (inline_container.cc) on a failed write: no errno, no reason ("unexpected pos 64
#: vs 0", "file write failed"); taken for a full disk only when the disk is nearly full
_TORCH_WRITE_TEXTS = ("unexpected pos", "file write failed")
#: below this much free space, a torch write failure is taken for a full disk
FULL_BYTES = 64 << 20


def os_error_of(exc: BaseException, path: str | Path | None) -> OSError | None:
    """The OS fault ``exc`` (raised while writing ``path``) stands for, as an ``OSError`` naming
    ``path``; None when it is something else (a bug keeps its traceback).

    An ``OSError`` with an errno is itself (given ``path`` when it names no file); otherwise the errno
    comes from the text: ``os error N``, ``No space left on device`` / ``Disk quota exceeded``, or
    torch's ``unexpected pos`` / ``file write failed`` when ``path``'s disk has under 64 MiB left."""
    if isinstance(exc, OSError) and exc.errno is not None:
        if exc.filename is None and path is not None:
            return OSError(exc.errno, exc.strerror or os.strerror(exc.errno), str(path))
        return exc
    text = str(exc)
    code = None
    m = _RUST_OS_ERROR.search(text)
    if m:
        code = int(m.group(1) or m.group(2))
    else:
        low = text.lower()
        code = next((c for t, c in _FULL_TEXTS.items() if t in low), None)
        if code is None and path is not None and any(t in low for t in _TORCH_WRITE_TEXTS):
            free = free_bytes(path)
            code = errno.ENOSPC if free is not None and free < FULL_BYTES else None
    if code is None:
        return None
    return OSError(code, os.strerror(code), None if path is None else str(path))


@contextmanager
def writing(path: str | Path) -> Iterator[None]:
    """Inside, an exception that is an OS fault (:func:`os_error_of`) is raised as that ``OSError``
    naming ``path`` (the original stays its ``__cause__``, shown by ``--verbose``)."""
    try:
        yield
    except Exception as exc:
        err = os_error_of(exc, path)
        if err is None or err is exc:
            raise
        raise err from exc


def tmp_name(path: Path) -> Path:
    """The temporary file :func:`atomic_write` writes ``path`` through: ``.<name>.tmp<pid>`` beside it."""
    return path.with_name(f".{path.name}.tmp{os.getpid()}")


def fsync_path(path: str | Path) -> None:
    """fsync a file or a folder (best effort: some file systems refuse a folder)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def atomic_write(path: str | Path, data: str | bytes) -> None:
    """Replace ``path`` by ``data`` (text is UTF-8) all at once: a temporary file in the same folder,
    written, fsynced, renamed over ``path``. On any failure the temporary file is removed and ``path``
    is as it was; an OS fault is raised as an ``OSError`` naming ``path`` (:func:`writing`)."""
    path = Path(path)
    tmp = tmp_name(path)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    try:
        with writing(path):
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
            try:
                _write_all(fd, raw)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise
    fsync_path(path.parent)
