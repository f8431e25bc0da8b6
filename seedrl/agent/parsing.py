"""Strict, total parsing of a model turn into an action, and verl-agent's format rule.

A turn must contain ``<action>…</action>``; the last complete action block wins (models sometimes
restate). Anything else — no block, an empty block, a block cut off by the token limit — sends
nothing to the environment. These functions never raise.

Which steps the invalid-action penalty hits is a separate question (``env.invalid_action``):
verl-agent's rule is about the *format* of the turn (:func:`format_ok`), not whether the env
accepted the command.
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


def action_span(text: str) -> tuple[int, int] | None:
    """Character span ``[start, end)`` of the action :func:`parse_action` reads (the last
    ``<action>`` block's content without its surrounding whitespace), or None when that turn has no
    valid action (no block, an empty one, or one over ``MAX_ACTION_CHARS``)."""
    if parse_action(text) is None:
        return None
    m = list(_ACTION_RE.finditer(text))[-1]
    content = m.group(1)
    start = m.start(1) + len(content) - len(content.lstrip())
    return start, m.end(1) - (len(content) - len(content.rstrip()))


_CJK_RE = re.compile(r"[\u4e00-\u9fff]")


def has_think(text: str) -> bool:
    """A ``<think>`` and a ``</think>`` tag are both present (verl-agent checks exactly this)."""
    return "<think>" in text and "</think>" in text


def has_cjk(text: str) -> bool:
    return bool(_CJK_RE.search(text))


def format_ok(text: str) -> bool:
    """verl-agent's format rule for ``<think>``/``<action>`` environments (``alfworld_projection``,
    ``webshop_projection``, ``sciworld_projection``): the turn has ``<think>…</think>``, a complete
    ``<action>…</action>`` block and no CJK character. A well-formed but inadmissible command is
    well-formed. (Here an empty or overlong action block also fails: the env would get nothing.)"""
    return isinstance(text, str) and has_think(text) and parse_action(text) is not None and not has_cjk(text)


def decision_mask(tokenizer, response_ids: list[int]) -> list[bool]:
    """Which response tokens carry the action (the content of the ``<action>`` block the parser
    reads); the rest is format (tags, reasoning). All False for a turn without an action block. Token
    ``k`` spans the characters ``[len(decode(ids[:k])), len(decode(ids[:k+1])))``; the span's ends are
    found by binary search, so a long response costs O(log n) decodes."""
    n = len(response_ids)
    span = action_span(tokenizer.decode(response_ids))
    if span is None or n == 0:
        return [False] * n
    start, end = span

    def first(pred) -> int:  # smallest k in [0, n] with pred(k) (pred monotone), n if none
        lo, hi = 0, n
        while lo < hi:
            mid = (lo + hi) // 2
            if pred(mid):
                hi = mid
            else:
                lo = mid + 1
        return lo

    lo = first(lambda k: len(tokenizer.decode(response_ids[:k + 1])) > start)
    hi = first(lambda k: len(tokenizer.decode(response_ids[:k])) >= end)
    return [lo <= k < hi for k in range(n)]
