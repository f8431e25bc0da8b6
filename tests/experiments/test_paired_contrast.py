"""benchmarks/paired_contrast.py: per-seed differences read from the right split and iteration, and both
intervals from seedrl.experiments.stats (the seeds x tasks one from each evaluation's per-task outcomes)."""

import json
from pathlib import Path

import pytest

from seedrl.experiments.stats import paired_task_bootstrap
from tests.helpers import load_script

pc = load_script("benchmarks/paired_contrast.py")


def _cell(runs: Path, name: str, rows: list[tuple[int, str, str]]) -> None:
    """rows: (iteration, split, per-task outcomes as a 0/1 string); success is their mean."""
    (runs / name / "eval").mkdir(parents=True)
    for i, s, won in rows:
        (runs / name / "eval" / f"iter_{i:06d}_{s}.json").write_text(
            json.dumps({"tasks": [{"won": c == "1"} for c in won]}))
    (runs / name / "eval.jsonl").write_text("".join(
        json.dumps({"iteration": i, "split": s, "success_rate": won.count("1") / len(won)}) + "\n"
        for i, s, won in rows))


def test_contrast_takes_each_seeds_split_at_the_asked_iteration(tmp_path):
    # rows out of order, and another split with other values: only the asked split and iteration count
    _cell(tmp_path, "a-seed3", [(8, "valid_seen", "1110"), (0, "valid_seen", "1000"), (4, "valid_seen", "1100"),
                                (8, "valid_unseen", "1111")])
    _cell(tmp_path, "b-seed3", [(0, "valid_seen", "1000"), (4, "valid_seen", "1000"), (8, "valid_seen", "1000"),
                                (8, "valid_unseen", "0000")])
    _cell(tmp_path, "a-seed4", [(0, "valid_seen", "0100"), (8, "valid_seen", "0100"), (4, "valid_seen", "0111")])
    _cell(tmp_path, "b-seed4", [(0, "valid_seen", "0100"), (4, "valid_seen", "0110"), (8, "valid_seen", "0110")])
    last = pc.contrast(tmp_path, "a", "b", range(3, 5), "valid_seen")
    assert last["seeds"]["per_seed"] == pytest.approx({3: 0.50, 4: -0.25})
    assert pc.contrast(tmp_path, "a", "b", range(3, 5), "valid_seen", 4)["seeds"]["per_seed"] == \
        pytest.approx({3: 0.25, 4: 0.25})
    assert pc.contrast(tmp_path, "a", "b", range(3, 4), "valid_unseen")["seeds"]["per_seed"] == pytest.approx({3: 1.0})
    # the seeds x tasks interval is the report's, on the outcomes of the evaluations the differences came from
    assert last["tasks"] == paired_task_bootstrap({3: "1110", 4: "0100"}, {3: "1000", 4: "0110"})
    with pytest.raises(SystemExit, match=r"no valid_seen evaluation at iteration 2 \(evaluated: \[0, 4, 8\]\)"):
        pc.contrast(tmp_path, "a", "b", range(3, 4), "valid_seen", 2)
    with pytest.raises(SystemExit, match="no test evaluation"):
        pc.contrast(tmp_path, "a", "b", range(3, 4), "test")


def test_without_per_task_outcomes_there_is_no_seeds_x_tasks_interval(tmp_path):
    _cell(tmp_path, "a-seed0", [(8, "valid_seen", "11")])
    _cell(tmp_path, "b-seed0", [(8, "valid_seen", "01")])
    (tmp_path / "b-seed0" / "eval" / "iter_000008_valid_seen.json").unlink()
    c = pc.contrast(tmp_path, "a", "b", range(0, 1), "valid_seen")
    assert c["tasks"] is None and c["seeds"]["per_seed"] == {0: 0.5}


def test_pooled_folders_and_the_shared_head_of_the_panels(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    _cell(one, "a-seed0", [(8, "valid_seen", "1100")])
    _cell(one, "b-seed0", [(8, "valid_seen", "0100")])
    # a later run on a panel twice as large: its first 4 tasks are the earlier panel's
    _cell(two, "a-seed1", [(8, "valid_seen", "01101111")])
    _cell(two, "b-seed1", [(8, "valid_seen", "11000000")])
    c = pc.contrast([one, two], "a", "b", range(0, 2), "valid_seen", tasks=4)
    assert c["seeds"]["per_seed"] == pytest.approx({0: 0.25, 1: 0.0})
    assert c["tasks"] == paired_task_bootstrap({0: "1100", 1: "0110"}, {0: "0100", 1: "1100"})
    whole = pc.contrast([one, two], "a", "b", range(1, 2), "valid_seen")
    assert whole["seeds"]["per_seed"] == pytest.approx({1: 0.5})  # without --tasks: the whole panel
    with pytest.raises(SystemExit, match="only 4 tasks"):
        pc.contrast([one, two], "a", "b", range(0, 2), "valid_seen", tasks=8)
    with pytest.raises(SystemExit, match="no cell a-seed2"):
        pc.contrast([one, two], "a", "b", range(0, 3), "valid_seen")


def test_a_method_named_with_its_folder_pairs_one_method_across_two_comparisons(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    _cell(one, "grpo-seed0", [(8, "valid_seen", "1110")])
    _cell(two, "grpo-seed0", [(8, "valid_seen", "1000")])
    c = pc.contrast([two], str(one / "grpo"), str(two / "grpo"), range(0, 1), "valid_seen")
    assert c["seeds"]["per_seed"] == pytest.approx({0: 0.5})
    assert c["tasks"] == paired_task_bootstrap({0: "1110"}, {0: "1000"})


def _cell_ids(runs: Path, name: str, tasks: list[tuple[str, bool]]) -> None:
    (runs / name / "eval").mkdir(parents=True)
    (runs / name / "eval" / "iter_000008_valid_seen.json").write_text(
        json.dumps({"tasks": [{"task_id": t, "won": w} for t, w in tasks]}))
    (runs / name / "eval.jsonl").write_text(json.dumps(
        {"iteration": 8, "split": "valid_seen", "success_rate": sum(w for _, w in tasks) / len(tasks)}) + "\n")


def test_a_task_filter_pairs_only_the_kept_games(tmp_path):
    # games "x*" are kept: a's lead is on them (+1 of 2), b's on the others; the whole panel is a tie
    _cell_ids(tmp_path, "a-seed0", [("x1", True), ("y1", False), ("x2", False), ("y2", False)])
    _cell_ids(tmp_path, "b-seed0", [("x1", False), ("y1", True), ("x2", False), ("y2", False)])
    whole = pc.contrast(tmp_path, "a", "b", range(0, 1), "valid_seen")
    kept = pc.contrast(tmp_path, "a", "b", range(0, 1), "valid_seen", keep=lambda t: t.startswith("x"))
    assert whole["seeds"]["per_seed"] == pytest.approx({0: 0.0})
    assert kept["seeds"]["per_seed"] == pytest.approx({0: 0.5}) and kept["games"] == {0: 2}
    assert kept["tasks"] == paired_task_bootstrap({0: "10"}, {0: "00"})
    with pytest.raises(SystemExit, match="keeps no task"):
        pc.contrast(tmp_path, "a", "b", range(0, 1), "valid_seen", keep=lambda t: False)
    _cell_ids(tmp_path, "a-seed1", [("x1", True), ("y1", False)])
    _cell_ids(tmp_path, "b-seed1", [("y1", True), ("x1", False)])  # another order: not pairable
    with pytest.raises(SystemExit, match="different tasks"):
        pc.contrast(tmp_path, "a", "b", range(1, 2), "valid_seen", keep=lambda t: True)


def test_the_place_filter_keeps_the_games_off_the_training_favourite():
    from seedrl.envs.household.world import place_rank
    from seedrl.envs.panels import build_panel

    ids = build_panel("household", "valid_seen", 60).task_ids
    off = pc.place_filter(1)
    assert [t for t in ids if off(t)] == [t for t in ids if place_rank(t) >= 1]
    assert 0 < sum(map(off, ids)) < len(ids)
    on = pc.place_filter(0, 0)  # the prior's favourite only: exactly the games the first filter drops
    assert [t for t in ids if on(t)] == [t for t in ids if not off(t)]
    mid = pc.place_filter(1, 2)
    assert [t for t in ids if mid(t)] == [t for t in ids if place_rank(t) in (1, 2)]
