"""benchmarks/by_type.py: a compare cell's per-task outcomes counted per task type (EZPoints' pair of card
values), pooled over seeds, at the start and the last evaluation; a panel it cannot rebuild is refused."""

import json

import pytest

from seedrl.envs.ezpoints.env import EZPointsEnv
from seedrl.envs.panels import build_panel
from seedrl.errors import SeedRLError
from tests.helpers import load_script

bt = load_script("benchmarks/by_type.py")
KW = {"mode": "rgb_array"}


def _cell(out, algo, seed, start: str, final: str, panel_hash: str) -> None:
    def point(won):
        return {"panels": {"valid_seen": {"num_tasks": len(won), "panel_hash": panel_hash, "won": won}}}

    cell = {"algo": algo, "seed": seed, "env": "ezpoints", "config": {"env": {"kwargs": KW}},
            "curve": [point(start), point("0" * len(start)), point(final)]}
    (out / "cells").mkdir(parents=True, exist_ok=True)
    (out / "cells" / f"{algo}-seed{seed}.json").write_text(json.dumps(cell))


def test_outcomes_are_counted_per_pair_at_the_start_and_the_last_point(tmp_path):
    panel = build_panel("ezpoints", "valid_seen", 128, **KW)
    kinds = [EZPointsEnv.task_type(t) for t in panel.task_ids]
    blind = "".join("1" if k == "cards-2-10" else "0" for k in kinds)  # writes 2+10= whatever the cards
    _cell(tmp_path, "grpo", 0, blind, "1" * 128, panel.hash)
    _cell(tmp_path, "grpo", 1, blind, blind, panel.hash)
    _cell(tmp_path, "seed+oracle", 0, blind, "".join("1" if k != "cards-2-6" else "0" for k in kinds), panel.hash)
    table = bt.by_type(tmp_path, "valid_seen")
    n = {k: kinds.count(k) for k in set(kinds)}
    assert table["grpo"]["start"] == {k: ((2 * n[k]) if k == "cards-2-10" else 0, 2 * n[k]) for k in sorted(n)}
    assert table["grpo"]["final"] == {k: ((2 * n[k]), 2 * n[k]) if k == "cards-2-10" else (n[k], 2 * n[k])
                                      for k in sorted(n)}
    assert table["seed+oracle"]["final"]["cards-2-6"] == (0, n["cards-2-6"])
    assert table["seed+oracle"]["final"]["cards-4-8"] == (n["cards-4-8"], n["cards-4-8"])


def test_a_panel_it_cannot_rebuild_is_refused(tmp_path):
    _cell(tmp_path, "grpo", 0, "1" * 128, "1" * 128, "0" * 16)
    with pytest.raises(SeedRLError, match="cannot type it"):
        bt.by_type(tmp_path, "valid_seen")
