"""benchmarks/skill_following.py: the summary carries the eval's own numbers and the starts' fingerprints."""

from __future__ import annotations

import hashlib
import json

import pytest

from tests.helpers import load_script


def _script():
    return load_script("benchmarks/skill_following.py")


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


def test_harm_twin_pairs_the_starts_skill_free_wins_with_the_twins(monkeypatch, tmp_path):
    """--twin: harm_twin is the start's skill-free success minus the twin's on the same tasks (sign, pairing
    and p), beside the plain start's harm, which stays the eval's."""
    mod = _script()
    start = [True, True, True, False, False, True]  # the literate start without a skill
    twin = [False, True, False, False, False, True]  # 2 won by the start only, 0 by the twin only
    panel = {"follow_rate": 0.9, "oracle_lift": 0.3, "mcnemar_p": 1e-4, "harm": 0.05, "follow": {"decisions": 7},
             "success_without_skill": 4 / 6, "success_with_skill": 1.0, "won_only_with_skill": 2,
             "won_only_without_skill": 0, "against": {"success": 0.5, "mcnemar_p": 0.6},
             "teacher_argmax_differs_frac": 0.1, "num_tasks": 6, "panel_hash": "h",
             "tasks": [{"task_id": f"t{i}", "won": w} for i, w in enumerate(start)]}
    def tasks(wins):
        return [{"task_id": f"t{i}", "won": w} for i, w in reversed(list(enumerate(wins)))]

    every = [True] * 6  # on valid_unseen both win every game: harm 0, unless a side reads the other panel
    panels = {"valid_seen": panel, "valid_unseen": panel | {"tasks": tasks(every)}}
    monkeypatch.setattr(mod, "probe", lambda ck, plain, out, args: ({"panels": panels, "precision": "bf16"},
                                                                    ["seedrl", "eval"]))
    monkeypatch.setattr(mod, "twin_eval", lambda ck, out, args: ({"panels": {
        "valid_seen": {"success_rate": 2 / 6, "tasks": tasks(twin)},
        "valid_unseen": {"success_rate": 1.0, "tasks": tasks(every)}}}, ["seedrl", "eval", "--checkpoint", ck]))
    monkeypatch.setattr(mod, "weight_fingerprint", lambda p: (str(p), 0))
    s = mod.main(["--start", "s", "--plain", "p", "--twin", "tw", "--out", str(tmp_path), "--split", "valid_seen",
                  "--split", "valid_unseen"])
    p = s["panels"]["valid_seen"]
    assert p["harm_twin"] == s["harm_twin"] == pytest.approx(2 / 6) and p["harm_twin_mcnemar_p"] == 0.5
    assert p["success_twin"] == pytest.approx(2 / 6) and s["harm"] == 0.05 and s["twin"]["path"] == "tw"
    assert s["panels"]["valid_unseen"]["harm_twin"] == 0  # each panel paired with its own
    assert s["commands"][-1] == "seedrl eval --checkpoint tw"
