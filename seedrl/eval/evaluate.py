"""Fixed-panel evaluation: every task of a panel played once, the same tasks for every run.

Evaluation prompts are the plain step prompts of ``seedrl.agent`` (never a skill). Results carry
the panel hash so two numbers are only compared when they were measured on the same tasks.
"""

from __future__ import annotations

import math
from typing import Any

from seedrl.envs.panels import Panel
from seedrl.envs.registry import env_class, make_env
from seedrl.rollout.backends import GenerationBackend, SamplingParams
from seedrl.rollout.runner import RolloutSettings, rollout


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a success rate (sensible at 0 and n successes)."""
    if n == 0:
        return (0.0, 0.0)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


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
) -> dict[str, Any]:
    """Play each task of ``panel`` once; return success rate, its 95% interval, and per-task rows."""
    task_ids = list(panel.task_ids[:num_tasks] if num_tasks else panel.task_ids)
    title = env_class(panel.env).title or panel.env
    settings = RolloutSettings(
        env_title=title, max_steps=max_steps, history_length=history_length, max_prompt_tokens=max_prompt_tokens,
        sampling=SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature, greedy=greedy),
        step_timeout_s=step_timeout_s, env_workers=env_workers)
    rows = []
    for start in range(0, len(task_ids), batch_size):
        chunk = task_ids[start:start + batch_size]
        trajs = rollout(backend, tokenizer, lambda: make_env(panel.env, **panel.env_kwargs), chunk, 1, settings,
                        seed=seed + start, traj_offset=start)
        for t in trajs:
            rows.append({"task_id": t.task_id, "won": t.won, "steps": len(t.steps),
                         "invalid": t.num_invalid, "truncated": t.truncated, "error": t.error})
    wins = sum(r["won"] for r in rows)
    lo, hi = wilson_interval(wins, len(rows))
    return {
        "env": panel.env, "split": panel.split, "panel_hash": panel.hash, "num_tasks": len(rows),
        "success_rate": wins / max(1, len(rows)), "ci95": [lo, hi],
        "mean_steps": sum(r["steps"] for r in rows) / max(1, len(rows)),
        "invalid_rate": sum(r["invalid"] for r in rows) / max(1, sum(r["steps"] for r in rows)),
        "env_errors": sum(r["error"] is not None for r in rows),
        "greedy": greedy, "temperature": None if greedy else temperature, "seed": seed, "tasks": rows,
    }
