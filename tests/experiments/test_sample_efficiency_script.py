"""benchmarks/sample_efficiency.py: issue 35's comparison as one resumable command (CPU and GPU sizes)."""

import json

import pytest

from tests.helpers import load_script

se = load_script("benchmarks/sample_efficiency.py")

# a tiny model at a size the test suite runs in a minute; eval.num_tasks 8 holds 5 of the 32 trained rooms
TINY = ["model.precision=fp32", "env.max_steps=3", "rollout.tasks_per_batch=2", "rollout.group_size=2",
        "rollout.max_new_tokens=8", "optim.mini_batch_size=8", "optim.micro_batch_size=8", "eval.num_tasks=8",
        "eval.batch_size=8", "skills.max_new_tokens=16", "log.progress=false"]


def test_every_cell_runs_the_same_recipe_and_the_gpu_size_only_adds_its_batch(capsys):
    assert se.main(["--out", "/nonexistent", "--dry-run", "--seeds", "0"]) == 0
    cpu = capsys.readouterr().out.splitlines()
    assert len(cpu) == len(se.METHODS)
    for line, (algo, tag, own) in zip(cpu, se.METHODS.values()):
        assert f"--algos {algo} " in line and (f"--tag {tag} " in line) == bool(tag)
        assert all(f"--set {s}" in line or f"--set '{s}'" in line for s in se.RECIPE + own)
        assert "model.device=cuda" not in line and "--budget-episodes 1536" in line
    assert se.main(["--out", "/nonexistent", "--dry-run", "--seeds", "1", "--gpu", "--methods", "sdar"]) == 0
    (gpu,) = capsys.readouterr().out.splitlines()
    assert "--set model.device=cuda" in gpu and "--set rollout.tasks_per_batch=64" in gpu and "--seeds 1," in gpu
    with pytest.raises(SystemExit, match="unknown method 'ppo'; methods: grpo, grpo\\+replay_only"):
        se.main(["--out", "/nonexistent", "--dry-run", "--methods", "grpo,ppo"])


@pytest.mark.slow
def test_the_comparison_runs_end_to_end_on_a_cpu_and_resumes(tmp_path, capsys):
    out = tmp_path / "cmp"
    argv = ["--out", str(out), "--runs-dir", str(tmp_path / "runs"), "--model", "tiny-micro", "--seeds", "0",
            "--budget-episodes", "8", "--eval-every", "1"] + [x for s in TINY for x in ("--set", s)]
    assert se.main(argv) == 0
    cells = {p.stem: json.loads(p.read_text()) for p in (out / "cells").glob("*.json")}
    assert set(cells) == {f"{m}-seed0" for m in se.METHODS}
    ro = cells["grpo+replay_only-seed0"]["config"]["algo"]
    assert ro["pos_adv_coef"] == 0 and ro["neg_adv_coef"] == 0 and ro["replay_coef"] == 1.0
    assert cells["seed+oracle-seed0"]["config"]["skills"]["analyzer"] == "oracle"
    s = json.loads((out / "summary.json").read_text())
    assert s["splits"] == ["valid_seen", "valid_unseen", "valid_seen_heldout"]
    assert s["efficiency_split"] == "valid_seen_heldout"
    # of the 3 untrained rooms of the 8 evaluated, one starts where a replayed demonstration (3 steps) stands
    assert "2 tasks of valid_seen outside the train panel" in s["header"]["derived_panels"]["valid_seen_heldout"]
    assert "1 more start at a demonstration's state" in s["header"]["derived_panels"]["valid_seen_heldout"]
    assert len(s["header"]["shared_config_hashes"]) == 1  # the untagged methods differ only in algo.name
    # a second call finds every cell done and starts none
    capsys.readouterr()
    assert se.main(argv + ["--dry-run"]) == 0
    assert capsys.readouterr().out == ""
