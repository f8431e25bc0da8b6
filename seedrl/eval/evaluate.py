"""Fixed-panel evaluation: every task of a panel played once, the same tasks for every run.

Evaluation prompts are the plain step prompts of ``seedrl.agent`` (never a skill). Results carry
the hash of the tasks actually played (``panel_hash``: the panel's, or with ``num_tasks`` the hash
of its seeded, type-stratified subset, :meth:`Panel.subset`) with their count (``num_tasks``), and
the full panel's hash and size (``full_panel_hash``, ``panel_size``), so two numbers are only
compared when they were measured on the same tasks. A panel none of whose tasks could even be
played (every episode an env error, e.g. rooms that cannot be generated) is a :class:`SeedRLError`,
not a success rate of 0.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

from seedrl.envs.panels import Panel
from seedrl.envs.registry import env_class
from seedrl.errors import SeedRLError
from seedrl.rollout.backends import GenerationBackend, SamplingParams
from seedrl.rollout.executors import EnvFactory
from seedrl.rollout.runner import RolloutSettings, rollout
from seedrl.rollout.types import Trajectory


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a success rate (sensible at 0 and n successes)."""
    if n == 0:
        return (0.0, 0.0)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def play_once(
    backend: GenerationBackend,
    tokenizer,
    env: str,
    env_kwargs: dict[str, Any],
    task_ids: Sequence[str],
    *,
    max_steps: int,
    history_length: int,
    max_new_tokens: int,
    max_prompt_tokens: int = 2048,
    greedy: bool = True,
    temperature: float = 0.4,
    batch_size: int = 32,
    seed: int = 0,
    step_timeout_s: float = 60.0,
    env_workers: int = 8,
    executor: str = "thread",
    ray_address: str | None = None,
) -> list[Trajectory]:
    """Each of ``task_ids`` played once with the plain step prompts (never a skill), ``batch_size`` tasks
    per rollout, the rollout from task ``k`` seeded ``seed + k``: what :func:`evaluate` scores, and the
    episodes ``demo_source: start`` turns into SFT rows (:func:`seedrl.train.sft.policy_demonstrations`)."""
    cls = env_class(env)
    settings = RolloutSettings(
        env_title=cls.title or env, max_steps=max_steps, history_length=history_length,
        max_prompt_tokens=max_prompt_tokens,
        sampling=SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature, greedy=greedy,
                                stop=list(cls.stop)),
        step_timeout_s=step_timeout_s, env_workers=env_workers, executor=executor,
        ray_address=ray_address)
    trajs: list[Trajectory] = []
    for start in range(0, len(task_ids), batch_size):
        trajs += rollout(backend, tokenizer, EnvFactory(env, env_kwargs), list(task_ids[start:start + batch_size]), 1,
                         settings, seed=seed + start, traj_offset=start)
    return trajs


def evaluate(
    backend: GenerationBackend,
    tokenizer,
    panel: Panel,
    *,
    max_steps: int,
    history_length: int,
    max_new_tokens: int,
    max_prompt_tokens: int = 2048,
    greedy: bool = True,
    temperature: float = 0.4,
    batch_size: int = 32,
    seed: int = 0,
    num_tasks: int | None = None,
    step_timeout_s: float = 60.0,
    env_workers: int = 8,
    executor: str = "thread",
    ray_address: str | None = None,
) -> dict[str, Any]:
    """Play each task of ``panel`` once (:func:`play_once`); return success rate (95% Wilson interval),
    score (mean episode reward), episode length, invalid-action rate, a per-task-type breakdown
    (``Env.task_type``) and per-task rows. Never depends on ``env_workers``."""
    played = panel.subset(num_tasks)  # seeded, stratified by task type; the panel itself when num_tasks is None
    cls = env_class(panel.env)
    t0 = time.perf_counter()
    trajs = play_once(backend, tokenizer, panel.env, panel.env_kwargs, played.task_ids, max_steps=max_steps,
                      history_length=history_length, max_new_tokens=max_new_tokens,
                      max_prompt_tokens=max_prompt_tokens, greedy=greedy, temperature=temperature,
                      batch_size=batch_size, seed=seed, step_timeout_s=step_timeout_s, env_workers=env_workers,
                      executor=executor, ray_address=ray_address)
    rows = [{"task_id": t.task_id, "type": cls.task_type(t.task_id), "won": t.won,
             "reward": t.episode_reward, "steps": len(t.steps), "invalid": t.num_invalid,
             "invalid_format": t.num_format_invalid,
             "truncated": t.truncated, "error": t.error,
             "tokens": sum(len(s.response_ids) for s in t.steps)} for t in trajs]
    if rows and all(r["error"] is not None and r["steps"] == 0 for r in rows):
        raise SeedRLError(f"none of the {len(rows)} tasks of {panel.env}/{panel.split} could be started (each "
                          f"failed at reset, e.g. a task that cannot be generated); the first: "
                          f"{rows[0]['task_id']}: {rows[0]['error']}")
    return {
        "env": panel.env, "split": panel.split, "panel_hash": played.hash,
        "panel_size": len(panel), "full_panel_hash": panel.hash, **summarize_rows(rows),
        "by_type": {k: summarize_rows(v, ci=False) for k, v in sorted(_group(rows, "type").items())},
        "greedy": greedy, "temperature": None if greedy else temperature, "seed": seed,
        "time_s": time.perf_counter() - t0, "tasks": rows,
    }


def _group(rows: list[dict[str, Any]], key: str) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        out.setdefault(r[key], []).append(r)
    return out


def summarize_rows(rows: list[dict[str, Any]], ci: bool = True) -> dict[str, Any]:
    """Success rate (with its 95% Wilson interval), score (mean episode reward), mean episode
    length, invalid-action rate (steps the env did not accept / steps) and invalid-format rate
    (steps that broke the output format, verl-agent's rule / steps) of per-episode rows."""
    n = len(rows)
    wins = sum(bool(r["won"]) for r in rows)
    steps = sum(r["steps"] for r in rows)
    out: dict[str, Any] = {"num_tasks": n, "success_rate": wins / max(1, n)}
    if ci:
        out["ci95"] = list(wilson_interval(wins, n))
    out |= {"score": sum(r.get("reward", 0.0) for r in rows) / max(1, n), "mean_steps": steps / max(1, n),
            "invalid_rate": sum(r["invalid"] for r in rows) / max(1, steps),
            "invalid_format_rate": sum(r.get("invalid_format", 0) for r in rows) / max(1, steps),
            "env_errors": sum(r.get("error") is not None for r in rows)}
    return out


def combine_seeds(results: list[dict[str, Any]]) -> dict[str, Any]:
    """One panel evaluated under several evaluation seeds (sampled decoding) -> one result.

    Rates pool every episode (tasks x seeds); ``per_seed`` keeps each seed's success rate so the
    spread between seeds is visible; the Wilson interval treats the pooled episodes as independent,
    which overstates precision when a task's outcome barely depends on the seed."""
    if len(results) == 1:
        return results[0]
    first = results[0]
    rows = [r | {"seed": res["seed"]} for res in results for r in res["tasks"]]
    return {
        "env": first["env"], "split": first["split"], "panel_hash": first["panel_hash"],
        **{k: first[k] for k in ("panel_size", "full_panel_hash") if k in first}, **summarize_rows(rows),
        "num_panel_tasks": first["num_tasks"],
        "per_seed": [{"seed": r["seed"], "success_rate": r["success_rate"], "score": r["score"]} for r in results],
        "by_type": {k: summarize_rows(v, ci=False) for k, v in sorted(_group(rows, "type").items())},
        "greedy": first["greedy"], "temperature": first["temperature"], "seeds": [r["seed"] for r in results],
        "time_s": sum(r.get("time_s", 0.0) for r in results), "tasks": rows,
    }
