"""first_pickle_global: what a pickle would import, read from its opcodes without running it."""

from __future__ import annotations

import os
import pickle

import pytest
import torch

from seedrl.models.pickles import first_pickle_global


class _Evil:
    def __reduce__(self):
        return (os.getcwd, ())


@pytest.mark.parametrize("protocol", [0, 1, 2, 3, 4, 5])
def test_a_raw_pickle_names_its_global_at_every_protocol(tmp_path, protocol):
    path = tmp_path / "w.bin"
    with open(path, "wb") as f:
        pickle.dump({"w": _Evil(), "x": [1, 2]}, f, protocol=protocol)
    assert first_pickle_global(path) == "posix.getcwd"


def test_torch_zip_format_and_allowed_globals(tmp_path):
    torch.save({"a": torch.zeros(2), "w": _Evil()}, tmp_path / "evil.pt")
    assert first_pickle_global(tmp_path / "evil.pt") == "posix.getcwd"  # torch's own globals are allowed
    torch.save({"a": torch.zeros(2)}, tmp_path / "ok.pt")
    assert first_pickle_global(tmp_path / "ok.pt") == "torch._utils._rebuild_tensor_v2"  # nothing refused: first
    with open(tmp_path / "plain.pkl", "wb") as f:
        pickle.dump({"a": [1, "b"]}, f)
    assert first_pickle_global(tmp_path / "plain.pkl") is None
    (tmp_path / "cut.pkl").write_bytes((tmp_path / "plain.pkl").read_bytes()[:5])
    assert first_pickle_global(tmp_path / "cut.pkl") is None
    assert first_pickle_global(tmp_path / "missing.pkl") is None
