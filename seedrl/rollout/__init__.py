"""Generation backends and the batched multi-turn rollout.

Names are loaded on first use, so a worker process that imports :mod:`seedrl.rollout.executors` (to
run an env) does not import torch with the generation backends.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Generation": "seedrl.rollout.backends", "HFBackend": "seedrl.rollout.backends",
    "SamplingParams": "seedrl.rollout.backends", "make_backend": "seedrl.rollout.backends",
    "RolloutSettings": "seedrl.rollout.runner", "rollout": "seedrl.rollout.runner",
    "StepSample": "seedrl.rollout.types", "Trajectory": "seedrl.rollout.types",
    "EnvExecutor": "seedrl.rollout.executors", "EnvFactory": "seedrl.rollout.executors",
    "make_executor": "seedrl.rollout.executors",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
