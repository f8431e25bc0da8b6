"""benchmarks/weight_shift.py: the distance it reports is the L2 norm of the parameter difference."""

import json

import pytest
import torch
from safetensors.torch import save_file

from tests.helpers import load_script

ws = load_script("benchmarks/weight_shift.py")


def test_l2_distance_is_the_norm_over_float_tensors():
    a = {"w": torch.zeros(2, 2), "b": torch.zeros(3), "steps": torch.tensor([5])}
    b = {"w": torch.tensor([[3.0, 0.0], [0.0, 0.0]]), "b": torch.tensor([0.0, 4.0, 0.0]), "steps": torch.tensor([9])}
    assert ws.l2_distance(a, b) == pytest.approx(5.0)  # the integer tensor is not a weight
    assert ws.l2_distance(a, a) == 0.0


def test_l2_distance_refuses_mismatched_models():
    with pytest.raises(ValueError, match="missing"):
        ws.l2_distance({"w": torch.zeros(2)}, {"v": torch.zeros(2)})
    with pytest.raises(ValueError, match="shape"):
        ws.l2_distance({"w": torch.zeros(2)}, {"w": torch.zeros(3)})


def test_model_files_finds_the_weights_of_a_model_folder(tmp_path):
    (tmp_path / "model").mkdir()
    save_file({"w": torch.ones(2)}, tmp_path / "model" / "model.safetensors")
    assert ws.model_files(tmp_path) == [tmp_path / "model" / "model.safetensors"]
    assert ws.model_files(tmp_path / "model") == [tmp_path / "model" / "model.safetensors"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit, match="no model.safetensors"):
        ws.model_files(tmp_path / "empty")
    with pytest.raises(SystemExit, match="does not exist"):
        ws.model_files(tmp_path / "nope" / "model")


def test_sharded_weights_are_merged_and_a_missing_shard_is_named(tmp_path):
    """Real models are saved as shards behind model.safetensors.index.json: every shard's tensors count."""
    m = tmp_path / "model"
    m.mkdir()
    save_file({"a": torch.zeros(2)}, m / "model-00001-of-00002.safetensors")
    save_file({"b": torch.zeros(3)}, m / "model-00002-of-00002.safetensors")
    (m / "config.json").write_text("{}")
    index = {"metadata": {}, "weight_map": {"a": "model-00001-of-00002.safetensors",
                                            "b": "model-00002-of-00002.safetensors"}}
    (m / "model.safetensors.index.json").write_text(json.dumps(index))
    base = ws.load_weights(m)
    assert sorted(base) == ["a", "b"]
    moved = {"a": torch.tensor([3.0, 0.0]), "b": torch.tensor([0.0, 4.0, 0.0])}
    assert ws.l2_distance(moved, base) == pytest.approx(5.0)  # the second shard's tensor is in the norm
    (m / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(SystemExit, match="model-00002-of-00002.safetensors"):
        ws.model_files(m)


def test_same_episodes_prefers_every_episodes_digests_and_falls_back_to_traces(tmp_path):
    """Whether two runs still trained on the same rollouts: per iteration, the episodes both recorded that
    they played identically. Digests (every episode) where both runs have them, else the traced
    trajectories (same traj_id, all actions equal); a model folder has neither."""
    def trace(run, it, trajs):
        (run / "traces").mkdir(parents=True, exist_ok=True)
        body = {"iteration": it, "trajectories": [{"traj_id": i, "steps": [{"action": a} for a in acts]}
                                                  for i, acts in trajs.items()]}
        (run / "traces" / f"iter_{it:06d}.json").write_text(json.dumps(body))

    def digests(run, rows):
        (run / "metrics.jsonl").write_text("".join(json.dumps({"iteration": it, "rollout/digests": d}) + "\n"
                                                   for it, d in rows.items()))

    a, b = tmp_path / "a", tmp_path / "b"
    trace(a, 1, {0: ["up", "left"], 5: ["down"]})
    trace(b, 1, {0: ["up", "left"], 5: ["down"]})
    trace(a, 2, {1: ["up"], 2: ["left", "left"], 9: ["up"]})
    trace(b, 2, {1: ["up"], 2: ["left", "right"], 7: ["up"]})  # 2 differs at its second step; 7/9 not shared
    trace(a, 3, {0: ["up"]})
    assert ws.same_episodes(a, b) == ("traces", {1: (2, 2), 2: (1, 2)})  # iteration 3 only a traced
    digests(a, {1: ["x", "y", "z"], 2: ["p", "q", "r"]})
    assert ws.same_episodes(a, b)[0] == "traces"  # b has no digests: like is compared with like
    digests(b, {1: ["x", "y", "z"], 2: ["p", "Q", "R"]})
    assert ws.same_episodes(a, b) == ("digests", {1: (3, 3), 2: (1, 3)})
    assert ws.same_episodes(tmp_path / "model_folder", a) == ("traces", {})
