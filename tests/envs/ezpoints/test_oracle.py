"""The EZPoints solver on hand cases, and the oracle's skills on played episodes."""

from __future__ import annotations

import pytest

from seedrl.envs.ezpoints import env as ez
from seedrl.envs.ezpoints import oracle
from seedrl.envs.registry import make_env
from seedrl.skills.analyzers.oracle import OracleAnalyzer
from tests.envs.helpers import check_skill, play_scripted


@pytest.mark.parametrize("numbers, formula, used, plan", [
    ([5, 7], [], [], ["5", "+", "7", "="]),
    ([7, 5], [], [], ["7", "+", "5", "="]),
    ([6, 2], [], [], ["6", "*", "2", "="]),
    ([3, 4], [], [], ["3", "*", "4", "="]),
    ([10, 2], [], [], ["10", "+", "2", "="]),
    ([6, 6], [], [], ["6", "+", "6", "="]),
    ([1, 2], [], [], ["1", "2", "="]),          # "12": the shortest formula joins the digits
    ([5, 7], ["7"], [7], ["+", "5", "="]),      # finishes from the middle
    ([5, 7], ["+"], [], ["5", "+", "7", "="]),  # "+5+7"
    ([5, 7], ["5", " "], [5], ["+", "7", "="]),  # "5 +7": a refused number's space is harmless here
])
def test_the_solver_finds_the_shortest_formula(numbers, formula, used, plan) -> None:
    assert ez.solve(numbers, formula, used) == plan
    full = [*formula, *plan[:-1]]
    assert ez.evaluate(full) == 12 and len(full) <= ez.MAX_FORMULA


@pytest.mark.parametrize("numbers, formula, used", [
    ([5, 5], [], []),            # 10, 25, 55, 3125: no 12
    ([3, 3], [], []),
    ([2, 2], [], []),
    ([10, 10], [], []),
    ([5, 7], ["5", "*"], [5]),   # 5*7, 5*+7: 35 whatever follows
    ([5, 7], ["5", "7"], [5, 7]),  # 57
    ([5, 7], ["+", "+", "+", "+", "5"], [5]),  # no room left for the second card
])
def test_the_solver_says_none_where_no_formula_exists(numbers, formula, used) -> None:
    assert ez.solve(numbers, formula, used) is None


def _episode(cards: list[str], tokens: list[str | None]):
    env = make_env("ezpoints")
    return play_scripted(env, tokens, lambda: env.reset_to_cards(cards, task_id="ezpoints-s0000001"),
                         "ezpoints-s0000001")


def test_a_win_gives_the_operator_workflow() -> None:
    traj = _episode(["H5", "C7"], ["5", "+", "7", "="])
    [r] = OracleAnalyzer().analyze([traj])  # the env inferred from the privileged state's "env" key
    skill = check_skill(r)
    assert "add up to 12" in skill and "'+'" in skill
    traj = _episode(["H6", "C2"], ["2", "*", "6", "="])
    summary, skill = oracle.hindsight(traj, traj.privileged_state)
    assert "multiply to 12" in skill and "2*6" in summary


def test_a_wrong_operator_names_what_the_cards_needed() -> None:
    traj = _episode(["H5", "C7"], ["5", "*", "7", "="])
    summary, skill = oracle.hindsight(traj, traj.privileged_state)
    assert "gave 35" in summary and "needed 5+7" in summary
    assert "add up to 12" in skill
    assert oracle.step_skills(traj, traj.privileged_state) == {
        1: "Do not write '*' after '5': no formula equal to 12 is left then. Write '+' instead."}


def test_a_refused_number_and_an_early_equals() -> None:
    traj = _episode(["H5", "C7"], ["5", "9", "*", "7", "="])  # "5 *7": 35
    summary, skill = oracle.hindsight(traj, traj.privileged_state)
    assert traj.won is False and "wrote 9" in summary and skill.startswith("Only write the numbers shown")
    traj = _episode(["H5", "C7"], ["5", "="])
    summary, skill = oracle.hindsight(traj, traj.privileged_state)
    assert "before writing both" in summary and skill.startswith("Press '=' only after")


def test_the_time_limit_and_unfinished_formulas() -> None:
    traj = _episode(["H5", "C7"], ["+", "+", "+", "+", "+", "+", "5"])
    summary, skill = oracle.hindsight(traj, traj.privileged_state)
    assert "grew to" in summary and "four steps" in skill
    traj = _episode(["H5", "C7"], ["5", "+"])
    summary, skill = oracle.hindsight(traj, traj.privileged_state)
    assert "never finished" in summary and "add up to 12" in skill


def test_mostly_invalid_turns_give_the_token_rule_and_other_envs_the_generic_skill() -> None:
    traj = _episode(["H5", "C7"], ["five", None, "plus", "5"])
    _, skill = oracle.hindsight(traj, traj.privileged_state)
    assert "'+', '*' or '='" in skill
    assert oracle.hindsight(traj, {}) == (None, None)
    assert oracle.hindsight(traj, {"env": "sokoban"}) == (None, None)
    assert oracle.step_skills(traj, {"env": "sokoban"}) == {}
