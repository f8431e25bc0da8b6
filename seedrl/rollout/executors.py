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
from collections.abc import Callable, Iterator, Mapping
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
    """Runs the calls of a rollout's episodes on their envs; see the module docstring. ``restarts``
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

    restarts = 0  # a hung thread is left behind, never replaced

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
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle (already so from exec on:
    # ProcessExecutor._start)
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
        conn.send(("took",))  # from here on, a death is the death of one of this message's calls
        if op in _STREAMED:
            for i, result in _STREAMED[op](host, *args):
                conn.send(("one", i, result))
            conn.send(("end", None))
        else:
            conn.send(("end", getattr(host, op)(*args)))


@dataclass(eq=False)
class _Worker:
    """A pool worker (a process or a Ray actor) and the episodes it holds in the current rollout."""

    handle: Any  # _Proc for a process, an actor handle for Ray
    episodes: list[int] = field(default_factory=list)
    lost: str | None = None  # why it was given up (killed, dead): never used again
    unexplained: int = 0  # deaths in a row in its place with no call running (see _Pool._blame)


@dataclass
class _Reply:
    """A worker's answer to one message: the results it sent (episode -> ``(ok, value)``), whether it
    finished, or what happened to it instead (``fault``; ``delivered``: it said it took the message, so a fault after that is the
    fault of the first episode without a result)."""

    done: dict[int, tuple[bool, Any]] = field(default_factory=dict)
    finished: bool = False
    fault: Outcome | None = None
    delivered: bool = False


@dataclass
class _Tape:
    """What a pool needs to make an episode's env again in a new worker: whether the factory made it,
    and its :data:`REPLAYED` calls with what they returned (``broken``: one raised, so its state cannot
    be made again)."""

    made: bool = False
    calls: list[tuple[Callable, tuple, Any]] = field(default_factory=list)
    broken: str | None = None


@dataclass
class _Proc:
    proc: Any  # multiprocessing.Process
    conn: Any  # multiprocessing.connection.Connection


def _exit_text(proc: Any) -> str:
    """How a worker process ended: ``exit code 1``, ``exit code -9: SIGKILL``, ``still running``."""
    code = proc.exitcode
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"exit code {code}: {signal.Signals(-code).name}"
        except ValueError:
            pass
    return f"exit code {code}"


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


class _Pool:
    """What the process and Ray executors share: ``min(workers, episodes)`` workers per rollout, each
    holding its episodes' envs (:func:`assign`); one message per worker per batch of calls. A worker that
    times out or dies is given up. With ``restartable`` (process) only the episode whose call it was in
    ends: a new worker takes its place, makes the envs of its other episodes again and replays their
    calls (:class:`_Tape`), then runs the calls of the batch it had not started; without (Ray) all its
    episodes end. With ``keep_warm`` the healthy workers outlive :meth:`close` (their envs are closed) and
    serve the next rollout; :meth:`shutdown` ends them. ``restarts`` counts the workers started in place
    of one that died or hung (over the pool's life)."""

    spawn_timeout_s: float = 60.0
    restartable: bool = False

    def __init__(self, workers: int, keep_warm: bool) -> None:
        self.workers = max(1, workers)
        self.keep_warm = keep_warm
        self.restarts = 0
        self._idle: list[_Worker] = []  # warm workers holding no envs
        self._active: list[_Worker] = []  # this rollout's workers
        self._owner: dict[int, _Worker] = {}  # episode index -> its worker
        self._tapes: dict[int, _Tape] = {}  # episode index -> how to make its env again
        self._lost: dict[int, str] = {}  # episode index -> why its env is gone (a later call answers ``lost``)
        self._moved: dict[float, float] = {}  # a caller's deadline -> itself plus the time restarts took

    # subclasses: start a worker, send it one message and collect replies, give one up
    def _start(self) -> _Worker: ...

    def _exchange(self, msgs: dict[_Worker, tuple], deadline: float) -> dict[_Worker, _Reply]: ...

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
        self._owner, self._tapes, self._lost, self._moved = {}, {i: _Tape() for i in range(n)}, {}, {}
        for w, episodes in zip(self._active, assign(n, k)):
            w.episodes = episodes
            self._owner |= dict.fromkeys(episodes, w)
        out, _ = self._dispatch("make", {w: dict.fromkeys(w.episodes) for w in self._active},
                                deadline + (self.spawn_timeout_s if fresh else 0.0))
        return [out[i] for i in range(n)]

    def run(self, calls: Mapping[int, Call], deadline: float) -> dict[int, Outcome]:
        # a deadline that a worker's restart pushed back stays pushed back for the calls that come with
        # it (the rollout reads and steps a turn by one deadline)
        given, deadline = deadline, self._moved.get(deadline, deadline)
        out: dict[int, Outcome] = {}
        batches: dict[_Worker, dict[int, Any]] = {}
        for i, call in calls.items():
            w = self._owner.get(i)
            if i in self._lost or w is None:
                out[i] = Outcome("lost", error=self._lost.get(i, "no env"))
            else:
                batches.setdefault(w, {})[i] = call
        done, moved = self._dispatch("call", batches, deadline)
        if moved != deadline:
            self._moved = {given: moved}
        out |= done
        return {i: out[i] for i in calls}

    def _dispatch(self, op: str, batches: dict[_Worker, dict[int, Any]], deadline: float
                  ) -> tuple[dict[int, Outcome], float]:
        """Run ``op`` (``make``: items are None; ``call``: items are the calls) on each worker's episodes,
        in order. A worker that dies or hangs costs the episode whose item it was running (the first
        without a result: the culprit) and is replaced (:meth:`_replace`); the items it had not started
        then run on the new worker, by a deadline pushed back by the time the restart took (and at least
        the batch's time budget from then on; with no budget at all they time out as well). One outcome
        per item, and the deadline as it ended up."""
        out: dict[int, Outcome] = {}
        budget = _remaining(deadline)
        factory = self._factory_message() if op == "make" else None
        while batches:
            replies = self._exchange({w: ("make", factory, list(items)) if op == "make" else ("call", items)
                                      for w, items in batches.items()}, deadline)
            broken: dict[_Worker, dict[int, Any]] = {}  # a given-up worker -> the items it did not start
            for w, items in batches.items():
                r = replies[w]
                for i, result in r.done.items():
                    out[i] = self._record(op, i, items[i], result)
                if r.fault is None:
                    w.unexplained = 0
                    continue
                rest = {i: item for i, item in items.items() if i not in r.done}
                culprit = next(iter(rest), None) if r.delivered else None
                if w.lost is None or not self.restartable or not self._blame(w, culprit):
                    # it lives on (these calls failed), or it is gone with all its episodes
                    for i in rest:
                        out[i] = r.fault
                    if w.lost is not None:
                        self._drop(w, w.lost)
                    continue
                if culprit is not None:
                    out[culprit] = r.fault
                    del rest[culprit]
                if budget <= 0:  # the batch came with no time left: the calls it did not start time out
                    for i in rest:
                        out[i] = Outcome("timeout", error="timed out")
                        self._lose(i, "its call timed out earlier")
                    rest = {}
                broken[w] = rest
            if not broken:
                break
            t0 = time.monotonic()
            self._replace({w: set(rest) for w, rest in broken.items()}, budget)
            batches = {}
            for rest in broken.values():
                for i, item in rest.items():
                    if i in self._lost:
                        out[i] = Outcome("lost", error=self._lost[i])
                    else:
                        batches.setdefault(self._owner[i], {})[i] = item
            now = time.monotonic()
            deadline = max(deadline + now - t0, now + budget)
        return out, deadline

    def _record(self, op: str, i: int, item: Any, result: tuple[bool, Any]) -> Outcome:
        """The outcome of one result, written on the episode's tape where a restart can replay it."""
        ok, value = result
        tape = self._tapes[i]
        if not self.restartable:  # nothing replays (Ray): no tape to keep
            pass
        elif op == "make":
            tape.made = ok
        elif item[0] in REPLAYED:
            fn, args = item
            if fn is env_reset:  # a new episode: what came before no longer matters
                tape.calls, tape.broken = [], None
            if ok:
                tape.calls.append((fn, args, value))
            else:
                tape.broken = f"{fn.__name__} raised {value}"
        return Outcome(value=value) if ok else Outcome("raised", error=value)

    def _blame(self, w: _Worker, culprit: int | None) -> bool:
        """Charge the loss of worker ``w`` to the episode whose item it was running (``culprit``); with none
        (it died between calls, or before it took the message) its place gets one more chance in a row:
        False once that is spent (then all its episodes are lost)."""
        if culprit is None:
            w.unexplained += 1
            return w.unexplained <= 1
        w.unexplained = 0
        self._lose(culprit, f"its env worker was lost earlier ({w.lost})")
        return True

    def _lose(self, i: int, why: str) -> None:
        self._lost.setdefault(i, why)

    def _drop(self, w: _Worker, why: str) -> None:
        """A worker given up for good: every episode it holds is lost."""
        for i in w.episodes:
            self._lose(i, f"its env worker was lost earlier ({why})")

    def _restorable(self, w: _Worker) -> dict[int, list[tuple[Callable, tuple, Any]]]:
        """The tapes of the envs ``w``'s episodes need made again (an episode whose tape is broken is
        lost: its env cannot be made again)."""
        tapes = {}
        for i in w.episodes:
            tape = self._tapes[i]
            if i in self._lost or not tape.made:
                continue
            if tape.broken is not None:
                self._lose(i, f"its env worker was lost and its env cannot be made again ({tape.broken})")
            else:
                tapes[i] = tape.calls
        return tapes

    def _replace(self, broken: dict[_Worker, set[int]], budget: float) -> None:
        """Start a worker in the place of each given-up one that still holds a live episode (``broken``:
        with the episodes whose items it did not start) and make their envs again: each env is made anew
        and its recorded calls replayed, which must give what they gave the first time; an episode whose
        env cannot be made again so is lost. A new worker that dies or hangs while it does this costs
        the episode it was at and is replaced in turn."""
        todo = list(broken)
        while todo:
            fresh: dict[_Worker, dict[int, list]] = {}
            for old in todo:
                tapes = self._restorable(old)
                if not tapes and not (broken.get(old, set()) - set(self._lost)):
                    self._drop(old, old.lost or "lost")  # nothing left to play there
                    continue
                w = self._respawn(old)
                if w is not None:
                    fresh[w] = tapes
                    broken[w] = broken.get(old, set())
            todo = []
            msgs = {w: ("restore", self._factory_message(), tapes) for w, tapes in fresh.items() if tapes}
            if not msgs:
                break
            replies = self._exchange(msgs, time.monotonic() + self.spawn_timeout_s + budget)
            for w, r in replies.items():
                for i, (ok, why) in r.done.items():
                    if not ok:
                        self._lose(i, f"its env worker was lost and its env could not be made again: {why}")
                        log.warning("episode %d lost: its env could not be made again in a new worker: %s", i, why)
                if r.fault is None:
                    continue
                if w.lost is None:  # a reply that could not be moved: give the worker up all the same
                    self._give_up(w, r.fault.error or "failed")
                rest = [i for i in fresh[w] if i not in r.done]
                if self._blame(w, rest[0] if rest and r.delivered else None):
                    todo.append(w)
                else:
                    self._drop(w, w.lost or "lost")

    def _respawn(self, old: _Worker) -> _Worker | None:
        """A new worker holding ``old``'s episodes, in its place (None, its episodes lost, if it cannot
        be started)."""
        try:
            w = self._start()
        except Exception as exc:  # noqa: BLE001 -- e.g. out of processes: the episodes end, the rollout goes on
            self._drop(old, f"{old.lost}; no worker could be started in its place: {_describe(exc)}")
            return None
        w.episodes, w.unexplained = old.episodes, old.unexplained
        self._active[self._active.index(old)] = w
        self._owner |= dict.fromkeys(w.episodes, w)
        self.restarts += 1
        live = [i for i in w.episodes if i not in self._lost]
        log.warning("env worker lost (%s); started another for its episodes %s (making their envs again and "
                    "replaying their actions)", old.lost, live)
        return w

    def close(self, deadline: float) -> None:
        live = [w for w in self._active if w.lost is None]
        try:
            self._exchange({w: ("close",) for w in live}, deadline)  # a close that hangs gets its worker killed
            self._idle += [w for w in live if w.lost is None]
            self._active, self._owner, self._tapes = [], {}, {}
        finally:  # also when a Ctrl-C interrupts the wait: nothing is left running, nothing unreaped
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

    restartable = True

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
        #: every worker process started and not yet reaped (with its pipe), whether or not the pool still
        #: holds it: an interrupted open or close may drop one between its start and its record
        self._procs: dict[Any, Any] = {}

    def shutdown(self, deadline: float | None = None) -> None:
        """End every worker, and kill and reap any process this pool started that is still around."""
        try:
            super().shutdown(deadline)
        finally:
            for proc, conn in list(self._procs.items()):
                _kill(_Proc(proc, conn))  # a no-op but the reaping for one already ended
                self._procs.pop(proc, None)

    def _factory_message(self) -> bytes:
        return self._factory_bytes  # unpickled in the worker: a failure there is that worker's episodes'

    def _start(self) -> _Worker:
        """Start a worker that ignores SIGINT from its exec on. A terminal's Ctrl-C goes to the whole
        foreground process group, and a worker still starting (before :func:`_process_main` ignores it and
        leaves the group) would die of it, printing a KeyboardInterrupt traceback. Only an ignored
        disposition survives exec (a signal mask does not: the spawn resets it), so SIGINT is ignored here
        for the moment of the start (main thread only; a Ctrl-C in those milliseconds is lost, the next
        one is not). The process is recorded before anything can interrupt, for :meth:`shutdown` to reap."""
        parent_conn, child_conn = self._ctx.Pipe(duplex=True)
        proc = self._ctx.Process(target=_process_main, args=(child_conn, os.getpid()),
                                 name=f"seedrl-env-{self._started}", daemon=False)
        self._started += 1
        main = threading.current_thread() is threading.main_thread()
        old = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
        try:
            proc.start()
            self._procs[proc] = parent_conn
        finally:
            if main:
                signal.signal(signal.SIGINT, old)
        child_conn.close()
        return _Worker(_Proc(proc, parent_conn))

    def _exchange(self, msgs: dict[_Worker, tuple], deadline: float) -> dict[_Worker, _Reply]:
        out: dict[_Worker, _Reply] = {}
        pending: dict[_Worker, _Reply] = {}
        for w, msg in msgs.items():
            try:
                w.handle.conn.send(msg)
                pending[w] = _Reply()
            except (OSError, ValueError):  # the pipe is gone: the worker died before it, while idle
                w.handle.proc.join(timeout=1)  # its exit code says how ("Broken pipe" says nothing)
                out[w] = _Reply(fault=self._died(w, f"env worker died while idle ({_exit_text(w.handle.proc)})"))
        while pending:
            ready = wait_connections([h for w in pending for h in (w.handle.conn, w.handle.proc.sentinel)],
                                     timeout=_remaining(deadline))
            if not ready:
                break
            for w, r in list(pending.items()):
                if w.handle.conn in ready or w.handle.proc.sentinel in ready:
                    self._read(w, r)
                    if r.finished or r.fault is not None:
                        out[w] = pending.pop(w)
        for w, r in pending.items():
            self._read(w, r)  # what came in at the last moment
            if not r.finished and r.fault is None:
                self._give_up(w, "timed out")
                r.fault = Outcome("timeout", error="timed out")
            out[w] = r
        return out

    def _read(self, w: _Worker, r: _Reply) -> None:
        """Take in what the worker has sent so far; one that has exited is given up once everything it
        sent before is read (so its last result is never mistaken for the call it died in)."""
        p = w.handle
        for _ in range(2):
            try:
                while p.conn.poll():
                    kind, *rest = p.conn.recv()
                    if kind == "took":
                        r.delivered = True
                    elif kind == "one":
                        r.done[rest[0]] = rest[1]
                    else:
                        r.finished = True
                        return
            except (EOFError, OSError):  # its end of the pipe is closed: it is gone
                break
            if p.proc.exitcode is None:
                return  # alive: more is coming
        p.proc.join(timeout=1)
        r.fault = self._died(w, f"env worker died ({_exit_text(p.proc)})")

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
        self._procs.pop(p.proc, None)


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

    def _exchange(self, msgs: dict[_Worker, tuple], deadline: float) -> dict[_Worker, _Reply]:
        ray = self._ray
        refs = {getattr(w.handle, op).remote(*args): w for w, (op, *args) in msgs.items()}
        if not refs:
            return {}
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=_remaining(deadline))
        out: dict[_Worker, _Reply] = {}
        for ref in ready:
            w = refs[ref]
            try:
                value = ray.get(ref)
                out[w] = _Reply(done=value if isinstance(value, dict) else {}, finished=True)
            except ray.exceptions.RayActorError as exc:  # ActorDiedError: its process exited or was killed
                why = f"env worker died ({type(exc).__name__})"
                self._give_up(w, why)
                out[w] = _Reply(fault=Outcome("died", error=why))
            except Exception as exc:  # noqa: BLE001 -- e.g. a reply Ray could not move: the actor lives on
                first = (str(exc).strip().splitlines() or [""])[0][:200]
                out[w] = _Reply(fault=Outcome("raised", error=f"{type(exc).__name__}: {first}"))
        for w in refs.values():
            if w not in out:
                self._give_up(w, "timed out")
                out[w] = _Reply(fault=Outcome("timeout", error="timed out"))
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
