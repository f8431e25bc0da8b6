"""benchmarks/paired_contrast.py: per-seed differences read from the right split and iteration, and the bootstrap."""

import importlib.util
import json
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location(
    "paired_contrast", Path(__file__).parents[2] / "benchmarks" / "paired_contrast.py")
pc = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(pc)


def _cell(runs: Path, name: str, rows: list[tuple[int, str, float]]) -> None:
    (runs / name).mkdir(parents=True)
    (runs / name / "eval.jsonl").write_text(
        "".join(json.dumps({"iteration": i, "split": s, "success_rate": v}) + "\n" for i, s, v in rows))


def test_paired_diffs_take_each_seeds_split_at_the_asked_iteration(tmp_path):
    # rows out of order, and another split with other values: only the asked split and iteration count
    _cell(tmp_path, "a-seed3", [(8, "valid_seen", 0.50), (0, "valid_seen", 0.25), (4, "valid_seen", 0.40),
                                (8, "valid_unseen", 0.90)])
    _cell(tmp_path, "b-seed3", [(0, "valid_seen", 0.25), (4, "valid_seen", 0.30), (8, "valid_seen", 0.35),
                                (8, "valid_unseen", 0.10)])
    _cell(tmp_path, "a-seed4", [(0, "valid_seen", 0.20), (8, "valid_seen", 0.20), (4, "valid_seen", 0.60)])
    _cell(tmp_path, "b-seed4", [(0, "valid_seen", 0.20), (4, "valid_seen", 0.50), (8, "valid_seen", 0.30)])
    assert pc.paired_diffs(tmp_path, "a", "b", range(3, 5), "valid_seen") == pytest.approx([0.15, -0.10])
    assert pc.paired_diffs(tmp_path, "a", "b", range(3, 5), "valid_seen", 4) == pytest.approx([0.10, 0.10])
    assert pc.paired_diffs(tmp_path, "a", "b", range(3, 4), "valid_unseen") == pytest.approx([0.80])
    with pytest.raises(SystemExit, match=r"no valid_seen evaluation at iteration 2 \(evaluated: \[0, 4, 8\]\)"):
        pc.paired_diffs(tmp_path, "a", "b", range(3, 4), "valid_seen", 2)
    with pytest.raises(SystemExit, match="no test evaluation"):
        pc.paired_diffs(tmp_path, "a", "b", range(3, 4), "test")


def test_bootstrap_brackets_the_mean_and_collapses_on_constant_differences():
    assert pc.bootstrap([0.1] * 7) == pytest.approx((0.1, 0.1))
    lo, hi = pc.bootstrap([-0.2, 0.0, 0.1, 0.3, 0.4])
    assert -0.2 < lo < 0.12 < hi < 0.4
    assert pc.bootstrap([-0.2, 0.0, 0.1, 0.3, 0.4]) == (lo, hi)  # seeded
