"""Panel hashes identify exactly their tasks: equivalent option spellings and machine-local options do not
change them, different tasks do; a ``--num-tasks`` subset has its own hash, is seeded, deterministic and
stratified by task type; format 1 manifests still load."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from seedrl.envs.panels import Panel, build_panel
from seedrl.errors import SeedRLError
from seedrl.eval.evaluate import evaluate


# -- the hash covers the normalised options, not their spelling or the machine ---------------------
@pytest.mark.parametrize(("env", "spellings"), [
    ("sokoban", [{"dim": 5}, {"dim": [5, 5]}, {"dim": [5.0, "5"]}, {"dim": (5, 5), "coords": False}]),
    ("sokoban", [{"num_boxes": 2}, {"num_boxes": 2.0}, {"num_boxes": "2"}]),
    ("alfworld-gen", [{"receptacles": 4}, {"receptacles": [4, 4]}, {"receptacles": ["4", 4.0]},
                      {"receptacles": [4, 4], "cache_dir": "/somewhere/else"}]),
    ("textworld", [{}, {"cache_dir": "/a"}, {"cache_dir": Path("/b")}, {"train_games": ["coin-l2", "coin-l3",
                                                                                      "coin-l4", "th-l3", "th-l5",
                                                                                      "th-l7"]}]),
    ("scienceworld", [{}, {"max_engines": 2, "jvm_heap": "1g", "call_timeout_s": 5}, {"simplifications": " easy "}]),
    ("webshop", [{}, {"server_url": "http://10.0.0.7:3000", "timeout_s": 5}]),
    ("search", [{}, {"topk": "3", "world_seed": 0.0}]),
])
def test_equivalent_spellings_and_local_options_share_the_hash(env: str, spellings: list[dict[str, Any]]) -> None:
    panels = [build_panel(env, "valid_seen", 6, **kw) for kw in spellings]
    assert len({p.task_ids for p in panels}) == 1
    assert len({p.hash for p in panels}) == 1, [p.hash for p in panels]


def test_different_tasks_have_different_hashes() -> None:
    base = build_panel("sokoban", "valid_seen", 6)
    others = [build_panel("sokoban", "valid_seen", 6, dim=5), build_panel("sokoban", "valid_seen", 7),
              build_panel("sokoban", "valid_unseen", 6), build_panel("sokoban", "valid_seen", 6, coords=True)]
    assert len({base.hash, *(p.hash for p in others)}) == 1 + len(others)
    # same ids, different households: the generator options are part of the identity
    a = build_panel("alfworld-gen", "valid_seen", 6)
    b = build_panel("alfworld-gen", "valid_seen", 6, receptacles=[4, 8])
    assert a.task_ids == b.task_ids and a.hash != b.hash


def test_local_options_are_still_passed_to_the_env() -> None:
    p = build_panel("textworld", "valid_seen", 2, cache_dir="/tmp/x")
    assert p.env_kwargs == {"cache_dir": "/tmp/x"} and "cache_dir" not in (p.options or {})


# -- subsets ---------------------------------------------------------------------------------------
def _typed_panel() -> Panel:
    """An official-ALFWorld-like panel: sorted paths, so each task type is one contiguous block."""
    types = ["look_at_obj_in_light", "pick_and_place_simple", "pick_clean_then_place_in_recep",
             "pick_heat_then_place_in_recep"]
    ids = tuple(f"valid_seen/{t}-Obj{i}-None-Desk-{i}/trial_{i}" for t in types for i in range(10))
    return Panel(env="alfworld", split="valid_seen", task_ids=ids, env_kwargs={}, options={"allow_partial": False})


def test_subset_hash_differs_from_the_panel_and_is_deterministic() -> None:
    panel = build_panel("sokoban", "valid_seen")
    sub = panel.subset(32)
    assert len(sub) == 32 and set(sub.task_ids) <= set(panel.task_ids)
    assert sub.hash != panel.hash and sub.parent_hash == panel.hash and sub.parent_size == len(panel)
    again = build_panel("sokoban", "valid_seen").subset(32)
    assert again.task_ids == sub.task_ids and again.hash == sub.hash
    assert panel.subset(None) is panel and panel.subset(len(panel)) is panel
    assert panel.subset(31).hash != sub.hash
    # the same in a fresh interpreter (another hash seed)
    code = ("from seedrl.envs.panels import build_panel; "
            "print(build_panel('sokoban', 'valid_seen').subset(32).hash)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "99", "PATH": ""}).stdout.strip()
    assert out == sub.hash


def test_subset_is_stratified_by_task_type() -> None:
    panel = _typed_panel()
    for n in (3, 4, 8):
        sub = panel.subset(n)
        types = [panel_type(t) for t in sub.task_ids]
        assert len(sub) == n and len(set(types)) == min(n, 4), types  # the first n would be one type
        assert list(sub.task_ids) == [t for t in panel.task_ids if t in set(sub.task_ids)]  # panel order
        assert panel.subset(n).task_ids == sub.task_ids
    # proportional: 8 of 4 equal types -> 2 each
    assert sorted(panel_type(t) for t in panel.subset(8).task_ids).count("pick_and_place_simple") == 2


def panel_type(task_id: str) -> str:
    from seedrl.envs.registry import env_class

    return env_class("alfworld").task_type(task_id)


def test_evaluate_plays_and_records_the_subset(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    import seedrl.eval.evaluate as ev

    played: list[str] = []

    def fake_rollout(backend, tokenizer, make_env, task_ids, group_size, settings, seed, traj_offset=0):
        played.extend(task_ids)
        return [SimpleNamespace(task_id=t, won=i % 2 == 0, episode_reward=0.0, steps=[SimpleNamespace(response_ids=[1])],
                                num_invalid=0,
                                num_format_invalid=0, truncated=False, error=None) for i, t in enumerate(task_ids)]

    monkeypatch.setattr(ev, "rollout", fake_rollout)
    panel = build_panel("alfworld-gen", "valid_seen")
    res = evaluate(None, None, panel, max_steps=1, history_length=1, max_new_tokens=1, num_tasks=12, batch_size=5)
    sub = panel.subset(12)
    assert played == list(sub.task_ids)
    assert res["panel_hash"] == sub.hash != panel.hash and res["num_tasks"] == 12
    assert res["full_panel_hash"] == panel.hash and res["panel_size"] == len(panel)
    assert len(res["by_type"]) == 6
    full = evaluate(None, None, panel, max_steps=1, history_length=1, max_new_tokens=1)
    assert full["panel_hash"] == panel.hash and full["num_tasks"] == len(panel)


@pytest.mark.faults
def test_a_panel_whose_every_task_fails_to_start_is_an_error() -> None:
    class NoModel:
        def generate(self, *a: Any, **k: Any) -> Any:
            raise AssertionError("no episode should reach the model")

        def sync_weights(self, model: Any) -> None:
            pass

    # rooms too small to generate (a panel written by hand, past the option checks)
    panel = Panel(env="sokoban", split="valid_seen", task_ids=("3x3-b1-s00001", "3x3-b1-s00002"))
    with pytest.raises(SeedRLError, match="none of the 2 tasks.*3x3-b1-s00001"):
        evaluate(NoModel(), None, panel, max_steps=2, history_length=1, max_new_tokens=4, env_workers=1,
                 step_timeout_s=10)


# -- stored manifests ------------------------------------------------------------------------------
def test_manifests_round_trip_and_format_1_still_loads(tmp_path: Path) -> None:
    panel = build_panel("sokoban", "valid_seen", 5, dim=[5, 5], coords=False)
    panel.save(tmp_path / "p.json")
    assert Panel.load(tmp_path / "p.json").hash == panel.hash
    sub = panel.subset(2)
    sub.save(tmp_path / "s.json")
    loaded = Panel.load(tmp_path / "s.json")
    assert loaded.hash == sub.hash and loaded.parent_hash == panel.hash

    # a format 1 manifest (hash over the raw env kwargs) loads with its stored hash
    old = {"env": "sokoban", "split": "valid_seen", "task_ids": list(panel.task_ids),
           "env_kwargs": {"dim": [5, 5], "coords": False}, "env_version": "1", "version": 1}
    legacy = Panel(env="sokoban", split="valid_seen", task_ids=panel.task_ids, env_kwargs=old["env_kwargs"],
                   version=1)
    (tmp_path / "old.json").write_text(json.dumps(old | {"hash": legacy.legacy_hash}))
    loaded = Panel.load(tmp_path / "old.json")
    assert loaded.hash == legacy.legacy_hash and loaded.task_ids == panel.task_ids
    assert panel.matches(panel.legacy_hash) and panel.matches(panel.hash) and not panel.matches("0" * 16)

    (tmp_path / "bad.json").write_text(json.dumps(old | {"hash": "0" * 16}))
    with pytest.raises(SeedRLError, match="corrupt"):
        Panel.load(tmp_path / "bad.json")
    (tmp_path / "junk.json").write_text("{not json")
    with pytest.raises(SeedRLError, match="cannot be read"):
        Panel.load(tmp_path / "junk.json")
