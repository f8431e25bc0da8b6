"""Issue 33 item 6: ALFWorld's step prompt in verl-agent's structure (ALFWORLD_TEMPLATE_NO_HIS at step 0,
ALFWORLD_TEMPLATE later, filled as its AlfWorldEnvironmentManager fills them), in this project's words."""

from __future__ import annotations

from seedrl.agent.prompts import TASK_PREFIX, TURN_LINE, HistoryItem, build_step_prompt, step_messages
from seedrl.skills.injection import inject_into_messages, skill_block

TITLE = "the ALFRED Embodied Environment"
TASK = "put a clean mug in coffeemachine."
INTRO = "You are in the middle of a room. Looking quickly around you, you see a cabinet 1, a sinkbasin 1."
ACTS = ["go to cabinet 1", "go to sinkbasin 1", "look"]


def _prompt(step, hist, h=2):
    return build_step_prompt(TITLE, TASK, "You arrive at sinkbasin 1." if step else INTRO, hist, step, h, ACTS,
                             style="verl_agent")


def test_step_zero_has_no_task_line_of_its_own_and_lists_actions_one_a_line():
    text = _prompt(0, [])
    lines = text.splitlines()
    assert lines[0] == f"You are an expert agent operating in {TITLE}."
    assert lines[1] == "Your current observation is: " + INTRO
    # the task sentence closes the intro observation (as ALFWorld shows it): the one task line
    assert lines[2] == "" and lines[3] == TASK_PREFIX + TASK
    assert sum(x.startswith(TASK_PREFIX) for x in lines) == 1 and "Prior to this step" not in text
    assert "Your admissible actions of the current situation are: ['go to cabinet 1'\n 'go to sinkbasin 1'\n 'look']." in text
    assert ", ".join(ACTS) not in text
    assert text.endswith("present it within <action> </action> tags.") and f"\n\n{TURN_LINE}\n" in text


def test_later_steps_lay_the_history_out_as_verl_agent_does():
    hist = [HistoryItem(INTRO, "go to sinkbasin 1"), HistoryItem("You arrive at cabinet 1.", None),
            HistoryItem("Nothing happens.", "look")]
    text = _prompt(3, hist)
    assert ("Prior to this step, you have already taken 3 step(s). Below are the most recent 2 observations and "
            "the corresponding actions you took: [Observation 2: 'You arrive at cabinet 1.', Action 2: "
            "'(invalid action)']\n[Observation 3: 'Nothing happens.', Action 3: 'look']\n"
            "You are now at step 4 and your current observation is: You arrive at sinkbasin 1.\n") in text
    assert text.splitlines()[1] == TASK_PREFIX + TASK


def test_the_teacher_prompt_differs_from_the_students_only_by_the_skill_block():
    hist = [HistoryItem(INTRO, "go to sinkbasin 1")]
    for step, h in ((0, []), (1, hist)):
        student = _prompt(step, h)
        teacher = inject_into_messages(step_messages(student), "Rinse the mug before placing it.")[0]["content"]
        block = skill_block("Rinse the mug before placing it.")
        task_line = TASK_PREFIX + TASK
        # the block sits right after the task line, separated by blank lines; nothing else changes
        assert teacher == student.replace(task_line + "\n", task_line + "\n\n" + block + "\n\n", 1)


def test_alfworld_defaults_to_the_reference_layout_and_alfworld_gen_keeps_its_own():
    from seedrl.envs.alfworld.env import AlfWorldEnv, AlfWorldGenEnv, AlfWorldOptions

    assert AlfWorldOptions.parse({}).prompt_style == "verl_agent"
    assert AlfWorldOptions.parse({"prompt_style": "seedrl"}).prompt_style == "seedrl"
    assert "prompt_style" not in AlfWorldOptions.parse({}).identity()  # panels do not change
    assert AlfWorldEnv(prompt_style="seedrl").prompt_style == "seedrl" and AlfWorldEnv().prompt_style == "verl_agent"
    assert AlfWorldGenEnv.prompt_style == "seedrl"
