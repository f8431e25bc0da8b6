"""seedrl.train.resume by hand: which folder a new run refuses, which config changes a resume may make,
and how the changes it makes are recorded. Through a real run: tests/train/test_checkpoint_faults.py."""

from __future__ import annotations

import json

import pytest
import yaml

from seedrl.config import save_config
from seedrl.errors import SeedRLError
from seedrl.train.resume import (
    check_resume_config,
    config_changes,
    record_resume_config,
    resume_safe,
    unsafe_in_this_run,
    used_run_dir,
)
from tests.helpers import tiny_cfg


def test_a_new_run_refuses_a_folder_with_checkpoints_or_rows(tmp_path):
    assert used_run_dir(tmp_path, False) is None
    (tmp_path / "eval.jsonl").write_text("")  # empty: nothing of an earlier run
    assert used_run_dir(tmp_path, False) is None
    (tmp_path / "metrics.jsonl").write_text('{"iteration": 1}\n')
    assert "holds metrics.jsonl of an earlier run but no checkpoint" in used_run_dir(tmp_path, False)
    assert "already holds checkpoints" in used_run_dir(tmp_path, True)


def test_safe_keys_cover_their_sections_and_nothing_else(tmp_path):
    old = tiny_cfg(tmp_path)
    new = tiny_cfg(tmp_path, **{"iterations": 9, "eval.every": 3, "optim.lr": 0.5})
    assert config_changes(old, new) == {"iterations": (4, 9), "eval.every": (old.eval.every, 3),
                                        "optim.lr": (0.001, 0.5)}
    assert resume_safe("iterations") and resume_safe("eval.every") and resume_safe("log.progress")
    assert not resume_safe("optim.lr") and not resume_safe("evaluation") and not resume_safe("seed")
    assert unsafe_in_this_run(old, new) == {}


def test_check_and_record_a_resume_config(tmp_path):
    cfg = tiny_cfg(tmp_path)
    assert check_resume_config(tmp_path, cfg) == {}  # no config.yaml: nothing to check (a warning)
    save_config(cfg, tmp_path / "config.yaml")
    with pytest.raises(SeedRLError, match=r'optim.lr 0.001 -> 0.5; resume with the run\'s settings') as exc:
        check_resume_config(tmp_path, tiny_cfg(tmp_path, **{"optim.lr": 0.5}))
    assert "\n" not in str(exc.value)
    longer = tiny_cfg(tmp_path, iterations=6)
    changes = check_resume_config(tmp_path, longer)
    assert changes == {"iterations": (4, 6)}
    before = (tmp_path / "config.yaml").read_text()
    record_resume_config(tmp_path, longer, 2, changes)
    assert (tmp_path / "config.original.yaml").read_text() == before
    assert yaml.safe_load((tmp_path / "config.yaml").read_text())["iterations"] == 6
    row = json.loads((tmp_path / "config_changes.jsonl").read_text())
    assert row["iteration"] == 2 and row["changes"] == {"iterations": {"old": 4, "new": 6}}
