"""Official ALFWorld data, partly present: every skipped game is named with its reason (log and error), a
smaller panel is accepted only when asked (``allow_partial: true``, part of the panel hash), the data folder
is not, and ``--num-tasks`` subsets of the sorted official panel cover several task types."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from seedrl.envs.alfworld.env import OFFICIAL_SPLITS
from seedrl.envs.panels import build_panel
from seedrl.errors import SeedRLError

TYPES = ["look_at_obj_in_light", "pick_and_place_simple", "pick_heat_then_place_in_recep"]


def _game(root: Path, folder: str, trial: str, *, traj: str | None = None, game: str | None = None) -> str:
    d = root / "json_2.1.1" / "valid_seen" / folder / trial
    d.mkdir(parents=True)
    if traj is not None:
        (d / "traj_data.json").write_text(traj)
    if game is not None:
        (d / "game.tw-pddl").write_text(game)
    return f"valid_seen/{folder}/{trial}"


def _tree(root: Path) -> dict[str, str]:
    """Three playable games of each of three types, plus broken and excluded ones; -> id: what it is."""
    ok_game = json.dumps({"pddl_domain": "", "grammar": "", "pddl_problem": "", "solvable": True})
    out = {}
    for t in TYPES:
        for i in range(3):
            out[_game(root, f"{t}-Obj-None-Desk-{i}", f"trial_T{i}", traj=json.dumps({"task_type": t}),
                      game=ok_game)] = "ok"
    out[_game(root, "pick_and_place_simple-Pen-None-Desk-9", "trial_nogame",
              traj=json.dumps({"task_type": "pick_and_place_simple"}))] = "no game.tw-pddl"
    out[_game(root, "pick_and_place_simple-Pen-None-Desk-8", "trial_badtraj", traj="{truncated",
              game=ok_game)] = "unreadable traj_data.json"
    out[_game(root, "look_at_obj_in_light-Pen-None-Desk-7", "trial_badgame",
              traj=json.dumps({"task_type": "look_at_obj_in_light"}), game='{"solvable": tr')] = "unreadable game.tw-pddl"
    out[_game(root, "look_at_obj_in_light-Pen-None-Desk-6", "trial_notraj", game=ok_game)] = "no traj_data.json"
    # left out by ALFWorld's own filter: not broken, not reported
    out[_game(root, "pick_and_place_with_movable_recep-A-B-C-1", "trial_m",
              traj=json.dumps({"task_type": "pick_and_place_with_movable_recep"}), game=ok_game)] = "excluded"
    return out


@pytest.mark.faults
def test_partial_tree_names_every_skipped_game_and_accepts_a_smaller_panel_only_when_asked(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "data"
    games = _tree(root)
    broken = {g: why for g, why in games.items() if why not in ("ok", "excluded")}
    playable = sorted(g for g, why in games.items() if why == "ok")

    with caplog.at_level(logging.WARNING), pytest.raises(SeedRLError) as info:
        build_panel("alfworld", "valid_seen", data_dir=str(root))  # the full-download size, 140
    msg = str(info.value)
    assert f"9 playable games, fewer than the panel size {OFFICIAL_SPLITS['valid_seen']}" in msg
    assert "allow_partial" in msg and "\n" not in msg
    for g, why in broken.items():
        assert f"{g} ({why}" in msg, (g, msg)
        assert g in caplog.text
    assert "movable" not in msg

    partial = build_panel("alfworld", "valid_seen", data_dir=str(root), allow_partial=True)
    assert list(partial.task_ids) == playable
    assert partial.options == {"allow_partial": True}
    # an explicit smaller size needs no flag; the flag is part of the hash, the data folder is not
    four = build_panel("alfworld", "valid_seen", 4, data_dir=str(root))
    assert len(four) == 4 and four.hash != build_panel("alfworld", "valid_seen", 4, data_dir=str(root),
                                                       allow_partial=True).hash
    moved = tmp_path / "elsewhere"
    shutil.copytree(root, moved)
    assert build_panel("alfworld", "valid_seen", 4, data_dir=moved).hash == four.hash


def test_num_tasks_subset_of_a_sorted_official_panel_covers_the_types(tmp_path: Path) -> None:
    root = tmp_path / "data"
    _tree(root)
    panel = build_panel("alfworld", "valid_seen", data_dir=str(root), allow_partial=True)
    assert {panel.task_ids[i].split("/")[1].split("-")[0] for i in range(3)} == {TYPES[0]}  # first 3: one type
    sub = panel.subset(3)
    assert {t.split("/")[1].split("-")[0] for t in sub.task_ids} == set(TYPES)
    assert panel.subset(3).task_ids == sub.task_ids and sub.hash != panel.hash
