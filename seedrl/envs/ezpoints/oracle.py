"""Oracle hindsight for EZPoints, from :class:`~seedrl.envs.ezpoints.state.EZPointsPrivilegedState`.

The solver (:func:`seedrl.envs.ezpoints.env.solve`) gives the shortest winning formula of the cards, so a
skill can say which operator the cards needed:

- success -> the workflow of the winning formula, generalised by its operator (values that add up to
  12: '+'; multiply to 12: '*'); ``(None, None)``, the generic skill, for a win the solver's plan does not
  explain (an exotic formula such as ``+5+7``);
- failure -> mostly unparsable or invalid tokens: the token rule; a card number that was not on the
  cards (or written twice): only the cards' numbers, each once; ``=`` on a wrong formula: what it gave
  and the operator the cards needed; ``=`` before both numbers: finish the formula first; the formula
  grown past its limit: four tokens are enough.

:func:`step_skills` (OPID): the first step after which no winning formula was left (the history's
``solvable`` flag), as a trajectory step, with the token the solver would have written there.
"""

from __future__ import annotations

from typing import Any

from seedrl.envs.ezpoints.env import MAX_FORMULA, NUMBER_TOKENS, TARGET, evaluate, solve
from seedrl.envs.ezpoints.state import EZPointsMove, EZPointsPrivilegedState
from seedrl.envs.oracle import invalid_skill, mostly_invalid, names_another_env, outcome
from seedrl.rollout.types import Trajectory

_VALID_HINT = "exactly one token: a card's number, '+', '*' or '='"


def _operator(numbers: list[int]) -> str | None:
    """The operator of the solver's shortest formula for the cards (``None``: no formula or another shape)."""
    plan = solve(numbers)
    if plan is not None and len(plan) == 4 and plan[1] in "+*":
        return plan[1]
    return None


def _how(op: str) -> str:
    return "add up to 12, so write one value, '+', the other value" if op == "+" else \
        "multiply to 12, so write one value, '*', the other value"


def hindsight(traj: Trajectory, ps: dict[str, Any]) -> tuple[str, str] | tuple[None, None]:
    if not ps or names_another_env(ps, "ezpoints"):
        return None, None
    state = EZPointsPrivilegedState.parse(ps)
    values = " and ".join(str(n) for n in state.numbers)
    op = _operator(state.numbers)
    history = state.history
    if state.won:
        if op is None or op not in "".join(state.formula):
            return None, None
        return (f"{outcome(traj)}; the cards were {values} and the formula {''.join(state.formula)} made 12.",
                f"When the two card values {_how(op)}, then '=': one token per step, four steps in all.")
    if mostly_invalid(traj):
        return f"{outcome(traj)}.", invalid_skill(traj, _VALID_HINT)
    need = f" The cards {values} needed {''.join(solve(state.numbers) or [])[:-1]}." if op else ""
    for i, h in enumerate(history):
        if not h["valid"] or h["reward"] >= 0:
            continue
        before = _tokens(history[:i])
        formula = "".join(before)
        if len(before) > MAX_FORMULA:  # the time limit: a step taken on a formula grown too long
            return (f"{outcome(traj)}; the formula grew to {formula!r} without '='.{need}",
                    "A formula needs only four steps: a card value, an operator, the other card value, then "
                    "'='; never add extra operators.")
        if h["action"] != "=":  # a card number that no card left showed
            return (f"{outcome(traj)}; at step {i + 1} it wrote {h['action']}, which no card left showed.{need}",
                    "Only write the numbers shown on the two cards (J, Q and K count 10), each exactly once; "
                    "any other number is refused and costs a point.")
        if sum(t in NUMBER_TOKENS for t in before) < len(state.numbers):
            return (f"{outcome(traj)}; it pressed '=' on {formula!r} before writing both card numbers.",
                    "Press '=' only after both card numbers and one operator between them are written.")
        value = evaluate(before)
        got = "no number" if value is None else str(value)
        skill = (f"When the two card values {_how(op)}, then '='; check the value is {TARGET} before "
                 "pressing '='." if op else
                 f"Before pressing '=', check the formula equals {TARGET}; try both '+' and '*'.")
        return f"{outcome(traj)}; the formula {formula!r} gave {got}, not {TARGET}.{need}", skill
    if traj.truncated or not state.done:
        return (f"{outcome(traj)}; the formula {''.join(state.formula)!r} was never finished with '='.{need}",
                f"When the two card values {_how(op)}, then '=': four steps in all." if op else
                "Finish the formula in four steps: a card value, an operator, the other card value, then '='.")
    return None, None


def step_skills(traj: Trajectory, ps: dict[str, Any]) -> dict[int, str]:
    """{trajectory step: skill} for the first step after which no winning formula was left."""
    if not ps or names_another_env(ps, "ezpoints"):
        return {}
    state = EZPointsPrivilegedState.parse(ps)
    history = state.history
    lost = next((i for i, h in enumerate(history) if not h["solvable"] and not state.won), None)
    if lost is None or (lost and not history[lost - 1]["solvable"]):
        return {}
    before = _tokens(history[:lost])
    formula = "".join(before)
    plan = solve(state.numbers, before, [int(t) for t in before if t in NUMBER_TOKENS])
    if plan is None:
        return {}
    sent = [i for i, s in enumerate(traj.steps) if s.action is not None]
    step = sent[lost] if len(sent) == len(history) else lost
    return {step: f"Do not write {history[lost]['action']!r} after {formula!r}: no formula equal to {TARGET} "
                  f"is left then. Write {plan[0]!r} instead."}


def _tokens(history: list[EZPointsMove]) -> list[str]:
    """The formula tokens the history appended (a space for a card misuse)."""
    out: list[str] = []
    for h in history:
        a = h["action"]
        if not h["valid"] or a == "=":
            continue
        out.append(" " if a in NUMBER_TOKENS and h["reward"] < 0 else a)
    return out
