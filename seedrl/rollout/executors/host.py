"""The worker side of the pools: the envs of one worker's episodes, made, called, restored and closed in
a worker process (:mod:`~seedrl.rollout.executors.process`) or a Ray actor
(:mod:`~seedrl.rollout.executors.ray_pool`)."""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from seedrl.envs.base import Env
from seedrl.errors import SeedRLError
from seedrl.rollout.executors.base import Call, _describe, env_reset, env_step, log

#: the calls that change an env's state: a pool records them, with what they returned, to make the envs
#: of a worker that died or hung again in the worker that replaces it (the other calls only read)
REPLAYED = (env_reset, env_step)


class _EnvHost:
    """The envs of one worker's episodes, in a worker process or a Ray actor: made, called (one after
    another, in episode order) and closed there. Every reply is plain picklable data. A process worker
    sends each episode's result as soon as it has it (:data:`_STREAMED`), so when it dies or hangs its
    parent knows which call it was in."""

    def __init__(self) -> None:
        self.envs: dict[int, Env] = {}

    def make(self, factory: Any, indices: list[int]) -> dict[int, tuple[bool, Any]]:
        return dict(_make_each(self, factory, indices))

    def call(self, calls: Mapping[int, Call]) -> dict[int, tuple[bool, Any]]:
        return dict(_call_each(self, calls))

    def close(self) -> None:
        envs, self.envs = self.envs, {}
        for env in envs.values():
            try:
                env.close()
            except Exception as exc:
                log.debug("env close raised %s", _describe(exc))


def _unpickled(factory: Any) -> Any:
    return pickle.loads(factory) if isinstance(factory, bytes) else factory


def _make_each(host: _EnvHost, factory: Any, indices: list[int]) -> Iterator[tuple[int, tuple[bool, Any]]]:
    """Make the envs of ``indices`` (beside those the worker holds: a warm worker's envs of an earlier
    rollout are closed and dropped by then, a replacement's replayed ones stay)."""
    try:
        factory = _unpickled(factory)
    except BaseException as exc:  # noqa: BLE001 -- e.g. the factory's module is not importable here
        for i in indices:
            yield i, (False, _describe(exc))
        return
    for i in indices:
        try:
            host.envs[i] = factory()
            result: tuple[bool, Any] = (True, None)
        except BaseException as exc:  # noqa: BLE001
            result = (False, _describe(exc))
        yield i, result


def _call_each(host: _EnvHost, calls: Mapping[int, Call]) -> Iterator[tuple[int, tuple[bool, Any]]]:
    for i, (fn, args) in calls.items():
        env = host.envs.get(i)
        if env is None:
            yield i, (False, f"SeedRLError: episode {i} has no env in this worker")
            continue
        try:
            value = fn(env, *args)
        except BaseException as exc:  # noqa: BLE001 -- reported to the rollout, never lost
            yield i, (False, _describe(exc))
            continue
        try:
            pickle.dumps(value)
        except Exception as exc:  # an unpicklable result: the call failed, the worker goes on
            yield i, (False, f"unpicklable result of {getattr(fn, '__name__', fn)}: {_describe(exc)}")
            continue
        yield i, (True, value)


def _restore_each(host: _EnvHost, factory: Any, tapes: Mapping[int, list[tuple[Callable, tuple, Any]]]
                  ) -> Iterator[tuple[int, tuple[bool, Any]]]:
    """Make each episode's env again (:func:`_make_each`) and replay its recorded calls (:data:`REPLAYED`),
    each of which must return what it returned the first time: ``(True, None)``, or ``(False, why not)``."""
    for i, (ok, why) in _make_each(host, factory, list(tapes)):
        if not ok:
            yield i, (False, why)
            continue
        tape = tapes[i]
        try:
            for k, (fn, args, want) in enumerate(tape):
                if fn(host.envs[i], *args) != want:
                    raise SeedRLError(f"replaying call {k + 1} of {len(tape)} ({fn.__name__}) did not give what "
                                      f"it gave the first time (a nondeterministic env?)")
        except BaseException as exc:  # noqa: BLE001 -- reported, and that episode is lost
            yield i, (False, _describe(exc))
            continue
        yield i, (True, None)


#: the messages a process worker answers one episode at a time (``("one", i, (ok, value))`` each, then
#: ``("end", None)``); any other is answered at once (``("end", value)``). Each answer starts with
#: ``("took",)``: the worker has the message (one that dies before it died between calls)
_STREAMED: dict[str, Callable[..., Iterator[tuple[int, tuple[bool, Any]]]]] = {
    "make": _make_each, "call": _call_each, "restore": _restore_each}
