"""Oracle hindsight for household search, from :class:`~seedrl.envs.household.state.HouseholdPrivilegedState`.

Every episode (won or lost) gets the same skill, worded exactly so that :func:`parse_facts` reads it back::

    The apple was in drawer 2 (not in fridge 1 or cabinet 1, which you checked). Look for a apple in the drawer first.

The parenthesis lists the receptacles whose contents the agent saw without the object ("A", "A or B",
"A, B or C"); it is left out when there are none. An empty state or another env's gives ``(None, None)``.

Two more hooks (``seedrl/envs/oracle.py``): :func:`counterfactual` writes a skill in the same words
for another plausible receptacle than the one the policy's action goes to, and :func:`fact_agreement`
checks what a skill says about the object's place against the privileged state.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from typing import Any

from seedrl.envs.household.env import HouseholdEnv
from seedrl.envs.household.state import HouseholdPrivilegedState
from seedrl.envs.household.world import rclass
from seedrl.envs.oracle import names_another_env, norm, outcome
from seedrl.rollout.types import Trajectory

_RECEPTACLE = r"[a-z]+ \d+"
_WAS_IN = re.compile(rf"\bthe ([a-z]+) was in (?:the )?({_RECEPTACLE})", re.I)
_NOT_IN = re.compile(r"\(not in ([^)]*?)(?:, which you checked)?\)", re.I)
#: the observed view's wording when the object was never seen: "The apple was not in A or B, which ..."
_WAS_NOT_IN = re.compile(r"\bthe [a-z]+ was not in ([^.]*?)(?:, which you checked)?\.", re.I)


def skill_text(obj: str, where: str, not_in: Sequence[str] = ()) -> str:
    """The one wording of every household skill (hindsight and counterfactual)."""
    checked = ""
    if not_in:
        names = not_in[0] if len(not_in) == 1 else ", ".join(not_in[:-1]) + " or " + not_in[-1]
        checked = f" (not in {names}, which you checked)"
    return f"The {obj} was in {where}{checked}. Look for a {obj} in the {rclass(where)} first."


def parse_facts(skill: str) -> tuple[list[tuple[str, str]], list[str]]:
    """([(object class, receptacle it was in)], [receptacles it was not in]) that a skill states."""
    was_in = [(m.group(1).lower(), norm(m.group(2))) for m in _WAS_IN.finditer(skill)]
    not_in = [norm(r) for rx in (_NOT_IN, _WAS_NOT_IN) for m in rx.finditer(skill)
              for r in re.findall(_RECEPTACLE, m.group(1).lower())]
    return was_in, not_in


def hindsight(traj: Trajectory, ps: dict[str, Any]) -> tuple[str, str] | tuple[None, None]:
    if not ps or names_another_env(ps, HouseholdEnv.name):
        return None, None
    s = HouseholdPrivilegedState.parse(ps)
    missed = [r for r in s.checked if r != s.object_receptacle]
    found = s.object_receptacle in s.checked
    summary = (f"{outcome(traj)}. The {s.object_name} was in {s.object_receptacle}"
               f"{'' if found else ', which it never checked'}"
               + (f"; it checked {', '.join(missed)} first." if missed else "."))
    return summary, skill_text(s.object_class, s.object_receptacle, missed)


def observed_hindsight(traj: Trajectory, ps: dict[str, Any]) -> tuple[str, str] | tuple[None, None]:
    """What the trajectory itself reveals, for a self-analyzer to learn to extract (Stage 1): where the object
    was when the agent saw it (then as :func:`hindsight`), else only where it was not ("The apple was not in
    fridge 1 or cabinet 1, which you checked. Look for a apple elsewhere first."); ``(None, None)`` (the
    generic skill) when it checked nothing. The privileged :func:`hindsight` names the place even when the
    episode never saw it: no analysis of the episode could know that."""
    if not ps or names_another_env(ps, HouseholdEnv.name):
        return None, None
    s = HouseholdPrivilegedState.parse(ps)
    if s.object_receptacle in s.checked:
        return hindsight(traj, ps)
    if not s.checked:
        return None, None
    missed = list(s.checked)
    names = missed[0] if len(missed) == 1 else ", ".join(missed[:-1]) + " or " + missed[-1]
    return (f"{outcome(traj)}. It never saw the {s.object_name}; it checked {', '.join(missed)}.",
            f"The {s.object_class} was not in {names}, which you checked. Look for a {s.object_class} elsewhere first.")


def fact_agreement(skill: str, ps: dict[str, Any]) -> bool | None:
    """Whether the facts ``skill`` states agree with the privileged state: every "The O was in R" names
    the episode's object class and its receptacle, and no receptacle of a "(not in ...)" is the object's.
    ``None`` when the skill states no such fact (advice such as "Look ... first" alone, a generic skill),
    or for an empty state or another env's."""
    was_in, not_in = parse_facts(skill)
    if not was_in and not not_in or not ps or names_another_env(ps, HouseholdEnv.name):
        return None
    s = HouseholdPrivilegedState.parse(ps)
    truth = norm(s.object_receptacle)
    return (all(obj == s.object_class and r == truth for obj, r in was_in)
            and all(r != truth for r in not_in))


def counterfactual(env: HouseholdEnv, default_action: str, rng: random.Random) -> tuple[str, str] | None:
    """A skill, worded as :func:`hindsight` words it, saying the object was in a receptacle other than
    the one ``default_action`` goes to (or acts on), and the command that goes there. The receptacle is
    drawn by ``rng`` from the room's unchecked ones where the object's class can lie (any unchecked one
    if none can), never where the agent stands. ``None`` when no such receptacle is left, once the agent
    has seen the object (a skill placing it elsewhere would contradict the observation), or when the
    episode is over. Reads the live env without changing it."""
    if env.game is None or env.won:
        return None
    g, default = env.game, norm(default_action)
    if any(g.target in env.contents[r] for r in env.checked):
        return None
    target = default[len("go to "):] if default.startswith("go to ") else env.location
    admissible = {norm(a): a for a in env.admissible_actions() or []}
    free = [r for r in g.receptacles if r not in (target, env.location) and r not in env.checked
            and norm(f"go to {r}") in admissible and norm(f"go to {r}") != default]
    plausible = [r for r in free if env.prior[g.object_class].get(rclass(r), 0.0) > 0]
    pool = plausible or free
    if not pool:
        return None
    r = rng.choice(sorted(pool))
    return skill_text(g.object_class, r), admissible[norm(f"go to {r}")]
