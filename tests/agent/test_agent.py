from __future__ import annotations

import pytest

from seedrl.agent.parsing import parse_action
from seedrl.agent.prompts import INSTRUCTION, TASK_PREFIX, HistoryItem, build_step_prompt, format_response


@pytest.mark.parametrize("text,expected", [
    ("<think>go</think><action>up</action>", "up"),
    ("<action> go to  fridge 1 \n</action>", "go to fridge 1"),
    ("<think>a</think><action>left</action> then <action>right</action>", "right"),  # last block wins
    ("<ACTION>down</ACTION>", "down"),
    ("<think>no action here</think>", None),
    ("<action>up", None),  # cut off by the token limit
    ("<action></action>", None),
    ("<action>   </action>", None),
    ("", None),
    ("up", None),  # a bare word is not an action: the format is part of the task
    ("<action>" + "x" * 500 + "</action>", None),
])
def test_parse_action_is_strict_and_total(text, expected):
    assert parse_action(text) == expected


def test_parse_action_never_raises_on_garbage():
    for junk in [None, 3, b"<action>up</action>", "<action><action></action>", "\x00\uffff<action>\u2603</action>"]:
        parse_action(junk)  # type: ignore[arg-type]


def test_step_prompt_layout_and_history_window():
    hist = [HistoryItem(f"obs{i}", f"act{i}") for i in range(5)] + [HistoryItem("obs5", None)]
    text = build_step_prompt("Sokoban", "push the box", "current-obs", hist, step_index=6, history_length=2,
                             admissible_actions=["up", "down"])
    lines = text.splitlines()
    assert lines[1] == TASK_PREFIX + "push the box"  # its own line: skills are inserted right after it
    assert "obs3" not in text and "obs4" in text and "obs5" in text  # only the last 2 pairs
    assert "Action 5: act4" in text and "Action 6: (invalid action)" in text
    assert "at step 7" in text and "current-obs" in text
    assert "[up, down]" in text
    assert text.endswith(INSTRUCTION)


def test_first_step_prompt_has_no_history_block():
    text = build_step_prompt("X", "t", "o", [], 0, 2, None)
    assert "Prior to this step" not in text and "admissible" not in text.split(INSTRUCTION)[0]


def test_expert_response_parses_back():
    assert parse_action(format_response("go to fridge 1")) == "go to fridge 1"


# ------------------------------------------------------------------ invalid-action rules (verl-agent)
from seedrl.envs.registry import env_class  # noqa: E402
from seedrl.rollout.types import StepSample, penalized  # noqa: E402

THINK = "<think>the fridge holds the apple</think>"


@pytest.mark.parametrize("text,ok", [
    (THINK + "<action>go to fridge 1</action>", True),
    (THINK + "<action>fly to the moon</action>", True),  # well-formed but inadmissible: not a format error
    ("<action>go to fridge 1</action>", False),  # no <think> block
    ("<think>x<action>go to fridge 1</action>", False),  # <think> never closed
    (THINK + "go to fridge 1", False),  # no action block
    (THINK + "<action>go to fridge 1", False),  # cut off by the token limit
    ("<think>去冰箱</think><action>go to fridge 1</action>", False),  # CJK characters
    (THINK + "<action></action>", False),  # nothing to send
])
def test_format_rule_of_think_action_envs(text, ok):
    for name in ("alfworld-gen", "textworld", "webshop", "scienceworld"):
        assert env_class(name).format_valid(env_class(name).__new__(env_class(name)), text) is ok, name


@pytest.mark.parametrize("text,ok", [
    (THINK + "<action>up</action>", True),
    (THINK + "<action>Move UP now</action>", True),  # sokoban_projection: a move word inside the block
    (THINK + "<action>jump</action>", False),
    ("<action>up</action>", False),
])
def test_format_rule_of_sokoban(text, ok):
    cls = env_class("sokoban")
    assert cls.format_valid(cls.__new__(cls), text) is ok


@pytest.mark.parametrize("text,ok", [
    ("<think>x</think><search>capital of France</search>", True),
    ("<answer>Paris</answer>", True),  # search_projection does not ask for <think>
    ("<search>a</search><answer>b</answer>", False),  # both kinds
    ("<search>a</search><search>b</search>", False),  # one tag twice
    ("Paris", False),
])
def test_format_rule_of_search(text, ok):
    cls = env_class("search")
    assert cls.format_valid(cls.__new__(cls), text) is ok


@pytest.mark.parametrize("format_valid,action_valid,hit_format,hit_admissible", [
    (True, True, False, False),  # well-formed, accepted
    (True, False, False, True),  # well-formed, inadmissible: verl-agent does not penalise it
    (False, True, True, False),  # accepted command in a malformed turn (no <think>)
    (False, False, True, True),  # malformed and nothing sent
])
def test_penalty_follows_the_rule(format_valid, action_valid, hit_format, hit_admissible):
    s = StepSample([1], [2], [0.0], traj_id=0, group_id=0, step=0, reward=0.0, action_valid=action_valid,
                   format_valid=format_valid)
    assert penalized(s, "format") is hit_format and penalized(s, "admissible") is hit_admissible
    with pytest.raises(ValueError):
        penalized(s, "strict")


# -- seedrl_observation_last: the same lines, the episode's part last ---------------------------------------
def _obs_last_pair(history_length: int = 2):
    from seedrl.agent.prompts import HistoryItem, build_step_prompt

    hist = [HistoryItem("board A", "up"), HistoryItem("board B", None)]
    args = ("sokoban", "push every box onto a target.", "board C", hist, 2, history_length, ["up", "down"])
    return build_step_prompt(*args), build_step_prompt(*args, style="seedrl_observation_last")


def test_observation_last_has_seedrls_lines_with_the_episode_last() -> None:
    plain, last = _obs_last_pair()
    assert sorted(x for x in plain.splitlines() if x) == sorted(x for x in last.splitlines() if x)
    assert last.endswith("\nboard C") and plain.endswith("</action> tags.")
    turn = last.index("Now it's your turn to")
    # every line that changes within an episode comes after the closing instruction
    for varying in ("Prior to this step", "[Observation 1:", "Action 2: (invalid action)", "your current observation is:"):
        assert last.index(varying) > turn, varying
    assert last.index("Your admissible actions") < turn


def test_observation_last_prompts_of_different_states_share_every_instruction_line() -> None:
    from seedrl.agent.prompts import build_step_prompt

    a, b = (build_step_prompt("sokoban", "push.", obs, [], 0, 0, ["up"], style="seedrl_observation_last")
            for obs in ("# P X O #", "# X P O #"))
    shared = len(a) - len("# P X O #")
    assert a[:shared] == b[:shared] and a[:shared].endswith("Your current observation is:\n")


def test_sokoban_prompt_style_option_reaches_the_prompt_and_leaves_the_panel() -> None:
    from seedrl.envs.panels import build_panel
    from seedrl.envs.registry import make_env
    from seedrl.errors import SeedRLError

    kw = {"dim": [5, 5], "unseen_dim": [6, 6]}
    assert make_env("sokoban", **kw).prompt_style == "seedrl"
    assert make_env("sokoban", **kw, prompt_style="seedrl_observation_last").prompt_style == "seedrl_observation_last"
    plain = build_panel("sokoban", "valid_seen", **kw)
    assert build_panel("sokoban", "valid_seen", **kw, prompt_style="seedrl_observation_last").hash == plain.hash
    with pytest.raises(SeedRLError, match="seedrl_observation_last"):
        make_env("sokoban", **kw, prompt_style="observation_first")
