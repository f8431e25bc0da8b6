"""benchmarks/weight_shift.py: the distance it reports is the L2 norm of the parameter difference."""

import importlib.util
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

_SPEC = importlib.util.spec_from_file_location(
    "weight_shift", Path(__file__).parents[2] / "benchmarks" / "weight_shift.py")
ws = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(ws)


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


def test_model_file_finds_the_weights_of_a_model_folder(tmp_path):
    (tmp_path / "model").mkdir()
    save_file({"w": torch.ones(2)}, tmp_path / "model" / "model.safetensors")
    assert ws.model_file(tmp_path) == tmp_path / "model" / "model.safetensors"
    assert ws.model_file(tmp_path / "model") == tmp_path / "model" / "model.safetensors"
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit, match="no model.safetensors"):
        ws.model_file(tmp_path / "empty")
    with pytest.raises(SystemExit, match="does not exist"):
        ws.model_file(tmp_path / "nope" / "model")
