"""Which of a run's self-analyses gave a skill, split by the trajectory's outcome (issue 5, item 4).

Reads the ``skills.jsonl`` every SEED-family run folder writes (one row per analysed trajectory:
success, parsed skill or parse error) and prints, per run and over all runs: parse rate on
successful and on failed trajectories, and the most common parse errors. With ``--stage1`` it also
counts successes and failures in the Stage-1 SFT data the analyzer was trained on, to compare the
outcome mix it learnt from with the one it meets during RL.

    python benchmarks/skill_parse.py runs/compare/alfworld_gen/seed-seed* --stage1 runs/alfworld_stage1/data.jsonl
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path


def parse_stats(rows: list[dict]) -> dict:
    """Counts of parsed skills by trajectory outcome and of parse errors (first 40 characters)."""
    out = {"trajectories": len(rows)}
    for name, won in (("success", True), ("failure", False)):
        sub = [r for r in rows if bool(r.get("success")) is won]
        out[name] = {"n": len(sub), "parsed": sum(bool(r.get("skill")) for r in sub)}
    out["errors"] = Counter((r.get("error") or "")[:40] for r in rows if not r.get("skill")).most_common(4)
    return out


def stage1_mix(path: Path) -> dict:
    """Successful vs failed trajectories among Stage-1 SFT rows (``seedrl analyze`` records each row's
    ``success``)."""
    rows = _jsonl(path)
    succ = sum(bool(r.get("success")) for r in rows)
    return {"rows": len(rows), "success": succ, "failure": len(rows) - succ}


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


def _fmt(s: dict) -> str:
    f = ", ".join(f"{k} {s[k]['parsed']}/{s[k]['n']}" for k in ("success", "failure"))
    return f"{s['trajectories']} trajectories; parsed on {f}; errors {s['errors']}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run folders holding skills.jsonl")
    ap.add_argument("--stage1", type=Path, help="the Stage-1 SFT JSONL (from `seedrl analyze`)")
    a = ap.parse_args()
    every: list[dict] = []
    for run in a.runs:
        rows = _jsonl(run / "skills.jsonl")
        every += rows
        print(f"{run}: {_fmt(parse_stats(rows))}")
    print(f"all: {_fmt(parse_stats(every))}")
    if a.stage1:
        print(f"stage-1 data {a.stage1}: {stage1_mix(a.stage1)}")


if __name__ == "__main__":
    main()
