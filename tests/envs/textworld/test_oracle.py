"""The TextWorld oracle on one generated game (~1-3 s): the walkthrough plan, the first deviation, step skills."""

from __future__ import annotations

import json
from typing import Any

import pytest

from seedrl.envs.registry import make_env
from seedrl.errors import SeedRLError
from seedrl.skills.analyzers.oracle import OracleAnalyzer
from tests.envs.helpers import check_skill, play_scripted


# -- oracle: textworld (one generated game, ~1-3 s) ---------------------------------------------
@pytest.mark.slow
def test_oracle_textworld(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("textworld")
    monkeypatch.setenv("SEEDRL_CACHE", str(tmp_path))
    env = make_env("textworld")
    tid = "coin-l2-s0001"
    try:
        env.reset(tid)
    except SeedRLError as e:  # no Inform7 compiler here
        pytest.skip(str(e))
    try:
        walkthrough = env.privileged_state()["walkthrough"]
        assert walkthrough
        won = play_scripted(env, list(walkthrough), lambda: env.reset(tid), tid)
        assert won.won
        # a chain of rooms: go forward, look (a no-op, ignored), then walk back instead of taking the coin
        back = {"go south": "go north", "go north": "go south", "go east": "go west", "go west": "go east"}
        lost = play_scripted(env, ["xyzzy", walkthrough[0], "look", back[walkthrough[0]], "xyzzy"],
                     lambda: env.reset(tid), tid)
    finally:
        env.close()
    assert not lost.won and lost.num_invalid == 2
    r_won, r_lost = OracleAnalyzer().analyze([won, lost])
    skill = check_skill(r_won)
    assert "in order" in skill and f"'{walkthrough[0]}'" in skill
    skill = check_skill(r_lost)
    assert (f"right after '{walkthrough[0]}' the next command must be '{walkthrough[1]}', "
            f"not '{back[walkthrough[0]]}'") in skill
    assert "admissible" in skill
    # OPID step skills: the step that left the walkthrough (0-based step 3: xyzzy, go, look, back)
    assert r_lost.step_skills == {} and "step_skills" not in r_lost.raw
    s_won, s_lost = OracleAnalyzer(step_skills=True).analyze([won, lost])
    assert s_won.step_skills == {} and json.loads(s_won.raw)["step_skills"] == []
    assert s_lost.skill == r_lost.skill
    assert s_lost.step_skills == {3: f"Send '{walkthrough[1]}' now, not '{back[walkthrough[0]]}': it is the next "
                                     f"command of the plan."}
    assert json.loads(s_lost.raw)["step_skills"][0]["step"] == 3  # numbered as the seed prompt, from 0
