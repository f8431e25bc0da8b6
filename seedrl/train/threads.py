"""``torch_threads: auto``: as many torch threads as there are cores nobody else is using, chosen again
as the load changes.

Why: torch's intra-op threads meet at a barrier after every kernel. On a 2-core machine a second job
that takes one core makes one of two threads wait for the scheduler at each barrier, and a tiny
model's thousands of small kernels then crawl (issue 44 measured GRPO iterations of 20-35 s alone and
250-420 s beside one other process). One thread per free core slows down in proportion instead.

How: :func:`cpu_sample` reads the system's busy CPU-seconds and this process's own (psutil, so it works
wherever psutil does, not only on Linux); between two samples, the cores the *other* processes kept
busy are the system's busy time minus our own, over the wall time (:func:`others_busy`), and the
threads are the cores left, at least one (:func:`free_threads`). :class:`ThreadGovernor` samples at
most every ``min_interval`` seconds and sets ``torch.set_num_threads``; the trainer asks it before every
iteration (logged as ``sys/torch_threads``), the SFT loop before every optimizer step.

The price: a gradient summed by 1 thread and by 2 differs in float rounding (measured ~5e-9 on the
tiny model; forwards were bit-identical), so a run under ``auto`` is bit-reproducible only on a
machine whose load is the same. Comparisons pin a number (``seedrl compare`` cells run with one thread).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class CpuSample:
    """``wall`` seconds (monotonic), the whole system's ``busy`` CPU-seconds, this process's ``own``."""

    wall: float
    busy: float
    own: float


def cpu_sample() -> CpuSample:
    """The system's busy CPU-seconds (every core, idle and I/O wait left out) and this process's own
    (user + system), now."""
    import psutil

    t = psutil.cpu_times()
    idle = t.idle + getattr(t, "iowait", 0.0)
    own = psutil.Process().cpu_times()
    return CpuSample(time.monotonic(), sum(t) - idle, own.user + own.system)


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def others_busy(a: CpuSample, b: CpuSample) -> float:
    """How many cores the other processes kept busy between samples ``a`` and ``b``, on average (>= 0)."""
    wall = b.wall - a.wall
    if wall <= 0:
        return 0.0
    return max(0.0, ((b.busy - a.busy) - (b.own - a.own)) / wall)


def free_threads(cores: int, busy: float) -> int:
    """The threads for ``cores`` cores of which others keep ``busy`` busy: the free ones, rounded to the
    nearest, at least 1 and at most ``cores``."""
    return max(1, min(cores, int(cores - busy + 0.5)))


class ThreadGovernor:
    """Sets torch's thread count to the free cores (module docstring). :meth:`step` is cheap to call
    often: it samples at most every ``min_interval`` seconds. The first decision comes from a
    ``probe``-second sample taken when the governor is made."""

    def __init__(self, cores: int | None = None, min_interval: float = 2.0, probe: float = 0.25,
                 sampler: Callable[[], CpuSample] | None = None,
                 sleep: Callable[[float], None] | None = None) -> None:
        self.cores = cores or usable_cores()
        self.min_interval, self.sampler = min_interval, sampler or cpu_sample
        self.last = self.sampler()
        (sleep or time.sleep)(probe)
        self._decide(self.sampler())

    def _decide(self, now: CpuSample) -> None:
        torch.set_num_threads(free_threads(self.cores, others_busy(self.last, now)))
        self.last = now

    def step(self) -> int:
        """Choose again if ``min_interval`` has passed since the last choice; the threads in use."""
        now = self.sampler()
        if now.wall - self.last.wall >= self.min_interval:
            self._decide(now)
        return torch.get_num_threads()


def apply_threads(setting: int | str | None) -> ThreadGovernor | None:
    """A run's ``torch_threads``: a number is set once, ``auto`` returns the governor that keeps it
    matched to the free cores, None leaves torch's default."""
    if setting == "auto":
        return ThreadGovernor()
    if setting:
        torch.set_num_threads(int(setting))
    return None
