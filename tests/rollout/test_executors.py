"""The pooled executors (``process``: worker processes, ``ray``: Ray actors) play exactly what the thread
executor plays, and a worker that hangs or dies ends only the episodes it holds.

A pool has ``min(env.workers, episodes)`` workers; episode i lives on worker ``i % workers``
(``seedrl.rollout.executors.assign``). The Ray tests share one local Ray instance, started by a
``RayExecutor`` (module fixture) and stopped by it at the end, which then checks no Ray process is left.
"""

from __future__ import annotations

import dataclasses
import functools
import multiprocessing
import os
import time

import pytest

from seedrl.envs.registry import make_env  # noqa: F401 -- registers the envs before EnvFactory is used
from seedrl.rollout.executors import EnvFactory, RayExecutor, assign, make_executor
from seedrl.rollout.runner import RolloutSettings, rollout
from tests.rollout.toy_envs import FAULT_STEP, DiesMakingOnce, FakeBackend, ToyEnv

MAX_STEPS = 4


def settings(**kw) -> RolloutSettings:
    base = dict(env_title="Toy", max_steps=MAX_STEPS, history_length=1, step_timeout_s=1.0, env_workers=2)
    return RolloutSettings(**(base | kw))


def play(tokenizer, tasks, group_size=1, factory=ToyEnv, pool=None, seed=11, **kw):
    """A rollout of the toy env; ``kw`` are RolloutSettings (``executor`` its name), ``pool`` a kept executor."""
    return rollout(FakeBackend(tokenizer), tokenizer, factory, tasks, group_size, settings(**kw), seed=seed,
                   executor=pool)


def as_dicts(trajs):
    return [dataclasses.asdict(t) for t in trajs]


def healthy_view(trajs):
    return [(t.task_id, t.won, t.truncated, t.error, t.privileged_state,
             [(s.observation, s.action, s.reward, s.action_valid, s.response_text) for s in t.steps])
            for t in trajs]


def _ray_processes() -> list[str]:
    """Ray's daemons (raylet, gcs_server, its workers) among this process's descendants."""
    import psutil

    found = []
    for p in psutil.Process().children(recursive=True):
        try:
            text = " ".join(p.cmdline()) + " " + p.name()
        except psutil.Error:
            continue
        if any(k in text for k in ("raylet", "gcs_server", "ray::", "default_worker.py")):
            found.append(text[:120])
    return found


@pytest.fixture(scope="module")
def ray_instance():
    """One local Ray instance for this module, started (and at the end stopped) by a RayExecutor."""
    pytest.importorskip("ray")
    import ray

    assert not ray.is_initialized()
    owner = RayExecutor(ToyEnv, workers=1)
    owner._ensure_ray()
    temp_dir = owner._temp_dir
    assert ray.is_initialized() and temp_dir and os.path.isdir(temp_dir)
    yield ray
    owner.shutdown()
    assert not ray.is_initialized()
    assert not os.path.exists(temp_dir)
    deadline = time.monotonic() + 15
    while _ray_processes() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _ray_processes()


def test_episodes_go_round_robin_to_the_workers():
    assert assign(5, 2) == [[0, 2, 4], [1, 3]]
    assert assign(3, 3) == [[0], [1], [2]]  # workers >= episodes: one episode each


@pytest.mark.parametrize("executor,workers", [("process", 2), ("process", 8), ("ray", 2)])
def test_pools_play_exactly_what_threads_play(tiny_tokenizer, request, executor, workers):
    if executor == "ray":
        request.getfixturevalue("ray_instance")
    tasks = ["ok-0", "ok-1", "ok-2"]
    kw = dict(group_size=2, max_steps=5, step_timeout_s=20.0, seed=5)
    thread = as_dicts(play(tiny_tokenizer, tasks, **kw))
    pooled = as_dicts(play(tiny_tokenizer, tasks, executor=executor, env_workers=workers, **kw))
    assert pooled == thread
    assert sum(len(t["steps"]) for t in thread) > 6 and any(t["won"] for t in thread)
    assert not multiprocessing.active_children()


@pytest.mark.faults
@pytest.mark.parametrize("executor", ["process", "ray"])
def test_a_worker_that_hangs_or_dies_ends_only_the_episodes_it_holds(tiny_tokenizer, request, tmp_path, executor):
    if executor == "ray":
        ray = request.getfixturevalue("ray_instance")
    # three workers: 0 holds (ok-0, exit-3), 1 holds (hang-1, ok-4), 2 holds (ok-2, ok-5)
    tasks = ["ok-0", "hang-1", "ok-2", "exit-3", "ok-4", "ok-5"]
    t0 = time.perf_counter()
    # every env writes its worker's pid into tmp_path
    pool = make_executor(executor, functools.partial(ToyEnv, pids=str(tmp_path)), workers=3)
    trajs = play(tiny_tokenizer, tasks, pool=pool, executor=executor, env_workers=3)
    wall = time.perf_counter() - t0
    pids = {int(p.name) for p in tmp_path.iterdir()}
    died, hung = trajs[3], trajs[1]
    assert "step timed out after 1s" in hung.error and len(hung.steps) == FAULT_STEP
    assert "env step failed: env worker died" in died.error and len(died.steps) == FAULT_STEP
    death = "env worker died (exit code 3)" if executor == "process" else "env worker died (ActorDiedError)"
    if executor == "process":
        # a new worker takes the lost one's place and replays its other episodes: they play on
        alone = play(tiny_tokenizer, ["ok-0", "ok-4"])
        assert healthy_view([trajs[0], trajs[4]]) == healthy_view(alone)
        assert pool.restarts == 2
    else:
        # Ray: their neighbours on the same worker end with them: at the same turn with the same error, or
        # (a turn that sent their env nothing, e.g. an unparsable answer) at their next call
        for lost, cause, why in ((trajs[0], died, death), (trajs[4], hung, "timed out")):
            assert lost.truncated and not lost.privileged_state and why in lost.error
            assert (lost.error, len(lost.steps)) == (cause.error, FAULT_STEP) or (
                lost.error == f"env read failed: its env worker was lost earlier ({why})"
                and len(lost.steps) == FAULT_STEP + 1), (lost.error, len(lost.steps))
    # the healthy worker's episodes play exactly as they do alone, on threads
    alone = play(tiny_tokenizer, ["ok-2", "ok-5"])
    assert all(t.error is None and t.privileged_state for t in alone)
    assert healthy_view([trajs[2], trajs[5]]) == healthy_view(alone)
    assert wall < 15, wall  # one timed-out turn (plus start-up), not a wait for HANG_S
    # nothing is left running: every worker that held an env is gone (killed or ended), none a zombie
    assert not multiprocessing.active_children()
    assert len(pids) == 3 + (pool.restarts if executor == "process" else 0) and os.getpid() not in pids
    deadline = time.monotonic() + 10  # ray.kill is asynchronous
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [pid for pid in pids if _alive(pid)]
    if executor == "ray":
        assert ray.is_initialized()  # an instance the executor did not start is left running


@pytest.mark.faults
@pytest.mark.parametrize("bad", ["exit", "hang"])
def test_a_process_worker_that_dies_or_hangs_ends_only_the_episode_whose_call_it_was_in(tiny_tokenizer, bad):
    # two workers: 0 holds (ok-0, ok-2, ok-4, ok-6), 1 holds (bad-1, ok-3, ok-5, bad-7); at the fault turn
    # worker 1 is lost in bad-1's step with ok-3, ok-5 and bad-7 still to step, then in bad-7's
    tasks = ["ok-0", f"{bad}-1", "ok-2", "ok-3", "ok-4", "ok-5", "ok-6", f"{bad}-7"]
    pool = make_executor("process", ToyEnv, workers=2)
    trajs = play(tiny_tokenizer, tasks, pool=pool, executor="process")
    # the same tasks on threads (where a dying env would take the test with it: it raises there instead)
    thread = play(tiny_tokenizer, [t.replace("exit-", "raise-") for t in tasks])
    ok = [i for i, t in enumerate(tasks) if t.startswith("ok")]
    assert healthy_view([trajs[i] for i in ok]) == healthy_view([thread[i] for i in ok])
    assert all(thread[i].error is None and thread[i].privileged_state for i in ok)
    assert max(len(trajs[i].steps) for i in (3, 5)) > FAULT_STEP  # they did play on past the fault
    for i in (1, 7):
        t = trajs[i]
        assert t.truncated and not t.privileged_state and len(t.steps) == FAULT_STEP
        assert t.error == ("env step failed: env worker died (exit code 3)" if bad == "exit"
                           else "env step timed out after 1s")
        assert [(s.observation, s.action) for s in t.steps] == [(s.observation, s.action) for s in thread[i].steps]
    if bad == "hang":  # nothing else tells the two executors apart
        assert as_dicts(trajs) == as_dicts(thread)
    assert pool.restarts == 2
    assert not multiprocessing.active_children()


@pytest.mark.faults
def test_an_episode_whose_replay_does_not_come_out_the_same_ends_as_an_env_error(tiny_tokenizer, caplog):
    # one worker holds all three; exit-0 kills it, and pid-1's observations name the process they came from
    pool = make_executor("process", ToyEnv, workers=1)
    trajs = play(tiny_tokenizer, ["exit-0", "pid-1", "ok-2"], pool=pool, executor="process", env_workers=1)
    assert "env worker died (exit code 3)" in trajs[0].error
    assert healthy_view(trajs[2:]) == healthy_view(play(tiny_tokenizer, ["ok-2"]))
    assert "replaying call 1 of" in trajs[1].error and "did not give what it gave the first time" in trajs[1].error
    assert trajs[1].truncated and not trajs[1].privileged_state and len(trajs[1].steps) in (FAULT_STEP, FAULT_STEP + 1)
    assert "could not be made again" in caplog.text
    assert pool.restarts == 1


@pytest.mark.faults
def test_a_worker_that_dies_making_an_env_costs_only_that_episode(tiny_tokenizer, tmp_path):
    # one worker: making episode 1's env kills it; its successor makes episode 0's again, then episode 2's
    pool = make_executor("process", DiesMakingOnce(str(tmp_path / "died")), workers=1)
    trajs = play(tiny_tokenizer, ["ok-0", "ok-1", "ok-2"], pool=pool, executor="process", env_workers=1)
    assert trajs[1].error == "env start failed: env worker died (exit code 3)" and not trajs[1].steps
    assert healthy_view([trajs[0], trajs[2]]) == healthy_view(play(tiny_tokenizer, ["ok-0", "ok-2"]))
    assert pool.restarts == 1
    assert not multiprocessing.active_children()


@pytest.mark.faults
def test_a_restart_in_the_read_gives_the_turns_steps_their_time(tiny_tokenizer):
    # exitread-0 kills the worker as it reads the answer to step 2; making the two other envs again takes
    # longer (2 x 0.4 s, plus a start) than what was left of the turn's 1 s: their steps get that time back
    pool = make_executor("process", functools.partial(ToyEnv, make_s=0.4), workers=1)
    trajs = play(tiny_tokenizer, ["exitread-0", "ok-1", "ok-2"], pool=pool, executor="process", env_workers=1)
    assert trajs[0].error == "env read failed: env worker died (exit code 3)" and len(trajs[0].steps) == FAULT_STEP
    assert healthy_view(trajs[1:]) == healthy_view(play(tiny_tokenizer, ["ok-1", "ok-2"]))
    assert pool.restarts == 1
    assert not multiprocessing.active_children()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_warm_pool_serves_rollout_after_rollout_and_replaces_a_dead_worker(tiny_tokenizer, tmp_path):
    # the pool's envs write their worker's pid into tmp_path (the factory goes with make_executor)
    pool = make_executor("process", functools.partial(ToyEnv, pids=str(tmp_path)), workers=2, keep_warm=True)
    tasks = ["ok-0", "ok-1", "ok-2"]
    try:
        first = play(tiny_tokenizer, tasks, pool=pool, executor="process", step_timeout_s=10.0)
        warm = {int(p.name) for p in tmp_path.iterdir()}
        assert len(warm) == 2 and len(multiprocessing.active_children()) == 2  # kept between rollouts
        again = play(tiny_tokenizer, tasks, pool=pool, executor="process", step_timeout_s=10.0)
        assert as_dicts(again) == as_dicts(first) == as_dicts(play(tiny_tokenizer, tasks))
        assert {int(p.name) for p in tmp_path.iterdir()} == warm  # the same two workers, no new start
        # a worker dies: its episodes end, the next rollout gets a fresh worker in its place
        faulty = play(tiny_tokenizer, ["exit-0", "ok-1"], pool=pool, executor="process", step_timeout_s=10.0)
        assert "died" in faulty[0].error and faulty[1].error is None
        after = play(tiny_tokenizer, tasks, pool=pool, executor="process", step_timeout_s=10.0)
        assert as_dicts(after) == as_dicts(first)
        assert len({int(p.name) for p in tmp_path.iterdir()} - warm) == 1
        assert len(multiprocessing.active_children()) == 2
    finally:
        pool.shutdown()
    assert not multiprocessing.active_children()


def test_a_missing_ray_is_one_line_naming_the_extra(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_ray(name, *args, **kw):
        if name == "ray" or name.startswith("ray."):
            raise ImportError("No module named 'ray'")
        return real_import(name, *args, **kw)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    from seedrl.errors import SeedRLError

    with pytest.raises(SeedRLError, match=r"pip install 'seedrl\[ray\]'"):
        make_executor("ray", ToyEnv)


@pytest.mark.slow
@pytest.mark.parametrize("executor", ["process", "ray"])
def test_pools_play_sokoban_exactly_as_threads(tiny_tokenizer, request, executor):
    if executor == "ray":
        request.getfixturevalue("ray_instance")
    tasks = ["6x6-b1-s00000", "6x6-b1-s00001"]
    kw = dict(group_size=2, factory=EnvFactory("sokoban"), env_title="Sokoban", max_steps=6,
              step_timeout_s=30.0, seed=3)
    thread = as_dicts(play(tiny_tokenizer, tasks, **kw))
    assert as_dicts(play(tiny_tokenizer, tasks, executor=executor, env_workers=3, **kw)) == thread
    assert sum(len(t["steps"]) for t in thread) >= 8
    assert not multiprocessing.active_children()


CTRL_C = """
import json, os, signal, sys, threading, time
import psutil
from seedrl.models.loading import load_tokenizer
from tests.rollout.test_executors import play

def main():
    # a program started at a terminal gets Python's Ctrl-C handler even when whatever launched this test
    # ignores SIGINT (a background job of a non-interactive shell does, and the ignore survives exec)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    tok = load_tokenizer("tiny-micro")
    threading.Timer(float(sys.argv[1]), lambda: os.killpg(os.getpgrp(), signal.SIGINT)).start()  # a terminal's Ctrl-C
    t0 = time.monotonic()
    try:
        play(tok, ["hang-0", "ok-1", "ok-2"], executor="process", step_timeout_s=30.0, env_workers=3)
        interrupted = False
    except KeyboardInterrupt:
        interrupted = True
    took = time.monotonic() - t0
    time.sleep(0.3)
    kids = []  # every child but multiprocessing's own resource tracker; a zombie is named as one
    for c in psutil.Process().children(recursive=True):
        try:
            if c.status() == psutil.STATUS_ZOMBIE:
                kids.append([c.pid, "zombie"])
            elif "resource_tracker" not in " ".join(c.cmdline()):
                kids.append([c.pid, c.status(), c.name()])
        except psutil.Error:
            pass
    print(json.dumps({"interrupted": interrupted, "took": took, "children": kids}))

if __name__ == "__main__":
    main()
"""


@pytest.mark.parametrize("after_s", [0.05, 0.4, 2.0])  # while the workers start, while they make envs, mid-turn
def test_a_ctrl_c_ends_the_process_pool_at_once_and_leaves_no_child(tmp_path, after_s):
    """Ctrl-C at a terminal (SIGINT to the whole foreground group) during a process-pool rollout with a hung
    env: the rollout ends at once (not after step_timeout_s), no worker prints a KeyboardInterrupt traceback
    (one still starting died of it), and no child is left, running or defunct (a zombie was)."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    script = tmp_path / "ctrl_c.py"
    script.write_text(CTRL_C)
    r = subprocess.run([sys.executable, str(script), str(after_s)], cwd=root, capture_output=True, text=True,
                       timeout=120, start_new_session=True,  # its own group: the SIGINT reaches nothing else
                       env=os.environ | {"PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["interrupted"] and out["took"] < after_s + 5, out
    assert out["children"] == [], out
    assert "Traceback" not in r.stderr and "KeyboardInterrupt" not in r.stderr, r.stderr[-3000:]


def test_shutdown_reaps_a_worker_the_pool_never_recorded():
    """A worker started but never recorded as the pool's (a Ctrl-C between its start and its record) that
    then died: shutdown still reaps it, so it is not left defunct."""
    import signal

    import psutil

    from seedrl.rollout.executors import ProcessExecutor

    ex = ProcessExecutor(ToyEnv, workers=1)
    w = ex._start()  # dropped on the floor, as an interrupted open would
    pid = w.handle.proc.pid
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while psutil.Process(pid).status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
        time.sleep(0.05)
    assert psutil.Process(pid).status() == psutil.STATUS_ZOMBIE  # dead, not reaped yet
    ex.shutdown()
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    assert not multiprocessing.active_children()


def test_a_warm_worker_killed_while_idle_is_named_by_its_signal_not_broken_pipe(tiny_tokenizer, caplog):
    import logging
    import signal

    pool = make_executor("process", ToyEnv, workers=2, keep_warm=True)
    tasks = ["ok-0", "ok-1"]
    try:
        first = play(tiny_tokenizer, tasks, pool=pool, executor="process", step_timeout_s=10.0)
        idle = pool._idle[0].handle.proc
        os.kill(idle.pid, signal.SIGKILL)
        idle.join(timeout=10)
        with caplog.at_level(logging.WARNING, logger="seedrl.rollout.executors"):
            again = play(tiny_tokenizer, tasks, pool=pool, executor="process", step_timeout_s=10.0)
    finally:
        pool.shutdown()
    assert as_dicts(again) == as_dicts(first)  # its replacement made the envs again
    (line,) = [r.getMessage() for r in caplog.records if "env worker lost" in r.getMessage()]
    assert "env worker died while idle (exit code -9: SIGKILL)" in line and "Broken pipe" not in line, line
