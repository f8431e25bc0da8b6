"""What the process and Ray executors share, on the parent's side: :class:`_Pool` (workers per rollout,
each holding its episodes' envs; restarts and replay) and :func:`assign`."""

from __future__ import annotations

import atexit
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from seedrl.rollout.executors.base import Call, Outcome, _describe, _remaining, env_reset, log
from seedrl.rollout.executors.host import REPLAYED


def assign(n: int, k: int) -> list[list[int]]:
    """The episodes each of ``k`` workers holds: round-robin (episode i on worker ``i % k``), so a worker
    that dies takes one episode of many groups rather than a whole group."""
    return [list(range(w, n, k)) for w in range(k)]


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

