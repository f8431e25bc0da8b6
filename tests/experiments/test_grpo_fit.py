"""benchmarks/grpo_fit.py: trained vs unseen tasks of a panel, rollout blocks, how far the policy moved."""

import json

import pytest

from seedrl.envs.panels import build_panel
from seedrl.errors import SeedRLError
from tests.helpers import load_script

gf = load_script("benchmarks/grpo_fit.py")

KW = {"dim": [5, 5], "unseen_dim": [6, 5], "coords": True}


def test_split_wins_counts_trained_and_other_tasks_by_id():
    assert gf.split_wins("1011", ["a", "b", "c", "d"], {"a", "b"}) == ((1, 2), (2, 2))
    assert gf.split_wins("01", ["a", "b"], set()) == ((0, 0), (1, 2))
    with pytest.raises(ValueError, match="3 outcomes for a panel of 2"):
        gf.split_wins("011", ["a", "b"], set())


def test_block_means_and_movement_by_hand():
    assert gf.block_means([1.0, 0.0, 0.5, 0.5, 1.0], 2) == [0.5, 0.5, 1.0]
    rows = [{"iteration": 1, "ppo/approx_kl": 0.01, "loss/kl": 0.0, "ppo/clipfrac": 0.03},
            {"iteration": 2, "ppo/approx_kl": 0.4, "loss/kl": 0.2, "ppo/clipfrac": 0.01},
            {"iteration": 3, "ppo/approx_kl": -0.001, "loss/kl": 5.1, "ppo/clipfrac": 0.0}]
    assert gf.movement(rows) == {"kl_ref_last": 5.1, "approx_kl_max": 0.4, "approx_kl_max_iteration": 2,
                                 "clipfrac_max": 0.03}
    # a row without approx_kl (e.g. an iteration with no update) does not shift which iteration is named
    assert gf.movement([{"iteration": 1}] + rows)["approx_kl_max_iteration"] == 2
    assert gf.movement([{"iteration": 1, "loss/kl": 0.3}]) == {"kl_ref_last": 0.3, "approx_kl_max": None,
                                                               "approx_kl_max_iteration": None,
                                                               "clipfrac_max": None}


def _cell(train_split, train_size):
    return {"algo": "grpo", "seed": 0, "budget_episodes": 8, "splits": ["valid_seen"], "run_dir": "nowhere",
            "config": {"env": {"name": "sokoban", "kwargs": KW, "train_split": train_split, "train_size": train_size},
                       "eval": {"num_tasks": None}, "optim": {"lr": 1e-4}}}


def test_a_run_trained_on_part_of_the_panel_sees_those_tasks_as_trained():
    cfg = _cell("valid_seen", 2)["config"]
    trained, ids = gf.train_task_ids(cfg), gf.eval_task_ids(cfg, "valid_seen")
    assert len(ids) == 128 and trained == set(build_panel("sokoban", "valid_seen", 2, **KW).task_ids)
    assert sum(t in trained for t in ids) == 2
    # the hashes the cell recorded must name the rebuilt panels: outcomes are paired to tasks by position
    stored = build_panel("sokoban", "valid_seen", None, **KW).hash
    assert gf.eval_task_ids(cfg, "valid_seen", stored) == ids
    with pytest.raises(SeedRLError, match="valid_seen panel rebuilt .* recorded 0123456789abcdef"):
        gf.eval_task_ids(cfg, "valid_seen", "0123456789abcdef")
    with pytest.raises(SeedRLError, match="train panel rebuilt"):
        gf.train_task_ids(cfg, stored)  # the 128-room panel's hash is not the 2-room train panel's
    # the usual run trains on the train split: no evaluated room is a train room
    assert not set(gf.eval_task_ids(_cell("train", None)["config"], "valid_seen")) & gf.train_task_ids(
        _cell("train", None)["config"])


def test_report_reads_the_metrics_copy_next_to_the_cells(tmp_path, capsys):
    cell = _cell("valid_seen", 2)
    ids = gf.eval_task_ids(cell["config"], "valid_seen")
    trained = gf.train_task_ids(cell["config"])
    won0 = "".join("1" if i == 0 else "0" for i in range(len(ids)))
    won1 = "".join("1" if t in trained else "0" for t in ids)  # after training: both trained rooms won
    cell["curve"] = [{"episodes": 0, "panels": {"valid_seen": {"won": won0}}},
                     {"episodes": 8, "panels": {"valid_seen": {"won": won1}}}]
    (tmp_path / "cells").mkdir()
    (tmp_path / "cells" / "grpo-seed0.json").write_text(json.dumps(cell))
    cell["panel_hashes"] = {"train": "0123456789abcdef"}  # a panel that changed since the run: one line
    (tmp_path / "cells" / "grpo-seed0.json").write_text(json.dumps(cell))
    with pytest.raises(SystemExit, match="train panel rebuilt .* recorded 0123456789abcdef"):
        gf.main([str(tmp_path)])
    del cell["panel_hashes"]
    (tmp_path / "cells" / "grpo-seed0.json").write_text(json.dumps(cell))
    gf.main([str(tmp_path)])  # no metrics kept: the greedy evaluations are still read
    out = capsys.readouterr().out
    assert "no metrics.jsonl kept for this cell" in out and "rollout success" not in out
    # final - iteration 0 split by trained/other: the two trained rooms won after training, one won
    # room lost if it was an other room
    gain = 2 - (ids[0] in trained)
    assert f"grpo valid_seen trained (2 tasks), final - iteration 0 over 1 seed(s): {gain / 2:+.3f}" in out
    other_change = -1 / 126 if ids[0] not in trained else 0.0
    assert f"grpo valid_seen other (126 tasks), final - iteration 0 over 1 seed(s): {other_change:+.3f}" in out
    (tmp_path / "metrics" / "grpo-seed0").mkdir(parents=True)
    (tmp_path / "metrics" / "grpo-seed0" / "metrics.jsonl").write_text("")
    with pytest.raises(SystemExit, match="has no rows"):
        gf.main([str(tmp_path)])
    rows = [{"iteration": i, "rollout/success_rate": s, "ppo/approx_kl": k, "loss/kl": 0.01 * i,
             "ppo/clipfrac": 0.002 * i, "rollout/invalid_rate": 0.0} for i, s, k in ((1, 0.25, 0.001), (2, 0.75, 0.003))]
    (tmp_path / "metrics" / "grpo-seed0" / "metrics.jsonl").write_text("\n".join(map(json.dumps, rows)))
    gf.main([str(tmp_path), "--block", "2"])
    out = capsys.readouterr().out
    first = "trained 1/2, other 0/126" if ids[0] in trained else "trained 0/2, other 1/126"
    assert f"0: {first}; 8: trained 2/2, other 0/126" in out
    assert "rollout success by 2 iterations: 0.500" in out
    assert "kl to reference at the end 0.0200; largest approx_kl 3.00e-03 (iteration 2); largest clipfrac 0.0040" in out


def test_a_folder_without_cells_is_one_line(tmp_path):
    with pytest.raises(SystemExit, match="no cells"):
        gf.main([str(tmp_path)])


def test_held_out_is_the_reports_panel_the_others_less_the_demonstration_starts(tmp_path, capsys, monkeypatch):
    """The others are every untrained task (the figures quoted from earlier runs stay reproducible); held out
    leaves out those that start at a demonstration's state, the set the report's ``<split>_heldout`` panel
    leaves out (heldout.demonstration_start_tasks, asked once for all the folder's cells and the split they
    train on). Seen red on: the held-out split printed as the others (the 96 rooms of
    benchmarks/results/sample_efficiency where its report reads 71)."""
    import seedrl.experiments.heldout as heldout

    assert gf.demonstration_start_tasks is heldout.demonstration_start_tasks
    cell = _cell("valid_seen", 2)
    ids = gf.eval_task_ids(cell["config"], "valid_seen")
    trained = gf.train_task_ids(cell["config"])
    others = [t for t in ids if t not in trained]
    demo = {others[0], others[1], next(iter(trained))}  # a trained task that is also a demo start counts as trained
    asked = []

    def starts(cells, split):
        asked.append((len(cells), split))
        return demo, ["the replay pool (by hand)"], ["the start's SFT data"]

    monkeypatch.setattr(gf, "demonstration_start_tasks", starts)
    # iteration 0 wins the two demo-start rooms only; the final policy wins them and one held-out room
    won0 = "".join("1" if t in (others[0], others[1]) else "0" for t in ids)
    won1 = "".join("1" if t in (others[0], others[1], others[2]) else "0" for t in ids)
    cell["curve"] = [{"episodes": 0, "panels": {"valid_seen": {"won": won0}}},
                     {"episodes": 8, "panels": {"valid_seen": {"won": won1}}}]
    (tmp_path / "cells").mkdir()
    (tmp_path / "cells" / "grpo-seed0.json").write_text(json.dumps(cell))
    gf.main([str(tmp_path)])
    out = capsys.readouterr().out
    assert asked == [(1, "valid_seen")]
    assert (f"{tmp_path.name}: valid_seen_heldout: 124 of the 126 other tasks; 2 start at a demonstration's state "
            "(the replay pool (by hand)); not checked: the start's SFT data") in out
    assert "0: trained 0/2, other 2/126 (held out 0/124); 8: trained 0/2, other 3/126 (held out 1/124)" in out
    assert f"grpo valid_seen other (126 tasks), final - iteration 0 over 1 seed(s): {1 / 126:+.3f}" in out
    assert f"grpo valid_seen held out (124 tasks), final - iteration 0 over 1 seed(s): {1 / 124:+.3f}" in out
    # no untrained task starts at a demonstration: held out is the others, and is not printed twice
    demo = set()
    gf.main([str(tmp_path)])
    out = capsys.readouterr().out
    assert "124 of" not in out and "(held out" not in out and "held out (" not in out
    assert "valid_seen_heldout: 126 of the 126 other tasks; 0 start at a demonstration's state" in out
