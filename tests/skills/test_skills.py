from __future__ import annotations

import copy
import json

import pytest

from seedrl.agent.prompts import TASK_PREFIX, TURN_LINE, HistoryItem, build_step_prompt, step_messages
from seedrl.rollout.types import StepSample, Trajectory
from seedrl.skills.injection import (
    PRIVILEGED_HEADER,
    SKILL_HEADER,
    SKILL_INTRO,
    STEP_SKILL_HEADER,
    STEP_SKILL_INTRO,
    has_skill,
    inject_into_messages,
    inject_skill,
    inject_step_skill,
    prefix_skill,
    skill_block,
    step_skill_block,
)
from seedrl.skills.parsing import ParsedSkill, parse_skill
from seedrl.skills.prompts import analysis_messages, render_trajectory, repair_messages, skill_target

SKILL = "Find the mug first, clean it in the sink, then put it in the coffee machine."


def obj(skill=SKILL, summary="The agent cleaned the mug and won."):
    return json.dumps({"episode_summary": summary, "episode_skill": skill})


# ---------------------------------------------------------------------------------------------- parsing


@pytest.mark.parametrize("text", [
    obj(),
    "```json\n" + obj() + "\n```",
    "```\n" + obj() + "\n```",
    "Here is my analysis:\n" + obj() + "\nHope this helps!",
    "Sure. ```json\n" + obj() + "\n``` Done.",
    '{"episode_summary": "The agent cleaned the mug and won.", "episode_skill": "' + SKILL + '",}',
    '{\n  "episode_summary": "The agent cleaned the mug and won.",\n  "episode_skill": "' + SKILL + '",\n}\n',
    # JSON-only literals (true/null) + trailing commas: only the comma repair can parse this, not literal_eval
    '{"won": true, "notes": [null, 1,], "episode_summary": "The agent cleaned the mug and won.", '
    '"episode_skill": "' + SKILL + '",}',
    "{'episode_summary': 'The agent cleaned the mug and won.', 'episode_skill': '" + SKILL + "'}",
    '{"EPISODE_SKILL": "' + SKILL + '", "Episode_Summary": "The agent cleaned the mug and won."}',
    '{"episode_summary": "The agent cleaned the mug and won.", "episode_skill": "Find the mug first, '
    'clean it in the sink,\n   then put it in the   coffee machine."}',
])
def test_parse_accepts_the_usual_shapes(text):
    p = parse_skill(text)
    assert p == ParsedSkill(SKILL, "The agent cleaned the mug and won.", None)
    assert p.ok


def test_parse_first_valid_object_wins():
    a = obj("Always open the drawer before looking for the key inside.")
    b = obj("Never go to the garden before you have found the key.")
    assert parse_skill(a + "\n" + b).skill == "Always open the drawer before looking for the key inside."
    # an object without a usable skill is skipped in favour of a later valid one
    short = obj("Too short.")
    assert parse_skill(short + "\n" + b).skill == "Never go to the garden before you have found the key."
    # a skill nested in a wrapper object is still found
    nested = json.dumps({"result": {"episode_skill": SKILL}})
    assert parse_skill(nested).skill == SKILL


def test_parse_braces_inside_strings_and_unicode():
    skill = 'Use {"a": 1} style { braces } and "quotes"; never } stop early.'
    p = parse_skill("prefix { not json " + json.dumps({"episode_skill": skill, "episode_summary": "s"}))
    assert p.skill == skill and p.error is None
    uni = "Öffne zuerst den Kühlschrank 冰箱 und nimm dann den Apfel 🍎 heraus."
    assert parse_skill(skill_target("résumé ✓", uni)) == ParsedSkill(uni, "résumé ✓", None)
    assert parse_skill(json.dumps({"episode_skill": uni}, ensure_ascii=True)).skill == uni


@pytest.mark.parametrize("text,needle", [
    ('{"episode_summary": "x", "episode_skill": "Go to the fridge and', "truncated"),
    ('```json\n{"episode_summary": "x", "episode_skill": "Go to the fri', "truncated"),
    ('{"episode_summary": "x", "episode_skill": ""}', "empty skill"),
    ('{"episode_summary": "x", "episode_skill": "   \\n  "}', "empty skill"),
    ('{"episode_summary": "x", "episode_skill": "Open the fridge."}', "skill too short"),
    ('{"episode_summary": "x", "episode_skill": ["open", "the", "fridge", "now", "please"]}', "not a string"),
    ('{"episode_summary": "x", "episode_skill": null}', "no 'episode_skill'"),
    ('{"episode_summary": "x", "skill": "' + SKILL + '"}', "no 'episode_skill'"),  # only episode_skill counts
    ("The agent should open the fridge before taking the apple.", "no JSON object"),
    ("", "empty output"),
    ("```json\n```", "empty output"),
    ("{ this is not json : at all }", "invalid JSON"),
    ("[1, 2, 3]", "no JSON object"),
])
def test_parse_failures_give_no_skill_and_an_error(text, needle):
    p = parse_skill(text)
    assert p.skill is None and not p.ok
    assert p.error is not None and p.error.startswith("parse: ") and needle in p.error


def test_parse_min_words_is_a_parameter():
    text = obj("Open the fridge first.")
    assert parse_skill(text).skill is None
    assert parse_skill(text, min_words=4).skill == "Open the fridge first."
    assert parse_skill(obj(" ".join(["w"] * 5))).skill == "w w w w w"  # exactly min_words passes


@pytest.mark.parametrize("junk", [None, 3, b'{"episode_skill": "a b c d e"}', ["x"], {"episode_skill": SKILL},
                                  "{" * 5000, "[" * 5000 + "{", "{'a': " * 3000, "\x00\uffff{\u2603}", "}{" * 2000])
def test_parse_never_raises_on_garbage(junk):
    p = parse_skill(junk)  # type: ignore[arg-type]
    assert p.skill is None and p.error


def test_parse_does_not_evaluate_code():
    for text in ["{'episode_skill': __import__('os').getcwd()}",
                 "{'episode_skill': 'a b c d e ' + 'f'}",
                 "{'episode_skill': (lambda: 'a b c d e f')()}"]:
        assert parse_skill(text).skill is None


def test_skill_target_round_trips():
    t = skill_target("The agent won.", SKILL)
    assert json.loads(t) == {"episode_summary": "The agent won.", "episode_skill": SKILL}
    assert list(json.loads(t)) == ["episode_summary", "episode_skill"]
    assert parse_skill(t) == ParsedSkill(SKILL, "The agent won.", None)
    assert "é" in skill_target("é", SKILL)  # ensure_ascii=False


# -------------------------------------------------------------------------------------------- injection

PLAIN = (
    "You are an expert agent playing ALFWorld.\n"
    "Your task is to: put a clean mug in coffeemachine.\n"
    "Your current observation is:\n"
    "You are in the middle of a room. Your task is to: (not a task line)\n"
    "\n" + TURN_LINE + "\nYou should first reason step-by-step."
)


def test_inject_after_task_line_in_seeds_exact_format():
    out = inject_skill(PLAIN, SKILL)
    # seed/prompting.py: before.rstrip() + blank line + block + blank line + after.lstrip()
    assert out == (
        "You are an expert agent playing ALFWorld.\n"
        "Your task is to: put a clean mug in coffeemachine.\n\n"
        f"{SKILL_HEADER}\n{SKILL_INTRO}\n[{SKILL}]\n\n"
        "Your current observation is:\n"
        "You are in the middle of a room. Your task is to: (not a task line)\n"
        "\n" + TURN_LINE + "\nYou should first reason step-by-step.")
    assert SKILL_INTRO.endswith(":") and out.count(SKILL_HEADER) == 1
    # nothing but the join changes: removing the block gives the input with one blank line at the joint
    assert out.replace(skill_block(SKILL) + "\n\n", "", 1) == PLAIN.replace("coffeemachine.\n", "coffeemachine.\n\n", 1)
    assert out.index(SKILL_HEADER) < out.index("Your current observation is:") < out.index(TURN_LINE)


def test_inject_task_line_is_last_line():
    text = "intro\nYour task is to: find the key"
    assert inject_skill(text, SKILL) == text + "\n\n" + skill_block(SKILL)


def test_inject_uses_only_a_line_that_starts_with_the_prefix():
    text = "intro mentions Your task is to: nothing\nobs\n\n" + TURN_LINE + "\nrest"
    out = inject_skill(text, SKILL)  # no task line: falls back to before the turn line
    assert out == "intro mentions Your task is to: nothing\nobs\n\n" + skill_block(SKILL) + "\n\n" + TURN_LINE + "\nrest"


@pytest.mark.parametrize("text,expected", [("just an observation", "just an observation\n\n"),
                                           ("ends with newline\n", "ends with newline\n\n"), ("", "")])
def test_inject_last_fallback_appends(text, expected):
    assert inject_skill(text, SKILL) == expected + skill_block(SKILL)


def test_inject_keeps_the_skill_as_written_and_rejects_bad_input():
    out = inject_skill(PLAIN, "  Open   the fridge\nbefore taking the apple. ")
    assert "\n[Open   the fridge\nbefore taking the apple.]\n" in out  # stripped only, as SEED does
    with pytest.raises(ValueError):
        inject_skill(PLAIN, "   ")
    with pytest.raises(ValueError):
        inject_skill(inject_skill(PLAIN, SKILL), SKILL)  # double injection is a bug


def test_inject_into_messages_copies_and_targets_last_user_message():
    msgs = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "old turn\nYour task is to: x"},
        {"role": "assistant", "content": "<action>look</action>"},
        {"role": "user", "content": PLAIN},
    ]
    before = copy.deepcopy(msgs)
    out = inject_into_messages(msgs, SKILL)
    assert msgs == before  # input untouched
    assert out is not msgs and all(a is not b for a, b in zip(out, msgs))
    assert out[:3] == msgs[:3]
    assert out[3]["content"] == inject_skill(PLAIN, SKILL) and out[3]["role"] == "user"
    assert not any(has_skill(m["content"]) for m in out[:3])
    with pytest.raises(ValueError):
        inject_into_messages([{"role": "assistant", "content": "x"}], SKILL)


def test_build_step_prompt_gets_the_skill_right_after_its_task_line():
    hist = [HistoryItem("You see a mug 1.", "take mug 1 from countertop 1")]
    plain = build_step_prompt("ALFWorld", "put a clean mug in coffeemachine", "You pick up the mug 1.", hist,
                              step_index=1, history_length=2, admissible_actions=["go to sinkbasin 1"])
    assert not has_skill(plain)
    msgs = step_messages(plain)
    out = inject_into_messages(msgs, SKILL)
    assert not has_skill(msgs[0]["content"]) and has_skill(out[0]["content"])
    lines, plain_lines = out[0]["content"].split("\n"), plain.split("\n")
    assert plain_lines[1] == TASK_PREFIX + "put a clean mug in coffeemachine"
    assert lines[:2] == plain_lines[:2]
    assert lines[2:7] == ["", SKILL_HEADER, SKILL_INTRO, f"[{SKILL}]", ""]
    assert lines[7:] == plain_lines[2:]


# ---------------------------------------------------------------------------------------------- prompts


def make_traj(won: bool) -> Trajectory:
    steps = []
    for i, (obs, resp, valid) in enumerate([
        ("You are in a kitchen. You see a fridge 1.", "<think>look</think><action>go to fridge 1</action>", True),
        ("The fridge 1 is closed.", "<think>hmm</think><action>fly away</action>", False),
        ("Nothing happens.\nSecond line of obs.", "<think>open</think><action>open fridge 1</action>", True),
    ]):
        steps.append(StepSample(prompt_ids=[1], response_ids=[2], logprobs=[-0.1], traj_id=7, group_id=0, step=i,
                                reward=0.0, action_valid=valid, observation=obs, response_text=resp))
    return Trajectory(traj_id=7, group_id=0, task_id="t", task_description="cool an apple and put it in fridge",
                      steps=steps, won=won)


def test_render_trajectory_contains_every_step():
    """The legacy prompt, unchanged: steps from 1, the flag is the env's acceptance of the action."""
    for won, flag in [(True, "success"), (False, "failure")]:
        text = render_trajectory(make_traj(won), variant="legacy")
        assert "cool an apple and put it in fridge" in text
        assert f"episode_success: {flag}" in text
        other = "failure" if won else "success"
        assert f"episode_success: {other}" not in text
    text = render_trajectory(make_traj(True), variant="legacy")
    lines = text.split("\n")
    for i, s in enumerate(make_traj(True).steps, start=1):
        j = lines.index(f"Step {i}")
        assert lines[j + 1] == "Observation: " + s.observation.split("\n")[0]
        assert f"Response: {s.response_text}" in text
        assert s.observation in text
    valid = [ln for ln in lines if ln.startswith("Action valid: ")]
    assert valid == ["Action valid: true", "Action valid: false", "Action valid: true"]
    assert text.index("Step 1") < text.index("Step 2") < text.index("Step 3")
    assert "Step 4" not in text and "Step 0" not in text


def test_render_trajectory_caps_observations_keeping_the_head():
    t = make_traj(False)
    t.steps[0].observation = "HEAD" + "x" * 500 + "TAIL"
    text = render_trajectory(t, max_obs_chars=50)
    assert "HEAD" in text and "TAIL" not in text and "truncated 458 chars" in text
    assert "The fridge 1 is closed." in text  # short observations untouched
    assert "TAIL" in render_trajectory(t)


def test_render_trajectory_task_fallback_from_messages():
    t = make_traj(True)
    t.task_description = ""
    t.steps[0].messages = step_messages(build_step_prompt("ALFWorld", "heat some egg", "obs"))
    assert render_trajectory(t).startswith("Task: heat some egg\n")


@pytest.mark.parametrize("variant", ["seed", "legacy"])
def test_analysis_prompt_differs_for_success_and_failure(variant):
    ok = analysis_messages(make_traj(True), variant=variant)
    bad = analysis_messages(make_traj(False), variant=variant)
    assert len(ok) == 1 and ok[0]["role"] == "user"
    ok_text, bad_text = ok[0]["content"], bad[0]["content"]
    assert render_trajectory(make_traj(True), variant=variant) in ok_text
    assert render_trajectory(make_traj(False), 10, variant) in analysis_messages(make_traj(False), 10,
                                                                               variant=variant)[0]["content"]
    assert "workflow" in ok_text and "decision rule" in ok_text and "action ordering" in ok_text
    assert "avoidance rule" in bad_text and "mistake" in bad_text and "warning signs" in bad_text
    assert "workflow" not in bad_text and "avoidance" not in ok_text
    for text in (ok_text, bad_text):
        assert "policy-facing" in text and "not a retrospective explanation" in text
        assert '"episode_summary"' in text and '"episode_skill"' in text and "JSON" in text
        if variant == "legacy":  # the request comes after the trajectory (left-truncation keeps it)
            assert text.rindex("episode_skill") > text.index("Step 3")
        else:  # SEED: the instructions first, the episode last
            assert text.rindex("episode_skill") < text.index("\nStep 0\n")


def test_the_default_analysis_prompt_has_seeds_structure():
    """Issue 33, item 5: as SEED's analyzer prompt, the instructions come first and the episode last,
    steps are numbered from 0, observations are not capped, and "Action valid" is the format flag."""
    from seedrl.config import TrainConfig

    t = make_traj(False)
    long_obs = "You see " + ", ".join(f"a cabinet {i}" for i in range(400)) + ". THE END"
    t.steps[0].observation = long_obs
    assert len(long_obs) > 5_000
    # step 1 was parsable but inadmissible; step 2 broke the format
    t.steps[1].format_valid, t.steps[1].action_valid = True, False
    t.steps[2].format_valid, t.steps[2].action_valid = False, False
    text = analysis_messages(t)[0]["content"]
    episode = render_trajectory(t)
    assert text.endswith("\n" + episode)  # the episode last
    head = text[:-len(episode)]
    assert "episode_skill" in head and "JSON" in head and "avoidance rule" in head  # the instructions first
    lines = episode.split("\n")
    assert [ln for ln in lines if ln.startswith("Step ")] == ["Step 0", "Step 1", "Step 2"]
    assert "Observation: " + long_obs in lines and "truncated" not in text
    assert [ln for ln in lines if ln.startswith("Action valid: ")] == [
        "Action valid: true", "Action valid: true", "Action valid: false"]  # format, not admissibility
    assert "parsable in the required action format" in head
    assert "Step 0 is the first step" in head
    skills = TrainConfig().skills
    assert (skills.analysis_prompt, skills.max_obs_chars) == ("seed", None)
    # the legacy prompt is still there, unchanged: request last, steps from 1, admissibility
    legacy = analysis_messages(t, variant="legacy")[0]["content"]
    assert legacy.index("Step 1") < legacy.rindex('"episode_skill"') and "Step 0" not in legacy
    assert "Action valid: false\n\nStep 3" in legacy


def test_seed_prompt_over_the_limit_loses_its_oldest_steps_never_the_instructions(tiny_tokenizer):
    from seedrl.rollout.runner import encode_messages
    from seedrl.skills.analyzers.self_analyzer import SelfAnalyzer

    t = make_traj(False)
    for i, st in enumerate(t.steps):
        st.observation = f"OBS{i} " + "the room is quiet " * 40
    full = len(encode_messages(tiny_tokenizer, analysis_messages(t)))
    last = len(encode_messages(tiny_tokenizer, analysis_messages(t, first_step=2)))
    a = SelfAnalyzer(None, tiny_tokenizer, max_prompt_tokens=last + 5)
    assert last + 5 < full
    text = tiny_tokenizer.decode(a.prompt_ids(t))
    assert "Fill in 2 fields" in text and "OBS2" in text and "OBS0" not in text and "OBS1" not in text
    assert "Steps 0 to 1 are left out" in text
    assert a.prompt_ids(t) == encode_messages(tiny_tokenizer, analysis_messages(t, first_step=2))
    assert SelfAnalyzer(None, tiny_tokenizer, max_prompt_tokens=full).prompt_ids(t) == \
        encode_messages(tiny_tokenizer, analysis_messages(t))  # fits: untouched
    legacy = SelfAnalyzer(None, tiny_tokenizer, max_prompt_tokens=last + 5, analysis_prompt="legacy")
    ids = encode_messages(tiny_tokenizer, analysis_messages(t, variant="legacy"))
    assert legacy.prompt_ids(t) == ids[-(last + 5):]  # the legacy prompt keeps its end, as before


def test_repair_messages():
    orig = analysis_messages(make_traj(False))
    before = copy.deepcopy(orig)
    msgs = repair_messages(orig, "not json", error="parse: no JSON object found")
    assert orig == before and msgs[:1] == orig and msgs[0] is not orig[0]
    assert [m["role"] for m in msgs] == ["user", "assistant", "user"]
    assert msgs[1]["content"] == "not json"
    assert "JSON" in msgs[2]["content"] and "episode_skill" in msgs[2]["content"]
    assert "no JSON object found" in msgs[2]["content"]


# ------------------------------------------------------------------------- step-level skills (OPID)

STEP = "Take the mug out of the sink before turning on the tap."


def with_steps(steps):
    return json.dumps({"episode_summary": "s", "episode_skill": SKILL, "step_skills": steps})


def test_parse_step_skills_numbered_as_the_prompt_zero_based_out():
    # the seed prompt numbers steps from 0 (the default), the legacy prompt from 1
    p = parse_skill(with_steps([{"step": 2, "skill": STEP}, {"step": 0, "skill": "Open the  cabinet\nbefore anything else."}]))
    assert p.skill == SKILL and p.step_skills == {2: STEP, 0: "Open the cabinet before anything else."}
    p = parse_skill(with_steps([{"step": 3, "skill": STEP}, {"step": 1, "skill": "Open the  cabinet\nbefore anything else."}]),
                    step_base=1)
    assert p.skill == SKILL and p.step_skills == {2: STEP, 0: "Open the cabinet before anything else."}
    # the mapping form, steps as strings (still 1-based), and surrounding prose / fences
    p = parse_skill("Here:\n```json\n" + with_steps({"2": STEP}) + "\n```", step_base=1)
    assert p.step_skills == {1: STEP}
    # trailing commas inside the list are repaired like everywhere else
    text = ('{"episode_summary": "s", "episode_skill": "' + SKILL + '", "step_skills": [{"step": 4, "skill": "'
            + STEP + '",},],}')
    assert parse_skill(text, step_base=1).step_skills == {3: STEP}
    # absent key: empty, and the plain answer is unchanged
    assert parse_skill(obj()).step_skills == {}


def test_parse_step_skills_drops_bad_entries_and_never_fails_the_episode_skill():
    def parse(text, **kw):  # numbered from 1, as the legacy prompt
        return parse_skill(text, step_base=1, **kw)

    entries = [
        {"step": 0, "skill": STEP},            # not 1-based
        {"step": -2, "skill": STEP},
        {"step": True, "skill": STEP},         # bools are not step numbers
        {"step": "two", "skill": STEP},
        {"step": 2.5, "skill": STEP},
        {"skill": STEP},                       # no step
        {"step": 5},                           # no skill
        {"step": 6, "skill": ["not", "a", "string"]},
        {"step": 7, "skill": "Too short."},    # under min_words
        "step 8: do something useful here",    # not an object
        None,
        {"step": 9.0, "skill": STEP},          # integral float: kept
        {"STEP": " 10 ", "Skill": STEP},       # keys case-insensitive, digit string
        {"step": 9, "skill": "A later duplicate of step nine is ignored."},
    ]
    p = parse(with_steps(entries))
    assert p.skill == SKILL and p.error is None
    assert p.step_skills == {8: STEP, 9: STEP}
    for junk in ("not a list", 42, None, [[1, 2]], {"x": {"y": 1}}):
        p = parse(with_steps(junk))
        assert p.skill == SKILL and p.step_skills == {}
    # at most max_step_skills, in order; 0 ignores the key
    many = [{"step": i, "skill": f"{STEP} ({i})"} for i in range(1, 9)]
    assert sorted(parse(with_steps(many)).step_skills) == [0, 1, 2, 3, 4]
    assert sorted(parse(with_steps(many), max_step_skills=2).step_skills) == [0, 1]
    assert parse(with_steps(many), max_step_skills=0).step_skills == {}
    # step skills never come without a valid episode skill
    bad = json.dumps({"episode_summary": "s", "episode_skill": "short", "step_skills": [{"step": 1, "skill": STEP}]})
    p = parse(bad)
    assert p.skill is None and p.error and p.step_skills == {}


def test_skill_target_with_step_skills_round_trips():
    t = skill_target("s", SKILL, {4: STEP, 0: "Open the cabinet before anything else."})
    data = json.loads(t)
    assert list(data) == ["episode_summary", "episode_skill", "step_skills"]
    assert data["step_skills"] == [{"step": 0, "skill": "Open the cabinet before anything else."},
                                   {"step": 4, "skill": STEP}]  # numbered as the seed prompt: from 0
    assert parse_skill(t).step_skills == {0: "Open the cabinet before anything else.", 4: STEP}
    legacy = skill_target("s", SKILL, {4: STEP}, step_base=1)
    assert json.loads(legacy)["step_skills"] == [{"step": 5, "skill": STEP}]
    assert parse_skill(legacy, step_base=1).step_skills == {4: STEP}
    assert json.loads(skill_target("s", SKILL, {}))["step_skills"] == []
    assert "step_skills" not in json.loads(skill_target("s", SKILL))


@pytest.mark.parametrize("variant", ["seed", "legacy"])
def test_analysis_prompt_asks_for_step_skills_only_when_enabled(variant):
    plain = analysis_messages(make_traj(False), variant=variant)[0]["content"]
    steps = analysis_messages(make_traj(False), step_skills=True, max_step_skills=3, variant=variant)[0]["content"]
    assert "step_skills" not in plain and "critical" not in plain
    assert '"step_skills"' in steps and "at most 3" in steps and '"episode_skill"' in steps
    if variant == "legacy":  # after the trajectory, like the rest of the request
        assert steps.rindex("step_skills") > steps.index("Step 3")
    else:
        assert steps.rindex("step_skills") < steps.index("\nStep 0\n")
    repair = repair_messages(analysis_messages(make_traj(False)), "x", step_skills=True)[-1]["content"]
    assert "step_skills" in repair and "three keys" in repair
    assert "step_skills" not in repair_messages(analysis_messages(make_traj(False)), "x")[-1]["content"]


def test_inject_step_skill_goes_right_before_the_turn_line():
    out = inject_step_skill(PLAIN, STEP)
    lines = out.split("\n")
    i = lines.index(TURN_LINE)
    assert lines[i - 5:i] == ["", STEP_SKILL_HEADER, STEP_SKILL_INTRO, f"[{STEP}]", ""]
    assert out.replace(step_skill_block(STEP) + "\n\n", "", 1) == PLAIN
    assert has_skill(out) and SKILL_HEADER not in out
    # after the observation, unlike the episode skill
    assert out.index("Your current observation is:") < out.index(STEP_SKILL_HEADER) < out.index(TURN_LINE)
    assert inject_step_skill("no turn line", STEP) == "no turn line\n\n" + step_skill_block(STEP)
    with pytest.raises(ValueError):
        inject_step_skill(out, STEP)  # already carries a skill
    with pytest.raises(ValueError):
        inject_step_skill(inject_skill(PLAIN, SKILL), STEP)
    msgs = step_messages(PLAIN)
    assert inject_into_messages(msgs, STEP, step=True)[-1]["content"] == out and msgs[-1]["content"] == PLAIN


def test_prefix_skill_is_sdar_privileged_information():
    templated = "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"
    out = prefix_skill(templated, "  Push boxes\nalong walls with targets.  ")
    assert out == "[Privileged Skill Information]\nPush boxes\nalong walls with targets.\n\n" + templated
    assert out.startswith(PRIVILEGED_HEADER) and has_skill(out) and not has_skill(templated)
    for bad in ("", "   "):
        with pytest.raises(ValueError):
            prefix_skill(templated, bad)
