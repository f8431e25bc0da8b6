"""A programmatic analyzer that writes hindsight skills from the env's privileged state.

Deterministic and offline: the same trajectory always gets the same skill, with no model and no
network. Used to make Stage-1 SFT data reproducible (SEED's labels come from a closed model, see
seed_algorithm.md §1.1) and as an ablation (a perfect, but templated, analyzer).

Every answer goes through the analyzer JSON format: ``raw`` is the canonical answer
``skill_target(summary, skill)``, and it is parsed back with ``parse_skill`` so an oracle skill is
exactly what a model trained on it would have to produce. Skills are policy-facing ("When X, do
Y"), one or two sentences, never a story of the episode; summaries may narrate. Both are kept short:
the self-analyzer has to generate every token of them for every trajectory, so their length is
SEED's analysis cost.

With ``step_skills=True`` (config ``skills.step_skills``; OPID) the answer also carries critical-step
skills, ``step_skills: [{"step": <step, from 0 as in the seed prompt>, "skill": ...}]``, from the env oracle's
``step_skills`` (an empty list where it has none).

The analyzer names no environment. The env of a trajectory is ``env_name``, else the privileged
state's ``"env"`` key, else the first registered env whose class claims the privileged state
(:meth:`Env.claims_privileged_state`) or, failing that, the task id (:meth:`Env.claims_task_id`).
Its oracle is the module ``oracle`` of the env's package (:func:`seedrl.envs.registry.env_package`),
imported on first use: ``hindsight(traj, privileged_state) -> (summary, skill)`` and optionally
``step_skills`` (see :mod:`seedrl.envs.oracle`). The generic skill of :func:`seedrl.envs.oracle.generic_skill`
(from the trajectory's statistics) is used where the oracle deliberately returns ``(None, None)``,
where the trajectory has no privileged state, and for an env without an oracle or an unknown env.

Per-trajectory failures never raise: a privileged state that does not match its env's typed state (a
missing or wrongly typed key) gives ``AnalysisResult(skill=None, error="oracle: ...")`` naming the
key; any other exception gives ``error="exception: ..."``.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from seedrl.envs.base import PrivilegedStateError
from seedrl.envs.oracle import generic_skill
from seedrl.envs.registry import env_class, env_names, env_package
from seedrl.errors import SeedRLError
from seedrl.rollout.types import Trajectory
from seedrl.skills.analyzers.base import AnalysisResult

#: what an oracle skill may state: ``privileged`` (anything the env's state knows, e.g. where an object
#: was that the episode never saw: the positive control) or ``observed`` (only what the trajectory itself
#: revealed, from the oracle's ``observed_hindsight``: labels a self-analyzer can learn to write)
VIEWS = ("privileged", "observed")


class OracleAnalyzer:
    """Skills from privileged env state, through each env's own oracle (generic for any other env)."""

    name = "oracle"

    def __init__(self, env_name: str | None = None, min_words: int = 5, step_skills: bool = False,
                 max_step_skills: int = 5, view: str = "privileged") -> None:
        if view not in VIEWS:
            raise SeedRLError(f"unknown oracle view {view!r}; valid: {', '.join(VIEWS)}")
        if view == "observed" and env_name is not None and not hasattr(oracle_module(env_name), "observed_hindsight"):
            raise SeedRLError(f"{env_name}'s oracle has no observed view (observed_hindsight); use "
                              f"skills.oracle_view=privileged")
        self.env_name = env_name
        self.view = view
        self.min_words = min_words
        self.step_skills, self.max_step_skills = step_skills, max_step_skills

    def analyze(self, trajectories: list[Trajectory]) -> list[AnalysisResult]:
        return [self._analyze_one(t) for t in trajectories]

    # -- one trajectory -----------------------------------------------------------------------
    def _analyze_one(self, traj: Trajectory) -> AnalysisResult:
        from seedrl.skills.parsing import parse_skill
        from seedrl.skills.prompts import skill_target

        traj_id = getattr(traj, "traj_id", -1)
        try:
            if not traj.steps:
                return AnalysisResult(traj_id=traj_id, skill=None, error="oracle: the trajectory has no steps")
            env = self.env_of(traj)
            ps = traj.privileged_state if isinstance(traj.privileged_state, dict) else {}
            summary, skill = None, None
            steps: dict[int, str] = {}
            oracle = oracle_module(env) if env and ps else None
            if oracle is not None:
                try:
                    write = oracle.hindsight if self.view == "privileged" else oracle.observed_hindsight
                    summary, skill = write(traj, ps)
                    # optional: the module's step_skills(traj, ps) -> {0-based step: skill}
                    if self.step_skills and skill and hasattr(oracle, "step_skills"):
                        steps = oracle.step_skills(traj, ps)
                except PrivilegedStateError as exc:
                    return AnalysisResult(traj_id=traj_id, skill=None, error=f"oracle: {exc}"[:300])
            if skill is None:  # the oracle's deliberate fallback, or no oracle / no privileged state
                summary, skill = generic_skill(traj, env)
                steps = {}
            steps = {i: t for i, t in sorted(steps.items()) if 0 <= i < len(traj.steps)}
            steps = dict(list(steps.items())[:self.max_step_skills])
            raw = skill_target(summary, skill, steps if self.step_skills else None)
            parsed = parse_skill(raw, min_words=self.min_words,
                                 max_step_skills=self.max_step_skills if self.step_skills else 0)
            return AnalysisResult(traj_id=traj_id, skill=parsed.skill, summary=parsed.summary, raw=raw,
                                  error=parsed.error, step_skills=parsed.step_skills)
        except Exception as exc:
            return AnalysisResult(traj_id=traj_id, skill=None, error=f"exception: {type(exc).__name__}: {exc}"[:300])

    def env_of(self, traj: Trajectory) -> str | None:
        """``env_name`` if given, else the privileged state's ``"env"``, else the first registered env
        that claims the privileged state, else the first that claims the task id."""
        if self.env_name:
            return self.env_name
        ps = traj.privileged_state if isinstance(traj.privileged_state, dict) else {}
        if isinstance(ps.get("env"), str):
            return ps["env"]
        classes = [(name, env_class(name)) for name in env_names()]
        if ps:
            for name, cls in classes:
                if cls.claims_privileged_state(ps):
                    return name
        tid = (traj.task_id or "").strip()
        return next((name for name, cls in classes if cls.claims_task_id(tid)), None)


def oracle_module(env: str) -> ModuleType | None:
    """The oracle module of environment ``env`` (``<its package>.oracle``); None for an env that has
    none or is not registered."""
    try:
        name = env_package(env) + ".oracle"
    except SeedRLError:  # not a registered env
        return None
    if importlib.util.find_spec(name) is None:
        return None
    return importlib.import_module(name)
