"""The typed privileged state of the household env: what :meth:`HouseholdEnv.privileged_state` returns."""

from __future__ import annotations

from dataclasses import dataclass

from seedrl.envs.base import PrivilegedState


@dataclass
class HouseholdPrivilegedState(PrivilegedState):
    """Receptacles are named as the game names them (``"cabinet 2"``). ``checked``: the receptacles whose
    contents the agent has seen (arrived at an open one, or opened it), in order; ``prior_ranking``: the
    receptacle classes of the object's class, most likely first under the *training* prior (what a
    skill-free searcher follows; valid_unseen's games are drawn from a shifted prior)."""

    env: str
    task_id: str
    #: the split whose prior placed the object (from the seed range)
    split: str
    object_class: str
    #: the target's name in commands, "apple 1"
    object_name: str
    #: the receptacle the object lies in at the start
    object_receptacle: str
    receptacles: list[str]
    openable: list[str]
    #: receptacles gone to, in the order first visited
    visited: list[str]
    #: receptacles ever opened, in order
    opened: list[str]
    checked: list[str]
    prior_ranking: list[str]
    #: where the agent stands (None: the middle of the room)
    location: str | None
    holding: str | None
    won: bool
