"""benchmarks/visual_tiny.sh: TASK picks the family's SFT and RL presets, a METHOD+ANALYZER cell sets that
analyzer under its own tag, and a grid runs every (method, seed); recorded by a stand-in ``seedrl``."""

import os
import stat
import subprocess
from pathlib import Path

ROOT = Path(__file__).parents[2]


def _run(tmp_path: Path, *args: str, **env: str) -> tuple[subprocess.CompletedProcess, list[list[str]]]:
    log = tmp_path / "calls.txt"
    log.unlink(missing_ok=True)
    fake = tmp_path / "seedrl"
    fake.write_text(f'#!/usr/bin/env bash\necho "$*" >> {log}\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    done = subprocess.run(["bash", "benchmarks/visual_tiny.sh", *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "SEEDRL": str(fake), "OUT": str(tmp_path / "out"), **env})
    return done, [c.split() for c in log.read_text().splitlines()] if log.exists() else []


def _after(call: list[str], flag: str) -> list[str]:
    return [call[i + 1] for i, a in enumerate(call[:-1]) if a == flag]


def test_each_task_trains_and_compares_with_its_own_presets(tmp_path):
    for task, sft, rl, start in [("sokoban", "sokoban_visual_tiny_sft", "sokoban_visual_rl_tiny", "runs/visual_tiny/sft"),
                                 ("ezpoints", "ezpoints_tiny_sft", "ezpoints_rl_tiny", "runs/ezpoints_tiny/sft")]:
        done, calls = _run(tmp_path, "sft", TASK=task)
        assert done.returncode == 0, done.stderr
        assert calls == [["sft", "--config", f"configs/{sft}.yaml", "--set", f"run_dir={start}"]]
        done, calls = _run(tmp_path, "cell", "grpo", "1", TASK=task)
        assert done.returncode == 0, done.stderr
        (c,) = calls
        assert c[:3] == ["compare", "--config", f"configs/{rl}.yaml"] and f"model.name={start}/model" in c
        assert (_after(c, "--algos"), _after(c, "--seeds"), _after(c, "--tag")) == (["grpo"], ["1,"], [])
        assert not any(s.startswith("skills.analyzer=") for s in _after(c, "--set"))
    for path in ("configs/ezpoints_tiny_sft.yaml", "configs/ezpoints_rl_tiny.yaml"):
        assert (ROOT / path).is_file()
    done, calls = _run(tmp_path, "sft", TASK="alfworld")
    assert done.returncode == 2 and "sokoban or ezpoints" in done.stderr and calls == []


def test_an_analyzer_variant_is_its_own_tagged_cell_and_the_grid_runs_every_method(tmp_path):
    done, calls = _run(tmp_path, "cell", "seed+oracle", "2", TASK="ezpoints")
    assert done.returncode == 0, done.stderr
    (c,) = calls
    assert (_after(c, "--algos"), _after(c, "--tag")) == (["seed"], ["oracle"])
    assert "skills.analyzer=oracle" in _after(c, "--set")
    done, calls = _run(tmp_path, "cell", "seed+oracle@1", "0", TASK="ezpoints")
    (c,) = calls
    assert (_after(c, "--algos"), _after(c, "--tag")) == (["seed"], ["oracle_opd1"])
    assert {"skills.analyzer=oracle", "algo.opd_coef=1"} <= set(_after(c, "--set"))
    done, calls = _run(tmp_path, "cell", "grpo@0.5", "0", TASK="ezpoints")
    (c,) = calls
    assert _after(c, "--tag") == ["opd0.5"] and "algo.opd_coef=0.5" in _after(c, "--set")
    assert not any(s.startswith("skills.analyzer=") for s in _after(c, "--set"))
    done, calls = _run(tmp_path, "grid", "1", TASK="ezpoints", ALGOS="grpo seed+oracle", SEEDS="0 1")
    assert done.returncode == 0, done.stderr
    cells = sorted((_after(c, "--algos")[0], tuple(_after(c, "--tag")), _after(c, "--seeds")[0]) for c in calls)
    assert cells == [("grpo", (), "0,"), ("grpo", (), "1,"), ("seed", ("oracle",), "0,"), ("seed", ("oracle",), "1,")]
    assert all(_after(c, "--budget-episodes") == ["1920"] for c in calls)
