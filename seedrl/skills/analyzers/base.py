"""The analyzer interface: completed trajectories in, one hindsight skill (or none) per trajectory out.

An analyzer never raises for a single bad trajectory: garbage, a timeout or an exception becomes an
:class:`AnalysisResult` with ``skill=None`` and ``error`` set, so that trajectory simply gets no
distillation signal (GRPO still applies) and the failure is counted in the metrics.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from seedrl.rollout.types import Trajectory


@dataclass
class AnalysisResult:
    traj_id: int
    skill: str | None  # None: no skill, no OPD signal for this trajectory
    summary: str | None = None
    raw: str = ""  # the analyzer's raw output (for inspection)
    error: str | None = None  # "parse: ...", "timeout", "http 500", "exception: ..."
    prompt_tokens: int = 0
    completion_tokens: int = 0
    attempts: int = 1
    #: OPID critical-step skills, 0-based step index -> skill; empty unless ``skills.step_skills`` is on.
    #: Only meaningful with an episode ``skill`` (a trajectory without one gets no signal at all).
    step_skills: dict[int, str] = field(default_factory=dict)
    #: whether the facts the skill states agree with the env's oracle (``seedrl.skills.facts``); None:
    #: not checked (no skill, no checkable fact, an env without the check)
    fact_agrees: bool | None = None


class Analyzer(Protocol):
    name: str

    def analyze(self, trajectories: list[Trajectory]) -> list[AnalysisResult]:
        """One result per trajectory, in the same order. Must not raise for per-trajectory failures."""
