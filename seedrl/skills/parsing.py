"""Lenient, total parsing of the analyzer's answer into one hindsight skill.

``parse_skill`` never raises and never ``eval``s. Pipeline:

1. non-string input -> error; Markdown fences (```json / ```) are removed;
2. ``json`` decoding of the whole text (always with ``strict=False``: models often put raw newlines
   inside strings);
3. otherwise, at every ``{`` in document order: ``JSONDecoder.raw_decode``; if that fails,
   the balanced ``{...}`` span starting there (quote-aware) with trailing commas before ``}``/``]``
   removed, then ``json.loads``; if that fails too, ``ast.literal_eval`` on that span. literal_eval
   only builds Python literals (no names, calls or attribute access are evaluated), so it is safe; it
   is applied only to a balanced brace span that contains a ``:`` and a quote, of bounded length.
   Prose before/after the JSON is therefore ignored. At most the first 100 ``{`` positions are
   tried, so degenerate output cannot make the parser slow.
4. The FIRST object (in document order, nested objects included) whose skill is valid wins; when
   none is valid the error of the first object found is reported.

Keys: only ``episode_skill`` / ``episode_summary`` are accepted, matched case-insensitively and
ignoring surrounding whitespace (an exact-case key wins over another spelling). A bare ``skill`` key
is NOT accepted: the prompt asks for ``episode_skill`` and the Stage-1 targets use it, so another key
means the model did not follow the format.

The skill must be a string; its whitespace is collapsed to single spaces; fewer than ``min_words``
words (or empty) -> ``skill=None``.

Step-level skills (OPID, optional): a ``step_skills`` key in the winning object, a list of
``{"step": <step number, as "Step i" in the analysis prompt>, "skill": "..."}``, comes back as
:attr:`ParsedSkill.step_skills`, a dict *0-based* step index -> skill. The prompt's numbering is
``step_base`` (``seedrl.skills.prompts.STEP_BASE``: 0 for the ``seed`` prompt, 1 for ``legacy``). It is
parsed leniently and can never fail the parse: entries that are not objects, have a step below
``step_base`` or not an integer (ints, integral floats and digit strings are accepted; bools are not), a non-string skill or one
shorter than ``min_words`` are dropped; the first entry for a step wins; at most
``max_step_skills`` entries are kept (0 = ignore the key). The mapping form ``{"<step>": "skill"}``
is read the same way (numbered the same way). Step skills are only returned together with a valid
episode skill: a trajectory without one gets no teacher signal at all. Errors start with ``"parse: "`` (they go straight into
:attr:`AnalysisResult.error`); text cut off mid-object reports ``"parse: truncated JSON ..."``.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from typing import Any

SKILL_KEY = "episode_skill"
SUMMARY_KEY = "episode_summary"
STEP_SKILLS_KEY = "step_skills"
DEFAULT_MAX_STEP_SKILLS = 5  # OPID's k for ALFWorld
_LITERAL_EVAL_MAX_CHARS = 20_000
_MAX_OPEN_BRACES = 100  # ``{`` positions tried; bounds the work on degenerate output ("{{{{...")
_FENCE = re.compile(r"```[A-Za-z0-9_+-]*")


@dataclass
class ParsedSkill:
    skill: str | None
    summary: str | None = None
    error: str | None = None
    #: 0-based step index -> step-level skill (critical steps; OPID), only with a valid ``skill``
    step_skills: dict[int, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.skill is not None


def collapse_ws(text: str) -> str:
    return " ".join(text.split())


def _span_end(text: str, start: int) -> int | None:
    """Index one past the ``}`` closing the ``{`` at ``start`` (skipping quoted strings, "..." and
    '...', with backslash escapes); None when the text ends first (truncated)."""
    depth, quote, i, n = 0, None, start, len(text)
    while i < n:
        c = text[i]
        if quote is not None:
            if c == "\\":
                i += 2
                continue
            if c == quote:
                quote = None
        elif c in "\"'":
            quote = c
        elif c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return None


def _strip_trailing_commas(text: str) -> str:
    """Remove commas directly followed (up to whitespace) by ``}`` or ``]``, outside strings."""
    out: list[str] = []
    quote, i, n = None, 0, len(text)
    while i < n:
        c = text[i]
        if quote is not None:
            out.append(c)
            if c == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            if c == quote:
                quote = None
        elif c in "\"'":
            quote = c
            out.append(c)
        elif c == ",":
            j = i + 1
            while j < n and text[j].isspace():
                j += 1
            if j >= n or text[j] not in "}]":
                out.append(c)
        else:
            out.append(c)
        i += 1
    return "".join(out)


def _decode_at(text: str, pos: int, decoder: json.JSONDecoder) -> tuple[Any, bool]:
    """(object, truncated) for the ``{`` at ``pos``; object is None when nothing decodes there."""
    try:
        return decoder.raw_decode(text, pos)[0], False
    except (ValueError, RecursionError):
        pass
    end = _span_end(text, pos)
    if end is None:
        return None, True
    span = text[pos:end]
    repaired = _strip_trailing_commas(span)
    try:
        return decoder.decode(repaired), False
    except (ValueError, RecursionError):
        pass
    if len(span) <= _LITERAL_EVAL_MAX_CHARS and ":" in span and ('"' in span or "'" in span):
        for candidate in (span, repaired):
            try:
                return ast.literal_eval(candidate), False
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                continue
    return None, False


def _lookup(obj: dict, key: str) -> Any:
    if key in obj:
        return obj[key]
    for k, v in obj.items():
        if isinstance(k, str) and k.strip().lower() == key:
            return v
    return None


def _step_number(value: Any, base: int) -> int | None:
    """The 0-based step of a step number counted from ``base``, or None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    return value - base if isinstance(value, int) and value >= base else None


def _step_skills(raw: Any, min_words: int, limit: int, base: int) -> dict[int, str]:
    """``step_skills`` as {0-based step: skill}; bad entries are dropped (see the module docstring)."""
    if limit <= 0 or raw is None:
        return {}
    if isinstance(raw, dict):
        entries = [{"step": k, "skill": v} for k, v in raw.items()]
    elif isinstance(raw, list):
        entries = raw
    else:
        return {}
    out: dict[int, str] = {}
    for entry in entries:
        if len(out) >= limit:
            break
        if not isinstance(entry, dict):
            continue
        step = _step_number(_lookup(entry, "step"), base)
        text = _lookup(entry, "skill")
        if step is None or not isinstance(text, str) or step in out:
            continue
        text = collapse_ws(text)
        if text and len(text.split()) >= min_words:
            out[step] = text
    return out


def _from_object(obj: dict, min_words: int, max_step_skills: int = DEFAULT_MAX_STEP_SKILLS,
                 step_base: int = 0) -> ParsedSkill:
    raw_summary = _lookup(obj, SUMMARY_KEY)
    summary = collapse_ws(raw_summary) if isinstance(raw_summary, str) else None
    summary = summary or None
    raw_skill = _lookup(obj, SKILL_KEY)
    if raw_skill is None:
        return ParsedSkill(None, summary, f"parse: no {SKILL_KEY!r} key")
    if not isinstance(raw_skill, str):
        return ParsedSkill(None, summary, f"parse: {SKILL_KEY} is not a string ({type(raw_skill).__name__})")
    skill = collapse_ws(raw_skill)
    if not skill:
        return ParsedSkill(None, summary, "parse: empty skill")
    words = len(skill.split())
    if words < min_words:
        return ParsedSkill(None, summary, f"parse: skill too short ({words} < {min_words} words)")
    try:
        steps = _step_skills(_lookup(obj, STEP_SKILLS_KEY), min_words, max_step_skills, step_base)
    except Exception:  # noqa: BLE001 - optional extra: never costs the episode skill
        steps = {}
    return ParsedSkill(skill, summary, None, steps)


def _parse(text: str, min_words: int, max_step_skills: int, step_base: int = 0) -> ParsedSkill:
    if not isinstance(text, str):
        return ParsedSkill(None, None, f"parse: not a string ({type(text).__name__})")
    text = _FENCE.sub("", text).strip()
    if not text:
        return ParsedSkill(None, None, "parse: empty output")
    first: ParsedSkill | None = None
    decoder = json.JSONDecoder(strict=False)  # strict=False: raw newlines/tabs inside strings are fine
    try:
        whole = decoder.decode(text)
    except (ValueError, RecursionError):
        whole = None
    if isinstance(whole, dict):
        first = _from_object(whole, min_words, max_step_skills, step_base)
        if first.skill is not None:
            return first
    truncated = False
    pos, tried = text.find("{"), 0
    while pos != -1 and tried < _MAX_OPEN_BRACES:
        tried += 1
        obj, cut = _decode_at(text, pos, decoder)
        truncated = truncated or cut
        if isinstance(obj, dict):
            result = _from_object(obj, min_words, max_step_skills, step_base)
            if result.skill is not None:
                return result
            first = first or result
        pos = text.find("{", pos + 1)
    if first is not None:
        return first
    if truncated:
        return ParsedSkill(None, None, "parse: truncated JSON (no closing brace)")
    if "{" not in text:
        return ParsedSkill(None, None, "parse: no JSON object found")
    return ParsedSkill(None, None, "parse: invalid JSON object")


def parse_skill(text: str, min_words: int = 5, max_step_skills: int = DEFAULT_MAX_STEP_SKILLS,
                step_base: int = 0) -> ParsedSkill:
    """The skill in an analyzer answer, or ``skill=None`` with ``error`` set. Never raises.

    ``max_step_skills``: how many ``step_skills`` entries to keep (0 = ignore them); ``step_base``: the
    number of the first step in the analysis prompt (0: ``seed``, 1: ``legacy``)."""
    try:
        return _parse(text, min_words, max_step_skills, step_base)
    except Exception as exc:  # noqa: BLE001 - total by contract; a parser bug must not kill a batch
        return ParsedSkill(None, None, f"parse: internal error {type(exc).__name__}: {exc}")
