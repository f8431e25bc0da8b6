"""Putting an episode-level skill into a step prompt (the SEED teacher context).

The block is three lines::

    **Episode-Level Skill**
    Refer to this episode-level skill when deciding what action to take in the current episode:
    <skill>

Where it goes (first rule that applies):

1. right after the first line that starts with ``TASK_PREFIX`` ("Your task is to: "): the text
   becomes ``text[:eol] + "\\n" + block + text[eol:]`` where ``eol`` is the end of that line, so the
   block sits before the history and the current observation;
2. right before the first line that starts with ``TURN_LINE`` ("Now it's your turn to take an
   action."): ``text[:sol] + block + "\\n" + text[sol:]``;
3. appended at the end, after a newline when the text does not already end with one.

Nothing else in the text changes: removing the inserted string gives back the input exactly. The
skill's whitespace is collapsed to single spaces so the block is always exactly three lines.
Skills exist only for teacher re-scoring; student and evaluation prompts never carry one.
"""

from __future__ import annotations

import re

from seedrl.agent.prompts import TASK_PREFIX, TURN_LINE

SKILL_HEADER = "**Episode-Level Skill**"
SKILL_INTRO = "Refer to this episode-level skill when deciding what action to take in the current episode:"

_TASK_LINE = re.compile(r"^" + re.escape(TASK_PREFIX), re.MULTILINE)
_TURN_LINE = re.compile(r"^" + re.escape(TURN_LINE), re.MULTILINE)


def skill_block(skill: str) -> str:
    """The block's text, without surrounding newlines. Raises ValueError for an empty skill."""
    if not isinstance(skill, str):
        raise TypeError(f"skill must be a str, got {type(skill).__name__}")
    text = " ".join(skill.split())
    if not text:
        raise ValueError("empty skill")
    return f"{SKILL_HEADER}\n{SKILL_INTRO}\n{text}"


def has_skill(text: str) -> bool:
    """True when ``text`` carries an episode-level skill block."""
    return isinstance(text, str) and SKILL_HEADER in text


def inject_skill(user_text: str, skill: str) -> str:
    """``user_text`` with the skill block inserted (see the module docstring for where).

    Raises ValueError for an empty skill or a text that already has a skill block (double injection
    is always a bug)."""
    block = skill_block(skill)
    if has_skill(user_text):
        raise ValueError("the text already carries a skill block")
    m = _TASK_LINE.search(user_text)
    if m is not None:
        eol = user_text.find("\n", m.start())
        eol = len(user_text) if eol == -1 else eol
        return user_text[:eol] + "\n" + block + user_text[eol:]
    m = _TURN_LINE.search(user_text)
    if m is not None:
        sol = m.start()
        return user_text[:sol] + block + "\n" + user_text[sol:]
    sep = "" if not user_text or user_text.endswith("\n") else "\n"
    return user_text + sep + block


def inject_into_messages(messages: list[dict], skill: str) -> list[dict]:
    """A NEW message list (every dict copied; the input is never mutated) whose last user message
    carries the skill. Raises ValueError when there is no user message with string content."""
    out = [dict(m) for m in messages]
    for m in reversed(out):
        if m.get("role") == "user":
            content = m.get("content")
            if not isinstance(content, str):
                raise ValueError("the last user message has no text content")
            m["content"] = inject_skill(content, skill)
            return out
    raise ValueError("no user message to carry the skill")
