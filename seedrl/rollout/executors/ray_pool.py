"""The ``ray`` executor: the pool of :mod:`~seedrl.rollout.executors.pool` as Ray actors (see
:mod:`seedrl.rollout.executors`). Ray is imported on first use."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from typing import Any

from seedrl.envs.base import Env
from seedrl.errors import SeedRLError
from seedrl.rollout.executors.base import Outcome, _describe, _remaining, log
from seedrl.rollout.executors.host import _EnvHost
from seedrl.rollout.executors.pool import _Pool, _Reply, _Worker

_RAY_HOST: Any = None  # _EnvHost as a Ray actor class (made on first use: ray is imported lazily)


def _import_ray():
    try:
        import ray
    except ImportError:
        raise SeedRLError("env.executor=ray needs Ray, which is not installed: pip install 'seedrl[ray]'") from None
    return ray


class RayExecutor(_Pool):
    """``min(workers, episodes)`` Ray actors per rollout, each holding its episodes' envs, like the
    process pool; see the package docstring. Connects to ``ray_address`` ("auto": the cluster this machine
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
