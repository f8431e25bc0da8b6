"""torch_threads: auto (seedrl/train/threads.py): one torch thread per core no other process is using."""

from __future__ import annotations

import pytest
import torch

from seedrl.train.threads import CpuSample, ThreadGovernor, free_threads, others_busy


@pytest.fixture(autouse=True)
def _keep_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def test_others_busy_is_the_system_busy_time_less_our_own_over_the_wall_time():
    """Over 4 s the system was busy 10 CPU-seconds of which 6 were ours: the others kept 1 core busy.
    Our own time is never counted as another's; a clock that did not move reads 0."""
    a, b = CpuSample(100.0, 50.0, 20.0), CpuSample(104.0, 60.0, 26.0)
    assert others_busy(a, b) == pytest.approx(1.0)
    assert others_busy(a, CpuSample(104.0, 58.0, 28.0)) == 0.0  # our threads alone: nobody else
    assert others_busy(a, CpuSample(100.0, 60.0, 26.0)) == 0.0


@pytest.mark.parametrize(("cores", "busy", "threads"), [(2, 0.0, 2), (2, 0.3, 2), (2, 0.6, 1), (2, 1.0, 1),
                                                        (2, 3.0, 1), (8, 2.2, 6), (8, 0.0, 8)])
def test_free_threads_are_the_free_cores_at_least_one(cores, busy, threads):
    assert free_threads(cores, busy) == threads


def test_governor_follows_the_load_and_samples_at_most_every_interval():
    """A fake clock and load on 2 cores: idle at first (2 threads), then another job takes a core (1),
    then it ends (2 again); a step before min_interval has passed keeps the last choice."""
    samples = iter([CpuSample(0.0, 0.0, 0.0), CpuSample(0.25, 0.5, 0.5),  # probe: only us -> 2
                    CpuSample(1.0, 1.9, 1.4),  # too soon: no new choice
                    CpuSample(3.0, 6.5, 4.0),  # others 1.0 core over 2.75 s -> 1
                    CpuSample(6.0, 9.5, 7.0)])  # only us again -> 2
    gov = ThreadGovernor(cores=2, min_interval=2.0, sampler=lambda: next(samples), sleep=lambda s: None)
    assert torch.get_num_threads() == 2
    assert gov.step() == 2
    assert gov.step() == 1
    assert gov.step() == 2


def test_trainer_under_auto_logs_its_threads(tmp_path, monkeypatch):
    """A run with torch_threads=auto asks the governor before each iteration and logs sys/torch_threads;
    here the load reads as another process on every core but one, so it runs one thread."""
    import json

    import seedrl.train.threads as threads_mod
    from seedrl.train.trainer import Trainer
    from tests.helpers import tiny_cfg

    clock = iter(range(0, 10_000, 5))

    def busy_world():  # every 5 s the others use (cores - 1) cores
        t = float(next(clock))
        return CpuSample(t, t * (threads_mod.usable_cores() - 1), 0.0)

    monkeypatch.setattr(threads_mod, "cpu_sample", busy_world)
    torch.set_num_threads(2)
    tr = Trainer(tiny_cfg(tmp_path / "run", torch_threads="auto", iterations=1, **{"eval.num_tasks": 0}))
    tr.train()
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["sys/torch_threads"] == 1 and torch.get_num_threads() == 1
