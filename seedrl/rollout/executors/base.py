"""What every env executor shares: the :class:`EnvExecutor` protocol, :class:`Outcome`, the picklable
:class:`EnvFactory`, and the calls the rollout sends (see :mod:`seedrl.rollout.executors`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from seedrl.envs.base import Env

#: one logger for the whole package (its name as when it was one module)
log = logging.getLogger("seedrl.rollout.executors")

#: one call on an episode's env: ``function(env, *args)``
Call = tuple[Callable[..., Any], tuple]


@dataclass(frozen=True)
class EnvFactory:
    """A picklable env factory: the registry's ``make_env(name, **kwargs)`` (what the ``process``
    executor, and any executor whose envs live out of process, needs instead of a lambda)."""

    name: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __call__(self) -> Env:
        from seedrl.envs.registry import make_env

        return make_env(self.name, **dict(self.kwargs))


@dataclass
class Outcome:
    """What one call on one episode's env gave: ``kind`` is ``ok``, ``raised``, ``timeout``, ``died`` or
    ``lost`` (the episode was lost by an earlier call)."""

    kind: str = "ok"
    value: Any = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.kind == "ok"


class EnvExecutor(Protocol):
    """Runs the calls of a rollout's episodes on their envs; see the package docstring. ``restarts``
    counts the workers started in place of one that died or hung (0 where none ever is)."""

    restarts: int

    def open(self, n: int, deadline: float) -> list[Outcome]:
        """Make the envs of episodes ``0..n-1`` with the factory; one outcome each by ``deadline``
        (a ``time.monotonic()`` value)."""

    def run(self, calls: Mapping[int, Call], deadline: float) -> dict[int, Outcome]:
        """Start every call at once (one per episode index), wait until all are done or ``deadline``
        (``time.monotonic()``) passes; one outcome per call."""

    def close(self, deadline: float) -> None:
        """Close every env (``env.close()``) and release every worker (a warm pool keeps its healthy
        workers for the next :meth:`open`); never raises, never waits past ``deadline`` (by more than a
        worker's kill)."""

    def shutdown(self, deadline: float | None = None) -> None:
        """End every worker, a warm pool's too (a no-op once :meth:`close` ended them)."""


# -- the calls the rollout sends (module level: picklable by reference) --------------------------
def env_reset(env: Env, task_id: str) -> tuple[str, str, str | None, list[str] | None, str, list]:
    """Start the episode: first observation, task description, instruction, admissible actions,
    step-prompt style, the observation's images (``[]`` for a text env)."""
    obs = env.reset(task_id)
    return (obs, env.task_description, env.instruction, env.admissible_actions(), env.prompt_style,
            _images(env))


def _images(env: Env) -> list:
    return list(env.observation_images()) if getattr(env, "returns_images", False) else []


def env_read(env: Env, text: str) -> tuple[str | None, bool, str | None]:
    """A model turn as the env reads it: (action or None, format valid, the format check's exception if
    it raised: a buggy format check counts the turn as malformed, never ends the episode)."""
    action = env.parse_action(text)
    try:
        return action, bool(env.format_valid(text)), None
    except Exception as exc:
        return action, False, f"{type(exc).__name__}: {exc}"


def env_step(env: Env, action: str) -> tuple[str, float, bool, bool, bool, list[str] | None, list]:
    """Apply ``action``: (observation, reward, done, won, action valid, admissible actions for the next
    prompt: ``None`` once done, the observation's images: ``[]`` for a text env)."""
    obs, reward, done, info = env.step(action)
    done = bool(done)
    return (obs, float(reward), done, bool(info.get("won")), bool(info.get("action_valid", True)),
            None if done else env.admissible_actions(), _images(env))


def env_privileged_state(env: Env) -> dict[str, Any]:
    return env.privileged_state()


def env_close(env: Env) -> None:
    env.close()


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _remaining(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())

