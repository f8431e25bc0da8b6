"""What every environment's oracle shares: trajectory statistics, common skill wording, and the generic
fallback skill.

An environment's oracle is the module ``oracle`` of its package (``seedrl/envs/<name>/oracle.py``),
found through the registry by :class:`seedrl.skills.analyzers.oracle.OracleAnalyzer`. It defines

- ``hindsight(traj, privileged_state) -> (summary, skill)``: a hindsight skill from the env's
  privileged state, read through the env's typed :class:`~seedrl.envs.base.PrivilegedState` (a
  missing or wrongly typed key raises :class:`~seedrl.envs.base.PrivilegedStateError`, which the
  analyzer records as the trajectory's error). ``(None, None)`` is a deliberate fallback to
  :func:`generic_skill`: for an empty privileged state (the env had none), a state of another env,
  or an episode the oracle has nothing specific to say about (each oracle documents its cases);
- optionally ``step_skills(traj, privileged_state) -> {0-based step: skill}``: OPID's critical-step
  skills, asked for only when ``hindsight`` gave a skill;
- optionally ``counterfactual(env, default_action: str, rng: random.Random) -> tuple[str, str] | None``:
  given a live env at a decision state (reset and stepped there) and the action the policy would take
  there without a skill, ``(skill_text, named_action)``: a sensible skill, worded exactly as the env's
  hindsight skills are, that names a legal action other than ``default_action`` (``named_action`` is in
  ``env.admissible_actions()`` where the env has a list, and differs from ``default_action`` after
  :func:`norm`); ``None`` when no such alternative exists. It never changes the env's state;
- optionally ``fact_agreement(skill: str, privileged_state) -> bool | None``: whether the checkable facts
  a skill states (where an object was, where it was not, ...) agree with the privileged state; ``None``
  when the skill states no fact the oracle can check (a generic skill).

Skills are policy-facing ("When X, do Y"), one or two sentences; summaries may narrate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from seedrl.rollout.types import Trajectory

#: how many commands a plan shows before "..."
MAX_PLAN_COMMANDS = 12


def names_another_env(privileged_state: Mapping[str, Any], *names: str) -> bool:
    """The state's ``"env"`` key names an env other than ``names``: an oracle returns ``(None, None)``
    for it (a missing ``"env"`` key is left to the typed state to report)."""
    env = privileged_state.get("env")
    return isinstance(env, str) and env not in names


def step_counts(traj: Trajectory) -> tuple[int, int, int]:
    """(steps, unparsable turns, actions the env rejected)."""
    unparsable = sum(s.action is None for s in traj.steps)
    rejected = sum(s.action is not None and not s.action_valid for s in traj.steps)
    return len(traj.steps), unparsable, rejected


def outcome(traj: Trajectory) -> str:
    """"Failed after 6 steps; 1 without a parsable action; 2 invalid actions; the step limit ran out"."""
    n, unparsable, rejected = step_counts(traj)
    bits = [f"{'Succeeded' if traj.won else 'Failed'} after {n} step{'s' if n != 1 else ''}"]
    if unparsable:
        bits.append(f"{unparsable} without a parsable action")
    if rejected:
        bits.append(f"{rejected} invalid action{'s' if rejected != 1 else ''}")
    if not traj.won and traj.truncated:
        bits.append("the step limit ran out")
    return "; ".join(bits)


def invalid_skill(traj: Trajectory, valid_hint: str) -> str:
    """The skill for an episode of mostly unparsable turns or rejected actions."""
    _, unparsable, rejected = step_counts(traj)
    if unparsable >= rejected:
        return (f"Always end every reply with exactly one action inside <action></action> tags, {valid_hint}; "
                "a reply without a parsable action wastes the whole step.")
    return f"Only ever answer with {valid_hint}; any other action is invalid, changes nothing and wastes a step."


def mostly_invalid(traj: Trajectory) -> bool:
    """At least two and at least a third of the turns were unparsable or rejected."""
    n, unparsable, rejected = step_counts(traj)
    bad = unparsable + rejected
    return bad >= 2 and 3 * bad >= n


def norm(command: object) -> str:
    """Lower case, whitespace collapsed: how commands are compared."""
    return " ".join(str(command).strip().lower().split())


def plan_text(commands: Sequence[str]) -> str:
    """"'go east', 'take coin'" (at most :data:`MAX_PLAN_COMMANDS`, then ", ...")."""
    shown = [f"'{c}'" for c in commands[:MAX_PLAN_COMMANDS]]
    text = ", ".join(shown)
    return text + (", ..." if len(commands) > MAX_PLAN_COMMANDS else "")


def generic_skill(traj: Trajectory, env: str | None) -> tuple[str, str]:
    """The skill of any environment, from the trajectory's statistics alone (no privileged state)."""
    actions = [s.action for s in traj.steps if s.action is not None and s.action_valid]
    summary = outcome(traj) + (f" in {env}" if env else "") + "."
    if traj.won:
        order = plan_text(actions) if actions else None
        skill = ("When doing this task, repeat the action order that worked"
                 + (f": {order}" if order else "") + ", one valid action per step and no detours.")
        return summary, skill
    if mostly_invalid(traj):
        return summary, invalid_skill(traj, "one admissible action for the current situation")
    repeats = sum(1 for a, b in zip(actions, actions[1:]) if norm(a) == norm(b))
    if actions and repeats >= 2 and 3 * repeats >= len(actions):
        return summary, ("When an action has just been taken and the observation did not change, do not repeat "
                         "it; choose a different admissible action that moves toward the goal.")
    return summary, ("When the goal is not reached after a few actions, stop and re-read the task, then choose "
                     "the admissible action that most directly advances it instead of exploring at random.")
