"""User-facing errors: one line that says what was wrong and what to do."""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterable
from pathlib import Path


class SeedRLError(Exception):
    """An error caused by user input or the environment, shown to the user as one line."""


def unknown_name(kind: str, name: str, valid: list[str] | tuple[str, ...]) -> SeedRLError:
    return SeedRLError(f"unknown {kind} {name!r}; valid: {', '.join(sorted(valid))}")


# -- OS faults the user can fix (a full or read-only disk, a file where a folder belongs, ...) ------
_OS_HINTS: dict[int, str] = {
    errno.ENOSPC: "free some disk space or write elsewhere",
    errno.EDQUOT: "free some space under your quota or write elsewhere",
    errno.EROFS: "the file system is read-only: write elsewhere (e.g. --set run_dir=...)",
    errno.EACCES: "fix the permissions or write elsewhere",
    errno.EPERM: "fix the permissions or write elsewhere",
    errno.EEXIST: "a file is in the way: remove it or choose another path",
    errno.ENOTDIR: "a file is where a folder belongs: remove it or choose another path",
    errno.EISDIR: "a folder is where a file belongs: give a file path",
    errno.ENOENT: "check the path",
    errno.ENAMETOOLONG: "use a shorter path",
    errno.EMFILE: "too many open files: raise `ulimit -n` or lower env.workers",
    errno.ENFILE: "the system has too many open files: close some programs or lower env.workers",
    errno.ELOOP: "a symbolic link points back into itself (or the chain is too long): fix or replace the link",
    errno.EIO: "the disk or network file system failed to read or write: check it (dmesg), or use another path",
    errno.EFBIG: "the file is too large for this file system: write elsewhere",
    errno.ENXIO: "no such device behind this path: give a regular file or folder",
    errno.ENODEV: "no such device behind this path: give a regular file or folder",
    errno.EBUSY: "the file or device is busy: try again when it is free, or use another path",
    errno.ETXTBSY: "the file is in use by a running program: use another path",
    errno.ESTALE: "a stale network file system handle: remount or reopen the folder",
    errno.ENOTEMPTY: "the folder is not empty: remove what is in it or choose another path",
}
USER_OS_ERRNOS = frozenset(_OS_HINTS)


def free_bytes(path: str | os.PathLike | None) -> int | None:
    """Bytes an unprivileged user may still write on the disk holding ``path`` (its nearest existing
    folder), or None when that cannot be told."""
    if path is None:
        return None
    p = Path(path).expanduser().absolute()
    for q in (p, *p.parents):
        try:
            st = os.statvfs(q)
        except (OSError, ValueError):
            continue
        return st.f_bavail * st.f_frsize
    return None


def human_bytes(n: int) -> str:
    """``0 bytes``, ``812 KB``, ``3.1 GB``, ``15 GB`` (powers of 1024; a decimal only below 10)."""
    if n < 1024:
        return f"{n} bytes"
    for unit in ("KB", "MB", "GB", "TB", "PB"):
        n /= 1024
        if n < 1024 or unit == "PB":
            return f"{n:.1f} {unit}" if n < 10 else f"{n:.0f} {unit}"
    raise AssertionError("unreachable")


def describe_os_error(exc: OSError) -> str | None:
    """One line for an OSError the user can fix (naming the path and the errno reason; a full disk
    or quota also the space left there), else None."""
    if exc.errno not in _OS_HINTS:
        return None
    reason = exc.strerror or errno.errorcode.get(exc.errno, str(exc.errno))
    where = str(exc.filename) if exc.filename is not None else "a file"
    if exc.filename2 is not None:
        where += f" -> {exc.filename2}"
    space = ""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        free = free_bytes(exc.filename)
        space = f"; {human_bytes(free)} free there" if free is not None else ""
    return f"{where}: {reason} ({errno.errorcode.get(exc.errno, exc.errno)}){space}; {_OS_HINTS[exc.errno]}"


# -- secrets ---------------------------------------------------------------------------------------
_MASK = "***"
_GRAM = 8  # a run of this many characters of a secret is a leak (providers echo "sk-abc1****wxyz")
_PATTERNS = (
    # an Authorization header, however it is quoted: "Authorization: Bearer x", 'authorization': 'x'
    (re.compile(r"(?i)(authorization['\"]?\s*[:=]\s*['\"]?)(?:bearer\s+|basic\s+)?[^\s'\",}]+"), r"\1" + _MASK),
    (re.compile(r"(?i)\b(bearer\s+)[^\s'\",}]+"), r"\1" + _MASK),
    # OpenAI-style keys (also someone else's, quoted by a proxy)
    (re.compile(r"\bsk-[A-Za-z0-9_\-*.]{6,}"), "sk-" + _MASK),
)


def _mask_run(run: str) -> str:
    core = run.strip()
    lead, trail = run[:len(run) - len(run.lstrip())], run[len(run.rstrip()):]
    return lead + ("sk-" + _MASK if core.startswith("sk-") else _MASK) + trail


def redact(text: str | None, secrets: Iterable[str | None] = (), *, patterns: bool = True) -> str | None:
    """``text`` with every secret removed: each secret and any run of 8+ of its characters (a key a
    server echoes half-masked, or one cut off by truncation) become ``***`` (``sk-***``); with
    ``patterns`` (for error and log text) also Authorization/Bearer header values and OpenAI-style
    ``sk-...`` keys, whoever's they are. Pure; None stays None."""
    if not text:
        return text
    keys = sorted({s.strip() for s in secrets if s and s.strip()}, key=len, reverse=True)
    for key in keys:
        if len(key) < _GRAM:
            text = text.replace(key, _mask_run(key)) if len(key) >= 4 else text
            continue
        grams = {key[j:j + _GRAM] for j in range(len(key) - _GRAM + 1)}
        marked = bytearray(len(text))
        for i in range(len(text) - _GRAM + 1):
            if text[i:i + _GRAM] in grams:
                marked[i:i + _GRAM] = b"\x01" * _GRAM
        if any(marked):
            out, i = [], 0
            while i < len(text):
                if marked[i]:
                    j = i
                    while j < len(text) and marked[j]:
                        j += 1
                    out.append(_mask_run(text[i:j]))
                    i = j
                else:
                    out.append(text[i])
                    i += 1
            text = "".join(out)
    for pattern, repl in _PATTERNS if patterns else ():
        text = pattern.sub(repl, text)
    return text
