"""Stage 1 of SEED: label the policy's own trajectories with a stronger analyzer, as SFT data.

The policy plays train tasks (``tasks x rollouts``, drawn from the train panel after its first
``skip_tasks``) **at the RL rollout temperature** by default (``rollout.temperature``): the analyzer must learn the outcome mix it will meet in Stage 2, where
rollouts at temperature 1.0 are mostly failures (SEED's own Stage-1 script samples at 0.4: a command that follows
it says ``--temperature 0.4``, as ``configs/alfworld_seed.yaml``'s does; docs/deviations.md). The analyzer (``oracle`` offline, or ``api``) writes
one skill per trajectory; parsed pairs (analysis prompt -> skill JSON) are kept and written as SFT data
for ``seedrl sft --data``.

- ``min_failure_frac``: keep at least this share of failures among the rows written, by dropping
  successes (evenly, in play order) when there are too few failures; when there are no failures at all
  the summary says so (``failure_frac_note``) instead of pretending. ``max_failure_frac`` likewise keeps at
  most that share, by dropping failures: the successes a self-analyzer must learn to name a found place
  from are a minority of the trajectories at the RL temperature.
- ``task_sampling``: ``per_type`` (default) draws the tasks evenly over the env's task types
  (``Env.task_type``), seeded, as SEED's data script takes 30 tasks of each of ALFWorld's 6 types
  (:func:`select_tasks`); an env with one task type, or ``first``, plays the first ``tasks`` in panel
  order (what earlier Stage-1 data used: ALFWorld's path-sorted panel then gives one task type).
- ``skip_tasks``: a warm start trained on demonstrations of the first train tasks plays those far
  better than the tasks RL samples (the alfworld-gen warm start and its Stage-1 model win ~80 % of the
  300 demonstration tasks at temperature 1.0, ~15 % of the other 300); skipping them gives the
  failures RL meets.
- ``max_target_tokens`` (default half of ``skills.max_new_tokens``): a row whose answer (the skill
  JSON) is longer is dropped and counted, so the self-analyzer learns answers that end well before
  its generation limit.

Provenance (analyzer, model, commit, panel hash, temperature, how the tasks were drawn and how many of
each task type, the outcome mix before and after) goes into every row and into ``<out>.meta.json``.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from seedrl.config import TrainConfig
from seedrl.envs.panels import build_panel
from seedrl.envs.registry import env_class
from seedrl.errors import SeedRLError
from seedrl.fileio import atomic_write
from seedrl.methods.sources import make_analyzer
from seedrl.models.loading import load_model, load_tokenizer
from seedrl.models.precision import resolve_precision
from seedrl.provenance import git_commit
from seedrl.rollout.backends import backend_options, make_backend
from seedrl.rollout.executors import EnvFactory
from seedrl.rollout.runner import rollout
from seedrl.skills.prompts import STEP_BASE, analysis_messages, skill_target
from seedrl.train.collect import rollout_settings


def run_analyze(cfg: TrainConfig, out: str | Path, tasks: int, rollouts: int, temperature: float | None = None,
                batch_tasks: int = 8, min_failure_frac: float = 0.0, max_failure_frac: float = 1.0,
                max_target_tokens: int | None = None, skip_tasks: int = 0,
                task_sampling: str = "per_type") -> dict[str, Any]:
    """Roll out ``cfg.model`` on ``tasks`` train tasks (after the first ``skip_tasks``; drawn by
    ``task_sampling``, see :func:`select_tasks`), ``rollouts`` times each, at ``temperature`` (default:
    the RL rollout temperature); label; balance; write."""
    if task_sampling not in TASK_SAMPLING:
        raise SeedRLError(f"--task-sampling must be one of {', '.join(TASK_SAMPLING)}, got {task_sampling!r}")
    if not 0.0 <= min_failure_frac <= 1.0:
        raise SeedRLError(f"--min-failure-frac must be between 0 and 1, got {min_failure_frac}")
    if not min_failure_frac <= max_failure_frac <= 1.0:
        raise SeedRLError(f"--max-failure-frac must be between --min-failure-frac ({min_failure_frac}) and 1, got "
                          f"{max_failure_frac}")
    temperature = cfg.rollout.temperature if temperature is None else temperature
    max_target_tokens = max_target_tokens or cfg.skills.max_new_tokens // 2
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    m, e = cfg.model, cfg.env
    panel = build_panel(e.name, e.train_split, e.train_size, **e.kwargs)
    if skip_tasks >= len(panel.task_ids):
        raise SeedRLError(f"--skip-tasks {skip_tasks} leaves no task: {e.name}/{e.train_split} has "
                          f"{len(panel.task_ids)}")
    bf16 = resolve_precision(m.precision, m.device).bf16
    tok = load_tokenizer(m.name, m.trust_remote_code)
    model = load_model(m.name, m.dtype, m.device, None, m.init_seed, tokenizer=tok,
                       trust_remote_code=m.trust_remote_code)
    backend = make_backend(cfg.rollout.backend, model, tok, bf16=bf16, seed=cfg.seed, **backend_options(cfg.rollout))
    analyzer = make_analyzer(cfg, backend, tok, bf16=bf16, source="hindsight")
    task_ids, type_counts = select_tasks(panel.task_ids[skip_tasks:], tasks, env_class(e.name).task_type,
                                         seed=f"seedrl-stage1/{panel.hash}/{cfg.seed}", sampling=task_sampling)
    settings = rollout_settings(cfg, temperature=temperature)
    provenance = {"analyzer": analyzer.name, "analyzer_model": cfg.skills.api.model if analyzer.name == "api"
                  else (m.name if analyzer.name == "self" else None), "policy_model": m.name,
                  "commit": git_commit(), "env": e.name, "env_kwargs": e.kwargs, "panel": f"{e.name}/{e.train_split}",
                  "panel_hash": panel.hash, "tasks": len(task_ids), "skip_tasks": skip_tasks,
                  "task_sampling": task_sampling, "task_types": type_counts, "rollouts": rollouts,
                  "analysis_prompt": cfg.skills.analysis_prompt,
                  "temperature": temperature, "seed": cfg.seed}
    rows: list[dict[str, Any]] = []
    target_tokens: list[int] = []
    total = wins = unparsed = too_long = 0
    t0 = time.perf_counter()
    sk = cfg.skills
    try:
        for start in range(0, len(task_ids), batch_tasks):
            chunk = task_ids[start:start + batch_tasks]
            trajs = rollout(backend, tok, EnvFactory(e.name, e.kwargs), chunk, rollouts, settings,
                            seed=cfg.seed * 7_919 + start, traj_offset=total)
            trajs = [t for t in trajs if t.error is None and t.steps]
            results = analyzer.analyze(trajs)
            for t, r in zip(trajs, results):
                total += 1
                wins += t.won
                if not r.skill:
                    unparsed += 1
                    continue
                response = skill_target(r.summary or "", r.skill, r.step_skills if sk.step_skills else None,
                                        step_base=STEP_BASE[sk.analysis_prompt])
                n_tokens = len(tok(response, add_special_tokens=False)["input_ids"])
                if n_tokens > max_target_tokens:
                    too_long += 1
                    continue
                target_tokens.append(n_tokens)
                rows.append({"messages": analysis_messages(t, sk.max_obs_chars, sk.step_skills, sk.max_step_skills,
                                                           variant=sk.analysis_prompt),
                             "response": response, "task_id": t.task_id, "success": t.won,
                             "provenance": provenance})
    finally:
        backend.close()  # a vLLM engine is shut down (a no-op for HF)
    rows, note = balance_outcomes(rows, min_failure_frac, max_failure_frac)
    atomic_write(out, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))  # never half a data file
    failures = sum(not r["success"] for r in rows)
    lengths = sorted(target_tokens)
    summary = provenance | {
        "trajectories": total, "success_rate": wins / max(1, total), "unparsed": unparsed,
        "too_long": too_long, "max_target_tokens": max_target_tokens, "kept": len(rows),
        "kept_failures": failures, "failure_frac": failures / max(1, len(rows)),
        "min_failure_frac": min_failure_frac, "max_failure_frac": max_failure_frac, "failure_frac_note": note,
        "target_tokens": {"p50": lengths[len(lengths) // 2] if lengths else 0,
                          "p95": lengths[int(0.95 * (len(lengths) - 1))] if lengths else 0,
                          "max": lengths[-1] if lengths else 0},
        "seconds": time.perf_counter() - t0}
    atomic_write(Path(str(out) + ".meta.json"), json.dumps(summary, indent=1))
    return summary


TASK_SAMPLING = ("per_type", "first")


def select_tasks(task_ids: Sequence[str], n: int, task_type: Callable[[str], str], seed: str | int,
                 sampling: str = "per_type") -> tuple[list[str], dict[str, int]]:
    """``n`` of ``task_ids`` for Stage-1 data, in their order, and how many of each task type.

    ``per_type``: as even over the task types as their sizes allow: ``n // types`` each, the remainder
    one each to types in a seeded order, and a type with too few tasks gives its share to the others;
    the tasks of a type are a seeded sample. A pure function of (``task_ids``, ``n``, ``seed``).
    ``first``, or ids of a single task type: the first ``n`` (panel order)."""
    groups: dict[str, list[str]] = {}
    for t in task_ids:
        groups.setdefault(task_type(t), []).append(t)
    if sampling == "first" or len(groups) < 2:
        chosen = list(task_ids[:n])
    else:
        rng = random.Random(seed)
        order = sorted(groups)
        rng.shuffle(order)
        quotas = dict.fromkeys(order, 0)
        left, open_ = min(n, len(task_ids)), order
        while left and open_:
            share, extra = divmod(left, len(open_))
            for i, k in enumerate(open_):
                give = min(share + (i < extra), len(groups[k]) - quotas[k])
                quotas[k] += give
                left -= give
            open_ = [k for k in open_ if quotas[k] < len(groups[k])]
        picked = {t for k in sorted(groups) for t in rng.sample(groups[k], quotas[k])}
        chosen = [t for t in task_ids if t in picked]
    counts: dict[str, int] = {}
    for t in chosen:
        counts[task_type(t)] = counts.get(task_type(t), 0) + 1
    return chosen, dict(sorted(counts.items()))


def balance_outcomes(rows: list[dict[str, Any]], min_failure_frac: float,
                     max_failure_frac: float = 1.0) -> tuple[list[dict[str, Any]], str | None]:
    """Drop successes (evenly spaced, keeping play order) until failures make up at least
    ``min_failure_frac`` of the rows, or failures likewise until they make up at most ``max_failure_frac``.
    Returns the rows and, when a fraction cannot be reached (no row of the outcome to keep), a note that
    says why; None when it was reached."""
    if not 0.0 <= min_failure_frac <= max_failure_frac <= 1.0:
        raise SeedRLError(f"failure fractions must satisfy 0 <= --min-failure-frac <= --max-failure-frac <= 1, got "
                          f"{min_failure_frac} and {max_failure_frac}")
    failures = [r for r in rows if not r["success"]]
    successes = [r for r in rows if r["success"]]
    if not rows:
        return rows, None
    if min_failure_frac > 0 and len(failures) / len(rows) < min_failure_frac:
        if not failures:
            return rows, (f"no failed trajectory among {len(rows)} labelled ones: the failure fraction "
                          f"{min_failure_frac:.2f} cannot be reached; play at a higher temperature or more tasks")
        # keep k successes with F / (F + k) >= f  <=>  k <= F (1 - f) / f
        return _thin(rows, successes, int(len(failures) * (1 - min_failure_frac) / min_failure_frac + 1e-9)), None
    if max_failure_frac < 1 and len(failures) / len(rows) > max_failure_frac:
        if not successes:
            return rows, (f"no successful trajectory among {len(rows)} labelled ones: the failure fraction "
                          f"{max_failure_frac:.2f} cannot be reached; play at a lower temperature or more tasks")
        # keep k failures with k / (k + S) <= f  <=>  k <= S f / (1 - f)
        return _thin(rows, failures, int(len(successes) * max_failure_frac / (1 - max_failure_frac) + 1e-9)), None
    return rows, None


def _thin(rows: list[dict[str, Any]], group: list[dict[str, Any]], k: int) -> list[dict[str, Any]]:
    """``rows`` with only ``k`` of ``group`` (a sublist of them) left, evenly spaced over it, in order."""
    keep = {id(group[int(i * len(group) / k)]) for i in range(k)} if k else set()
    drop = {id(r) for r in group} - keep
    return [r for r in rows if id(r) not in drop]
