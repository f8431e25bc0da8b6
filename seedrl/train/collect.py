"""Collection: which train tasks an iteration plays, how its episodes are played (in one block, or in
the blocks of several processes), and which groups it keeps (dynamic sampling).

The task stream depends only on (seed, panel position), so a resumed run draws exactly the same
tasks (:func:`next_tasks`). Several processes (or ``rollout_shards`` in one) play the batch's tasks as
equal contiguous blocks, each with its own seed, and keep the global ids the episodes have in the batch
(:func:`play`). With group filters, further rounds are played until enough groups remain
(:func:`sample_groups`)."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from typing import Any

import torch

from seedrl.algos import select_groups
from seedrl.config import TrainConfig
from seedrl.envs.panels import Panel
from seedrl.envs.registry import env_class
from seedrl.rollout.backends import SamplingParams
from seedrl.rollout.executors import EnvExecutor, EnvFactory, make_executor
from seedrl.rollout.runner import RolloutSettings, rollout
from seedrl.rollout.types import Trajectory
from seedrl.train.distributed import World, shard_seed, task_block

log = logging.getLogger(__name__)

#: iterations in a row without an update at which the first warning comes (then at 2x, 4x, ...)
SKIP_STREAK_WARN = 3


def rollout_settings(cfg: TrainConfig, temperature: float | None = None) -> RolloutSettings:
    """The rollout settings a run config implies (``temperature`` overrides the training one)."""
    return RolloutSettings(
        env_title=env_class(cfg.env.name).title or cfg.env.name, max_steps=cfg.env.max_steps,
        history_length=cfg.env.history_length, max_prompt_tokens=cfg.rollout.max_prompt_tokens,
        step_timeout_s=cfg.env.step_timeout_s, env_workers=cfg.env.workers, executor=cfg.env.executor,
        ray_address=cfg.env.ray_address,
        sampling=SamplingParams(max_new_tokens=cfg.rollout.max_new_tokens, top_p=cfg.rollout.top_p,
                                temperature=cfg.rollout.temperature if temperature is None else temperature,
                                stop=list(env_class(cfg.env.name).stop)))


def next_tasks(panel: Panel, seed: int, position: int, count: int) -> list[str]:
    """The ``count`` train tasks from ``position`` on: the panel in a seeded order, reshuffled each epoch."""
    n = len(panel)
    out = []
    for p in range(position, position + count):
        epoch, idx = divmod(p, n)
        order = list(range(n))
        random.Random(seed * 7919 + epoch).shuffle(order)
        out.append(panel.task_ids[order[idx]])
    return out


def play(backend: Any, tokenizer: Any, cfg: TrainConfig, tasks: list[str], base: int, traj_offset: int, round_: int,
         world: World, shards: int, timings: dict[str, float], pool: EnvExecutor | None) -> list[Trajectory]:
    """This process's trajectories of a batch on ``tasks`` (every one of them in a single process),
    ``rollout.group_size`` per task, seeded by ``base``, their ids from ``traj_offset`` on.

    With several processes (``world``) or ``shards`` > 1, the tasks are cut into equal contiguous
    blocks; block ``r`` is played with seed ``shard_seed(base, r)`` and keeps the global ``traj_id``s
    and ``group_id``s it has in the batch, so the blocks concatenated are the batch. ``round_`` > 0: a
    further rollout of the same iteration (dynamic sampling); its group ids follow the earlier rounds'."""
    e, gs = cfg.env, cfg.rollout.group_size
    if shards == 1:
        trajs = rollout(backend, tokenizer, EnvFactory(e.name, e.kwargs), tasks, gs, rollout_settings(cfg),
                        seed=base, traj_offset=traj_offset, timings=timings, executor=pool)
    else:
        trajs = []
        for r in [world.rank] if world.active else range(shards):
            lo, hi = task_block(len(tasks), World(r, shards))
            for t in rollout(backend, tokenizer, EnvFactory(e.name, e.kwargs), tasks[lo:hi], gs,
                             rollout_settings(cfg), seed=shard_seed(base, r),
                             traj_offset=traj_offset + lo * gs, timings=timings, executor=pool):
                t.group_id += lo
                for s in t.steps:
                    s.group_id = t.group_id
                trajs.append(t)
    if round_:
        for t in trajs:
            t.group_id += round_ * len(tasks)
            for s in t.steps:
                s.group_id = t.group_id
    return trajs


def sample_groups(cfg: TrainConfig, trajs: list[Trajectory], play_round: Callable[[int], list[Trajectory]],
                  returns: Callable[[list[Trajectory]], torch.Tensor]) -> tuple[list[Trajectory], dict[str, float]]:
    """The trajectories of an iteration's update and the ``sampling/*`` metrics, from its first round
    ``trajs``; ``play_round(r)`` plays round ``r`` on the next tasks.

    Without group filters: ``trajs``. With ``algo.keep_group_frac`` < 1 the groups of largest reward
    std are kept; with ``algo.dynamic_sampling`` (DAPO) groups whose episode rewards are all equal are
    dropped and further rounds of ``tasks_per_batch`` tasks are played until ``tasks_per_batch`` groups
    remain (equal and std are of ``returns``) (then trimmed to it) or ``dynamic_sampling_rounds`` rounds
    were played. Every played episode is counted."""
    a = cfg.algo
    if not a.dynamic_sampling and a.keep_group_frac >= 1:
        return trajs, {}
    want = cfg.rollout.tasks_per_batch
    played: list[Trajectory] = []
    kept: list[Trajectory] = []
    rounds = 0
    while True:
        rounds += 1
        played += trajs
        keep = set(select_groups(returns(trajs), torch.tensor([t.group_id for t in trajs]),
                                 drop_uniform=a.dynamic_sampling, keep_frac=a.keep_group_frac).tolist())
        kept += [t for t in trajs if t.group_id in keep]
        if (not a.dynamic_sampling or len({t.group_id for t in kept}) >= want
                or rounds >= a.dynamic_sampling_rounds):
            break
        trajs = play_round(rounds)
    if a.dynamic_sampling:
        first = set(sorted({t.group_id for t in kept})[:want])
        kept = [t for t in kept if t.group_id in first]
    return kept, {"sampling/rounds": rounds, "sampling/episodes": len(played),
                  "sampling/groups_played": len({t.group_id for t in played}),
                  "sampling/groups_kept": len({t.group_id for t in kept}),
                  "sampling/success_rate_played": sum(t.won for t in played) / max(1, len(played))}


def env_pool(cfg: TrainConfig) -> EnvExecutor | None:
    """A warm worker pool of the process and Ray executors, to keep for the run (worker start-up costs
    seconds); ``None`` for threads."""
    e = cfg.env
    if e.executor == "thread":
        return None
    return make_executor(e.executor, EnvFactory(e.name, e.kwargs), workers=e.workers, ray_address=e.ray_address,
                         keep_warm=True)


def warn_skip_streak(streak: int, iteration: int, first: int = SKIP_STREAK_WARN) -> None:
    """After ``first`` iterations in a row without an update (``streak``, the last one ``iteration``),
    a warning that names the fix; again, as an error line, each time the streak doubles."""
    q, r = divmod(streak, first)
    if q == 0 or r or q & (q - 1):  # only at first, 2 x first, 4 x first, ...
        return
    since = iteration - streak + 1
    fix = ("raise algo.dynamic_sampling_rounds or rollout.tasks_per_batch, or start from a policy whose groups "
           "are not all won or all lost")
    if streak == first:
        log.warning("%d iterations in a row (%d-%d) made no update: dynamic sampling kept no group with mixed "
                    "outcomes, so the policy is not learning; %s", streak, since, iteration, fix)
    else:
        log.error("STILL no update: %d iterations in a row (since iteration %d) kept no group with mixed "
                  "outcomes; this run is spending its episodes without learning; %s", streak, since, fix)
