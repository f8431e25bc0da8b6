"""Issue 33 item 6: ALFWorld's step prompt in verl-agent's structure (ALFWORLD_TEMPLATE_NO_HIS at step 0,
ALFWORLD_TEMPLATE later, filled as its AlfWorldEnvironmentManager fills them), in this project's words."""

from __future__ import annotations

import pytest

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


# -- Search and WebShop (issue 43, item 3) -------------------------------------------------------------
# The reference: verl-agent's agent_system/environments/prompts/search.py (SEARCH_TEMPLATE_NO_HIS,
# SEARCH_TEMPLATE) filled by env_manager.py's SearchEnvironmentManager.build_text_obs and
# memory.py's SearchMemory.fetch ("Step {k}:{action} {observation}\n" items joined by "\n"), and
# prompts/webshop.py (WEBSHOP_TEMPLATE_NO_HIS, WEBSHOP_TEMPLATE) filled by WebshopEnvironmentManager
# (SimpleMemory's "[Observation k: '...', Action k: '...']" items, actions as "'a',\n'b',"); SEED's copies
# (zhangdw156/SEED, same paths) hold the same sentences. Lines are compared with the templates' outer
# newlines and trailing spaces dropped (docs/deviations.md).
SEARCH_HEAD = "You are an expert agent tasked with answering the given question step-by-step."
SEARCH_TURN = ["Now it's your turn to respond for the current step.",
               "You should first conduct reasoning process. This process MUST be enclosed within <think> </think> tags.",
               "After completing your reasoning, choose only one of the following actions (do not perform both):",
               "(1) If you find you lack some knowledge, you can call a search engine to get more external information "
               "using format: <search> your query </search>.",
               "(2) If you have enough knowledge to answer the question confidently, provide your final answer within "
               "<answer> </answer> tags, without detailed illustrations. For example, <answer>Beijing</answer>."]
SEARCH_HISTORY = ("Prior to this step, you have already taken {n} step(s). Below is the interaction history where "
                  "<search> </search> wrapped your past search queries and <information> </information> wrapped the "
                  "corresponding search results returned by the external search engine. History:")
QUESTION = "who founded the company that makes the zentrix phone?"
SEARCH_HIST = [HistoryItem(f"Question: {QUESTION}", "<search>zentrix phone</search>"),
               HistoryItem("<information>Doc 1(Title: \"Zentrix\") Zentrix was founded by Tavo Brisk.</information>",
                           None),
               HistoryItem("<information>Doc 1(Title: \"Zentrix\") Zentrix was founded by Tavo Brisk.</information>",
                           "<search>tavo brisk</search>")]
NOW = "<information>Doc 1(Title: \"Tavo Brisk\") Tavo Brisk is an engineer.</information>"


def _search_env():
    from seedrl.envs.search.env import VERL_AGENT_INSTRUCTION, SearchEnv

    env = SearchEnv()
    assert env.instruction == VERL_AGENT_INSTRUCTION == "\n".join(SEARCH_TURN)
    return env


def _search(step, hist, h=5):
    env = _search_env()
    return build_step_prompt("Search-QA", QUESTION, NOW if step else f"Question: {QUESTION}", hist, step, h, None,
                             env.instruction, env.prompt_style)


def test_search_step_zero_is_search_template_no_his():
    assert _search(0, []).split("\n") == [SEARCH_HEAD, "Your question: " + QUESTION, "", *SEARCH_TURN]


def test_search_later_steps_are_search_template_with_searchmemorys_history():
    """Each history item is an action with the observation it got (the next step's observation), items a
    blank line apart; the step count is every step taken, the history the last ``history_length``; a turn
    without a parsable action shows the invalid marker."""
    assert _search(3, SEARCH_HIST).split("\n") == [
        SEARCH_HEAD, "Your question: " + QUESTION, "", SEARCH_HISTORY.format(n=3),
        "Step 1:<search>zentrix phone</search> " + SEARCH_HIST[1].observation, "",
        "Step 2:(invalid action) " + SEARCH_HIST[2].observation, "",
        "Step 3:<search>tavo brisk</search> " + NOW, "", *SEARCH_TURN]
    assert _search(3, SEARCH_HIST, h=1).split("\n") == [
        SEARCH_HEAD, "Your question: " + QUESTION, "", SEARCH_HISTORY.format(n=3),
        "Step 3:<search>tavo brisk</search> " + NOW, "", *SEARCH_TURN]
    # no history to show (history_length 0, or shed to fit the prompt budget): SEARCH_TEMPLATE_NO_HIS
    assert _search(3, SEARCH_HIST, h=0) == _search(0, [])


def test_search_skills_go_after_the_question_and_before_the_turn_line_as_seed_places_them():
    """SEED's build_augmented_observation_text tries "Your question:" among its task-line patterns and
    puts a critical-step skill before "Now it's your turn to"."""
    from seedrl.skills.injection import inject_into_messages, step_skill_block

    student = _search(3, SEARCH_HIST)
    skill = "Search the founder's name next."
    teacher = inject_into_messages(step_messages(student), skill)[0]["content"]
    line = "Your question: " + QUESTION
    assert teacher == student.replace(line + "\n", line + "\n\n" + skill_block(skill) + "\n", 1)
    step = inject_into_messages(step_messages(student), skill, step=True)[0]["content"]
    assert step == student.replace("\n\n" + SEARCH_TURN[0], "\n\n" + step_skill_block(skill) + "\n\n" + SEARCH_TURN[0])


def test_the_search_env_defaults_to_verl_agents_layout_and_its_task_is_the_question():
    from seedrl.envs.search.env import INSTRUCTION, SearchConfig, SearchEnv

    env = _search_env()
    assert env.prompt_style == "verl_agent_search"
    env.reset("hop2-s00000")
    assert env.task_description == env.privileged_state()["question"]  # verl-agent's task: the question itself
    old = SearchEnv(prompt_style="seedrl")
    assert (old.prompt_style, old.instruction) == ("seedrl", INSTRUCTION)
    old.reset("hop2-s00000")
    assert old.task_description == "answer this question: " + env.task_description
    assert "prompt_style" not in SearchConfig.parse({}).identity()  # panels do not change


SHOP_TITLE = "the WebShop e-commerce environment"
SHOP_HEAD = f"You are an expert autonomous agent operating in {SHOP_TITLE}."
SHOP_TURN = ["Now it's your turn to take one action for the current step.",
             "You should first reason step-by-step about the current situation, then think carefully which admissible "
             "action best advances the shopping goal. This reasoning process MUST be enclosed within <think> </think> "
             "tags.",
             "Once you've finished your reasoning, you should choose an admissible action for current step and present "
             "it within <action> </action> tags."]
GOAL = "i need a red cotton shirt, and price lower than 40.00 dollars"
SHOP_ACTS = ["search[<your query>]", "click[back to search]", "click[b078gwrc1j]"]


def _shop(step, hist, h=2):
    from seedrl.envs.webshop.env import WebShopEnv

    env = WebShopEnv()
    obs = "'Back to Search' [SEP] 'Page 1 (Total results: 50)'" if step else "'Search'"
    return build_step_prompt(SHOP_TITLE, GOAL, obs, hist, step, h, SHOP_ACTS, env.instruction, env.prompt_style)


def test_webshop_step_zero_is_webshop_template_no_his():
    assert _shop(0, []).split("\n") == [
        SHOP_HEAD, f"Your task is to: {GOAL}.", "Your current observation is: 'Search'.",
        "Your admissible actions of the current situation are:", "[", "'search[<your query>]',",
        "'click[back to search]',", "'click[b078gwrc1j]',", "].", "", *SHOP_TURN]


def test_webshop_later_steps_are_webshop_template():
    hist = [HistoryItem("'Search'", "search[red cotton shirt]"),
            HistoryItem("'Back to Search' [SEP] 'Page 1'", None),
            HistoryItem("'Back to Search' [SEP] 'Page 1'", "click[next >]")]
    assert _shop(3, hist).split("\n") == [
        SHOP_HEAD, f"Your task is to: {GOAL}.",
        "Prior to this step, you have already taken 3 step(s). Below are the most recent 2 observations and the "
        "corresponding actions you took: [Observation 2: ''Back to Search' [SEP] 'Page 1'', Action 2: '(invalid action)']",
        "[Observation 3: ''Back to Search' [SEP] 'Page 1'', Action 3: 'click[next >]']",
        "You are now at step 4 and your current observation is: 'Back to Search' [SEP] 'Page 1 (Total results: 50)'.",
        "Your admissible actions of the current situation are:", "[", "'search[<your query>]',",
        "'click[back to search]',", "'click[b078gwrc1j]',", "].", "", *SHOP_TURN]


def test_webshop_skills_go_after_the_task_line_and_before_the_turn_line():
    from seedrl.skills.injection import inject_into_messages, step_skill_block

    student = _shop(0, [])
    skill = "Filter by price first."
    teacher = inject_into_messages(step_messages(student), skill)[0]["content"]
    line = f"Your task is to: {GOAL}."
    assert teacher == student.replace(line + "\n", line + "\n\n" + skill_block(skill) + "\n\n", 1)
    step = inject_into_messages(step_messages(student), skill, step=True)[0]["content"]
    assert step == student.replace("\n\n" + SHOP_TURN[0], "\n\n" + step_skill_block(skill) + "\n\n" + SHOP_TURN[0])


def test_the_webshop_env_defaults_to_verl_agents_layout():
    from seedrl.envs.webshop.env import VERL_AGENT_INSTRUCTION, WebShopEnv, WebShopOptions

    env = WebShopEnv()
    assert (env.prompt_style, env.instruction) == ("verl_agent_webshop", VERL_AGENT_INSTRUCTION)
    assert VERL_AGENT_INSTRUCTION == "\n".join(SHOP_TURN) and env.title == SHOP_TITLE
    old = WebShopEnv(prompt_style="seedrl")
    assert (old.prompt_style, old.instruction) == ("seedrl", None)
    assert "prompt_style" not in WebShopOptions.parse({}).identity()


@pytest.mark.parametrize("env_name", ["search", "webshop"])
def test_a_run_saved_before_config_version_2_keeps_this_projects_layout(tmp_path, env_name):
    """Search's and WebShop's default layout changed with config_version 2: a run saved before it (1, or
    none) loads with ``prompt_style: seedrl``, the layout it played; a run saved today keeps the default;
    a layout the run chose itself is kept. Its config.yaml given as the preset of a resume
    (``seedrl train -c <run>/config.yaml --resume``) reads the same, so the resume is not refused."""
    import yaml

    from seedrl.config import TrainConfig, load_config, load_run_config, save_config
    from seedrl.train.resume import check_resume_config

    saved = tmp_path / "config.yaml"
    save_config(TrainConfig(env={"name": env_name}), saved)
    data = yaml.safe_load(saved.read_text())
    assert data["config_version"] == 2 and "prompt_style" not in load_run_config(saved).env.kwargs
    for version in (1, None):
        old = {k: v for k, v in data.items() if k != "config_version"} | ({} if version is None else
                                                                          {"config_version": version})
        saved.write_text(yaml.safe_dump(old))
        assert load_run_config(saved).env.kwargs["prompt_style"] == "seedrl", version
        if version is not None:  # a file that says its version is read under it, as a preset too
            assert load_config(TrainConfig, saved).env.kwargs["prompt_style"] == "seedrl"
            assert check_resume_config(tmp_path, load_config(TrainConfig, saved)) == {}
        old["env"]["kwargs"] = {"prompt_style": "verl_agent"}
        saved.write_text(yaml.safe_dump(old))
        assert load_run_config(saved).env.kwargs["prompt_style"] == "verl_agent", version
        old["env"]["kwargs"] = {}
