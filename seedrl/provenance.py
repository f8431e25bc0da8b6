"""Where a number came from: the commit it was measured at."""

from __future__ import annotations

import subprocess


def git_commit() -> str:
    """Short hash of HEAD, or "unknown" outside a git checkout."""
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except Exception:
        return "unknown"
