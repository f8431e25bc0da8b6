"""Issue 33 item 4: ``algo.static_skill_dir`` takes SDAR's own skill folder (skills/<env>/ of a
ZJU-REAL/SDAR checkout): general_skills.md, a file per skill and skill_mapping.json, composed as
SDAR's SkillProvider composes them; the run records which skill text it used."""

from __future__ import annotations

import json

from seedrl.skills.analyzers.static import StaticSkillAnalyzer
from tests.helpers import tiny_cfg

GENERAL = "### GENERAL ###\nLook everywhere once."
PLACE = "### PLACE ###\nCarry one object at a time."
HEAT = "### HEAT ###\nUse the microwave."


def sdar_folder(root):
    """Same structure and file names as SDAR's skills/alfworld/, our own made-up text."""
    d = root / "skills" / "alfworld"
    d.mkdir(parents=True)
    (d / "general_skills.md").write_text(GENERAL + "\n")
    (d / "pick_and_place.md").write_text(PLACE + "\n")
    (d / "heat.md").write_text(HEAT + "\n")
    (d / "skill_mapping.json").write_text(json.dumps({
        "skill_files": {"general_skills": "general_skills.md", "pick_and_place": "pick_and_place.md",
                        "heat": "heat.md"},
        "task_to_skill": {"pick_and_place": "pick_and_place", "pick_two_obj_and_place": "pick_and_place",
                          "pick_heat_then_place_in_recep": "heat"},
        "task_keywords": {"pick_heat_then_place_in_recep": ["heat"], "pick_and_place": ["put"]}}))
    return d


def test_an_sdar_skill_folder_loads_and_maps_task_types_as_sdar_does(tmp_path):
    d = sdar_folder(tmp_path)
    a = StaticSkillAnalyzer("alfworld", d)
    assert a.layout == "sdar" and set(a.skills) == {"general_skills", "pick_and_place", "heat"}
    tid = "valid_seen/{}-Apple-None-Fridge-1/trial_T1".format
    # mapped: general, a blank line, the mapped skill's file (pick_two -> pick_and_place)
    assert a.skill_for(tid("pick_two_obj_and_place")) == GENERAL + "\n\n" + PLACE
    assert a.skill_for(tid("pick_heat_then_place_in_recep")) == GENERAL + "\n\n" + HEAT
    # SDAR's first-key-in-the-game-path rule: pick_and_place_simple -> pick_and_place
    assert a.skill_for(tid("pick_and_place_simple")) == GENERAL + "\n\n" + PLACE
    # unmapped (no cool in this mapping): the general skills alone, as SDAR's _get_skill_text(None)
    assert a.skill_for(tid("pick_cool_then_place_in_recep")) == GENERAL
    # the generated env's ids map through their task type too
    assert StaticSkillAnalyzer("alfworld-gen", d).skill_for("pick_two-s00001") == GENERAL + "\n\n" + PLACE
    src = a.source
    assert src["layout"] == "sdar" and src["dir"] == str(d.resolve()) and "skill_mapping.json" in src["files"]
    # the hash covers the files' contents
    (d / "heat.md").write_text("changed")
    assert StaticSkillAnalyzer("alfworld", d).source["sha256"] != src["sha256"]


def test_this_projects_layout_still_loads_and_names_itself():
    a = StaticSkillAnalyzer("sokoban")
    assert a.layout == "seedrl" and a.source["layout"] == "seedrl" and "general.md" in a.source["files"]
    assert a.skill_for("anything") == a.skills["general"]  # sokoban ships no task-type file
    # with a task-type file: the general skill, then the type's
    t = StaticSkillAnalyzer("textworld")
    assert t.layout == "seedrl" and "coin.md" in t.source["files"]
    assert t.skill_for("coin") == t.skills["general"] + "\n\n" + t.skills["coin"]


def test_a_static_skill_run_records_its_skill_source(tmp_path):
    from seedrl.train.trainer import Trainer

    d = sdar_folder(tmp_path)
    tr = Trainer(tiny_cfg(tmp_path / "run", **{"algo.name": "sdar", "algo.static_skill_dir": str(d),
                                               "eval.num_tasks": 0, "iterations": 0}))
    rec = json.loads((tmp_path / "run" / "skill_source.json").read_text())
    assert rec["layout"] == "sdar" and rec["dir"] == str(d.resolve()) and len(rec["sha256"]) == 64
    assert tr.train()["skill_source"] == rec


def test_sdars_path_rule_is_alfworlds_and_other_envs_look_their_task_type_up_exactly(tmp_path):
    """SDAR finds an ALFWorld game's skill as the first task_to_skill key in the game's path; that rule
    lives with ALFWorld (``Env.sdar_skills``), not in the generic static analyzer. Seen red with the
    substring fallback back in the analyzer (a textworld task id holding a key got its skill)."""
    d = sdar_folder(tmp_path)
    # a textworld task type that merely contains the key "pick_and_place": no substring route there
    tw = StaticSkillAnalyzer("textworld", d)
    assert tw.skill_name("pick_and_place_extra-1") is None and tw.skill_for("pick_and_place_extra-1") == GENERAL
    assert tw.skill_name("pick_and_place-1") == "pick_and_place"  # the exact task type still maps
    # ALFWorld keeps SDAR's rule
    assert StaticSkillAnalyzer("alfworld", d).skill_name(
        "valid_seen/pick_and_place_simple-Apple-None-Fridge-1/trial_T1") == "pick_and_place"
    # an env that is not registered: the exact type only
    assert StaticSkillAnalyzer("no-such-env", d).skill_name("pick_and_place_simple-1") is None
