"""Collection: which train tasks an iteration plays, how its episodes are played (in one block, or in
the blocks of several processes), and which groups it keeps (dynamic sampling).

The task stream depends only on (seed, panel position), so a resumed run draws exactly the same
tasks (:func:`next_tasks`). Several processes (or ``rollout_shards`` in one) play the batch's tasks as
equal contiguous blocks, each with its own seed, and keep the global ids the episodes have in the batch
(:func:`play`). With group filters, further rounds are played until enough groups remain
(:func:`sample_groups`)."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import torch

from seedrl.algos import select_groups
from seedrl.config import TrainConfig
from seedrl.envs.panels import Panel
from seedrl.envs.registry import env_class
from seedrl.rollout.backends import SamplingParams
from seedrl.rollout.executors import EnvExecutor, EnvFactory
from seedrl.rollout.runner import RolloutSettings, rollout
from seedrl.rollout.types import Trajectory
from seedrl.train.distributed import World, shard_seed, task_block


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
