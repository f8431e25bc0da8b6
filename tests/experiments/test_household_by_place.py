"""benchmarks/household_by_place.py: the prior rank of the object's place, and success per rank from each
cell's per-task outcomes."""

import json
from pathlib import Path

import pytest

from seedrl.envs.household.world import generate_game, rclass, training_prior
from seedrl.envs.panels import build_panel
from tests.helpers import load_script

hp = load_script("benchmarks/household_by_place.py")


def test_rank_is_the_place_class_position_by_training_probability():
    ids = build_panel("household", "valid_unseen", 40).task_ids
    ranks = [hp.place_rank(t) for t in ids]
    for t, r in zip(ids, ranks):
        g = generate_game(t)
        probs = training_prior()[g.object_class]
        by_prob = sorted(probs, key=lambda c: -probs[c])
        assert by_prob[r] == rclass(g.location)
    assert len(set(ranks)) > 1  # the shifted prior puts objects off the training favourite


def _cell(runs: Path, name: str, split: str, won: dict[str, bool]) -> None:
    (runs / name / "eval").mkdir(parents=True, exist_ok=True)
    (runs / name / "eval" / f"iter_000008_{split}.json").write_text(
        json.dumps({"tasks": [{"task_id": t, "won": w} for t, w in won.items()]}))


def test_success_per_rank_counts_each_methods_own_outcomes(tmp_path):
    ids = build_panel("household", "valid_seen", 60).task_ids
    zero = [t for t in ids if hp.place_rank(t) == 0][:3]
    one = [t for t in ids if hp.place_rank(t) == 1][:2]
    assert len(zero) == 3 and len(one) == 2
    _cell(tmp_path, "a-seed0", "valid_seen", {zero[0]: True, zero[1]: True, zero[2]: False, one[0]: True, one[1]: False})
    _cell(tmp_path, "b-seed0", "valid_seen", {zero[0]: True, zero[1]: False, zero[2]: False, one[0]: False, one[1]: False})
    _cell(tmp_path, "a-seed1", "valid_seen", {one[0]: True})
    _cell(tmp_path, "b-seed1", "valid_seen", {one[0]: True})
    got = hp.by_place(tmp_path, "a", "b", range(0, 2), "valid_seen", 8)
    assert got[0] == pytest.approx({"n": 3, "a": 2 / 3, "b": 1 / 3})
    assert got[1] == pytest.approx({"n": 3, "a": 2 / 3, "b": 1 / 3})
    with pytest.raises(SystemExit, match="missing"):
        hp.by_place(tmp_path, "a", "b", range(0, 3), "valid_seen", 8)
