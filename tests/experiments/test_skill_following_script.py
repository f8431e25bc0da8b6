"""benchmarks/skill_following.py: the summary carries the eval's own numbers and the starts' fingerprints."""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("skill_following", ROOT / "benchmarks" / "skill_following.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_acceptance_needs_every_threshold():
    acc = _script().acceptance
    good = {"follow_rate": 0.85, "oracle_lift": 0.25, "mcnemar_p": 1e-5, "harm": -0.01}
    assert all(acc(good).values())
    for key, bad in (("follow_rate", 0.79), ("follow_rate", None), ("oracle_lift", 0.19), ("mcnemar_p", 0.001),
                     ("harm", -0.03), ("harm", 0.021), ("harm", None)):
        assert not all(acc(good | {key: bad}).values()), (key, bad)


@pytest.mark.slow
def test_summary_is_the_evals_numbers_with_both_starts_fingerprints(tmp_path, tiny_tokenizer):
    from seedrl.models.loading import load_model, save_model

    starts = {}
    for name, seed in (("start", 1), ("plain", 2)):
        save_model(load_model("tiny-micro", tokenizer=tiny_tokenizer, init_seed=seed), tiny_tokenizer, tmp_path / name)
        starts[name] = hashlib.sha256((tmp_path / name / "model.safetensors").read_bytes()).hexdigest()
    out = tmp_path / "out"
    s = _script().main(["--start", str(tmp_path / "start"), "--plain", str(tmp_path / "plain"), "--out", str(out),
                        "--num-tasks", "3", "--split", "valid_seen", "--batch-size", "3", "--panel-size", "130"])
    ev = json.loads((out / "literate.json").read_text())["panels"]["valid_seen"]
    assert ev["panel_size"] == 130 and "--panel-size" in s["commands"][0]  # the panel built as asked
    assert {k: s[k] for k in ("follow_rate", "oracle_lift", "mcnemar_p", "harm")} == \
        {k: ev[k] for k in ("follow_rate", "oracle_lift", "mcnemar_p", "harm")}
    assert s["start"]["sha256"] == starts["start"] and s["plain"]["sha256"] == starts["plain"]
    assert s["machine"]["cpu_bf16"] and "--against" in s["commands"][0] and s["panel"] == "valid_seen"
    assert json.loads((out / "summary.json").read_text()) == json.loads(json.dumps(s))
