"""seedrl._torchvision_cpu: a torchvision whose ops library cannot load (PyPI's CUDA build beside a CPU
torch) still imports, because the two ops its ``_meta_registrations`` registers unchecked are declared
first. Checked here on a stand-in package that fails the same way (the real one is in ``.venv-vllm``:
tests/rollout/test_vllm_vision.py)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

# a stand-in for torchvision 0.28: its ops library does not load, then it registers a fake kernel for
# nms without checking, as torchvision/_meta_registrations.py does
FAKE_INIT = textwrap.dedent('''
    import torch
    try:
        torch.ops.load_library(__path__[0] + "/_C.so")
    except OSError:
        pass
    @torch.library.register_fake("torchvision::nms")
    def meta_nms(dets, scores, iou_threshold):
        return dets.new_empty(0, dtype=torch.long)
    VERSION = "stand-in"
''')


def _run(tmp_path, code: str) -> subprocess.CompletedProcess:
    pkg = tmp_path / "torchvision"
    pkg.mkdir(exist_ok=True)
    (pkg / "__init__.py").write_text(FAKE_INIT)
    (pkg / "_C.so").write_text("not a shared library")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})


@pytest.mark.parametrize("fixed", [False, True])
def test_an_unloadable_ops_library_imports_only_with_the_fix(tmp_path, fixed):
    # .venv-vllm installs the fix at start-up (a .pth): the unfixed case takes it out first
    pre = ("import seedrl._torchvision_cpu as m; m.install(); " if fixed else
           "import sys; sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != '_Finder']; ")
    r = _run(tmp_path, pre + "import torchvision, torch, sys; print(torchvision.VERSION, "
                             "hasattr(torch.ops.torchvision, 'qnms'), [f.done for f in sys.meta_path "
                             "if type(f).__name__ == '_Finder'])")
    if fixed:
        assert r.returncode == 0, r.stderr[-1500:]
        assert r.stdout.split() == ["stand-in", "True", "[True]"]  # both ops declared; the finder spent
    else:
        assert r.returncode != 0 and "torchvision::nms" in r.stderr


def test_nothing_is_declared_where_the_ops_exist_or_the_library_loads(tmp_path):
    from seedrl._torchvision_cpu import declare_missing_ops

    (tmp_path / "_C.so").write_text("not a shared library")
    assert declare_missing_ops(tmp_path, namespace="seedrl_tv_test") is True
    import torch

    assert all(hasattr(torch.ops.seedrl_tv_test, op) for op in ("nms", "qnms"))
    assert declare_missing_ops(tmp_path, namespace="seedrl_tv_test") is False  # already there


def test_a_loadable_ops_library_is_left_alone(tmp_path):
    from pathlib import Path

    import torch

    from seedrl._torchvision_cpu import declare_missing_ops

    # any shared library that loads stands in for a matching build's ops library
    (tmp_path / "_C.so").symlink_to(Path(torch.__file__).parent / "lib" / "libtorch_global_deps.so")
    assert declare_missing_ops(tmp_path, namespace="seedrl_tv_test2") is False
    assert not hasattr(torch.ops.seedrl_tv_test2, "nms")
