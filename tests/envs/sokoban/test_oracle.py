"""The Sokoban oracle on real episodes: workflows, deadlocks (generated and hand-made rooms), step skills."""

from __future__ import annotations

import json

from seedrl.envs.registry import make_env
from seedrl.skills.analyzers.oracle import OracleAnalyzer
from seedrl.skills.parsing import parse_skill
from tests.envs.helpers import check_skill, play_scripted


def test_oracle_sokoban_win_gives_workflow() -> None:
    env = make_env("sokoban")
    tid = "6x6-b1-s00000"  # box (2,2), target (3,3): below and to the right
    env.reset(tid)
    actions = []
    while (a := env.expert_action()) is not None:
        env.step(a)
        actions.append(a)
    traj = play_scripted(env, actions, lambda: env.reset(tid), tid)
    assert traj.won
    [r] = OracleAnalyzer().analyze([traj])  # env inferred
    skill = check_skill(r)
    assert skill.startswith("When the target is below and to the right of the box")
    assert "push it" in skill
    # deterministic
    assert OracleAnalyzer(env_name="sokoban").analyze([traj])[0].raw == r.raw


def test_oracle_sokoban_deadlock_against_wall_generated_room() -> None:
    env = make_env("sokoban")
    tid = "6x6-b1-s00000"
    # left, up, then push the box up into the top row, where no target lies
    traj = play_scripted(env, ["left", "up", "up", "down", "down", "right"], lambda: env.reset(tid), tid)
    ps = traj.privileged_state
    assert ps["deadlock"] and ps["first_deadlock_step"] == 2 and not traj.won
    [r] = OracleAnalyzer(env_name="sokoban").analyze([traj])
    skill = check_skill(r)
    assert "never push it up against the wall above it" in skill
    assert skill.startswith("When the target is below and to the right of the box")
    assert "step 3" in r.summary


def test_oracle_sokoban_corner_deadlock_hand_made_room() -> None:
    from seedrl.envs.sokoban.env import parse_board

    env = make_env("sokoban")
    board = parse_board("""
        ######
        #_X_O#
        #____#
        #____#
        #__P_#
        ######""")
    # an unparsable turn first (nothing sent), then walk up and push the box left into the corner
    traj = play_scripted(env, [None, "up", "up", "up", "left", "down"], lambda: env.reset_to_state(board), "custom")
    assert traj.privileged_state["simple_deadlock"] and traj.privileged_state["first_deadlock_step"] == 3
    [r] = OracleAnalyzer().analyze([traj])  # inferred from the privileged state; room from the observation
    skill = check_skill(r)
    assert "When the target is to the right of the box, never push it left into a corner" in skill
    assert "push it right" in skill
    assert "step 5" in r.summary  # the unparsable turn counts as a trajectory step


def test_oracle_sokoban_step_skill_at_the_deadlocking_push() -> None:
    from seedrl.envs.sokoban.env import parse_board

    env = make_env("sokoban")
    board = parse_board("""
        ######
        #_X_O#
        #____#
        #____#
        #__P_#
        ######""")
    traj = play_scripted(env, [None, "up", "up", "up", "left", "down"], lambda: env.reset_to_state(board), "custom")
    assert traj.privileged_state["first_deadlock_step"] == 3  # env history index (the None sent nothing)
    [plain] = OracleAnalyzer().analyze([traj])
    assert plain.step_skills == {} and "step_skills" not in plain.raw  # off by default
    [r] = OracleAnalyzer(step_skills=True).analyze([traj])
    assert r.skill == plain.skill and r.summary == plain.summary
    # trajectory step 4 (0-based) = "Step 5" of the analysis prompt, the one the summary names
    assert list(r.step_skills) == [4] and "step 5" in r.summary
    step = r.step_skills[4]
    assert step.startswith("Do not push the box left now") and "push it right" in step
    assert len(step.split()) <= 40
    assert json.loads(r.raw)["step_skills"] == [{"step": 4, "skill": step}]  # numbered as the seed prompt, from 0
    assert parse_skill(r.raw).step_skills == r.step_skills
    # a win or a failure without a deadlock names no critical step
    tid = "6x6-b1-s00000"
    wander = play_scripted(env, ["left", "left", "up", "right"], lambda: env.reset(tid), tid)
    assert OracleAnalyzer(step_skills=True).analyze([wander])[0].step_skills == {}


def test_oracle_sokoban_skills_are_short_and_policy_facing() -> None:
    """Every sokoban skill is at most 40 words (the self-analyzer has to write all of them)."""
    import random

    env = make_env("sokoban", dim=[5, 5])
    rng = random.Random(0)
    trajs = []
    for k in range(40):
        tid = f"5x5-b1-s{k:05d}"
        env.reset(tid)
        actions: list[str | None] = []
        if k % 3 == 0:
            while (a := env.expert_action()) is not None and len(actions) < 10:
                env.step(a)
                actions.append(a)
        else:
            actions = [rng.choice(["up", "down", "left", "right", None, "jump"]) for _ in range(10)]
        trajs.append(play_scripted(env, actions, lambda tid=tid: env.reset(tid), tid))
    results = OracleAnalyzer(env_name="sokoban", step_skills=True).analyze(trajs)
    kinds = set()
    for r in results:
        skill = check_skill(r)
        assert len(skill.split()) <= 40, skill
        assert all(len(s.split()) <= 40 for s in r.step_skills.values())
        kinds.add(skill.split(",")[0].split(" ")[0])
    assert {"When", "Never"} <= kinds  # conditional rules, not narration
    assert any(r.step_skills for r in results)


def test_oracle_sokoban_failures_without_deadlock() -> None:
    env = make_env("sokoban")
    tid = "6x6-b1-s00000"
    oracle = OracleAnalyzer(env_name="sokoban")
    oscillate = play_scripted(env, ["left", "right"] * 5, lambda: env.reset(tid), tid)
    invalid = play_scripted(env, ["jump", "fly", "left", "dance", None, "noop"], lambda: env.reset(tid), tid)
    wander = play_scripted(env, ["left", "left", "up", "right"], lambda: env.reset(tid), tid)
    r_osc, r_inv, r_wan = oracle.analyze([oscillate, invalid, wander])
    assert "oscillat" in check_skill(r_osc) and "left then right" in r_osc.skill
    assert "up, down, left or right" in check_skill(r_inv) and "invalid" in r_inv.skill
    assert "do not wander" in check_skill(r_wan)
    for r in (r_osc, r_wan):
        assert "When the target is below and to the right of the box" in r.skill
