"""Self-grading, measured: do the facts a skill states agree with the env's oracle?

A model that grades its own homework can write tidy, confident, wrong lessons. Where an env's oracle
defines ``fact_agreement(skill, privileged_state) -> bool | None`` (see :mod:`seedrl.envs.oracle`), every
analysed trajectory's skill is checked against the privileged state of its episode: ``True`` (its
checkable facts hold), ``False`` (one is wrong), ``None`` (no skill, no checkable fact, or an env
without the check). The trainer logs the shares per iteration (:func:`fact_metrics`), successes and
failures apart, and writes each verdict into ``skills.jsonl`` (``fact_agrees``), which ``seedrl lessons``
and the viewer show.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from seedrl.rollout.types import Trajectory
from seedrl.skills.analyzers.base import AnalysisResult
from seedrl.skills.analyzers.oracle import oracle_module

log = logging.getLogger(__name__)


def check_facts(env_name: str, trajs: list[Trajectory], results: list[AnalysisResult]) -> None:
    """Set ``fact_agrees`` on each result whose trajectory's env can check it (in place). A checker
    that raises on one skill leaves that verdict ``None`` and logs it: grading never costs a batch."""
    check = getattr(oracle_module(env_name), "fact_agreement", None)
    if not callable(check):
        return
    by_id = {t.traj_id: t for t in trajs}
    for r in results:
        t = by_id.get(r.traj_id)
        if not r.skill or t is None or not t.privileged_state:
            continue
        try:
            verdict = check(r.skill, t.privileged_state)
        except Exception as exc:  # noqa: BLE001 - one unreadable state is one missing verdict
            log.warning("fact check of trajectory %s failed: %s", r.traj_id, exc)
            continue
        r.fact_agrees = None if verdict is None else bool(verdict)


def agreement(verdicts: Iterable[bool | None]) -> tuple[float | None, int]:
    """(share of ``True`` among the verdicts that are not ``None``, how many those are)."""
    checked = [v for v in verdicts if v is not None]
    return (sum(checked) / len(checked) if checked else None), len(checked)


def fact_metrics(results: list[AnalysisResult], won: Mapping[int, bool]) -> dict[str, Any]:
    """``skills/fact_agreement`` over all checked skills, ``_success`` / ``_failure`` over those of won /
    lost episodes (``won``: traj_id -> won), and ``skills/fact_checked``: how many were checkable. Empty
    when nothing was checked (an env without the check), so a run without it logs no zero."""
    out: dict[str, Any] = {}
    share, n = agreement(r.fact_agrees for r in results)
    if not n:
        return out
    out["skills/fact_agreement"], out["skills/fact_checked"] = share, n
    for tag, want in (("success", True), ("failure", False)):
        share, n = agreement(r.fact_agrees for r in results if won.get(r.traj_id) is want)
        if n:
            out[f"skills/fact_agreement_{tag}"] = share
    return out
