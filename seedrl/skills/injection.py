"""Putting a skill into a step prompt (the teacher context), exactly as the official code does.

SEED/OPID (``seed/prompting.py``, ``build_augmented_observation_text``): a block of three lines::

    **Episode-Level Skill**
    Refer to this episode-level skill when deciding what action to take in the current episode:
    [<skill>]

goes into the step's user text (before the chat template is applied):

1. right after the first line that starts with ``TASK_PREFIX`` ("Your task is to: "), else after the
   first that starts with ``QUESTION_PREFIX`` ("Your question: ", the Search layout's task line; SEED
   tries its task-line patterns in this order too);
2. else right before the first line that starts with ``TURN_PREFIX`` ("Now it's your turn to", SEED's
   anchor: every closing instruction starts with it);
3. else appended at the end.

At the insertion point the text before is right-stripped and the text after left-stripped, and the
block is joined with blank lines: ``before.rstrip() + "\n\n" + block + "\n\n" + after.lstrip()``
(without the dangling separator when one side is empty). The skill is stripped of outer whitespace.
Nothing else in the text changes. Skills exist only for teacher re-scoring; student and evaluation
prompts never carry one.

The two other placements of the official code (seed_algorithm.md §1.3):

- **step-level skill** (OPID's critical steps): a ``**Critical-Step Skill**`` block ("Use this
  current-step skill for this decision only:" + ``[skill]``), inserted the same way right before the
  ``TURN_PREFIX`` line, i.e. after the current observation (else appended at the end);
- **privileged prefix** (SDAR): ``"[Privileged Skill Information]\n{skill}\n\n"`` prepended to the
  *already-templated* prompt text, before the chat template's own first token (see
  :func:`prefix_skill`); it is not inside any message.
"""

from __future__ import annotations

import re

from seedrl.agent.prompts import QUESTION_PREFIX, TASK_PREFIX, TURN_PREFIX

SKILL_HEADER = "**Episode-Level Skill**"
SKILL_INTRO = "Refer to this episode-level skill when deciding what action to take in the current episode:"
STEP_SKILL_HEADER = "**Critical-Step Skill**"
STEP_SKILL_INTRO = "Use this current-step skill for this decision only:"
PRIVILEGED_HEADER = "[Privileged Skill Information]"

#: the task lines an episode skill follows, in the order they are tried
_TASK_LINES = tuple(re.compile(r"^" + re.escape(p), re.MULTILINE) for p in (TASK_PREFIX, QUESTION_PREFIX))
_TURN_LINE = re.compile(r"^" + re.escape(TURN_PREFIX), re.MULTILINE)


def _clean(skill: str) -> str:
    if not isinstance(skill, str):
        raise TypeError(f"skill must be a str, got {type(skill).__name__}")
    text = skill.strip()
    if not text:
        raise ValueError("empty skill")
    return text


def skill_block(skill: str) -> str:
    """The episode-level block's text, without surrounding newlines. Raises ValueError for an empty skill."""
    return f"{SKILL_HEADER}\n{SKILL_INTRO}\n[{_clean(skill)}]"


def step_skill_block(skill: str) -> str:
    """The critical-step block's text, without surrounding newlines."""
    return f"{STEP_SKILL_HEADER}\n{STEP_SKILL_INTRO}\n[{_clean(skill)}]"


def has_skill(text: str) -> bool:
    """True when ``text`` carries any skill: an episode-level block, a critical-step block or the
    SDAR privileged prefix."""
    return isinstance(text, str) and any(h in text for h in (SKILL_HEADER, STEP_SKILL_HEADER, PRIVILEGED_HEADER))


def _join(before: str, block: str, after: str) -> str:
    before, after = before.rstrip(), after.lstrip()
    return "\n\n".join(p for p in (before, block, after) if p)


def inject_skill(user_text: str, skill: str) -> str:
    """``user_text`` with the episode-level block inserted (see the module docstring for where).

    Raises ValueError for an empty skill or a text that already has a skill block (double injection
    is always a bug)."""
    block = skill_block(skill)
    if has_skill(user_text):
        raise ValueError("the text already carries a skill block")
    for task_line in _TASK_LINES:
        m = task_line.search(user_text)
        if m is not None:
            eol = user_text.find("\n", m.start())
            eol = len(user_text) if eol == -1 else eol
            return _join(user_text[:eol], block, user_text[eol:])
    return _before_turn_line(user_text, block)


def _before_turn_line(user_text: str, block: str) -> str:
    """``block`` right before the ``TURN_PREFIX`` line, else appended at the end."""
    m = _TURN_LINE.search(user_text)
    if m is not None:
        return _join(user_text[:m.start()], block, user_text[m.start():])
    return _join(user_text, block, "")


def inject_step_skill(user_text: str, skill: str) -> str:
    """``user_text`` with the critical-step block inserted right before the ``TURN_PREFIX`` line, or
    appended at the end when there is none.

    Raises ValueError for an empty skill or a text that already carries a skill."""
    block = step_skill_block(skill)
    if has_skill(user_text):
        raise ValueError("the text already carries a skill block")
    return _before_turn_line(user_text, block)


def prefix_skill(templated_text: str, skill: str) -> str:
    """SDAR's placement: ``"[Privileged Skill Information]\\n{skill}\\n\\n"`` + the templated prompt.

    The skill's whitespace is kept as written (SDAR's skill files are Markdown); only outer
    whitespace is stripped."""
    if not isinstance(skill, str) or not skill.strip():
        raise ValueError("empty skill")
    if has_skill(templated_text):
        raise ValueError("the text already carries a skill block")
    return f"{PRIVILEGED_HEADER}\n{skill.strip()}\n\n{templated_text}"


def inject_into_messages(messages: list[dict], skill: str, step: bool = False) -> list[dict]:
    """A NEW message list (every dict copied; the input is never mutated) whose last user message
    carries the skill: the episode-level block after the task line, or with ``step=True`` the
    critical-step block before the turn line. Raises ValueError when there is no user message with
    string content."""
    out = [dict(m) for m in messages]
    for m in reversed(out):
        if m.get("role") == "user":
            content = m.get("content")
            if not isinstance(content, str):
                raise ValueError("the last user message has no text content")
            m["content"] = inject_step_skill(content, skill) if step else inject_skill(content, skill)
            return out
    raise ValueError("no user message to carry the skill")
