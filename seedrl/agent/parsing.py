"""Strict, total parsing of a model turn into an action.

A turn must contain ``<action>…</action>``; the last complete action block wins (models sometimes
restate). Anything else — no block, an empty block, a block cut off by the token limit — is an
*invalid action*: the caller sends nothing to the environment and applies the penalty. This
function never raises.
"""

from __future__ import annotations

import re

_ACTION_RE = re.compile(r"<action>(.*?)</action>", re.DOTALL | re.IGNORECASE)
MAX_ACTION_CHARS = 200


def parse_action(text: str) -> str | None:
    """Return the action string of a model turn, or None when the turn has no valid action."""
    if not isinstance(text, str):
        return None
    found = _ACTION_RE.findall(text)
    if not found:
        return None
    action = " ".join(found[-1].split())  # collapse whitespace/newlines
    if not action or len(action) > MAX_ACTION_CHARS:
        return None
    return action
