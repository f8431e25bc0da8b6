"""Held-out sub-panels: a fit check's evaluations read on the tasks the runs never trained on."""

import json

import pytest

from seedrl.envs.panels import build_panel
from seedrl.errors import SeedRLError
from seedrl.experiments.heldout import eval_task_ids, train_task_ids, with_heldout_panels
from seedrl.experiments.report import write_report

KW = {"dim": [5, 5], "unseen_dim": [6, 5], "coords": True}
PANEL = build_panel("sokoban", "valid_seen", None, **KW)  # 128 rooms; the first 3 are the train panel's
IDS = list(PANEL.task_ids)
TRAINED = set(build_panel("sokoban", "valid_seen", 3, **KW).task_ids)


def _won(trained: str, others: str) -> str:
    """A panel's outcome string from the outcomes of its 3 trained rooms and of the first others (the
    rest lost), each in panel order."""
    t, o = iter(trained), iter(others)
    return "".join(next(t) if i in TRAINED else next(o, "0") for i in IDS)


def _config(train_split="valid_seen", train_size=3):
    return {"env": {"name": "sokoban", "kwargs": KW, "train_split": train_split, "train_size": train_size},
            "eval": {"num_tasks": None}}


def _cell(algo, seed, wons, config=None, best_iteration=None):
    """A finished cell evaluated on valid_seen (128 rooms) at iterations 0, 1, 2 with the given outcomes."""
    config = config or _config()
    curve = [{"iteration": i, "episodes": 8 * i,
              "panels": {"valid_seen": {"success": w.count("1") / len(w), "won": w,
                                        "panel_hash": PANEL.hash}}}
             for i, w in enumerate(wons)]
    best = best_iteration if best_iteration is not None else len(wons) - 1
    return {"algo": algo, "method": algo, "seed": seed, "splits": ["valid_seen"], "selected_on": "valid_seen",
            "config": config, "curve": curve, "final": {"valid_seen": curve[-1]["panels"]["valid_seen"]["success"]},
            "best": {"iteration": best, "episodes": 8 * best,
                     "success": {"valid_seen": curve[best]["panels"]["valid_seen"]["success"]}},
            "panel_hashes": {"train": build_panel("sokoban", "valid_seen", 3, **KW).hash,
                             "valid_seen": curve[0]["panels"]["valid_seen"]["panel_hash"]},
            # what the report's header and cost table read
            "env": "sokoban", "model": "tiny", "iterations": len(wons) - 1, "episodes_per_iteration": 8,
            "budget_episodes": 8 * (len(wons) - 1), "eval_every": 1, "config_hash": f"{algo}{seed}",
            "shared_config_hash": "shared", "wall_s": 1.0, "stage_s": {}, "tokens": {}}


def test_the_heldout_panel_keeps_only_the_untrained_tasks_outcomes_in_panel_order():
    cfg = _config()
    ids, trained = eval_task_ids(cfg, "valid_seen"), train_task_ids(cfg)
    assert ids == IDS and trained == TRAINED and sum(t in trained for t in ids) == 3
    wons = [_won("111", ""), _won("000", "11"), _won("111", "1" * 125)]
    cells, derived = with_heldout_panels([_cell("grpo", 0, wons, best_iteration=1)])
    (c,) = cells
    held = [i for i, t in enumerate(ids) if t not in trained]
    for p, w in zip(c["curve"], wons):
        assert p["panels"]["valid_seen_heldout"]["won"] == "".join(w[i] for i in held)
        assert p["panels"]["valid_seen"]["won"] == w  # the whole panel is untouched
    assert [p["panels"]["valid_seen_heldout"]["success"] for p in c["curve"]] == [0.0, 2 / 125, 1.0]
    assert c["splits"] == ["valid_seen", "valid_seen_heldout"]
    assert c["final"]["valid_seen_heldout"] == 1.0
    assert c["best"]["success"]["valid_seen_heldout"] == 2 / 125  # at the best iteration, chosen on valid_seen
    assert "125 tasks of valid_seen outside the train panel" in derived["valid_seen_heldout"]


def test_no_heldout_panel_where_the_runs_trained_on_another_split_and_the_input_is_not_changed():
    cell = _cell("grpo", 0, ["1" * 128], config=_config("train", 32))
    before = json.dumps(cell)
    cells, derived = with_heldout_panels([cell])
    assert derived == {} and cells[0]["splits"] == ["valid_seen"]
    cells, derived = with_heldout_panels([_cell("grpo", 0, ["1" * 128, "0" * 128])])
    assert derived and json.dumps(cell) == before


def test_a_changed_env_fails_instead_of_pairing_outcomes_with_other_tasks():
    cell = _cell("grpo", 0, ["1" * 128])
    cell["config"]["env"]["kwargs"] = {**KW, "coords": False}  # the panel rebuilt now is another one
    cell["panel_hashes"]["train"] = "0123456789abcdef"
    with pytest.raises(SeedRLError, match="train panel rebuilt .* recorded 0123456789abcdef"):
        with_heldout_panels([cell])


def test_the_report_pairs_methods_and_measures_efficiency_on_the_heldout_panel(tmp_path):
    # grpo gains 2 held-out rooms by iteration 2; "other" gains them already at iteration 1
    grpo = [_cell("grpo", s, [_won("111", ""), _won("111", ""), _won("111", "11")]) for s in (0, 1)]
    other = [_cell("other", s, [_won("111", ""), _won("111", "11"), _won("111", "11")]) for s in (0, 1)]
    s = write_report(grpo + other, tmp_path, efficiency_split="valid_seen_heldout")
    assert s["splits"] == ["valid_seen", "valid_seen_heldout"]
    assert s["learning"]["grpo"]["valid_seen_heldout"]["mean"] == pytest.approx(2 / 125)
    assert s["paired"]["final"]["other"]["valid_seen_heldout"]["mean"] == pytest.approx(0.0)
    eff = s["efficiency"]
    assert eff["split"] == "valid_seen_heldout" and eff["threshold"] == pytest.approx(2 / 125)
    assert eff["methods"]["grpo"]["episodes"] == 16 and eff["methods"]["other"]["episodes"] == 8
    report = (tmp_path / "report.md").read_text()
    assert "- panel valid_seen_heldout: the 125 tasks of valid_seen outside the train panel" in report
