"""benchmarks/household_starts.sh: the chain plain -> L7 -> L9 -> S3, recorded by a stand-in command."""

import os
import stat
import subprocess
from pathlib import Path

ROOT = Path(__file__).parents[2]


def _chain(tmp_path: Path, **env: str) -> list[str]:
    log = tmp_path / "calls.txt"
    fake = tmp_path / "seedrl"  # records its arguments, builds nothing
    fake.write_text(f'#!/usr/bin/env bash\necho "$*" >> {log}\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    subprocess.run(["bash", "benchmarks/household_starts.sh"], cwd=ROOT, check=True, capture_output=True,
                   env={**os.environ, "SEEDRL": str(fake), "OUT": str(tmp_path / "hh"), **env})
    return log.read_text().splitlines()


def test_the_chain_runs_every_step_in_order_and_keeps_what_exists(tmp_path):
    calls = _chain(tmp_path)
    assert [c.split()[0] for c in calls] == ["sft", "sft", "sft", "analyze", "sft"]
    assert "torch_threads=2" not in " ".join(calls)  # the notes' commands: one thread unless asked
    model = tmp_path / "hh" / "L7" / "model"
    model.mkdir(parents=True)
    (model / "model.safetensors").write_bytes(b"x")
    (tmp_path / "calls.txt").unlink()
    kept = _chain(tmp_path)
    assert not any("run_dir=" + str(tmp_path / "hh" / "L7") in c for c in kept) and len(kept) == 4


def test_threads_reach_every_step_and_win_over_the_commands_own(tmp_path):
    calls = _chain(tmp_path, THREADS="2")
    assert len(calls) == 5
    for c in calls:  # last, so it overrides the analysis command's own torch_threads=1
        assert c.endswith("--set torch_threads=2")
