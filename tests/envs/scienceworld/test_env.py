"""ScienceWorld env: panels, gold-path expert, invalid actions, pooled JVM engines and their faults.
Needs ``scienceworld`` and Java 17 (skipped without them).

The engine pool is process-wide, so the tests share its JVMs (one episode engine and one gold engine;
JVM start ~2 s; conftest.py); the fault tests kill engines on purpose and check that a new one replaces
them. Tasks are short ones whose gold paths are deterministic.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from seedrl.envs.base import WIN_REWARD
from seedrl.envs.panels import build_panel
from seedrl.envs.registry import env_class, make_env
from seedrl.envs.scienceworld import engine as swe
from seedrl.envs.scienceworld import env as sw
from seedrl.envs.scienceworld import tasks as swt
from seedrl.envs.scienceworld.state import ScienceWorldPrivilegedState
from seedrl.errors import SeedRLError
from tests.envs.scienceworld.common import FIND, SHORT, THERMO, needs_engine

SPLITS = tuple(sw.ScienceWorldEnv.splits)


#: pinned panel hashes: a change means the tasks behind the panels changed (bump ScienceWorldEnv.version)
PANEL_HASHES = {"valid_seen": "076c341992c303d5", "valid_unseen": "509b6812fa738cca"}
#: the same panels' format 1 hashes (raw env kwargs): unchanged task ids under the format 2 hash
LEGACY_PANEL_HASHES = {"valid_seen": "db8d75a63fdca4c5", "valid_unseen": "3231b7055d573cf2"}


# -- panels (pure: no JVM) ------------------------------------------------------------------------
def test_panels_stable_pinned_and_pure() -> None:
    first = {s: build_panel("scienceworld", s) for s in SPLITS}
    for s in SPLITS:
        again = build_panel("scienceworld", s)
        assert again.task_ids == first[s].task_ids and again.hash == first[s].hash
        assert len(first[s]) == sw.ScienceWorldEnv.splits[s]
        assert len(set(first[s].task_ids)) == len(first[s])
    for s, h in PANEL_HASHES.items():
        assert first[s].hash == h, f"{s} panel changed ({first[s].hash}); bump ScienceWorldEnv.version"
        assert first[s].legacy_hash == LEGACY_PANEL_HASHES[s] and first[s].matches(LEGACY_PANEL_HASHES[s])
    # operational kwargs do not change the task ids
    assert build_panel("scienceworld", "train", 40, max_engines=2, jvm_heap="1g").task_ids == first["train"].task_ids[:40]


def test_seen_unseen_disjoint_and_from_scienceworld_splits() -> None:
    cls = env_class("scienceworld")
    ids = {s: build_panel("scienceworld", s).task_ids for s in SPLITS}
    types = {s: {cls.task_type(t) for t in ids[s]} for s in SPLITS}
    assert types["valid_unseen"] == types["test_unseen"] == set(swt.DEFAULT_UNSEEN_TASKS)
    assert not types["train"] & types["valid_unseen"]
    assert types["valid_seen"] <= types["train"] and types["test_seen"] <= types["train"]
    assert len(types["train"]) == 30 - len(swt.DEFAULT_UNSEEN_TASKS)
    every = [set(v) for v in ids.values()]
    for i in range(len(every)):
        for j in range(i + 1, len(every)):
            assert not every[i] & every[j]
    want = {"train": "train", "valid_seen": "dev", "valid_unseen": "dev", "test_seen": "test", "test_unseen": "test"}
    for s, w in want.items():
        for t in ids[s]:
            assert swt.variation_split(*swt.parse_task_id(t)) == w, (s, t)
    # a full panel of a small split uses every variation once, round-robin over task types
    assert len(build_panel("scienceworld", "valid_unseen", 150).task_ids) == 150
    assert cls.task_type("change-the-state-of-matter-of-v17") == "change-the-state-of-matter-of"


def test_task_id_and_option_errors() -> None:
    for bad in ("boil", "boil-3", "fly-v0", "boil-v30"):
        with pytest.raises(SeedRLError):
            swt.parse_task_id(bad)
    with pytest.raises(SeedRLError, match="shared: boil"):
        build_panel("scienceworld", "train", 4, unseen_tasks=["boil"], train_tasks=["boil", "melt"])
    with pytest.raises(SeedRLError, match="unknown scienceworld env option 'heap'"):
        make_env("scienceworld", heap="1g")
    with pytest.raises(SeedRLError, match="simplification"):
        make_env("scienceworld", simplifications="easy,flying")
    with pytest.raises(SeedRLError, match="panel size"):
        build_panel("scienceworld", "valid_unseen", 10_000)
    with pytest.raises(SeedRLError, match="jvm_heap"):
        make_env("scienceworld", jvm_heap="lots")


@pytest.mark.slow
@needs_engine
def test_gold_path_completes_tasks(env, expert_runs) -> None:
    for task_id, traj in expert_runs.items():
        ps = traj.privileged_state
        assert ScienceWorldPrivilegedState.parse(ps).to_dict() == ps
        assert traj.won and ps["won"] and ps["score"] == 100 and ps["done"], task_id
        assert traj.episode_reward == WIN_REWARD and traj.steps[-1].reward == WIN_REWARD
        assert ps["env"] == "scienceworld" and ps["first_deviation"] is None
        assert ps["gold_path"] and 0 < ps["gold_progress"] <= len(ps["gold_path"])
        assert all(g["done"] for g in ps["subgoals"])
    assert expert_runs[THERMO].task_description.startswith("measure the temperature of")
    # the JVM runs with the bounded heap
    engine = env.engine
    assert "-Xmx512m" in open(f"/proc/{engine.pid}/cmdline").read().split("\0")
    assert 400 < engine.max_heap_mb() <= 512
    assert set(engine.javaopts) >= set(swe.DEFAULT_JVM_OPTIONS)
    # every task loaded was checked against the pinned split table
    assert {"lifespan-longest-lived", "find-non-living-thing", "use-thermometer"} <= env.pool.checked


@pytest.mark.slow
@needs_engine
def test_invalid_actions_ambiguity_and_expert_through_noise(env) -> None:
    env.reset(SHORT)
    obs, r, done, info = env.step("fly to the moon")
    assert obs.startswith("No known action") and not info["action_valid"] and not done and r == 0
    for a in ("", "  reset   task "):  # never sent to the engine
        obs, r, done, info = env.step(a)
        assert not info["action_valid"] and not done
    obs, _, _, info = env.step("focus on door")
    assert obs.startswith("Ambiguous request") and info["action_valid"] and sw.ambiguity_options(obs)
    obs, _, _, info = env.step("look around")  # not a number: cancels the question
    assert obs.startswith("Unknown action") and not info["action_valid"]
    obs, _, _, info = env.step("look around")
    assert info["action_valid"] and "parrot egg" in obs
    assert env.expert_action() == "focus on egg parrot"  # noise is not a deviation
    _, r, done, info = env.step("focus on egg parrot")
    assert r == WIN_REWARD and done and info["won"] and info["score"] == 100
    obs, r, done, info = env.step("look around")
    assert obs == sw.GAME_OVER_OBS and done and r == 0 and not info["action_valid"]
    hist = env.privileged_state()["history"]
    assert [h["sent"] for h in hist] == [True, False, False, True, True, True, True]
    assert env.admissible_actions() is None


@pytest.mark.slow
@needs_engine
def test_wrong_focus_loses_and_deviation_stops_the_expert(env) -> None:
    env.reset(SHORT)
    _, r, done, info = env.step("focus on agent")
    assert done and info["lost"] and not info["won"] and info["score"] == -100 and r == 0
    assert env.expert_action() is None
    ps = env.privileged_state()
    assert ps["lost"] and ps["first_deviation"]["action"] == "focus on agent"
    assert ps["first_deviation"]["expected"] == "focus on egg parrot"


def test_gold_progress_rules() -> None:
    amb = "Ambiguous request: Please enter the number for the action you intended (or blank to cancel):\n0:\ta (x)\n1:\ta (x)\n2:\tb"
    gold = ["go to kitchen", "move a to b", "0", "focus on b"]

    def h(action, obs="ok", valid=True, sent=True):
        return {"action": action, "obs": obs, "valid": valid, "sent": sent}

    # observing and rejected actions are skipped; option 1 names the same object as the gold's 0
    hist = [h("look around"), h("fly", "No known action matches that input.", False), h("go to kitchen"),
            h("move a to b", amb), h("1")]
    prog = sw.gold_progress(gold, hist, "start")
    assert prog["pos"] == 3 and prog["deviation"] is None and not prog["ambiguous_open"]
    # a cancelled question: the gold action has to be sent again
    hist = [h("go to kitchen"), h("move a to b", amb), h("look", "Unknown action.", False)]
    assert sw.gold_progress(gold, hist, "start")["pos"] == 1
    # another object chosen -> deviation; a state-changing detour -> deviation
    assert sw.gold_progress(gold, [h("go to kitchen"), h("move a to b", amb), h("2")], "s")["deviation"]["index"] == 2
    dev = sw.gold_progress(gold, [h("go to bedroom")], "s")["deviation"]
    assert dev == {"index": 0, "action": "go to bedroom", "expected": "go to kitchen"}
    # the gold's answer to a question this world did not ask is skipped
    assert sw.gold_progress(gold, [h("go to kitchen"), h("move a to b")], "s")["pos"] == 3
    # once the gold path is used up, waiting is not a deviation (the expert waits for slow physics)
    done = [h("go to kitchen"), h("move a to b"), h("focus on b"), h("wait1"), h("wait")]
    prog = sw.gold_progress(gold, done, "s")
    assert prog["pos"] == 4 and prog["deviation"] is None and prog["after_end"] == 2


# -- engines ------------------------------------------------------------------------------------
def _wait_locked(engine, timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while not engine.lock.locked() and time.monotonic() < end:
        time.sleep(0.01)
    time.sleep(0.2)


@pytest.mark.slow
@needs_engine
def test_sessions_share_an_engine_with_their_own_globals(env) -> None:
    a, b = make_env("scienceworld"), make_env("scienceworld")
    try:
        a.reset(THERMO)
        b.reset(FIND)
        assert a.engine is b.engine is not None
        switches = a.engine.switches
        done = {a: False, b: False}
        while not all(done.values()):  # interleaved step by step
            for e in (a, b):
                if not done[e]:
                    _, _, done[e], info = e.step(e.expert_action())
                    assert info["action_valid"]
        assert a.privileged_state()["won"] and b.privileged_state()["won"]
        assert a.engine.switches > switches + 10
        sessions = a.engine.sessions
        a.close()
        assert b.engine.sessions == sessions - 1
    finally:
        a.close()
        b.close()


@pytest.mark.slow
@needs_engine
def test_killed_jvm_ends_only_the_episode_in_flight(env) -> None:
    a, b = make_env("scienceworld"), make_env("scienceworld")
    a.reset(FIND)
    b.reset(FIND)
    engine = a.engine
    assert b.engine is engine
    pid, started = engine.pid, env.pool.started
    for e in (a, b):
        e.step(e.expert_action())
    action = a.expert_action()
    os.kill(pid, signal.SIGSTOP)  # a's next step is in flight when the JVM is killed
    killer = threading.Thread(target=lambda: (_wait_locked(engine), os.kill(pid, signal.SIGKILL)))
    killer.start()
    with pytest.raises(SeedRLError) as err:
        a.step(action)
    killer.join(30)
    assert "killed by signal 9" in str(err.value) and "\n" not in str(err.value), str(err.value)
    with pytest.raises(SeedRLError, match="ended"):
        a.step("look around")  # the episode stays over
    assert engine.dead and pid not in swe.engine_pids()
    # b was on the same JVM, idle: it moves to a new engine, replays, and wins
    while True:
        _, _, done, info = b.step(b.expert_action())
        if done:
            break
    assert info["won"] and b.privileged_state()["engine_faults"] == 1
    assert b.engine is not engine and b.engine.alive() and env.pool.started == started + 1
    # the next episode just works
    c = make_env("scienceworld")
    c.reset(SHORT)
    assert c.engine.alive()
    for e in (a, b, c):
        e.close()


@pytest.mark.slow
@needs_engine
def test_hung_engine_times_out_and_a_raising_step_ends_the_episode(env) -> None:
    e = make_env("scienceworld", call_timeout_s=1.0)
    e.reset(SHORT)
    engine = e.engine
    os.kill(engine.pid, signal.SIGSTOP)
    t0 = time.monotonic()
    with pytest.raises(SeedRLError, match="did not answer within 1s"):
        e.step("look around")
    assert time.monotonic() - t0 < 15 and engine.dead and engine.proc.poll() is not None
    e.reset(SHORT)  # a new engine replaces it
    assert e.engine is not engine and e.engine.alive()

    class Broken:  # a session whose step raises inside the engine call
        def step(self, action):
            raise RuntimeError("simulated simulator crash")

    eng = e.engine
    sessions = eng.sessions
    e._holder.lease.session = Broken()
    with pytest.raises(SeedRLError, match="RuntimeError: simulated simulator crash"):
        e.step("look around")
    with pytest.raises(SeedRLError, match="ended"):
        e.step("look around")
    assert e.engine is None and eng.sessions == sessions - 1 and eng.alive()  # session dropped, JVM kept
    e.reset(SHORT)
    assert e.step("focus on egg parrot")[3]["won"]
    e.close()


class _DiesOnStep:
    """A session whose next ``step`` SIGKILLs its JVM (and waits for it to exit) before sending the
    command. Killing from another thread after seeing the engine's lock held raced: on a loaded machine
    the kill could land when no step was in flight, and both episodes then moved engines."""

    def __init__(self, session, engine) -> None:
        self._session, self._engine = session, engine

    def __getattr__(self, name):
        return getattr(self._session, name)

    def step(self, action):
        os.kill(self._engine.pid, signal.SIGKILL)
        self._engine.proc.wait(30)
        return self._session.step(action)


@pytest.mark.slow
@needs_engine
def test_rollout_ends_only_the_faulted_episode(env, tiny_tokenizer) -> None:
    """In a real rollout, a JVM killed mid-step ends one episode; the other one on that JVM wins."""
    from seedrl.rollout.backends import Generation
    from seedrl.rollout.runner import RolloutSettings, rollout

    gold = env.pool.gold(*swt.parse_task_id(THERMO), "easy", 60).result(60)
    made: list = []

    def factory():
        made.append(make_env("scienceworld"))
        return made[-1]

    class Backend:
        def generate(self, prompts, params, seed):
            turn = self.turn = getattr(self, "turn", -1) + 1
            if turn == 3:  # the JVM dies inside made[0]'s next step call, so that call is in flight
                lease = made[0]._holder.lease
                assert made[1].engine is lease.engine
                lease.session = _DiesOnStep(lease.session, lease.engine)
            text = f"<think></think><action>{gold[min(turn, len(gold) - 1)]}</action>"
            ids = tiny_tokenizer(text, add_special_tokens=False)["input_ids"]
            return [Generation(ids, [0.0] * len(ids), text, "stop") for _ in prompts]

    settings = RolloutSettings(env_title="ScienceWorld", max_steps=len(gold) + 2, max_prompt_tokens=4096,
                               env_workers=2)
    trajs = rollout(Backend(), tiny_tokenizer, factory, [THERMO], 2, settings, seed=0)
    errors = [t for t in trajs if t.error]
    assert len(errors) == 1 and errors[0].truncated and "killed by signal 9" in errors[0].error
    ok = next(t for t in trajs if not t.error)
    assert ok.won and ok.privileged_state["engine_faults"] == 1
