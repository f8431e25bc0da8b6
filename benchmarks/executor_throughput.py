"""Env steps per second under each env executor (thread, process pool, Ray pool), with no model.

``--tasks`` train-panel tasks × ``--group`` episodes each (default 16 × 4 = 64) play in lockstep, as
a rollout does: per turn ONE batch of ``env_step`` calls, one per live episode, through the executor
(``seedrl.rollout.executors``), for ``--turns`` turns. The policy is a random admissible action, seeded
per (seed, episode, turn), so every executor plays exactly the same moves; the table's ``digest`` (of
every observation and reward) checks that they also see exactly the same games.

Games are generated and cached before anything is timed (alfworld-gen: ``$SEEDRL_CACHE``), so the
numbers are steps, not generation. Per executor it reports: start (making the envs + resets: worker
processes / actors start here), steps/s over the step turns only, the ratio to ``thread``, and the
RSS of every process below this one afterwards (workers, Ray's daemons and actors).

    python benchmarks/executor_throughput.py [--env alfworld-gen] [--tasks 16] [--group 4] [--turns 10]
        [--configs thread:8 process:1 process:2 process:8 ray:2 ray:8]

``process:1`` measures one worker's rate (the IPC cost against ``thread``); the prediction for a
bigger host assumes ``thread`` stays flat (every env call holds the GIL of one process) and a pool of
``w`` workers on ``C`` cores reaches ``min(w, C - reserve)`` times that one-worker rate (envs are
independent; ``reserve`` cores are left to the driver and the GPU's host threads), capped by the
driver's own per-step cost. It is a model, not a measurement: say so when quoting it.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from env_step_latency import machine  # noqa: E402

from seedrl.rollout.executors import EnvFactory, env_reset, env_step, make_executor  # noqa: E402


def descendants_rss_mb() -> tuple[float, int]:
    try:
        import psutil
    except ImportError:
        return float("nan"), 0
    total, n = 0, 0
    for p in psutil.Process().children(recursive=True):
        try:
            total += p.memory_info().rss
            n += 1
        except psutil.Error:
            pass
    return total / 2**20, n


def prepare(env: str, n_tasks: int) -> list[str]:
    """The first ``n_tasks`` train-panel tasks, every game built and cached (not timed)."""
    from seedrl.envs.panels import build_panel
    from seedrl.envs.registry import make_env

    tasks = list(build_panel(env, "train", n_tasks).task_ids)
    e = make_env(env)
    t0 = time.perf_counter()
    for t in tasks:
        e.reset(t)
    e.close()
    print(f"games ready: {len(tasks)} tasks reset once in {time.perf_counter() - t0:.1f}s (cache: "
          f"{os.environ.get('SEEDRL_CACHE', '~/.cache/seedrl')})", flush=True)
    return tasks


def run(name: str, workers: int, env: str, episodes: list[str], turns: int, seed: int,
        timeout: float) -> dict:
    ex = make_executor(name, EnvFactory(env), workers=workers)
    digest = hashlib.sha256()
    steps = 0
    step_wall = 0.0
    try:
        t0 = time.perf_counter()
        made = ex.open(len(episodes), time.monotonic() + timeout)
        resets = ex.run({i: (env_reset, (t,)) for i, t in enumerate(episodes) if made[i].ok},
                        time.monotonic() + timeout)
        start = time.perf_counter() - t0
        admissible = {i: r.value[3] for i, r in resets.items() if r.ok}
        failed = len(episodes) - len(admissible)
        for turn in range(turns):
            calls = {}
            for i, acts in admissible.items():
                if acts:
                    calls[i] = (env_step, (random.Random(f"{seed}/{i}/{turn}").choice(sorted(acts)),))
            if not calls:
                break
            t0 = time.perf_counter()
            out = ex.run(calls, time.monotonic() + timeout)
            step_wall += time.perf_counter() - t0
            admissible = {}
            for i in sorted(out):
                r = out[i]
                if not r.ok:
                    failed += 1
                    continue
                steps += 1
                obs, reward, done = r.value[:3]
                digest.update(f"{i}|{turn}|{obs}|{reward}|{done}".encode())
                if not done:
                    admissible[i] = r.value[5]
        rss, procs = descendants_rss_mb()
    finally:
        ex.close(time.monotonic() + timeout)
    return {"executor": name, "workers": workers, "start_s": start, "steps": steps, "step_s": step_wall,
            "steps_per_s": steps / step_wall if step_wall else float("nan"), "failed": failed,
            "digest": digest.hexdigest()[:10], "rss_mb": rss, "procs": procs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--env", default="alfworld-gen")
    ap.add_argument("--tasks", type=int, default=16)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=300.0, help="deadline of each batch of calls, s")
    ap.add_argument("--configs", nargs="+", default=["thread:8", "process:1", "process:2", "process:8",
                                                     "ray:2", "ray:8"])
    ap.add_argument("--cores", type=int, default=16, help="the host to predict for")
    ap.add_argument("--reserve", type=int, default=2, help="cores left to the driver on that host")
    args = ap.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"command: python benchmarks/executor_throughput.py --env {args.env} --tasks {args.tasks} --group "
          f"{args.group} --turns {args.turns} --seed {args.seed} --configs {' '.join(args.configs)}")
    print(f"commit: {commit}\nmachine: {machine()}\nload average before: {os.getloadavg()[0]:.2f}", flush=True)
    tasks = prepare(args.env, args.tasks)
    episodes = [t for t in tasks for _ in range(args.group)]
    rows = []
    for cfg in args.configs:
        name, _, w = cfg.partition(":")
        rows.append(run(name, int(w or 8), args.env, episodes, args.turns, args.seed, args.timeout))
        r = rows[-1]
        print(f"  {cfg}: {r['steps_per_s']:.1f} steps/s, start {r['start_s']:.1f}s, load {os.getloadavg()[0]:.2f}",
              flush=True)
    base = next((r["steps_per_s"] for r in rows if r["executor"] == "thread"), float("nan"))
    one = next((r["steps_per_s"] for r in rows if r["executor"] == "process" and r["workers"] == 1), float("nan"))
    usable = max(1, args.cores - args.reserve)
    print(f"\n{len(episodes)} episodes ({args.tasks} tasks × {args.group}) of {args.env}, {args.turns} turns in "
          f"lockstep, random admissible actions\n")
    print(f"| executor | workers | start s (make + reset) | steps | step wall s | steps/s | × thread | failed | "
          f"digest | RSS below, MB (procs) | predicted steps/s, {args.cores} cores |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r["executor"] == "thread":
            pred = base  # GIL-bound: one core's worth, whatever the host
        else:
            pred = one * min(r["workers"], usable)
        print(f"| {r['executor']} | {r['workers']} | {r['start_s']:.1f} | {r['steps']} | {r['step_s']:.2f} | "
              f"{r['steps_per_s']:.1f} | {r['steps_per_s'] / base:.2f} | {r['failed']} | {r['digest']} | "
              f"{r['rss_mb']:.0f} ({r['procs']}) | {pred:.0f} |")
    print(f"\nload average after: {os.getloadavg()[0]:.2f}. Prediction: thread stays at its measured rate "
          f"(GIL-bound); a pool of w workers = process:1's rate × min(w, {args.cores} − {args.reserve}) "
          f"(independent envs, one core each; the driver's per-step cost is ignored).")


if __name__ == "__main__":
    main()
