"""benchmarks/seed_mechanism.sh: what its grid asks `seedrl compare` for, recorded by a stand-in command."""

import os
import stat
import subprocess
from pathlib import Path

ROOT = Path(__file__).parents[2]


def _grid(tmp_path: Path, seeds: str, jobs: int = 1, **env: str) -> list[str]:
    log = tmp_path / "calls.txt"
    fake = tmp_path / "seedrl"  # records its arguments when it starts, then works a moment
    fake.write_text(f'#!/usr/bin/env bash\necho "$*" >> {log}\nsleep 0.3\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    subprocess.run(["bash", "benchmarks/seed_mechanism.sh", "grid", seeds, str(jobs)], cwd=ROOT, check=True,
                   env={**os.environ, "SEEDRL": str(fake), **env})
    return log.read_text().splitlines()


def test_every_cell_gets_sets_eval_every_and_its_method(tmp_path):
    calls = _grid(tmp_path, "15-16", METHODS="grpo seed+oracle@1", EVAL_EVERY="4",
                  SETS="--set optim.shared_prefix=true --set optim.lr=3e-4")
    assert len(calls) == 4
    for c in calls:  # SETS reaches the cell processes the grid starts (an unexported array would not)
        assert "--set optim.shared_prefix=true --set optim.lr=3e-4" in c and "--eval-every 4" in c
    oracle = [c for c in calls if "--algos seed " in c]
    assert len(oracle) == 2 and all("skills.analyzer=oracle" in c and "algo.opd_coef=1" in c
                                    and "--tag oracle_opd1" in c for c in oracle)


def test_the_grid_runs_a_methods_seeds_side_by_side(tmp_path):
    """JOBS seeds at a time, method by method: the cells that run together have different seeds, so a
    seed's later methods reuse its iteration-0 evaluation; a last chunk of fewer seeds than jobs still
    runs (and the grid exits 0)."""
    calls = _grid(tmp_path, "15-17", jobs=2, METHODS="grpo seed+self")
    cells = [(c.split("--algos ")[1].split()[0], c.split("--seeds ")[1].split(",")[0]) for c in calls]
    assert set(cells[:2]) == {("grpo", "15"), ("grpo", "16")}
    assert set(cells[2:4]) == {("seed", "15"), ("seed", "16")}
    assert set(cells[4:]) == {("grpo", "17"), ("seed", "17")}
