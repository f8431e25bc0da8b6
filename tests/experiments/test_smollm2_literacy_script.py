"""benchmarks/smollm2_literacy.sh: four SFTs on the same rows, then three probes, recorded by stand-in commands."""

import os
import stat
import subprocess
from pathlib import Path

ROOT = Path(__file__).parents[2]


def _run(tmp_path: Path, *steps: str, **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    log = tmp_path / "calls.txt"
    log.unlink(missing_ok=True)
    for name in ("seedrl", "python"):  # each records its arguments (and the probe's thread setting), builds nothing
        fake = tmp_path / name
        fake.write_text(f'#!/usr/bin/env bash\necho "{name} OMP=${{OMP_NUM_THREADS:-}} $*" >> {log}\n')
        fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    done = subprocess.run(["bash", "benchmarks/smollm2_literacy.sh", *steps], cwd=ROOT, capture_output=True,
                          text=True, env={**os.environ, "SEEDRL": str(tmp_path / "seedrl"),
                                          "PY": str(tmp_path / "python"), "OUT": str(tmp_path / "sm"),
                                          "PLAIN": "plain/model", **env})
    return done, log.read_text().splitlines() if log.exists() else []


def _setting(call: str, key: str) -> str:
    """The value the last ``--set key=...`` of a call gives (the CLI applies them in order)."""
    args = call.split()
    return [args[i + 1].split("=", 1)[1] for i, a in enumerate(args[:-1])
            if a == "--set" and args[i + 1].startswith(key + "=")][-1]


def test_every_step_in_order_each_model_on_the_same_rows(tmp_path):
    done, calls = _run(tmp_path)
    assert done.returncode == 0, done.stderr
    assert [c.split()[0] + ":" + (c.split()[2] if c.startswith("seedrl") else c.split()[3]) for c in calls] == [
        "seedrl:sft", "seedrl:sft", "seedrl:sft", "seedrl:sft", *["python:--start"] * 3]
    sfts = {_setting(c, "run_dir").rsplit("/", 1)[1]: c for c in calls[:4]}
    assert set(sfts) == {"M1", "PM", "T2", "T1"}
    for c in sfts.values():  # one epoch of the same 128 + 128 games, in steps of 16
        assert (_setting(c, "demo_tasks"), _setting(c, "epochs"), _setting(c, "batch_size")) == ("128", "1", "16")
    assert [_setting(sfts[k], "skill_demo_tasks") for k in ("M1", "PM", "T2", "T1")] == ["128", "0", "128", "128"]
    assert [_setting(sfts[k], "model.name") for k in ("M1", "PM", "T2", "T1")] == [
        "smollm2-135m-instruct", "smollm2-135m-instruct", "plain/model", "tiny-3m"]
    assert [_setting(sfts[k], "lr") for k in ("M1", "PM", "T2", "T1")] == ["1e-4", "1e-4", "5e-4", "1e-3"]
    probes = [c.split() for c in calls[4:]]
    pairs = [(p[p.index("--start") + 1], p[p.index("--plain") + 1]) for p in probes]
    sm = str(tmp_path / "sm")
    assert all(p[p.index("--split") + 1] == "valid_seen" and p.count("--split") == 1 for p in probes)
    assert pairs == [(f"{sm}/M1/model", f"{sm}/PM/model"), (f"{sm}/T2/model", "plain/model"),
                     (f"{sm}/T1/model", "plain/model")]


def test_what_exists_is_kept_and_threads_reach_every_step(tmp_path):
    model = tmp_path / "sm" / "M1" / "model"
    model.mkdir(parents=True)
    (model / "model.safetensors").write_bytes(b"x")
    (tmp_path / "sm" / "probe_T1").mkdir()
    (tmp_path / "sm" / "probe_T1" / "summary.json").write_text("{}")
    done, calls = _run(tmp_path, THREADS="2")
    assert done.returncode == 0, done.stderr
    assert len(calls) == 5 and not any("run_dir=" + str(model.parent) in c for c in calls)
    assert not any("probe_T1" in c for c in calls)
    for c in calls:
        assert (_setting(c, "torch_threads") == "2") if c.startswith("seedrl") else c.startswith("python OMP=2 ")


def test_named_steps_only_and_an_unknown_step_lists_the_valid_ones(tmp_path):
    done, calls = _run(tmp_path, "PM", "probe-T2")
    assert done.returncode == 0 and len(calls) == 2 and "run_dir=" + str(tmp_path / "sm" / "PM") in calls[0]
    assert "probe_T2" in calls[1]
    done, calls = _run(tmp_path, "PM", "M3")  # checked before any step runs
    assert done.returncode == 2 and calls == []
    assert "unknown step 'M3'" in done.stderr and "probe-M1" in done.stderr
