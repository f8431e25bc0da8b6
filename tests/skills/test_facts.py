"""Fact agreement: the share of skills whose facts agree with the oracle, successes and failures apart."""

from __future__ import annotations

import types

from seedrl.rollout.types import Trajectory
from seedrl.skills import facts
from seedrl.skills.analyzers.base import AnalysisResult


def _checker(skill: str, ps: dict) -> bool | None:
    """A hand oracle: the skill's fact is "in <place>"; no "in" is no checkable fact."""
    if " in " not in skill:
        return None
    if skill == "crash in":
        raise KeyError("where")
    return skill.split(" in ")[-1] == ps["where"]


def test_check_facts_sets_each_verdict_from_its_own_trajectory(monkeypatch):
    monkeypatch.setattr(facts, "oracle_module", lambda env: types.SimpleNamespace(fact_agreement=_checker))
    trajs = [Trajectory(i, i, f"t{i}", won=i % 2 == 0, privileged_state={"where": w})
             for i, w in enumerate(["fridge", "drawer", "cabinet", "shelf", "sink", "desk"])]
    results = [AnalysisResult(0, "it was in fridge"), AnalysisResult(1, "it was in fridge"),  # right, wrong
               AnalysisResult(2, "look around"), AnalysisResult(3, None),  # no fact, no skill
               AnalysisResult(4, "crash in"), AnalysisResult(5, "it was in desk")]  # checker error, right
    facts.check_facts("any", trajs, results)
    assert [r.fact_agrees for r in results] == [True, False, None, None, None, True]
    won = {t.traj_id: t.won for t in trajs}
    m = facts.fact_metrics(results, won)
    assert m == {"skills/fact_agreement": 2 / 3, "skills/fact_checked": 3, "skills/fact_agreement_success": 1.0,
                 "skills/fact_agreement_failure": 0.5}


def test_an_env_without_the_check_logs_nothing(monkeypatch):
    monkeypatch.setattr(facts, "oracle_module", lambda env: types.SimpleNamespace())
    results = [AnalysisResult(0, "it was in fridge")]
    facts.check_facts("any", [Trajectory(0, 0, "t0", privileged_state={"where": "fridge"})], results)
    assert results[0].fact_agrees is None and facts.fact_metrics(results, {0: True}) == {}
