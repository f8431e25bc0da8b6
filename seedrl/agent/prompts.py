"""verl-agent style step prompts.

Every step of an episode is rendered as one user message: the task line ("Your task is to: …"),
the last ``history_length`` (observation, action) pairs, the current observation, the admissible
actions where the env lists them, and the instruction to reason in ``<think>`` and answer in
``<action>``. The task line is always a line of its own, because hindsight skills (SEED) are
inserted right after it; the student and evaluation prompts built here never carry a skill.

Layouts (``style``, an env's :attr:`~seedrl.envs.base.Env.prompt_style`):

- ``seedrl`` (this project's, what every env and every trained model so far uses): the task line at
  every step, history items as ``[Observation k:\n<obs>\nAction k: <act>]``, admissible actions
  joined by ", ";
- ``seedrl_observation_last``: ``seedrl``'s lines in another order, everything that does not change
  within an episode first (title, task line, admissible actions, closing instruction) and the history
  and current observation last, so a batch's prompts share all their instructions as one prefix (the
  shared-prefix passes run it once; under ``seedrl`` the text after the board is paid per sample). A
  CPU layout for ``make demo`` (sokoban's ``prompt_style`` option), not a reference one;
- ``verl_agent`` (the structure of verl-agent's ALFWORLD_TEMPLATE_NO_HIS / ALFWORLD_TEMPLATE, as its
  ``AlfWorldEnvironmentManager`` fills them; ALFWorld's default): step 0 has no task line of its own:
  the task sentence ends the first observation, on its own line after a blank line, as ALFWorld's
  intro shows it (so a skill goes right after it); later steps name the task after the title (on a
  line of its own here: skills go right after it), lay the history out as
  ``[Observation k: '<obs>', Action k: '<act>']``, one item a line, the first on the line that
  announces them, give the current observation on the "You are now at step" line, and list the
  admissible actions one a line, each quoted, as ``['a'\n 'b']``. docs/deviations.md lists where
  this still differs from the reference;
- ``verl_agent_search`` (the structure of verl-agent's SEARCH_TEMPLATE_NO_HIS / SEARCH_TEMPLATE, as its
  ``SearchEnvironmentManager`` and ``SearchMemory`` fill them): the question on a "Your question:" line
  (skills go right after it), no current-observation line: from step 1 on, a "History:" of the last
  ``history_length`` steps, each ``Step k:<action> <the observation it got>``, a blank line between
  items; ``task_description`` is the question itself;
- ``verl_agent_webshop`` (verl-agent's WEBSHOP_TEMPLATE_NO_HIS / WEBSHOP_TEMPLATE, as its
  ``WebshopEnvironmentManager`` fills them): the task line ends in a period at every step, the
  history items as ``verl_agent``'s, the current observation and a period, and the admissible
  actions one a line between a "[" line and a "]." line, each quoted and followed by a comma.

An env whose layout has its own closing sentence sets it as its ``instruction``; every closing
instruction starts with :data:`TURN_PREFIX` ("Now it's your turn to"), before which a critical-step
skill goes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

TASK_PREFIX = "Your task is to: "
#: the task line of the ``verl_agent_search`` layout (SEED places the episode skill after it too)
QUESTION_PREFIX = "Your question: "
#: how every closing instruction starts (SEED's anchor for a skill with no task line, and for step skills)
TURN_PREFIX = "Now it's your turn to"
TURN_LINE = TURN_PREFIX + " take an action."
INSTRUCTION = (
    TURN_LINE + "\n"
    "You should first reason step-by-step about the current situation. "
    "This reasoning process MUST be enclosed within <think> </think> tags.\n"
    "Once you've finished your reasoning, you should choose an admissible action for current step "
    "and present it within <action> </action> tags."
)
INVALID_ACTION_TEXT = "(invalid action)"
#: the step-prompt layouts (see the module docstring)
PROMPT_STYLES = ("seedrl", "seedrl_observation_last", "verl_agent", "verl_agent_search", "verl_agent_webshop")
#: the ``verl_agent_search`` layout's history preamble (verl-agent's SEARCH_TEMPLATE)
SEARCH_HISTORY_INTRO = ("Below is the interaction history where <search> </search> wrapped your past search "
                        "queries and <information> </information> wrapped the corresponding search results "
                        "returned by the external search engine. History:")


@dataclass(frozen=True)
class HistoryItem:
    observation: str
    action: str | None  # None = the model produced no parsable action at that step


def build_step_prompt(
    env_title: str,
    task_description: str,
    observation: str,
    history: Sequence[HistoryItem] = (),
    step_index: int = 0,
    history_length: int = 2,
    admissible_actions: Sequence[str] | None = None,
    instruction: str | None = None,
    style: str = "seedrl",
) -> str:
    """The user-message text of one step. ``step_index`` is the 0-based index of this step;
    ``instruction`` replaces the default closing instruction (it must start with ``TURN_LINE``);
    ``style`` picks the layout (:data:`PROMPT_STYLES`)."""
    if style == "verl_agent":
        return _verl_agent_prompt(env_title, task_description, observation, history, step_index, history_length,
                                  admissible_actions, instruction)
    if style == "verl_agent_search":
        return _verl_agent_search_prompt(task_description, observation, history, step_index, history_length,
                                         instruction)
    if style == "verl_agent_webshop":
        return _verl_agent_webshop_prompt(env_title, task_description, observation, history, step_index,
                                          history_length, admissible_actions, instruction)
    if style not in ("seedrl", "seedrl_observation_last"):
        raise ValueError(f"unknown prompt style {style!r}; known: {', '.join(PROMPT_STYLES)}")
    head = [f"You are an expert agent playing {env_title}.", TASK_PREFIX + task_description.strip()]
    lines: list[str] = []
    recent = list(history)[-history_length:] if history_length > 0 else []
    if step_index > 0 and recent:
        lines.append(
            f"Prior to this step, you have already taken {step_index} step(s). Below are the most recent "
            f"{len(recent)} observations and the corresponding actions you took:"
        )
        first = step_index - len(recent) + 1
        for i, item in enumerate(recent):
            act = item.action if item.action is not None else INVALID_ACTION_TEXT
            lines.append(f"[Observation {first + i}:\n{item.observation.strip()}\nAction {first + i}: {act}]")
        lines.append(f"You are now at step {step_index + 1} and your current observation is:")
    else:
        lines.append("Your current observation is:")
    lines.append(observation.strip())
    actions = (["Your admissible actions of the current situation are: [" + ", ".join(admissible_actions) + "]."]
               if admissible_actions else [])
    if style == "seedrl_observation_last":
        return "\n".join([*head, *actions, "", instruction or INSTRUCTION, "", *lines])
    return "\n".join([*head, *lines, *actions, "", instruction or INSTRUCTION])


def _verl_agent_prompt(env_title: str, task_description: str, observation: str, history: Sequence[HistoryItem],
                       step_index: int, history_length: int, admissible_actions: Sequence[str] | None,
                       instruction: str | None) -> str:
    """verl-agent's ALFWorld layout (see the module docstring)."""
    title = f"You are an expert agent operating in {env_title}."
    task = TASK_PREFIX + task_description.strip()
    recent = list(history)[-history_length:] if history_length > 0 else []
    if step_index == 0:
        # no task line of the template's own: the task sentence closes the intro observation
        lines = [title, "Your current observation is: " + observation.strip() + "\n\n" + task]
    else:
        lines = [title, task]
        if recent:
            items = _history_items(step_index, recent)
            lines.append(f"Prior to this step, you have already taken {step_index} step(s). Below are the most "
                         f"recent {len(recent)} observations and the corresponding actions you took: {items}")
        lines.append(f"You are now at step {step_index + 1} and your current observation is: {observation.strip()}")
    if admissible_actions:
        lines.append("Your admissible actions of the current situation are: ["
                     + "\n ".join(f"'{a}'" for a in admissible_actions) + "].")
    lines.append("")
    lines.append(instruction or INSTRUCTION)
    return "\n".join(lines)


def _history_items(step_index: int, recent: list[HistoryItem]) -> str:
    """``verl_agent``'s history items, one a line: ``[Observation k: '<obs>', Action k: '<act>']``."""
    first = step_index - len(recent) + 1
    return "\n".join(
        f"[Observation {first + i}: '{item.observation.strip()}', Action {first + i}: "
        f"'{item.action if item.action is not None else INVALID_ACTION_TEXT}']"
        for i, item in enumerate(recent))


def _verl_agent_search_prompt(question: str, observation: str, history: Sequence[HistoryItem], step_index: int,
                              history_length: int, instruction: str | None) -> str:
    """verl-agent's Search layout (see the module docstring). A history item holds the observation
    *before* its action; verl-agent's ``SearchMemory`` pairs each action with the observation it got,
    which is the next item's observation (or, for the last one, the current observation)."""
    lines = ["You are an expert agent tasked with answering the given question step-by-step.",
             QUESTION_PREFIX + question.strip()]
    past = list(history)
    recent_n = min(history_length, len(past)) if history_length > 0 else 0
    if step_index > 0 and recent_n:
        after = [h.observation for h in past[1:]] + [observation]
        start = len(past) - recent_n
        items = "\n\n".join(
            f"Step {start + j + 1}:{past[start + j].action if past[start + j].action is not None else INVALID_ACTION_TEXT}"
            f" {after[start + j].strip()}" for j in range(recent_n))
        lines += ["", f"Prior to this step, you have already taken {step_index} step(s). {SEARCH_HISTORY_INTRO}", items]
    lines.append("")
    lines.append(instruction or INSTRUCTION)
    return "\n".join(lines)


def _verl_agent_webshop_prompt(env_title: str, task_description: str, observation: str,
                               history: Sequence[HistoryItem], step_index: int, history_length: int,
                               admissible_actions: Sequence[str] | None, instruction: str | None) -> str:
    """verl-agent's WebShop layout (see the module docstring)."""
    lines = [f"You are an expert autonomous agent operating in {env_title}.",
             TASK_PREFIX + task_description.strip() + "."]
    recent = list(history)[-history_length:] if history_length > 0 else []
    if step_index > 0 and recent:
        lines.append(f"Prior to this step, you have already taken {step_index} step(s). Below are the most recent "
                     f"{len(recent)} observations and the corresponding actions you took: "
                     + _history_items(step_index, recent))
        lines.append(f"You are now at step {step_index + 1} and your current observation is: {observation.strip()}.")
    else:
        lines.append(f"Your current observation is: {observation.strip()}.")
    lines.append("Your admissible actions of the current situation are:")
    lines.append("[")
    lines += [f"'{a}'," for a in admissible_actions or ()]
    lines.append("].")
    lines.append("")
    lines.append(instruction or INSTRUCTION)
    return "\n".join(lines)


def step_messages(prompt_text: str) -> list[dict[str, str]]:
    """Chat messages of a step (one user turn, as verl-agent does)."""
    return [{"role": "user", "content": prompt_text}]


def format_response(action: str, thought: str = "") -> str:
    """The canonical model turn for an action (used for expert demonstrations)."""
    return f"<think>{thought}</think><action>{action}</action>"
