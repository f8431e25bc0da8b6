"""Let a CUDA build of torchvision import beside a CPU torch (the vLLM CPU environment, ``make vllm-env``).

PyPI ships torchvision for Linux only as CUDA builds. Beside the CPU torch their compiled ops (``_C.so``)
cannot load (``libtorch_cuda.so`` is missing); torchvision handles that everywhere except in one place:
``torchvision/_meta_registrations.py`` registers fake kernels for ``torchvision::nms`` and
``torchvision::qnms`` without checking, and ``import torchvision`` fails with "operator torchvision::nms
does not exist". transformers' Qwen2-VL video processor and vLLM's multimodal processing import
torchvision, so without it no vision-language model loads in vLLM on a CPU.

:func:`install` puts a finder first on ``sys.meta_path`` that, the first time ``torchvision`` is imported,
tries to load its ops library and, where that fails, declares the two ops' schemas (no kernels) so the
import completes; its pure-Python parts (transforms, which the processors use) then work, and calling
``torchvision.ops.nms`` is an error naming the missing kernel. Nothing is done where the library loads
(a matching torchvision) or torchvision is absent. ``make vllm-env`` installs a ``.pth`` that calls
:func:`install` at start-up (no torch import until torchvision is imported); the plain ``.venv`` does
not have torchvision at all.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from pathlib import Path

#: the ops ``_meta_registrations`` registers fakes for without checking that the library loaded
UNGUARDED_OPS = ("nms", "qnms")
_SCHEMA = "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor"


def declare_missing_ops(package_dir: Path, namespace: str = "torchvision") -> bool:
    """Load torchvision's ops library from ``package_dir``; where it cannot load, declare the schemas of
    :data:`UNGUARDED_OPS` in ``namespace``. Returns whether it declared any."""
    import torch

    found = sorted(package_dir.glob("_C*.so"))
    if found:
        try:
            torch.ops.load_library(str(found[0]))
            return False
        except (OSError, RuntimeError):
            pass
    declared = False
    for op in UNGUARDED_OPS:
        if not _exists(namespace, op):
            torch.library.define(f"{namespace}::{op}", _SCHEMA)
            declared = True
    return declared


def _exists(namespace: str, op: str) -> bool:
    import torch

    try:
        getattr(getattr(torch.ops, namespace), op)
        return True
    except (AttributeError, RuntimeError):
        return False


class _Finder(importlib.abc.MetaPathFinder):
    """Runs :func:`declare_missing_ops` once, just before ``torchvision`` is first imported; finds nothing
    itself (the normal finders import the package). It stays on ``sys.meta_path``, inert afterwards: the
    import system is iterating that list when it asks."""

    def __init__(self) -> None:
        self.done = False

    def find_spec(self, name, path=None, target=None):
        if name != "torchvision" or self.done:
            return None
        self.done = True
        spec = importlib.util.find_spec("torchvision")
        if spec is not None and spec.submodule_search_locations:
            declare_missing_ops(Path(next(iter(spec.submodule_search_locations))))
        return None


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once)."""
    if "torchvision" in sys.modules or any(isinstance(f, _Finder) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _Finder())
