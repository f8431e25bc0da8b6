"""A hung, crashing or dying environment costs only its own episode, under every env executor.

Faults come from tests/rollout/toy_envs.py (chosen by task id: ``hang-*`` blocks at step 2, ``exit-*``
kills its process there, ...). Time bounds are coarse correctness checks (a turn costs about one
``step_timeout_s`` however many envs hang), not benchmarks.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import threading
import time

import pytest

from seedrl.errors import SeedRLError
from seedrl.rollout.executors import EnvFactory, ProcessExecutor, make_executor
from seedrl.rollout.executors.thread import _Slots
from seedrl.rollout.runner import RolloutSettings, rollout
from tests.rollout.toy_envs import FAULT_STEP, FakeBackend, ToyEnv

pytestmark = pytest.mark.faults

MAX_STEPS = 4


def settings(**kw) -> RolloutSettings:
    base = dict(env_title="Toy", max_steps=MAX_STEPS, history_length=1, step_timeout_s=1.0, env_workers=2)
    return RolloutSettings(**(base | kw))


def play(tokenizer, tasks, **kw):
    return rollout(FakeBackend(tokenizer), tokenizer, ToyEnv, tasks, 1, settings(**kw), seed=11)


def healthy_view(trajs):
    """What a healthy episode's result is made of (its trajectory without the ids)."""
    return [(t.task_id, t.won, t.truncated, t.error, t.privileged_state,
             [(s.observation, s.action, s.reward, s.action_valid, s.response_text) for s in t.steps])
            for t in trajs]


def test_hung_envs_as_many_as_the_workers_cost_only_their_own_episodes(tiny_tokenizer):
    # three hung envs (one at reset, two at step 2), more than env_workers=2, among five healthy ones
    tasks = ["hangreset-0", "ok-1", "hang-2", "ok-3", "hang-4", "ok-5", "ok-6", "ok-7"]
    ok = [i for i, t in enumerate(tasks) if t.startswith("ok")]
    before = set(threading.enumerate())
    t0 = time.perf_counter()
    trajs = play(tiny_tokenizer, tasks)
    wall = time.perf_counter() - t0
    # two turns hang (the reset and step 2): about two timeouts, not one per hung call
    assert wall < (2 + 2) * 1.0, wall
    assert "reset timed out after 1s" in trajs[0].error and not trajs[0].steps
    for i in (2, 4):
        assert "step timed out after 1s" in trajs[i].error and len(trajs[i].steps) == FAULT_STEP
        assert trajs[i].truncated and not trajs[i].privileged_state
    # every healthy episode plays exactly as it does with no faulty neighbour
    alone = play(tiny_tokenizer, [tasks[i] for i in ok])
    assert all(t.error is None and t.privileged_state for t in alone)
    assert healthy_view([trajs[i] for i in ok]) == healthy_view(alone)
    # nothing non-daemon is left behind; healthy workers are gone, only the hung ones' threads linger
    extra = [t for t in threading.enumerate() if t not in before and t.is_alive()]
    assert not [t for t in extra if not t.daemon], extra
    assert len(extra) <= 3, extra


def test_a_hung_env_never_delays_its_neighbours_past_the_turn(tiny_tokenizer):
    # with one worker slot, a hang first in the batch must not make the healthy calls wait for it
    trajs = play(tiny_tokenizer, ["hang-0", "ok-1", "ok-2"], env_workers=1, step_timeout_s=2.0)
    assert "timed out" in trajs[0].error
    assert healthy_view(trajs[1:]) == healthy_view(play(tiny_tokenizer, ["ok-1", "ok-2"], env_workers=1))


@pytest.mark.parametrize("executor", ["thread", "process"])
def test_an_env_that_raises_ends_only_its_episode(tiny_tokenizer, executor, caplog):
    trajs = play(tiny_tokenizer, ["ok-0", "raise-1", "ok-2"], executor=executor, step_timeout_s=5.0)
    assert trajs[1].truncated and trajs[1].error == "RuntimeError: simulator crashed"
    assert len(trajs[1].steps) == FAULT_STEP and not trajs[1].privileged_state
    for t in (trajs[0], trajs[2]):
        assert t.error is None and (len(t.steps) == MAX_STEPS or t.won) and t.privileged_state
    assert "simulator crashed" in caplog.text
    assert not multiprocessing.active_children()


def test_process_workers_that_hang_or_die_are_killed_and_reaped(tiny_tokenizer, tmp_path, monkeypatch):
    monkeypatch.setenv("SEEDRL_TOY_PIDS", str(tmp_path))  # every worker writes its pid there
    tasks = ["hang-0", "ok-1", "exit-2", "ok-3", "hangclose-4"]
    t0 = time.perf_counter()
    # a worker per episode (workers >= episodes); tests/rollout/test_executors.py has workers shared
    trajs = play(tiny_tokenizer, tasks, executor="process", env_workers=len(tasks))
    wall = time.perf_counter() - t0
    hung, ok1, died, ok3, slow_close = trajs
    assert "step timed out" in hung.error and len(hung.steps) == FAULT_STEP
    assert "died (exit code 3)" in died.error and len(died.steps) == FAULT_STEP
    for t in (ok1, ok3, slow_close):  # a close that hangs costs nothing: the episode was over
        assert t.error is None and t.privileged_state and (len(t.steps) == MAX_STEPS or t.won)
    # one timed-out turn and one timed-out close (plus worker start-up), not a wait for HANG_S
    assert wall < 12, wall
    assert not multiprocessing.active_children()
    pids = [int(p.name) for p in tmp_path.iterdir()]
    assert len(pids) == len(tasks) and os.getpid() not in pids
    for pid in pids:  # killed and reaped: no orphan, no zombie
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_process_and_thread_executors_give_identical_trajectories(tiny_tokenizer):
    tasks = ["ok-0", "ok-1", "ok-2"]
    runs = {ex: rollout(FakeBackend(tiny_tokenizer), tiny_tokenizer, ToyEnv, tasks, 2,
                        settings(executor=ex, max_steps=5, step_timeout_s=10.0), seed=5)
            for ex in ("thread", "process")}
    thread, process = ([dataclasses.asdict(t) for t in trajs] for trajs in runs.values())
    assert thread == process
    assert sum(len(t["steps"]) for t in thread) > 6 and any(t["won"] for t in thread)


def test_a_hung_call_does_not_hold_its_slot():
    slots = _Slots(1)
    slots.acquire(lease_s=0.2)  # never released: a hung call
    t0 = time.monotonic()
    second = slots.acquire(lease_s=10.0)
    assert 0.15 < time.monotonic() - t0 < 2.0  # waited out the lease, not forever
    assert slots.held() == 1
    slots.release(second)
    assert slots.held() == 0


def test_unknown_executor_names_and_unpicklable_factories_are_refused():
    with pytest.raises(SeedRLError, match="unknown env executor 'fork'.*process, ray, thread"):
        settings(executor="fork")
    with pytest.raises(SeedRLError, match="unknown env executor"):
        make_executor("fork", ToyEnv)
    with pytest.raises(SeedRLError, match="picklable env factory"):
        ProcessExecutor(lambda: ToyEnv())
    assert EnvFactory("sokoban", {"size": 6}) == EnvFactory("sokoban", {"size": 6})


def test_a_close_that_hangs_is_abandoned_at_its_deadline(tiny_tokenizer):
    t0 = time.perf_counter()
    trajs = play(tiny_tokenizer, ["ok-0", "hangclose-1"], step_timeout_s=0.5, max_steps=2)
    assert time.perf_counter() - t0 < 2.5  # one close deadline, not HANG_S
    assert all(t.error is None and t.privileged_state for t in trajs)


def test_an_env_that_cannot_be_made_ends_only_its_episode_unless_none_can(tiny_tokenizer):
    made = iter([True, False, True, False])

    def factory():
        if not next(made):
            raise RuntimeError("engine missing")
        return ToyEnv()

    trajs = rollout(FakeBackend(tiny_tokenizer), tiny_tokenizer, factory, ["ok-0", "ok-1", "ok-2"], 1, settings(),
                    seed=0)
    # the factory is called in episode order (in the workers), so the second episode is the broken one
    assert [t.error for t in trajs] == [None, "RuntimeError: engine missing", None] and not trajs[1].steps
    assert all(t.steps and t.privileged_state for t in (trajs[0], trajs[2]))
    with pytest.raises(SeedRLError, match="no environment could be made.*engine missing"):
        rollout(FakeBackend(tiny_tokenizer), tiny_tokenizer, lambda: factory(), ["ok-0"], 1, settings(), seed=0)
