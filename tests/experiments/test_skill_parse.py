"""benchmarks/skill_parse.py: parse counts split by outcome, over all runs and per training iteration."""

import json
import subprocess
import sys
from pathlib import Path

from tests.helpers import load_script

_PATH = Path(__file__).parents[2] / "benchmarks" / "skill_parse.py"
sp = load_script("benchmarks/skill_parse.py")


def row(it, success, skill):
    return {"iteration": it, "success": success, "skill": "a rule" if skill else None,
            "error": None if skill else "parse: truncated JSON (no closing brace)"}


ROWS = [row(1, False, True), row(1, False, False), row(1, True, True),
        row(2, False, True), row(2, True, False), row(2, True, True)]


def test_parse_stats_splits_by_outcome_and_counts_errors():
    st = sp.parse_stats(ROWS)
    assert st["failure"] == {"n": 3, "parsed": 2} and st["success"] == {"n": 3, "parsed": 2}
    assert st["errors"] == [("parse: truncated JSON (no closing brace)", 2)]


def test_by_iteration_counts_each_iteration_apart():
    it = sp.by_iteration(ROWS)
    assert list(it) == [1, 2]
    assert it[1]["failure"] == {"n": 2, "parsed": 1} and it[1]["success"] == {"n": 1, "parsed": 1}
    assert it[2]["failure"] == {"n": 1, "parsed": 1} and it[2]["success"] == {"n": 2, "parsed": 1}


def test_cli_prints_the_iterations_over_all_runs(tmp_path):
    for name, rows in (("a", ROWS[:3]), ("b", ROWS[3:])):
        (tmp_path / name).mkdir()
        (tmp_path / name / "skills.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = subprocess.run([sys.executable, str(_PATH), str(tmp_path / "a"), str(tmp_path / "b")],
                         capture_output=True, text=True, check=True).stdout
    # 2 of 3 with its Wilson interval: (p + z²/2n ± z·sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n), z = 1.96
    assert "all: 6 trajectories; parsed on success 2/3 [0.208, 0.939], failure 2/3 [0.208, 0.939]" in out
    assert "by iteration (all runs): 1: failure 1/2, success 1/1; 2: failure 1/1, success 1/2" in out
