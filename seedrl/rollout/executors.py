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
- ``process``: every episode's env lives in a worker process of its own (``spawn`` start method, safe
  with torch loaded: nothing is forked). A call that times out, or a worker that dies, costs only its
  episode; the timed-out worker is killed (with its process group, so an engine it started goes too),
  and every worker is reaped when the rollout ends. Needs a picklable env factory, e.g.
  :class:`EnvFactory`; each worker pays an interpreter start and the env's imports per rollout, and
  ``env.workers`` is unused (each env has its process). A worker exits by itself if its parent dies.
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing
import os
import pickle
import queue
import signal
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
        """Close every env (``env.close()``) and release every worker; never raises, never waits
        past ``deadline`` (by more than a worker's kill)."""


# -- the calls the rollout sends (module level: picklable by reference) --------------------------
def env_reset(env: Env, task_id: str) -> tuple[str, str, str | None, list[str] | None]:
    """Start the episode: first observation, task description, instruction, admissible actions."""
    obs = env.reset(task_id)
    return obs, env.task_description, env.instruction, env.admissible_actions()


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


# -- process ----------------------------------------------------------------------------------------
def _watch_parent(parent: int) -> None:
    """Exit this worker if its parent dies (even while an env call hangs)."""

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="seedrl-parent-watch", daemon=True).start()


def _process_main(conn, factory: Callable[[], Env], parent: int) -> None:
    """A worker process: make the env, then answer calls until told to stop or the pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    try:
        os.setpgrp()  # a kill of the worker takes the engines its env started with it
    except (AttributeError, OSError):
        pass
    _watch_parent(parent)
    try:
        env = factory()
    except BaseException as exc:  # noqa: BLE001
        conn.send((False, _describe(exc)))
        return
    conn.send((True, None))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        fn, args = msg
        try:
            reply = (True, fn(env, *args))
        except BaseException as exc:  # noqa: BLE001
            reply = (False, _describe(exc))
        try:
            conn.send(reply)
        except Exception as exc:  # an unpicklable result: the call failed, the worker goes on
            conn.send((False, f"unpicklable result of {getattr(fn, '__name__', fn)}: {_describe(exc)}"))


@dataclass
class _Proc:
    proc: Any  # multiprocessing.Process
    conn: Any  # multiprocessing.connection.Connection
    lost: str | None = None


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
def _kill_leftovers() -> None:  # an interpreter that exits mid-rollout leaves no worker behind
    for ex in list(_LIVE):
        ex.close(time.monotonic())


class ProcessExecutor:
    """Each episode's env in a worker process of its own; see the module docstring.

    ``spawn_timeout_s`` is added to the deadline of :meth:`open` (an interpreter start and the env's
    imports are not env calls)."""

    def __init__(self, factory: Callable[[], Env], workers: int = 8, start_method: str = "spawn",
                 spawn_timeout_s: float = 60.0) -> None:
        try:
            pickle.dumps(factory)
        except Exception as exc:
            raise SeedRLError(f"the process env executor needs a picklable env factory, e.g. "
                              f"seedrl.rollout.executors.EnvFactory(name, kwargs), not {factory!r} "
                              f"({_describe(exc)})") from None
        self.factory = factory
        self.spawn_timeout_s = spawn_timeout_s
        self._ctx = multiprocessing.get_context(start_method)
        self._procs: list[_Proc] = []

    def open(self, n: int, deadline: float) -> list[Outcome]:
        _LIVE.add(self)
        for i in range(n):
            parent_conn, child_conn = self._ctx.Pipe(duplex=True)
            proc = self._ctx.Process(target=_process_main, args=(child_conn, self.factory, os.getpid()),
                                     name=f"seedrl-env-{i}", daemon=False)
            proc.start()
            child_conn.close()
            self._procs.append(_Proc(proc, parent_conn))
        out = self._collect(dict(enumerate(self._procs)), deadline + self.spawn_timeout_s)
        return [out[i] for i in range(n)]

    def run(self, calls: Mapping[int, Call], deadline: float) -> dict[int, Outcome]:
        out: dict[int, Outcome] = {}
        pending: dict[int, _Proc] = {}
        for i, call in calls.items():
            p = self._procs[i]
            if p.lost is None:
                try:
                    p.conn.send(call)
                    pending[i] = p
                    continue
                except (OSError, ValueError) as exc:  # the pipe is gone: the worker died
                    self._lose(p, f"env worker died ({_describe(exc)})")
            out[i] = Outcome("lost", error=p.lost)
        out |= self._collect(pending, deadline)
        return {i: out[i] for i in calls}

    def _collect(self, pending: dict[int, _Proc], deadline: float) -> dict[int, Outcome]:
        out: dict[int, Outcome] = {}
        pending = dict(pending)
        while pending:
            ready = wait_connections([p.conn for p in pending.values()]
                                     + [p.proc.sentinel for p in pending.values()], timeout=_remaining(deadline))
            if not ready:
                break
            for i, p in list(pending.items()):
                if p.conn in ready or p.proc.sentinel in ready:
                    del pending[i]
                    out[i] = self._reply(p)
        for p in pending.values():
            self._lose(p, "timed out")
        out |= {i: Outcome("timeout", error="timed out") for i in pending}
        return out

    def _reply(self, p: _Proc) -> Outcome:
        try:
            if p.conn.poll():
                ok, value = p.conn.recv()
                return Outcome(value=value) if ok else Outcome("raised", error=value)
        except (EOFError, OSError):
            pass
        p.proc.join(timeout=1)
        why = f"env worker died (exit code {p.proc.exitcode})"
        self._lose(p, why)
        return Outcome("died", error=why)

    def _lose(self, p: _Proc, why: str) -> None:
        p.lost = why
        _kill(p)

    def close(self, deadline: float) -> None:
        live = {i: p for i, p in enumerate(self._procs) if p.lost is None}
        for i, p in list(live.items()):
            try:
                p.conn.send((env_close, ()))
                p.conn.send(None)
            except (OSError, ValueError):
                del live[i]
        self._collect(live, deadline)  # a close that hangs gets its worker killed
        for p in self._procs:
            p.proc.join(timeout=min(1.0, _remaining(deadline)))
            _kill(p)
        self._procs = []
        _LIVE.discard(self)


#: executor name (``rollout.executor``) -> class
EXECUTORS: dict[str, type] = {"thread": ThreadExecutor, "process": ProcessExecutor}


def check_executor(name: str) -> str:
    if name not in EXECUTORS:
        raise unknown_name("env executor", name, list(EXECUTORS))
    return name


def make_executor(name: str, factory: Callable[[], Env], workers: int = 8) -> EnvExecutor:
    """The executor ``name`` over envs made by ``factory``; ``workers`` is ``env.workers``."""
    return EXECUTORS[check_executor(name)](factory, workers=workers)
