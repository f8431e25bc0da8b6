"""Hindsight-analysis prompts (SEED Stage 1 labels and Stage 2 self-analysis).

One finished trajectory is rendered as plain text (the task, ``episode_success: success|failure``,
then every step as ``Step i`` / ``Observation:`` / ``Response:`` / ``Action valid:``) and wrapped in a
single user message that asks for one short, policy-facing skill as strict JSON
``{"episode_summary": "...", "episode_skill": "..."}``. A success asks for a reusable workflow (the
core decision rule and action ordering); a failure asks for an avoidance rule (the core mistake and
its warning signs). The wording is our own, written from the description of the official prompt.

Two variants (config ``skills.analysis_prompt``):

- ``seed`` (default), SEED's structure (``seed/analysis.py``): the instructions first, the episode
  last; steps numbered from 0; observations as the env wrote them (``max_obs_chars`` caps them only
  when set); ``Action valid`` is the step's *format* validity (``StepSample.format_valid``: the turn
  was parsable in the required action format), as verl-agent's flag is. A prompt over the analyzer's
  limit loses its oldest steps, never the instructions (:class:`~seedrl.skills.analyzers.self_analyzer.SelfAnalyzer`
  renders it again with ``first_step``).
- ``seed_visual``, SEED's visual analysis (``_build_seed_visual_episode_analysis_prompt`` in
  ``seed/analysis.py``, its Sokoban and EZPoints launchers' ``analysis_prompt_version``): the ``seed`` prompt
  with each step's ``Observation:`` replaced by :data:`IMAGE_MARK`, where the analyzing vision-language
  policy sees that step's observation image (its first; :func:`analysis_images`), and ``<image>`` in a
  response written ``[image]``. A step without an image keeps its text (SEED refuses the episode).
- ``legacy``, the prompt the tiny CPU presets' Stage-1 models were trained on, unchanged: the
  request *after* the trajectory (restating the task and the outcome, so left-truncation loses the
  oldest steps first), steps numbered from 1, ``Action valid`` = the env accepted the action
  (admissibility, ``StepSample.action_valid``).

With ``step_skills=True`` (config ``skills.step_skills``; OPID's critical-step skills) the prompt
also asks for a third key, ``"step_skills": [{"step": <the "Step i" number>, "skill": "..."}]``,
one imperative sentence for each of at most ``max_step_skills`` critical steps (possibly none); the
step numbers are the prompt's own (:data:`STEP_BASE`). Off by default, so the SEED prompt and its
Stage-1 targets are unchanged.
"""

from __future__ import annotations

import json

from seedrl.agent.prompts import TASK_PREFIX
from seedrl.rollout.types import Trajectory

TRUNCATION_MARK = " ...[truncated {n} chars]"

#: the analysis prompt variants (config ``skills.analysis_prompt``); the first is the default
ANALYSIS_PROMPTS = ("seed", "legacy", "seed_visual")
#: the number of a trajectory's first step in each variant's prompt (and in its ``step_skills``)
STEP_BASE = {"seed": 0, "legacy": 1, "seed_visual": 0}
#: where a ``seed_visual`` prompt shows a step's image (the analyzer puts the image there)
IMAGE_MARK = "<image>"
_SEED_VARIANTS = ("seed", "seed_visual")

_INTRO = (
    "You are reviewing one finished episode of an agent acting in a text-based environment. "
    "Your goal is to write a hindsight skill: advice that the same agent can read at the start of "
    "this task to act better in it."
)

_SUCCESS_REQUEST = (
    "This episode was a SUCCESS. Extract the reusable workflow behind it: state the core decision rule "
    "and the action ordering that completed the task, so the agent can repeat it directly and without "
    "detours."
)

_FAILURE_REQUEST = (
    "This episode was a FAILURE. Extract an avoidance rule: state the core mistake that caused the "
    "failure and the warning signs that show the agent is about to make it, together with what to do "
    "instead."
)

_SKILL_RULES = (
    "Write one short policy-facing skill, not a retrospective explanation: one to three imperative "
    "sentences addressed to the agent, usable while it is acting in this task. Do not refer to step "
    "numbers or to this particular episode; do not narrate what happened."
)

_FORMAT_RULES = (
    "Output strictly JSON and nothing else (no code fences, no text before or after), with exactly "
    "these two string keys:\n"
    '{"episode_summary": "<one or two sentences on what happened in the episode>", '
    '"episode_skill": "<the skill>"}'
)


_STEP_SKILL_RULES = (
    "Also name the critical steps: at most {k} steps where the decision made or broke the episode (for a "
    "failure, the step where the core mistake was made). For each, write one imperative sentence that tells "
    "the agent what to do at that decision, using the step number shown above as \"Step i\". Use an empty "
    "list when no single step was critical."
)

_FORMAT_RULES_STEPS = (
    "Output strictly JSON and nothing else (no code fences, no text before or after), with exactly "
    "these three keys:\n"
    '{"episode_summary": "<one or two sentences on what happened in the episode>", '
    '"episode_skill": "<the skill>", '
    '"step_skills": [{"step": <step number>, "skill": "<one imperative sentence>"}]}'
)


_SEED_OPENING = (
    "Study the agent episode printed at the end of this message and answer with one JSON object, "
    "with no other text."
)

_SEED_SUMMARY_FIELD = "episode_summary: a short account of what happened in the episode."

_SEED_SUCCESS_FIELD = (
    "episode_skill: the episode SUCCEEDED, so turn it into a workflow: the core decision rule and the "
    "action ordering that made it work."
)

_SEED_FAILURE_FIELD = (
    "episode_skill: the episode FAILED, so turn it into avoidance rules: the core mistake, and the "
    "warning signs that tell the agent it is about to make it."
)

_SEED_STEP_FIELD = (
    "step_skills: at most {k} critical steps, where the decision made or broke the episode, each with one "
    "imperative sentence telling the agent what to do at that step; an empty list when no single step was "
    "critical."
)

_SEED_RULES = (
    "- episode_skill is one short policy-facing skill that the agent can act on, not a retrospective "
    "explanation of the episode.\n"
    "- The steps are numbered from 0: Step 0 is the first step of the episode.\n"
    "- \"Action valid\" says whether that response was parsable in the required action format.\n"
    "- Answer with exactly these top-level keys: {keys}."
)


_SEED_FORMAT = '{"episode_summary": "<string>", "episode_skill": "<string>"}'
_SEED_FORMAT_STEPS = ('{"episode_summary": "<string>", "episode_skill": "<string>", '
                      '"step_skills": [{"step": <step number>, "skill": "<one imperative sentence>"}]}')


def _check_variant(variant: str) -> None:
    if variant not in ANALYSIS_PROMPTS:
        raise ValueError(f"unknown analysis prompt {variant!r}; valid: {', '.join(ANALYSIS_PROMPTS)}")


def _task_text(traj: Trajectory) -> str:
    """The task description; when the trajectory has none, the task line of its first step prompt."""
    task = (traj.task_description or "").strip()
    if task:
        return task
    for step in traj.steps[:1]:
        for msg in step.messages:
            content = msg.get("content")
            if msg.get("role") == "user" and isinstance(content, str):
                for line in content.split("\n"):
                    if line.startswith(TASK_PREFIX):
                        return line[len(TASK_PREFIX):].strip()
    return "(not given)"


def _cap(text: str, max_chars: int | None) -> str:
    """Keep the HEAD of an overlong observation (where envs put what the agent sees and the result of
    its last action) and mark how much of the tail was cut."""
    if max_chars is None or len(text) <= max_chars:
        return text
    cut = len(text) - max(max_chars, 0)
    return text[:max(max_chars, 0)] + TRUNCATION_MARK.format(n=cut)


def render_trajectory(traj: Trajectory, max_obs_chars: int | None = None, variant: str = "seed",
                      first_step: int = 0) -> str:
    """The trajectory as analyzer input.

    ``Task: <task>``, ``episode_success: success|failure`` (from ``traj.won``), then for each step in
    order a block ``Step i`` / ``Observation: <raw env text>`` / ``Response: <full model output>`` /
    ``Action valid: true|false``; blocks are separated by a blank line. ``variant`` ``seed``: steps
    from 0, the flag is the turn's format validity; ``legacy``: steps from 1, the flag is the env's
    acceptance of the action (see the module docstring).

    ``max_obs_chars`` caps each observation (responses are never cut): the head is kept and
    ``" ...[truncated N chars]"`` is appended. ``None`` = no cap. ``first_step`` > 0 leaves out the
    steps before it, with a line saying which (to fit a prompt limit).
    """
    _check_variant(variant)
    base = STEP_BASE[variant]
    lines = [f"Task: {_task_text(traj)}", f"episode_success: {'success' if traj.won else 'failure'}"]
    if first_step > 0 and traj.steps:
        last = min(first_step, len(traj.steps)) - 1 + base
        lines += ["", f"(Steps {base} to {last} are left out to fit the prompt limit.)"]
    for i, step in enumerate(traj.steps):
        if i < first_step:
            continue
        obs = _cap(step.observation if step.observation else "(empty)", max_obs_chars)
        valid = step.format_valid if variant in _SEED_VARIANTS else step.action_valid
        response = step.response_text
        if variant == "seed_visual":  # the step's image stands for its observation; no placeholder elsewhere
            obs = IMAGE_MARK if _n_images(step) else obs.replace(IMAGE_MARK, "[image]")
            response = response.replace(IMAGE_MARK, "[image]")
        lines += [
            "",
            f"Step {i + base}",
            f"Observation: {obs}",
            f"Response: {response}",
            f"Action valid: {'true' if valid else 'false'}",
        ]
    if not traj.steps:
        lines += ["", "(the episode has no steps)"]
    return "\n".join(lines)


def analysis_prompt(traj: Trajectory, max_obs_chars: int | None = None, step_skills: bool = False,
                    max_step_skills: int = 5, variant: str = "seed", first_step: int = 0) -> str:
    """The text of the single analysis user message (``step_skills``: also ask for critical-step skills;
    ``variant``: ``seed`` or ``legacy``, see the module docstring; ``first_step``: see
    :func:`render_trajectory`)."""
    _check_variant(variant)
    episode = render_trajectory(traj, max_obs_chars, variant, first_step)
    if variant in _SEED_VARIANTS:
        fields = [_SEED_SUMMARY_FIELD, _SEED_SUCCESS_FIELD if traj.won else _SEED_FAILURE_FIELD]
        keys = "episode_summary, episode_skill"
        if step_skills:
            fields.append(_SEED_STEP_FIELD.format(k=max_step_skills))
            keys += ", step_skills"
        numbered = "\n".join(f"{i}. {f}" for i, f in enumerate(fields, start=1))
        return "\n\n".join([
            _SEED_OPENING,
            f"Fill in {len(fields)} fields:\n{numbered}",
            "Rules:\n" + _SEED_RULES.format(keys=keys),
            "Answer format:\n" + (_SEED_FORMAT_STEPS if step_skills else _SEED_FORMAT),
            "Episode:\n" + episode,
        ])
    outcome = "SUCCESS" if traj.won else "FAILURE"
    request = _SUCCESS_REQUEST if traj.won else _FAILURE_REQUEST
    parts = [
        _INTRO,
        "=== Episode ===\n" + episode + "\n=== End of episode ===",
        f"Task: {_task_text(traj)}\nOutcome: {outcome}",
        request,
        _SKILL_RULES,
    ]
    if step_skills:
        parts += [_STEP_SKILL_RULES.format(k=max_step_skills), _FORMAT_RULES_STEPS]
    else:
        parts.append(_FORMAT_RULES)
    return "\n\n".join(parts)


def _n_images(step) -> int:
    images = getattr(step, "images", None)
    return len(images.raw) if images is not None else 0


def analysis_images(traj: Trajectory, first_step: int = 0) -> list:
    """The images a ``seed_visual`` prompt of ``traj`` shows, in order (one :data:`IMAGE_MARK` each): the
    observation image (the first) of every kept step that has one (``first_step``: as
    :func:`render_trajectory`)."""
    return [s.images.raw[0] for i, s in enumerate(traj.steps) if i >= first_step and _n_images(s)]


def analysis_messages(traj: Trajectory, max_obs_chars: int | None = None, step_skills: bool = False,
                      max_step_skills: int = 5, variant: str = "seed", first_step: int = 0) -> list[dict[str, str]]:
    """Chat messages for the analyzer: one user message (as the official code does)."""
    return [{"role": "user", "content": analysis_prompt(traj, max_obs_chars, step_skills, max_step_skills,
                                                        variant, first_step)}]


def repair_messages(original_messages: list[dict[str, str]], bad_output: str,
                    error: str | None = None, step_skills: bool = False) -> list[dict[str, str]]:
    """The retry conversation after an unparsable answer: the original messages (copied), the bad
    answer as the assistant turn, and a user turn asking to re-emit valid JSON only."""
    reason = f" ({error})" if error else ""
    if step_skills:
        keys = ('three keys:\n{"episode_summary": "<one or two sentences>", "episode_skill": "<one short '
                'policy-facing skill, at least five words>", "step_skills": [{"step": <step number>, '
                '"skill": "<one imperative sentence>"}]}')
    else:
        keys = ('two string keys:\n{"episode_summary": "<one or two sentences>", "episode_skill": "<one short '
                'policy-facing skill, at least five words>"}')
    ask = (
        f"Your previous reply could not be used{reason}. Reply again with only a valid JSON object, "
        f"no code fences and no other text, with exactly these {keys}"
    )
    return [dict(m) for m in original_messages] + [
        {"role": "assistant", "content": bad_output if isinstance(bad_output, str) else str(bad_output)},
        {"role": "user", "content": ask},
    ]


def skill_target(summary: str, skill: str, step_skills: dict[int, str] | None = None,
                 step_base: int = STEP_BASE["seed"]) -> str:
    """The canonical analyzer answer (the SFT response in Stage 1).

    ``step_skills`` (0-based step -> skill) adds the ``step_skills`` key, steps numbered as in the
    analysis prompt (``step_base``: :data:`STEP_BASE` of its variant), in step order; ``None`` leaves
    the key out (an empty dict writes ``[]``)."""
    answer: dict = {"episode_summary": summary, "episode_skill": skill}
    if step_skills is not None:
        answer["step_skills"] = [{"step": i + step_base, "skill": s} for i, s in sorted(step_skills.items())]
    return json.dumps(answer, ensure_ascii=False)
