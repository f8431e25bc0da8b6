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
