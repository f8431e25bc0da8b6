"""WebShop's static (SDAR) skills: the general file, and SDAR's product-category route (every category
with a keyword in the instruction: ``get_privileged_info_from_prompt`` in ZJU-REAL/SDAR's
``verl/trainer/ppo/rlsd_utils.py`` with ``skills/webshop/skill_mapping.json``'s ``task_keywords``)."""

from __future__ import annotations

import json

import pytest

from seedrl.envs.webshop.env import SDAR_CATEGORY_KEYWORDS, WebShopEnv
from seedrl.rollout.types import Trajectory
from seedrl.skills.analyzers.static import StaticSkillAnalyzer


def test_static_skill_file_for_webshop() -> None:
    skill = StaticSkillAnalyzer("webshop").skill_for("goal-12")
    assert skill and "Buy Now" in skill


@pytest.mark.parametrize("instruction,kinds", [
    ("i need a long sleeve shirt in navy, and price lower than 30.00 dollars", ("apparel",)),
    ("i want running sneakers size 9", ("footwear",)),
    ("a velvet throw pillow cover", ("home_decor",)),
    ("a usb c charger for my phone", ("electronics",)),
    ("a leather wallet", ("accessories",)),
    ("a sulfate free shampoo", ("beauty_health",)),
    ("i want a dress and a matching handbag", ("apparel", "accessories")),  # several, in SDAR's order
    ("something that is red", ("accessories",)),  # substrings, as SDAR: "hat" in "that"
    ("a box of green tea", ()),  # no keyword: the general skill alone
])
def test_a_goal_gets_every_category_whose_keyword_is_in_its_instruction(instruction, kinds) -> None:
    assert WebShopEnv.skill_types("goal-1", instruction) == kinds
    a = StaticSkillAnalyzer("webshop")
    assert a.skill_names("goal-1", instruction) == list(kinds)
    assert a.skill_for("goal-1", instruction) == "\n\n".join([a.skills["general"], *(a.skills[k] for k in kinds)])


def test_every_category_has_its_own_skill_file() -> None:
    a = StaticSkillAnalyzer("webshop")
    assert set(SDAR_CATEGORY_KEYWORDS) <= set(a.skills) and all(len(s.split()) <= 46 for s in a.skills.values())
    traj = Trajectory(0, 0, "goal-3", "i need a pair of leather boots")
    assert a.analyze([traj])[0].skill == a.skills["general"] + "\n\n" + a.skills["footwear"]


def test_sdars_own_folder_routes_by_its_own_keywords(tmp_path) -> None:
    kinds = [*SDAR_CATEGORY_KEYWORDS, "other"]
    mapping = {"skill_files": {"general_skills": "general_skills.md"} | {k: f"{k}.md" for k in kinds},
               "task_to_skill": {k: k for k in kinds},
               "task_keywords": {k: list(v) for k, v in SDAR_CATEGORY_KEYWORDS.items()} | {"other": [], "apparel": ["tunic"]}}
    (tmp_path / "skill_mapping.json").write_text(json.dumps(mapping))
    for k in ["general_skills", *kinds]:
        (tmp_path / f"{k}.md").write_text(f"### {k} ###")
    a = StaticSkillAnalyzer("webshop", tmp_path)
    assert a.skill_names("goal-1", "a cotton tunic and a belt") == ["apparel", "accessories"]
    assert a.skill_names("goal-1", "a long sleeve shirt") == []  # the folder's keywords, not ours
    assert a.skill_for("goal-1", "a leather belt") == "### general_skills ###\n\n### accessories ###"
