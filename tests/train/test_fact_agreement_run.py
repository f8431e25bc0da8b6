"""skills/fact_agreement in a real run: the household oracle's own skills always agree with it; skills that
name the wrong place never do; each verdict reaches metrics.jsonl and skills.jsonl."""

from __future__ import annotations

import json

import pytest

from seedrl.envs.household.oracle import skill_text
from seedrl.skills.analyzers.base import AnalysisResult
from seedrl.train.trainer import Trainer
from tests.helpers import tiny_cfg

HOUSEHOLD = {"env.name": "household", "env.max_steps": 2, "algo.name": "seed", "eval.num_tasks": 0,
             "iterations": 1, "skills.analyzer": "oracle", "skills.min_words": 1}


class WrongPlace:
    """Skills that put the object in the first receptacle of the room that is not its own."""

    name = "wrong"

    def analyze(self, trajectories):
        out = []
        for t in trajectories:
            ps = t.privileged_state
            wrong = next(r for r in ps["receptacles"] if r != ps["object_receptacle"])
            out.append(AnalysisResult(t.traj_id, skill_text(ps["object_class"], wrong)))
        return out


@pytest.mark.parametrize("wrong", [False, True])
def test_fact_agreement_is_logged_per_iteration_and_per_skill(tmp_path, wrong):
    tr = Trainer(tiny_cfg(tmp_path / "run", **HOUSEHOLD))
    if wrong:
        tr.analyzer = WrongPlace()
    tr.train()
    row = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[-1])
    skills = [json.loads(x) for x in (tmp_path / "run" / "skills.jsonl").read_text().splitlines()]
    assert row["skills/fact_checked"] == len(skills) == 6
    assert row["skills/fact_agreement"] == (0.0 if wrong else 1.0)
    assert all(s["fact_agrees"] is (not wrong) for s in skills)
    lost = [s for s in skills if not s["success"]]
    assert row.get("skills/fact_agreement_failure") == ((0.0 if wrong else 1.0) if lost else None)
