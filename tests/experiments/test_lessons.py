"""`seedrl lessons`: skills grouped into recurring lessons (TF-IDF + leader clustering), their counts
per iteration, trend, success rate and the >= 3 rule, on constructed skills.jsonl files."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import pytest

from seedrl.errors import SeedRLError
from seedrl.experiments.lessons import (
    DEFAULT_THRESHOLD,
    cosine,
    group,
    lessons_report,
    main_lessons,
    normalise,
    suggest_kind,
    tfidf,
)

DRAWER = "Open the drawer before taking the mug."
DRAWER_2 = "You must open the drawer first, then take the mug."
DRAWER_3 = "Open drawer 12 before you take mug 1."
FRIDGE = "Open the fridge and put the egg inside."  # shares a word with DRAWER, another lesson
PUSH = "Push the box right only when the square beyond it is free."
PUSH_2 = "Only push a box right when the square beyond it is free of walls."
SEARCH = "Visit each receptacle once, looking inside, until you find the target object."


def _write(run: Path, rows: list[tuple[int, str | None, bool]], shuffle: int | None = None) -> Path:
    """rows: (iteration, skill or None for a parse failure, success); traj ids in order."""
    run.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"iteration": it, "traj_id": i, "task_id": f"t{i % 3}", "success": won, "skill": skill,
                         "summary": "s" if skill else None, "error": None if skill else "no JSON object",
                         "raw": skill or "garbage"})
             for i, (it, skill, won) in enumerate(rows)]
    if shuffle is not None:
        random.Random(shuffle).shuffle(lines)
    (run / "skills.jsonl").write_text("\n".join(lines) + "\n")
    return run


def _by_text(rep: dict, needle: str) -> dict:
    (hit,) = [x for x in rep["lessons"] if any(needle in m for m in x["members"])]
    return hit


# ------------------------------------------------------------------------------------ grouping
def test_normalisation_drops_ids_stop_words_and_suffixes():
    assert normalise(DRAWER) == normalise(DRAWER_2) == normalise(DRAWER_3) == ["open", "drawer", "tak", "mug"]
    assert normalise("move box (3, 4) to target_2") == ["mov", "box", "target"]
    assert normalise("boxes pushed pushing") == ["box", "push", "push"]


def test_paraphrases_group_together_and_different_lessons_do_not():
    texts = [DRAWER, PUSH, DRAWER_2, SEARCH, PUSH_2, DRAWER_3, FRIDGE]
    vecs = tfidf([normalise(t) for t in texts])
    assert cosine(vecs[0], vecs[2]) >= DEFAULT_THRESHOLD
    assert cosine(vecs[1], vecs[4]) >= DEFAULT_THRESHOLD
    assert cosine(vecs[0], vecs[1]) < DEFAULT_THRESHOLD
    assert 0 < cosine(vecs[0], vecs[6]) < DEFAULT_THRESHOLD
    clusters = group(texts)
    assert sorted(clusters) == [[0, 2, 5], [1, 4], [3], [6]]
    # a threshold of 1 only groups texts that normalise identically
    assert sorted(group(texts, threshold=1.0)) == [[0, 2, 5], [1], [3], [4], [6]]


def test_grouping_does_not_depend_on_input_order():
    texts = [DRAWER, PUSH, DRAWER_2, SEARCH, PUSH_2, DRAWER_3] * 2
    base = {frozenset(texts[i] for i in c) for c in group(texts)}
    for seed in range(5):
        perm = texts[:]
        random.Random(seed).shuffle(perm)
        assert {frozenset(perm[i] for i in c) for c in group(perm)} == base
    # a chain (a ~ b, b ~ c, a !~ c at 0.35): the leaders follow the sorted texts, not the input order
    chain = ["Open the drawer, take the mug and heat it in the microwave.",
             "Heat the mug in the microwave, then put it in the fridge.",
             "Heat the egg in the microwave, then put it in the fridge."]
    for perm in itertools.permutations(chain):
        got = {frozenset(perm[i] for i in c) for c in group(list(perm), threshold=0.35)}
        assert got == {frozenset(chain[1:]), frozenset(chain[:1])}


# ------------------------------------------------------------------------------------ the report
def test_counts_per_iteration_success_and_examples(tmp_path):
    run = _write(tmp_path / "seed-seed0", [
        (1, DRAWER, False), (1, DRAWER_2, True), (1, PUSH, False),
        (2, DRAWER_3, False), (2, SEARCH, True),
        (4, DRAWER, True), (4, DRAWER, False), (4, DRAWER_2, True),
    ])
    rep = lessons_report(run)
    assert (rep["analysed"], rep["parsed"], rep["runs"]) == (8, 8, [str(run)])
    drawer = rep["lessons"][0]
    assert drawer["id"] == 1 and drawer["count"] == 6
    assert drawer["iterations"] == {"1": 2, "2": 1, "4": 3}
    assert drawer["success_rate"] == pytest.approx(3 / 6, abs=1e-4)
    assert drawer["examples"] == [0, 1, 3, 6, 7]  # evenly spread over traj ids 0, 1, 3, 5, 6, 7
    assert drawer["text"] == DRAWER  # the most frequent of the identical-meaning wordings
    assert set(drawer["members"]) == {DRAWER, DRAWER_2, DRAWER_3} and drawer["variants"] == 3
    assert [x["count"] for x in rep["lessons"]] == [6, 1, 1]
    assert sum(x["count"] for x in rep["lessons"]) == rep["parsed"]
    json.dumps(rep)  # JSON-able


def test_recurrence_rule_two_is_not_a_candidate_three_is(tmp_path):
    run = _write(tmp_path / "r", [(1, DRAWER, False), (1, DRAWER_2, False), (2, DRAWER_3, True),
                                  (1, PUSH, False), (2, PUSH_2, False)])
    rep = lessons_report(run)
    drawer, push = _by_text(rep, DRAWER), _by_text(rep, PUSH)
    assert (drawer["count"], drawer["candidate"]) == (3, True)
    assert drawer["kind"] in ("environment check", "prompt rule", "evaluation test")
    assert (push["count"], push["candidate"], push["kind"]) == (2, False, None)
    assert _by_text(lessons_report(run, min_recur=2), PUSH)["candidate"]
    assert not _by_text(lessons_report(run, min_recur=4), DRAWER)["candidate"]
    md = rep["markdown"]
    cands = md.split("## System-design candidates")[1].split("## Other lessons")[0]
    assert "| 1 | 3 |" in cands and "mug" in cands and "Push" not in cands and "push" not in cands


def test_trend_fading_rising_persistent(tmp_path):
    rows = []
    for it in (1, 2, 3, 4):
        rows += [(it, SEARCH, True), (it, SEARCH, False)]  # every iteration, same rate
        if it <= 2:
            rows += [(it, DRAWER, False), (it, DRAWER_2, False)]  # early only
        else:
            rows += [(it, PUSH, True), (it, PUSH_2, True)]  # late only
    rep = lessons_report(_write(tmp_path / "r", rows))
    drawer, push, search = _by_text(rep, DRAWER), _by_text(rep, PUSH), _by_text(rep, SEARCH)
    assert drawer["trend"] == "fading" and drawer["rates"]["early"] == 0.5 and drawer["rates"]["late"] == 0.0
    assert drawer["rates"]["slope"] < 0
    assert push["trend"] == "rising" and push["rates"]["late"] == 0.5 and push["rates"]["slope"] > 0
    assert search["trend"] == "persistent" and search["rates"]["early"] == search["rates"]["late"] == 0.5
    assert "fading (50.0% → 0.0%)" in rep["markdown"]
    one = lessons_report(_write(tmp_path / "one", [(1, DRAWER, False)] * 3))
    assert one["lessons"][0]["trend"] == "n/a"


def test_trend_is_per_parsed_skill_not_per_trajectory(tmp_path):
    """Parse failures late in the run do not make a lesson look distilled."""
    rows = [(1, DRAWER, False), (1, SEARCH, False), (2, DRAWER, False), (2, SEARCH, False)]
    rows += [(2, None, False)] * 6
    rep = lessons_report(_write(tmp_path / "r", rows))
    assert _by_text(rep, DRAWER)["trend"] == "persistent"


def test_parse_failures_are_counted_but_not_grouped(tmp_path):
    run = _write(tmp_path / "r", [(1, None, False), (1, DRAWER, True), (1, "", False), (2, None, True),
                                  (2, DRAWER_2, False)])
    (run / "skills.jsonl").open("a").write('{"iteration": 3, "traj_id": 9, "skill": "Open the dra')  # cut line
    rep = lessons_report(run)
    assert (rep["analysed"], rep["parsed"], rep["parse_failures"], rep["unreadable_lines"]) == (5, 2, 3, 1)
    assert [x["count"] for x in rep["lessons"]] == [2]
    assert rep["lessons"][0]["examples"] == [1, 4]
    assert "parse failures (counted, not grouped): 3" in rep["markdown"]


def test_deterministic(tmp_path):
    rows = [(it, t, it % 2 == 0) for it in (1, 2, 3) for t in (DRAWER, PUSH, SEARCH, DRAWER_2, PUSH_2, DRAWER_3)]
    a = lessons_report(_write(tmp_path / "a", rows))
    b = lessons_report(_write(tmp_path / "a", rows))
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    c = lessons_report(_write(tmp_path / "a", rows, shuffle=3))  # file order does not matter either
    assert json.dumps(c, sort_keys=True) == json.dumps(a, sort_keys=True)


def test_kind_heuristic():
    assert suggest_kind("Answer with exactly one command copied from the admissible actions.") == "environment check"
    assert suggest_kind("Never push a box into a corner; it can never reach a target.") == "environment check"
    assert suggest_kind("To put two cloths in the cabinet: take one, then the second.") == "evaluation test"
    assert suggest_kind("Visit each receptacle once until you see it. Copy commands exactly.") == "prompt rule"


# ------------------------------------------------------------------------------------ folders, CLI entry
def test_several_runs_and_a_comparison_folder(tmp_path):
    _write(tmp_path / "cmp" / "seed-seed0", [(1, DRAWER, False), (2, PUSH, True)])
    _write(tmp_path / "cmp" / "seed-seed1", [(1, DRAWER_2, True), (2, DRAWER_3, True)])
    (tmp_path / "cmp" / "grpo-seed0").mkdir()  # no skills: skipped inside a comparison folder
    rep = lessons_report([tmp_path / "cmp" / "seed-seed0", tmp_path / "cmp" / "seed-seed1"])
    drawer = _by_text(rep, DRAWER)
    assert drawer["count"] == 3 and drawer["iterations"] == {"1": 2, "2": 1}
    assert drawer["examples"] == ["seed-seed0:0", "seed-seed1:0", "seed-seed1:1"]
    assert lessons_report(tmp_path / "cmp")["lessons"] == rep["lessons"]


def test_main_lessons_writes_markdown_and_errors(tmp_path):
    run = _write(tmp_path / "seed-seed0", [(1, DRAWER, False)] * 3)
    path = main_lessons([run], None, DEFAULT_THRESHOLD, 3)
    assert path == str(run / "lessons.md")
    assert Path(path).read_text().startswith("# Lessons: seed-seed0")
    assert json.loads((run / "lessons.json").read_text())["lessons"][0]["count"] == 3
    out = tmp_path / "notes" / "l.md"
    assert main_lessons([run], out, 0.5, 3) == str(out) and out.is_file()
    (tmp_path / "grpo-seed0").mkdir()
    with pytest.raises(SeedRLError, match=r"grpo-seed0/skills\.jsonl not found.*seed"):
        main_lessons([run, tmp_path / "grpo-seed0"], None, 0.5, 3)
    with pytest.raises(SeedRLError, match="threshold"):
        lessons_report(run, threshold=0.0)


def test_lessons_command_through_the_cli(tmp_path):
    from typer.testing import CliRunner

    from seedrl.cli import app

    run = _write(tmp_path / "seed-seed0", [(1, DRAWER, False), (2, DRAWER_2, False), (3, DRAWER_3, True),
                                           (3, PUSH, True)])
    r = CliRunner().invoke(app, ["lessons", str(run), "--min-recur", "3"])
    assert r.exit_code == 0, r.output
    rep = json.loads((run / "lessons.json").read_text())
    assert [x["count"] for x in rep["lessons"]] == [3, 1] and [x["candidate"] for x in rep["lessons"]] == [True, False]
    r = CliRunner().invoke(app, ["lessons", str(run), "--threshold", "2"])
    assert r.exit_code == 2 and "threshold" in r.output


def test_fact_agreement_overall_by_outcome_and_per_lesson(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    rows = [(1, 0, "The apple was in the fridge; look there first.", True, True),
            (1, 1, "The apple was in the fridge; look there first!", False, False),
            (2, 2, "The apple was in the fridge, look there first.", False, True),
            (2, 3, "Always end every reply with one action in tags.", False, None)]
    (run / "skills.jsonl").write_text("".join(json.dumps(
        {"iteration": it, "traj_id": i, "task_id": f"t{i}", "success": won, "skill": sk, "fact_agrees": fa}) + "\n"
        for it, i, sk, won, fa in rows))
    rep = lessons_report(run)
    assert rep["fact_agreement"] == {"all": {"share": round(2 / 3, 4), "checked": 3}, "success": {"share": 1.0, "checked": 1},
                                     "failure": {"share": 0.5, "checked": 2}}
    apple = next(x for x in rep["lessons"] if "apple" in x["text"])
    assert apple["count"] == 3 and apple["fact_agreement"] == round(2 / 3, 4)
    assert "facts that agree with the env's oracle: 66.7% of 3 checkable skills" in rep["markdown"]
    assert next(x for x in rep["lessons"] if "tags" in x["text"])["fact_agreement"] is None


def _run_folder(path: Path, method: str | None, metrics: list[dict] | None = None) -> Path:
    path.mkdir(parents=True)
    if method is not None:
        (path / "config.yaml").write_text(f"run_dir: {path}\nalgo:\n  name: {method}\n")
    if metrics is not None:
        (path / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    return path


def test_a_method_without_skills_and_a_run_that_analysed_nothing_are_told_apart(tmp_path):
    grpo = _run_folder(tmp_path / "grpo", "grpo", [{"iteration": 1}])
    with pytest.raises(SeedRLError, match=r"grpo/skills\.jsonl not found: grpo runs write no skills \(only these"):
        lessons_report(grpo)
    skipped = [{"iteration": i, "update/skipped": 1} for i in (1, 2, 3)]
    seed = _run_folder(tmp_path / "seed", "seed", skipped)
    with pytest.raises(SeedRLError) as e:
        lessons_report(seed)
    assert "seed/skills.jsonl not found: this seed run analysed no trajectory (3 iterations, every one skipped by " \
           "dynamic sampling before its analysis)" in str(e.value) and "GRPO" not in str(e.value)
    fresh = _run_folder(tmp_path / "fresh", "seed")
    with pytest.raises(SeedRLError, match=r"this seed run analysed no trajectory \(no iteration finished\)"):
        lessons_report(fresh)
    with pytest.raises(SeedRLError, match=r"is not a run folder of a method with skills"):
        lessons_report(_run_folder(tmp_path / "bare", None))


def test_an_empty_skills_file_is_one_error_line_and_writes_no_report(tmp_path):
    from typer.testing import CliRunner

    from seedrl.cli import app

    run = _run_folder(tmp_path / "seed", "seed", [{"iteration": 1}, {"iteration": 2}])
    (run / "skills.jsonl").write_text("")
    r = CliRunner().invoke(app, ["lessons", str(run)])
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "skills.jsonl holds no skill row: this seed run analysed no trajectory " \
                                "(2 iterations)" in lines[0], r.output
    assert not (run / "lessons.md").exists() and not (run / "lessons.json").exists()
    # several runs: an error only when none has a row
    (run / "skills.jsonl").write_text('{"iteration": 1, "cut')
    empty = _run_folder(tmp_path / "seed3", "seed")
    (empty / "skills.jsonl").write_text("\n")
    with pytest.raises(SeedRLError, match=r"none of the skills.jsonl of the 2 runs \(seed, seed3\) holds a skill row "
                                          r"\(1 unreadable lines\)"):
        lessons_report([run, empty])
    assert lessons_report([run, _write(tmp_path / "seed2", [(1, DRAWER, False)])])["analysed"] == 1
