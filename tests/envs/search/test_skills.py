"""The search env's static (SDAR) skills: the generated world's hop types, and SDAR's question types of
the Search-R1 data sources (``get_privileged_info_from_data_source`` in ZJU-REAL/SDAR's
``verl/trainer/ppo/rlsd_utils.py``, lines 112-142)."""

from __future__ import annotations

import json

import pytest

from seedrl.envs.search.env import TASK_PREFIX, SearchEnv, sdar_question_type
from seedrl.rollout.types import Trajectory
from seedrl.skills.analyzers.static import StaticSkillAnalyzer

#: SDAR's route of every Search-R1 source, for a question that is no comparison
SOURCES = {"nq": "direct_retrieval", "triviaqa": "direct_retrieval", "popqa": "entity_attribute_lookup",
           "hotpotqa": "multi_hop_reasoning", "2wikimultihopqa": "multi_hop_reasoning",
           "musique": "multi_hop_reasoning", "bamboogle": "multi_hop_reasoning"}
PLAIN = "answer this question: who wrote the play hamlet?"


def test_static_skills_per_question_type() -> None:
    pytest.importorskip("bm25s")  # the generated world is searched with in-process BM25 (seedrl[envs])
    a = StaticSkillAnalyzer("search")
    assert a.skill_for("hop3-s00001") == a.skills["general"] + "\n\n" + a.skills["hop3"]
    assert a.skills["hop3"].startswith("The question chains three links")
    assert a.skill_for("hop1-s20000") != a.skill_for("hop2-s20000")
    assert a.skill_for("nq-te000001") != a.skill_for("musique-te000001")
    assert a.skill_for("newsource-te000001") == a.skills["general"]
    assert all(len(s.split()) <= 45 for s in a.skills.values())


@pytest.mark.parametrize("source,kind", sorted(SOURCES.items()))
def test_a_search_r1_task_gets_sdars_question_type_of_its_data_source(source, kind) -> None:
    a = StaticSkillAnalyzer("search")
    for split in ("tr", "te"):
        tid = f"{source}-{split}000001"
        assert a.skill_name(tid, PLAIN) == kind
        assert a.skill_for(tid, PLAIN) == a.skills["general"] + "\n\n" + a.skills[kind]


def test_the_compare_rule_reads_the_question_as_sdar_does_substrings_after_the_fixed_sources() -> None:
    which_or = "Which film came out first, Alpha or Beta?"
    assert sdar_question_type("2wikimultihopqa", which_or) == "compare"
    assert sdar_question_type("bamboogle", which_or) == "compare"
    assert sdar_question_type("somesource", which_or) == "compare"  # an unknown source may compare too
    # the fixed sources are decided before the question is read
    assert sdar_question_type("hotpotqa", which_or) == "multi_hop_reasoning"
    assert sdar_question_type("nq", which_or) == "direct_retrieval"
    # SDAR's tests are substrings: "for" anywhere (here in "formed") rules compare out, "or" anywhere counts
    assert sdar_question_type("musique", "Which band formed first, Alpha or Beta?") == "multi_hop_reasoning"
    assert sdar_question_type("musique", "Which author wrote Hamlet?") == "compare"
    assert sdar_question_type("musique", "Who directed Alpha?") == "multi_hop_reasoning"
    assert sdar_question_type("somesource", "Who directed Alpha?") is None  # the general skill alone
    assert SearchEnv.skill_types("somesource-te000001", TASK_PREFIX + "Who directed Alpha?") == ()
    # the env reads the question out of the task description
    assert SearchEnv.skill_types("musique-te000003", TASK_PREFIX + which_or) == ("compare",)
    assert SearchEnv.skill_types("hop2-s00042", TASK_PREFIX + which_or) == ("hop2",)  # the generated world's own


def test_the_analyzer_routes_each_trajectory_by_its_task_description() -> None:
    a = StaticSkillAnalyzer("search")
    trajs = [Trajectory(0, 0, "musique-te000001", TASK_PREFIX + "Which film came out first, Alpha or Beta?"),
             Trajectory(1, 0, "musique-te000002", TASK_PREFIX + "Who directed the film Alpha?")]
    compare, hop = a.analyze(trajs)
    assert compare.skill == a.skills["general"] + "\n\n" + a.skills["compare"]
    assert hop.skill == a.skills["general"] + "\n\n" + a.skills["multi_hop_reasoning"]


def test_sdars_own_skill_folder_routes_the_same_way(tmp_path) -> None:
    """``algo.static_skill_dir`` at SDAR's ``skills/search/`` (its skill_mapping.json: skill_files and an
    identity task_to_skill over the four question types); before, every dataset task got the general
    skill alone (``skill_name('nq-tr000001')`` was None)."""
    names = ["direct_retrieval", "multi_hop_reasoning", "entity_attribute_lookup", "compare"]
    mapping = {"skill_files": {"general_skills": "general_skills.md"} | {n: f"{n}.md" for n in names},
               "task_to_skill": {n: n for n in names}}
    (tmp_path / "skill_mapping.json").write_text(json.dumps(mapping))
    for n in ["general_skills", *names]:
        (tmp_path / f"{n}.md").write_text(f"### {n} ###")
    a = StaticSkillAnalyzer("search", tmp_path)
    assert a.layout == "sdar"
    for source, kind in SOURCES.items():
        assert a.skill_name(f"{source}-tr000001", PLAIN) == kind
    assert a.skill_for("nq-tr000001") == "### general_skills ###\n\n### direct_retrieval ###"
    assert a.skill_name("bamboogle-te000001", TASK_PREFIX + "Which is older, Alpha or Beta?") == "compare"
    assert a.skill_name("hop1-s00001", PLAIN) is None  # SDAR maps no generated-world type
