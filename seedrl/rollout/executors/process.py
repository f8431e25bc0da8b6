"""The ``process`` executor: a pool of worker processes, each holding its episodes' envs (see
:mod:`seedrl.rollout.executors`)."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import wait as wait_connections
from typing import Any

from seedrl.envs.base import Env
from seedrl.errors import SeedRLError
from seedrl.rollout.executors.base import Outcome, _describe, _remaining
from seedrl.rollout.executors.host import _STREAMED, _EnvHost
from seedrl.rollout.executors.pool import _Pool, _Reply, _Worker


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


class ProcessExecutor(_Pool):
    """``min(workers, episodes)`` worker processes per rollout, each holding its episodes' envs; see the
    package docstring. ``spawn_timeout_s`` is added to the deadline of an :meth:`open` that starts workers
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
