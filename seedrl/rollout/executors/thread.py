"""The ``thread`` executor: every episode's env on a daemon thread of its own (see
:mod:`seedrl.rollout.executors`)."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field
from typing import Any

from seedrl.envs.base import Env
from seedrl.rollout.executors.base import Call, Outcome, _describe, _remaining, env_close, log

#: a slot is held for at most this fraction of its call's time budget (see the package docstring)
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
    """Each episode's env on a daemon thread of its own; see the package docstring."""

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

