"""The typed privileged state of the EZPoints env: what :meth:`EZPointsEnv.privileged_state` returns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

from seedrl.envs.base import PrivilegedState


class EZPointsMove(TypedDict):
    """One action the env received, in order (invalid ones included, as typed)."""

    action: str
    #: a token of the action list (``1``..``10``, ``+``, ``*``, ``=``)
    valid: bool
    reward: float
    #: a formula equal to 12 could still be finished after this step
    solvable: bool


@dataclass
class EZPointsPrivilegedState(PrivilegedState):
    """``cards`` as verl-agent names them (suit letter + rank: ``"H5"``, ``"CT"`` for a ten, ``"DK"``),
    ``numbers`` their values (J, Q, K count 10); ``formula`` the tokens written so far (``" "`` for a
    card number that was not available, as verl-agent records it); ``solution`` the shortest way to
    finish from here (ending with ``"="``), ``None`` when none is left."""

    env: str
    task_id: str
    cards: list[str]
    numbers: list[int]
    formula: list[str]
    used: list[int]
    solution: list[str] | None
    history: list[EZPointsMove]
    won: bool
    done: bool
