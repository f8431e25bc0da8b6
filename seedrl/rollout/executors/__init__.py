"""Where environment calls run: the seam between the batched rollout and the environments.

An :class:`EnvExecutor` owns one environment per episode, made by an env factory and addressed by the
episode's index, for the whole rollout. The rollout hands it a whole turn at once -- one call per
live episode, ``(function, args)`` with ``function(env, *args)`` -- and gets back one
:class:`Outcome` per episode after at most ONE deadline for the turn, however many calls hang:

- ``ok``: the call returned ``value``;
- ``raised``: the env raised (``error`` is ``"Type: message"``); its worker is healthy and the env
  is still closed at the end;
- ``timeout``: the call was still running at the deadline; the episode is lost;
- ``died``: the worker went away (a process that exited or was killed); the episode is lost.

A lost episode gets no more calls (a later one answers ``lost`` at once); only the rollout's end
tries to close its env. The functions the rollout sends live in :mod:`.base` (:func:`env_reset`,
:func:`env_read`, :func:`env_step`, :func:`env_privileged_state`, :func:`env_close`), so an executor
whose envs live elsewhere (a process, a Ray actor) pickles them by reference.

Executors (``env.executor``, :data:`EXECUTORS`):

- ``thread`` (default): every episode's env lives on a daemon thread of its own, created, called and
  closed on that thread. A hung call strands only its own thread; the process can still exit, and
  nothing non-daemon is left once the rollout returns. ``env.workers`` bounds how many calls run at
  once, but a slot is a lease of at most a quarter of the call's time budget: a call that runs longer
  keeps running without counting, so hung calls never hold the slots healthy ones wait for (a turn
  with ``workers`` hung calls delays the healthy ones by at most a quarter of ``step_timeout_s``).
  The factory is called on the workers one after another in episode order, as the rollout always
  called it (a factory that hangs holds the next one up for at most that quarter).
- ``process``: a pool of ``min(env.workers, episodes)`` worker processes (``spawn`` start method,
  safe with torch loaded: nothing is forked). Each worker holds the envs of its episodes (round-robin:
  episode i on worker ``i % workers``, see :func:`assign`) for the whole rollout and runs their calls
  one after another, the workers in parallel, and sends each result as soon as it has it. A worker
  whose calls are still running at the deadline is killed (with its process group, so an engine it
  started goes too) and reaped; one that dies is reaped. Either way only the episode whose call it was
  in is lost (the timeout or death is its error), as on threads: a new worker takes its place, makes
  the envs of its other episodes again and replays their ``env_reset`` and ``env_step`` calls, which
  must return what they returned the first time (an episode whose replay differs, e.g. a
  nondeterministic env, or whose env raised before, is lost too, with that as its error), then runs the
  calls of the batch the lost worker had not started, by a deadline pushed back by the restart's time
  (and for as long as the batch had: so each further hung env on one worker adds a timeout to the
  turn, where threads wait for all of them at once). A worker that dies with no call running is replaced once; if its
  successor does so too, all its episodes are lost. ``restarts`` counts the replacements. With
  ``workers >= episodes`` every episode has a worker of its own (nothing to replay). Needs a picklable
  env factory, e.g. :class:`EnvFactory`. Each worker pays an interpreter start and the env's imports;
  with ``keep_warm`` (:func:`make_executor`) the healthy workers serve the next rollout too (their envs
  closed and made anew), until ``shutdown()``. A worker exits by itself if its parent dies.
- ``ray``: the same pool as Ray actors (``env.ray_address``: a cluster to join, ``"auto"`` for the one
  this machine belongs to; unset: a local Ray instance is started, and stopped again at ``shutdown``).
  Calls are waited for with ``ray.wait`` under the turn's deadline; a hung actor is ``ray.kill``-ed,
  a dead one (``ActorDiedError``) ends only its episodes, ALL of them (an actor answers a batch at once,
  so which call it was in is unknown: nothing is replayed). Needs ``pip install 'seedrl[ray]'``.

Nothing an executor starts outlives its ``close`` (without ``keep_warm``) or ``shutdown``, and an
interpreter that exits with a pool still up ends it (``atexit``).

The package, one module an executor: :mod:`.base` (the protocol, :class:`Outcome`, :class:`EnvFactory`,
the calls the rollout sends), :mod:`.thread`, :mod:`.pool` (what the process and Ray pools share, on the
parent's side), :mod:`.host` (their worker side: a worker's envs), :mod:`.process`, :mod:`.ray_pool`;
here, the names (:data:`EXECUTORS`) and :func:`make_executor`.
"""

from __future__ import annotations

from collections.abc import Callable

from seedrl.envs.base import Env
from seedrl.errors import unknown_name
from seedrl.rollout.executors.base import (
    Call,
    EnvExecutor,
    EnvFactory,
    Outcome,
    env_close,
    env_privileged_state,
    env_read,
    env_reset,
    env_step,
)
from seedrl.rollout.executors.pool import assign
from seedrl.rollout.executors.process import ProcessExecutor
from seedrl.rollout.executors.ray_pool import RayExecutor
from seedrl.rollout.executors.thread import LEASE_FRACTION, ThreadExecutor

__all__ = [
    "EXECUTORS", "LEASE_FRACTION", "Call", "EnvExecutor", "EnvFactory", "Outcome", "ProcessExecutor",
    "RayExecutor", "ThreadExecutor", "assign", "check_executor", "env_close", "env_privileged_state", "env_read",
    "env_reset", "env_step", "make_executor",
]

#: executor name (``env.executor``) -> class
EXECUTORS: dict[str, type] = {"thread": ThreadExecutor, "process": ProcessExecutor, "ray": RayExecutor}


def check_executor(name: str) -> str:
    if name not in EXECUTORS:
        raise unknown_name("env executor", name, list(EXECUTORS))
    return name


def make_executor(name: str, factory: Callable[[], Env], workers: int = 8, ray_address: str | None = None,
                  keep_warm: bool = False) -> EnvExecutor:
    """The executor ``name`` over envs made by ``factory``; ``workers`` is ``env.workers``, ``ray_address``
    ``env.ray_address`` (ray only). With ``keep_warm`` a process or Ray pool keeps its workers from one
    rollout to the next; its owner ends them with ``shutdown()`` (at the latest, at interpreter exit)."""
    check_executor(name)
    if name == "thread":
        return ThreadExecutor(factory, workers=workers)
    if name == "process":
        return ProcessExecutor(factory, workers=workers, keep_warm=keep_warm)
    return RayExecutor(factory, workers=workers, ray_address=ray_address, keep_warm=keep_warm)
