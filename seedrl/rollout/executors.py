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
tries to close its env. The functions the rollout sends live in this module (:func:`env_reset`,
:func:`env_read`, :func:`env_step`, :func:`env_privileged_state`, :func:`env_close`), so an executor
whose envs live elsewhere (a process, a Ray actor) pickles them by reference.

Executors (``rollout.executor``, :data:`EXECUTORS`):

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
  one after another, the workers in parallel. A worker whose calls are still running at the deadline
  is killed (with its process group, so an engine it started goes too) and reaped; one that dies is
  reaped; either way ALL the episodes it holds are lost (each gets the timeout or death as its error,
  including a finished one's final ``privileged_state``), and it is not used again: the next rollout
  starts a fresh one. With ``workers >= episodes`` every episode has a worker of its own. Needs a
  picklable env factory, e.g. :class:`EnvFactory`. Each worker pays an interpreter start and the env's
  imports; with ``keep_warm`` (:func:`make_executor`) the healthy workers serve the next rollout too
  (their envs closed and made anew), until ``shutdown()``. A worker exits by itself if its parent dies.
- ``ray``: the same pool as Ray actors (``env.ray_address``: a cluster to join, ``"auto"`` for the one
  this machine belongs to; unset: a local Ray instance is started, and stopped again at ``shutdown``).
  Calls are waited for with ``ray.wait`` under the turn's deadline; a hung actor is ``ray.kill``-ed,
  a dead one (``ActorDiedError``) ends only its episodes. Needs ``pip install 'seedrl[ray]'``.

Nothing an executor starts outlives its ``close`` (without ``keep_warm``) or ``shutdown``, and an
interpreter that exits with a pool still up ends it (``atexit``).
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing
import os
import pickle
import queue
import shutil
import signal
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field
from multiprocessing.connection import wait as wait_connections
from typing import Any, Protocol

from seedrl.envs.base import Env
from seedrl.errors import SeedRLError, unknown_name

log = logging.getLogger(__name__)

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
    """Runs the calls of a rollout's episodes on their envs; see the module docstring."""

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
def env_reset(env: Env, task_id: str) -> tuple[str, str, str | None, list[str] | None, str]:
    """Start the episode: first observation, task description, instruction, admissible actions,
    step-prompt style."""
    obs = env.reset(task_id)
    return obs, env.task_description, env.instruction, env.admissible_actions(), env.prompt_style


def env_read(env: Env, text: str) -> tuple[str | None, bool, str | None]:
    """A model turn as the env reads it: (action or None, format valid, the format check's exception if
    it raised: a buggy format check counts the turn as malformed, never ends the episode)."""
    action = env.parse_action(text)
    try:
        return action, bool(env.format_valid(text)), None
    except Exception as exc:
        return action, False, f"{type(exc).__name__}: {exc}"


def env_step(env: Env, action: str) -> tuple[str, float, bool, bool, bool, list[str] | None]:
    """Apply ``action``: (observation, reward, done, won, action valid, admissible actions for the next
    prompt: ``None`` once done)."""
    obs, reward, done, info = env.step(action)
    done = bool(done)
    return (obs, float(reward), done, bool(info.get("won")), bool(info.get("action_valid", True)),
            None if done else env.admissible_actions())


def env_privileged_state(env: Env) -> dict[str, Any]:
    return env.privileged_state()


def env_close(env: Env) -> None:
    env.close()


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _remaining(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())


# -- thread -----------------------------------------------------------------------------------------
#: a slot is held for at most this fraction of its call's time budget (see the module docstring)
LEASE_FRACTION = 0.25


class _Slots:
    """At most ``cap`` calls hold a slot at once; each slot is a lease that expires, so a call that runs
    past its lease (a hung one) stops counting against ``cap``."""

    def __init__(self, cap: int) -> None:
        self.cap = max(1, cap)
        self._cond = threading.Condition()
        self._held: dict[int, float] = {}  # ticket -> lease expiry (monotonic)
        self._next = 0

    def acquire(self, lease_s: float) -> int:
        with self._cond:
            while True:
                now = time.monotonic()
                for ticket, expiry in list(self._held.items()):
                    if expiry <= now:
                        del self._held[ticket]
                if len(self._held) < self.cap:
                    ticket, self._next = self._next, self._next + 1
                    self._held[ticket] = now + max(lease_s, 0.0)
                    return ticket
                self._cond.wait(timeout=min(self._held.values()) - now)

    def release(self, ticket: int) -> None:
        """Give a slot back (a no-op for an expired or already returned one)."""
        with self._cond:
            if self._held.pop(ticket, None) is not None:
                self._cond.notify()

    def held(self) -> int:
        with self._cond:
            now = time.monotonic()
            return sum(expiry > now for expiry in self._held.values())


@dataclass
class _Turnstile:
    """Lets episode i's worker call the factory only once episode i-1's call has returned."""

    started: threading.Event = field(default_factory=threading.Event)
    made: threading.Event = field(default_factory=threading.Event)


def _make(factory: Callable[[], Env], prev: _Turnstile | None, mine: _Turnstile, patience: float,
          deadline: float) -> Env:
    """``factory()`` once the previous episode's call of it returned, so the factory is called in
    episode order as the rollout always did (a factory with state, e.g. an iterator of env settings,
    gives episode i its i-th value); one that hangs holds the next up for at most ``patience`` s."""
    try:
        if prev is not None:
            prev.started.wait(timeout=_remaining(deadline))
            prev.made.wait(timeout=min(patience, _remaining(deadline)))
        mine.started.set()
        return factory()
    finally:
        mine.started.set()
        mine.made.set()


class _ThreadWorker:
    """One episode's env and the daemon thread that makes, calls and closes it."""

    def __init__(self, index: int, slots: _Slots) -> None:
        self.slots = slots
        self.env: Env | None = None
        self.lost: str | None = None  # why the episode was lost (its thread may still be stuck)
        self.ticket: int | None = None
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._loop, name=f"seedrl-env-{index}", daemon=True)
        self.thread.start()

    def submit(self, fn: Callable[..., Any], args: tuple, lease_s: float) -> Future:
        fut: Future = Future()
        self._inbox.put((fut, fn, args, lease_s))
        return fut

    def stop(self) -> None:
        self._inbox.put(None)

    def lose(self, why: str) -> None:
        self.lost = why
        if self.ticket is not None:  # its slot goes back now, whatever the stuck call does
            self.slots.release(self.ticket)

    def _loop(self) -> None:
        while True:
            item = self._inbox.get()
            if item is None:
                return
            fut, fn, args, lease_s = item
            # making the env takes no slot: the turnstile orders those calls, a slot would reorder them
            self.ticket = None if fn is _make else self.slots.acquire(lease_s)
            try:
                if self.lost is not None or not fut.set_running_or_notify_cancel():
                    continue  # lost, or cancelled at the deadline while it waited for a slot
                if fn is _make:
                    self.env = _make(*args)
                    fut.set_result(None)
                else:
                    fut.set_result(fn(self.env, *args))
            except BaseException as exc:  # noqa: BLE001 -- reported to the rollout, never lost
                fut.set_exception(exc)
            finally:
                if self.ticket is not None:
                    self.slots.release(self.ticket)


def _outcome(fut: Future) -> Outcome:
    exc = fut.exception()
    return Outcome(value=fut.result()) if exc is None else Outcome("raised", error=_describe(exc))


def _close_quietly(env: Env, done: Future) -> None:
    try:
        env.close()
    except Exception as exc:
        log.debug("env close raised %s", _describe(exc))
    done.set_result(None)


class ThreadExecutor:
    """Each episode's env on a daemon thread of its own; see the module docstring."""

    def __init__(self, factory: Callable[[], Env], workers: int = 8) -> None:
        self.factory = factory
        self.slots = _Slots(workers)
        self._workers: list[_ThreadWorker] = []

    def open(self, n: int, deadline: float) -> list[Outcome]:
        self._workers = [_ThreadWorker(i, self.slots) for i in range(n)]
        gates = [_Turnstile() for _ in range(n)]
        patience = LEASE_FRACTION * _remaining(deadline)
        calls = {i: (_make, (self.factory, gates[i - 1] if i else None, gates[i], patience, deadline))
                 for i in range(n)}
        return list(self.run(calls, deadline).values())

    def run(self, calls: Mapping[int, Call], deadline: float) -> dict[int, Outcome]:
        lease = LEASE_FRACTION * _remaining(deadline)
        out: dict[int, Outcome] = {}
        futures: dict[int, Future] = {}
        for i, (fn, args) in calls.items():
            w = self._workers[i]
            if w.lost is not None:
                out[i] = Outcome("lost", error=w.lost)
            else:
                futures[i] = w.submit(fn, args, lease)
        wait_futures(list(futures.values()), timeout=_remaining(deadline))
        for i, fut in futures.items():
            if fut.done():
                out[i] = _outcome(fut)
            else:
                fut.cancel()  # not started yet (waiting for a slot): never will be
                self._workers[i].lose("timed out")
                out[i] = Outcome("timeout", error="timed out")
        return {i: out[i] for i in calls}

    def close(self, deadline: float) -> None:
        pending: list[Future] = []
        for w in self._workers:
            if w.lost is None and w.env is not None:
                pending.append(w.submit(env_close, (), 0.0))
            w.stop()  # a stuck thread that ever comes back exits too
            if w.lost is not None and w.env is not None:
                # its own thread is stuck: close from a helper (e.g. to stop the engine it waits on)
                fut: Future = Future()
                threading.Thread(target=_close_quietly, args=(w.env, fut), name="seedrl-env-close",
                                 daemon=True).start()
                pending.append(fut)
        wait_futures(pending, timeout=_remaining(deadline))
        for w in self._workers:
            if w.lost is None:
                w.thread.join(timeout=_remaining(deadline))
        self._workers = []

    def shutdown(self, deadline: float | None = None) -> None:
        """Nothing outlives :meth:`close` here."""


# -- pools: process and Ray ------------------------------------------------------------------------
def assign(n: int, k: int) -> list[list[int]]:
    """The episodes each of ``k`` workers holds: round-robin (episode i on worker ``i % k``), so a worker
    that dies takes one episode of many groups rather than a whole group."""
    return [list(range(w, n, k)) for w in range(k)]


class _EnvHost:
    """The envs of one worker's episodes, in a worker process or a Ray actor: made, called (one after
    another, in episode order) and closed there. Every reply is plain picklable data."""

    def __init__(self) -> None:
        self.envs: dict[int, Env] = {}

    def make(self, factory: Any, indices: list[int]) -> dict[int, tuple[bool, Any]]:
        self.envs = {}
        try:
            if isinstance(factory, bytes):
                factory = pickle.loads(factory)
        except BaseException as exc:  # noqa: BLE001 -- e.g. the factory's module is not importable here
            return {i: (False, _describe(exc)) for i in indices}
        out: dict[int, tuple[bool, Any]] = {}
        for i in indices:
            try:
                self.envs[i] = factory()
                out[i] = (True, None)
            except BaseException as exc:  # noqa: BLE001
                out[i] = (False, _describe(exc))
        return out

    def call(self, calls: Mapping[int, Call]) -> dict[int, tuple[bool, Any]]:
        out: dict[int, tuple[bool, Any]] = {}
        for i, (fn, args) in calls.items():
            env = self.envs.get(i)
            if env is None:
                out[i] = (False, f"SeedRLError: episode {i} has no env in this worker")
                continue
            try:
                value = fn(env, *args)
            except BaseException as exc:  # noqa: BLE001 -- reported to the rollout, never lost
                out[i] = (False, _describe(exc))
                continue
            try:
                pickle.dumps(value)
                out[i] = (True, value)
            except Exception as exc:  # an unpicklable result: the call failed, the worker goes on
                out[i] = (False, f"unpicklable result of {getattr(fn, '__name__', fn)}: {_describe(exc)}")
        return out

    def close(self) -> None:
        envs, self.envs = self.envs, {}
        for env in envs.values():
            try:
                env.close()
            except Exception as exc:
                log.debug("env close raised %s", _describe(exc))


def _watch_parent(parent: int) -> None:
    """Exit this worker if its parent dies (even while an env call hangs)."""

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="seedrl-parent-watch", daemon=True).start()


def _process_main(conn, parent: int) -> None:
    """A pool worker process: answer ``(op, *args)`` messages with :class:`_EnvHost` until told to stop
    (``None``) or the pipe closes. It serves rollout after rollout (``open`` makes its envs anew)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    try:
        os.setpgrp()  # a kill of the worker takes the engines its envs started with it
    except (AttributeError, OSError):
        pass
    _watch_parent(parent)
    host = _EnvHost()
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            host.close()
            return
        op, *args = msg
        conn.send(getattr(host, op)(*args))


@dataclass(eq=False)
class _Worker:
    """A pool worker (a process or a Ray actor) and the episodes it holds in the current rollout."""

    handle: Any  # _Proc for a process, an actor handle for Ray
    episodes: list[int] = field(default_factory=list)
    lost: str | None = None  # why it was given up (killed, dead): never used again


@dataclass
class _Proc:
    proc: Any  # multiprocessing.Process
    conn: Any  # multiprocessing.connection.Connection


def _kill(p: _Proc) -> None:
    """Kill a worker and its process group, reap it, close its pipe."""
    if p.proc.pid is not None and p.proc.exitcode is None:
        try:
            os.killpg(p.proc.pid, signal.SIGKILL)  # its group: the worker made itself the leader
        except (AttributeError, OSError):
            p.proc.kill()
        p.proc.join(timeout=5)
        if p.proc.exitcode is None:
            p.proc.kill()
            p.proc.join(timeout=5)
    elif p.proc.pid is not None:
        p.proc.join(timeout=0)
    p.conn.close()


_LIVE: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _kill_leftovers() -> None:  # an interpreter that exits mid-rollout, or with a warm pool, leaves no worker
    for ex in list(_LIVE):
        try:
            ex.shutdown()
        except Exception as exc:  # noqa: BLE001 -- at exit: do what can be done
            log.debug("executor shutdown at exit raised %s", _describe(exc))


#: a worker's whole reply to one message, or what happened to it instead (applies to all its episodes)
Reply = dict[int, tuple[bool, Any]] | Outcome


class _Pool:
    """What the process and Ray executors share: ``min(workers, episodes)`` workers per rollout, each
    holding its episodes' envs (:func:`assign`); one message per worker per batch of calls; a worker that
    times out or dies is given up with all its episodes. With ``keep_warm`` the healthy workers outlive
    :meth:`close` (their envs are closed) and serve the next rollout; :meth:`shutdown` ends them."""

    spawn_timeout_s: float = 60.0

    def __init__(self, workers: int, keep_warm: bool) -> None:
        self.workers = max(1, workers)
        self.keep_warm = keep_warm
        self._idle: list[_Worker] = []  # warm workers holding no envs
        self._active: list[_Worker] = []  # this rollout's workers
        self._owner: dict[int, _Worker] = {}  # episode index -> its worker

    # subclasses: start a worker, send it one message and collect replies, give one up
    def _start(self) -> _Worker: ...

    def _exchange(self, msgs: dict[_Worker, tuple], deadline: float) -> dict[_Worker, Reply]: ...

    def _give_up(self, w: _Worker, why: str) -> None: ...

    def _factory_message(self) -> Any: ...

    def open(self, n: int, deadline: float) -> list[Outcome]:
        _LIVE.add(self)
        if n == 0:
            return []
        k = min(self.workers, n)
        fresh = 0
        while len(self._idle) < k:
            self._idle.append(self._start())
            fresh += 1
        self._active, self._idle = self._idle[:k], self._idle[k:]
        self._owner = {}
        for w, episodes in zip(self._active, assign(n, k)):
            w.episodes = episodes
            self._owner |= dict.fromkeys(episodes, w)
        factory = self._factory_message()
        replies = self._exchange({w: ("make", factory, w.episodes) for w in self._active},
                                 deadline + (self.spawn_timeout_s if fresh else 0.0))
        out = self._spread({w: w.episodes for w in self._active}, replies)
        return [out[i] for i in range(n)]

    def run(self, calls: Mapping[int, Call], deadline: float) -> dict[int, Outcome]:
        out: dict[int, Outcome] = {}
        batches: dict[_Worker, dict[int, Call]] = {}
        for i, call in calls.items():
            w = self._owner.get(i)
            if w is None or w.lost is not None:
                out[i] = Outcome("lost", error=f"its env worker was lost earlier ({w.lost})" if w is not None
                                 else "no env")
            else:
                batches.setdefault(w, {})[i] = call
        replies = self._exchange({w: ("call", batch) for w, batch in batches.items()}, deadline)
        out |= self._spread({w: list(batch) for w, batch in batches.items()}, replies)
        return {i: out[i] for i in calls}

    @staticmethod
    def _spread(asked: dict[_Worker, list[int]], replies: dict[_Worker, Reply]) -> dict[int, Outcome]:
        out: dict[int, Outcome] = {}
        for w, indices in asked.items():
            reply = replies[w]
            for i in indices:
                if isinstance(reply, Outcome):
                    out[i] = reply
                else:
                    ok, value = reply[i]
                    out[i] = Outcome(value=value) if ok else Outcome("raised", error=value)
        return out

    def close(self, deadline: float) -> None:
        live = [w for w in self._active if w.lost is None]
        self._exchange({w: ("close",) for w in live}, deadline)  # a close that hangs gets its worker killed
        self._idle += [w for w in live if w.lost is None]
        self._active, self._owner = [], {}
        if not self.keep_warm:
            self.shutdown(deadline)

    def shutdown(self, deadline: float | None = None) -> None:
        """End every worker (a warm pool's too); the executor can still open again (starting anew)."""
        for w in self._idle + self._active:
            if w.lost is None:
                self._give_up(w, "shut down")
        self._idle, self._active, self._owner = [], [], {}
        _LIVE.discard(self)


class ProcessExecutor(_Pool):
    """``min(workers, episodes)`` worker processes per rollout, each holding its episodes' envs; see the
    module docstring. ``spawn_timeout_s`` is added to the deadline of an :meth:`open` that starts workers
    (an interpreter start and the env's imports are not env calls)."""

    def __init__(self, factory: Callable[[], Env], workers: int = 8, start_method: str = "spawn",
                 spawn_timeout_s: float = 60.0, keep_warm: bool = False) -> None:
        try:
            self._factory_bytes = pickle.dumps(factory)
        except Exception as exc:
            raise SeedRLError(f"the process env executor needs a picklable env factory, e.g. "
                              f"seedrl.rollout.executors.EnvFactory(name, kwargs), not {factory!r} "
                              f"({_describe(exc)})") from None
        super().__init__(workers, keep_warm)
        self.factory = factory
        self.spawn_timeout_s = spawn_timeout_s
        self._ctx = multiprocessing.get_context(start_method)
        self._started = 0

    def _factory_message(self) -> bytes:
        return self._factory_bytes  # unpickled in the worker: a failure there is that worker's episodes'

    def _start(self) -> _Worker:
        parent_conn, child_conn = self._ctx.Pipe(duplex=True)
        proc = self._ctx.Process(target=_process_main, args=(child_conn, os.getpid()),
                                 name=f"seedrl-env-{self._started}", daemon=False)
        self._started += 1
        proc.start()
        child_conn.close()
        return _Worker(_Proc(proc, parent_conn))

    def _exchange(self, msgs: dict[_Worker, tuple], deadline: float) -> dict[_Worker, Reply]:
        out: dict[_Worker, Reply] = {}
        pending: dict[_Worker, _Proc] = {}
        for w, msg in msgs.items():
            try:
                w.handle.conn.send(msg)
                pending[w] = w.handle
            except (OSError, ValueError) as exc:  # the pipe is gone: the worker died
                out[w] = self._died(w, f"env worker died ({_describe(exc)})")
        while pending:
            ready = wait_connections([p.conn for p in pending.values()] + [p.proc.sentinel for p in pending.values()],
                                     timeout=_remaining(deadline))
            if not ready:
                break
            for w, p in list(pending.items()):
                if p.conn in ready or p.proc.sentinel in ready:
                    del pending[w]
                    out[w] = self._reply(w)
        for w in pending:
            self._give_up(w, "timed out")
            out[w] = Outcome("timeout", error="timed out")
        return out

    def _reply(self, w: _Worker) -> Reply:
        p = w.handle
        try:
            if p.conn.poll():
                return p.conn.recv()
        except (EOFError, OSError):
            pass
        p.proc.join(timeout=1)
        return self._died(w, f"env worker died (exit code {p.proc.exitcode})")

    def _died(self, w: _Worker, why: str) -> Outcome:
        self._give_up(w, why)
        return Outcome("died", error=why)

    def _give_up(self, w: _Worker, why: str) -> None:
        w.lost = why
        p = w.handle
        if why == "shut down" and p.proc.exitcode is None:  # a healthy idle worker: let it exit by itself
            try:
                p.conn.send(None)
                p.proc.join(timeout=1.0)
            except (OSError, ValueError):
                pass
        _kill(p)


# -- ray --------------------------------------------------------------------------------------------
_RAY_HOST: Any = None  # _EnvHost as a Ray actor class (made on first use: ray is imported lazily)


def _import_ray():
    try:
        import ray
    except ImportError:
        raise SeedRLError("env.executor=ray needs Ray, which is not installed: pip install 'seedrl[ray]'") from None
    return ray


class RayExecutor(_Pool):
    """``min(workers, episodes)`` Ray actors per rollout, each holding its episodes' envs, like the
    process pool; see the module docstring. Connects to ``ray_address`` ("auto": the cluster this machine
    belongs to) or, if None, starts a local Ray instance, which :meth:`shutdown` stops again (an instance
    this executor did not start is left running; one already initialised in this process is used)."""

    def __init__(self, factory: Callable[[], Env], workers: int = 8, ray_address: str | None = None,
                 spawn_timeout_s: float = 60.0, keep_warm: bool = False, actor_cpus: float = 0.0) -> None:
        self._ray = _import_ray()
        super().__init__(workers, keep_warm)
        self.factory = factory
        self.ray_address = ray_address
        self.spawn_timeout_s = spawn_timeout_s
        self.actor_cpus = actor_cpus
        self._started_ray = False
        self._temp_dir: str | None = None

    def _ensure_ray(self) -> None:
        ray = self._ray
        if ray.is_initialized():
            return
        if self.ray_address:
            ray.init(address=self.ray_address, logging_level=logging.WARNING)
        else:
            os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # no token written under ~/.ray
            # a short folder: Ray's socket paths must fit in 107 bytes
            self._temp_dir = tempfile.mkdtemp(prefix="seedrl-ray-", dir="/tmp" if os.path.isdir("/tmp") else None)
            ray.init(address="local", num_cpus=max(os.cpu_count() or 1, self.workers), include_dashboard=False,
                     object_store_memory=256 * 1024**2, _temp_dir=self._temp_dir, logging_level=logging.WARNING)
        self._started_ray = True

    def open(self, n: int, deadline: float) -> list[Outcome]:
        global _RAY_HOST
        self._ensure_ray()
        if _RAY_HOST is None:
            _RAY_HOST = self._ray.remote(max_restarts=0)(_EnvHost)
        return super().open(n, deadline)

    def _factory_message(self) -> Any:
        return self.factory  # Ray pickles it (cloudpickle)

    def _start(self) -> _Worker:
        # no CPU reserved by default: a pool never waits for CPUs other actors hold (the envs' cost is
        # CPU time, not a reservation); SPREAD places the actors across a cluster's nodes
        return _Worker(_RAY_HOST.options(num_cpus=self.actor_cpus, scheduling_strategy="SPREAD").remote())

    def _exchange(self, msgs: dict[_Worker, tuple], deadline: float) -> dict[_Worker, Reply]:
        ray = self._ray
        refs = {getattr(w.handle, op).remote(*args): w for w, (op, *args) in msgs.items()}
        if not refs:
            return {}
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=_remaining(deadline))
        out: dict[_Worker, Reply] = {}
        for ref in ready:
            w = refs[ref]
            try:
                out[w] = ray.get(ref)
            except ray.exceptions.RayActorError as exc:  # ActorDiedError: its process exited or was killed
                why = f"env worker died ({type(exc).__name__})"
                self._give_up(w, why)
                out[w] = Outcome("died", error=why)
            except Exception as exc:  # noqa: BLE001 -- e.g. a reply Ray could not move: the actor lives on
                first = (str(exc).strip().splitlines() or [""])[0][:200]
                out[w] = Outcome("raised", error=f"{type(exc).__name__}: {first}")
        for w in refs.values():
            if w not in out:
                self._give_up(w, "timed out")
                out[w] = Outcome("timeout", error="timed out")
        return out

    def _give_up(self, w: _Worker, why: str) -> None:
        w.lost = why
        try:
            if self._ray.is_initialized():
                self._ray.kill(w.handle, no_restart=True)
        except Exception as exc:  # noqa: BLE001 -- already gone
            log.debug("ray.kill raised %s", _describe(exc))

    def shutdown(self, deadline: float | None = None) -> None:
        super().shutdown(deadline)
        if self._started_ray:
            self._started_ray = False
            try:
                self._ray.shutdown()
            finally:
                if self._temp_dir:
                    shutil.rmtree(self._temp_dir, ignore_errors=True)
                    self._temp_dir = None


#: executor name (``rollout.executor``) -> class
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
