"""Data-parallel training over several processes (``accelerate launch`` or ``torchrun``).

One process per device; every process holds a full replica of the policy. Per iteration:

- **Rollout**: the ``tasks_per_batch`` tasks are split into ``world_size`` contiguous blocks
  (:func:`task_block`; a group never spans processes), rank ``r`` plays block ``r`` with a sampling
  seed of its own (:func:`shard_seed`). Advantages are per group, so per rank they are exact.
- **Update**: the mini-batches are drawn from the *global* sample list, exactly as one process
  draws them (:func:`sample_layout` shares every rank's response lengths and teacher-signal flags);
  each rank computes its part of a mini-batch with every loss term divided by the mini-batch's
  global token count, and the gradients are *summed* across ranks by torch DDP
  (:func:`data_parallel`, a summing communication hook), so the update is the one-process update of
  the same global batch (up to float summation order). Ranks hold different numbers of
  micro-batches per mini-batch (possibly none): each accumulates its own under ``no_sync`` and DDP
  reduces in its last backward; a rank with none runs one zero-weighted pass.
- **Rank 0** writes every file of the run (config, metrics rows gathered over all ranks, skills,
  evaluation, checkpoints); the others wait at a barrier. On ``--resume`` every rank loads the same
  checkpoint from ``run_dir`` (several machines: ``run_dir`` on a shared filesystem).

A single process (no ``WORLD_SIZE`` > 1 and no initialised process group) never calls anything
here but :func:`setup`, which returns :data:`SINGLE`: the one-process run is unchanged.
FSDP (a policy sharded over the processes, chosen in the accelerate config) is
:mod:`seedrl.train.fsdp`: the same global-batch update, with gradients reduce-scattered by FSDP
instead of DDP. DeepSpeed is not supported: a launch that asks for it is
refused in one line rather than silently run as replicas.
"""

from __future__ import annotations

import datetime
import logging
import os
from dataclasses import dataclass
from typing import Any

import torch

from seedrl.errors import SeedRLError
from seedrl.train.fsdp import requested_plan

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class World:
    """This process's place in the run: ``rank`` of ``size`` processes, ``local_rank`` on its machine."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def active(self) -> bool:
        """True when several processes train together (collectives are needed)."""
        return self.size > 1

    @property
    def main(self) -> bool:
        """True on the process that writes the run's files (rank 0)."""
        return self.rank == 0


SINGLE = World()

_TRUE = ("1", "true", "yes")


def _env_int(name: str, default: int) -> int:
    v = os.environ.get(name, "")
    try:
        return int(v) if v.strip() else default
    except ValueError:
        raise SeedRLError(f"environment variable {name}={v!r} is not an integer") from None


def setup(device: str) -> World:
    """The world of this process; initialises the process group when a launcher asked for several
    processes (``WORLD_SIZE`` > 1) and none exists yet (gloo on CPU, nccl on CUDA). A one-line
    SeedRLError for a launch this loop cannot run as it was asked to."""
    import torch.distributed as dist

    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() in _TRUE:
        raise SeedRLError("the launcher asks for DeepSpeed (ACCELERATE_USE_DEEPSPEED), which seedrl train does not "
                          "support; relaunch data-parallel (`accelerate launch --multi_gpu ...`) or with FSDP "
                          "(`--use_fsdp --fsdp_version 2`)")
    want = _env_int("WORLD_SIZE", 1)
    if dist.is_available() and dist.is_initialized():
        size, rank = dist.get_world_size(), dist.get_rank()
        if "WORLD_SIZE" in os.environ and size != want:
            raise SeedRLError(f"the process group has {size} processes but the launcher set WORLD_SIZE={want}")
    elif want > 1 or (requested_plan() is not None and "MASTER_ADDR" in os.environ):
        # (FSDP in one launched process: a group of one, so the FSDP code path runs as on N)
        if not dist.is_available():
            raise SeedRLError(f"WORLD_SIZE={want} but this torch build has no torch.distributed")
        backend = "nccl" if device.startswith("cuda") else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(_env_int("LOCAL_RANK", 0))
        # rank 0 evaluates and saves while the others wait at a barrier: allow long waits
        dist.init_process_group(backend, timeout=datetime.timedelta(hours=3))
        size, rank = dist.get_world_size(), dist.get_rank()
        if size != want:
            raise SeedRLError(f"the process group formed with {size} processes but WORLD_SIZE={want}")
    else:
        if os.environ.get("ACCELERATE_USE_CPU", "").lower() in _TRUE:
            log.warning("launched by `accelerate launch --cpu`, which starts ONE process whatever "
                        "--num_processes says; for several CPU processes use `accelerate launch --multi_gpu "
                        "--num_processes N ...` (gloo) or `torchrun --nproc_per_node N ...`")
        return SINGLE
    world = World(rank=rank, size=size, local_rank=_env_int("LOCAL_RANK", rank))
    if size > 1:
        log.info("data-parallel training: rank %d of %d (local rank %d)", rank, size, world.local_rank)
    return world


def rank_device(world: World, device: str) -> str:
    """The device this rank computes on: a bare ``cuda`` becomes ``cuda:<local_rank>``."""
    if world.active and device.strip() == "cuda":
        return f"cuda:{world.local_rank}"
    return device


def task_block(num_tasks: int, world: World) -> tuple[int, int]:
    """[start, stop) of the tasks of a batch this rank plays: the ``rank``-th of ``size`` equal
    contiguous blocks, so the ranks' trajectories concatenated in rank order are the batch's order."""
    if num_tasks % world.size:
        raise SeedRLError(f"rollout.tasks_per_batch={num_tasks} must be divisible by the number of processes "
                          f"({world.size}): a group never spans processes")
    per = num_tasks // world.size
    return world.rank * per, (world.rank + 1) * per


def shard_seed(base: int, shard: int) -> int:
    """The rollout sampling seed of task block ``shard``: block 0 keeps ``base`` (the one-process seed)."""
    return base + shard * 1_000_000_007


def dummy_loss(model: torch.nn.Module, device: torch.device) -> torch.Tensor:
    """A zero-weighted forward through the whole model: its backward takes part in the other ranks'
    gradient collectives (DDP's all-reduce, FSDP's gathers and reduce-scatters) and adds exactly
    zero to every gradient."""
    ids = torch.zeros((1, 2), dtype=torch.long, device=device)
    logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
    return logits.float().sum() * 0.0


def barrier(world: World) -> None:
    if world.active:
        import torch.distributed as dist

        dist.barrier()


def all_gather(world: World, obj: Any) -> list[Any]:
    """Every rank's ``obj`` (picklable), in rank order; ``[obj]`` in a single process."""
    if not world.active:
        return [obj]
    import torch.distributed as dist

    out: list[Any] = [None] * world.size
    dist.all_gather_object(out, obj)
    return out


def check_same(world: World, value: Any, what: str) -> None:
    """A one-line SeedRLError unless every rank holds the same ``value``."""
    values = all_gather(world, value)
    if any(v != values[0] for v in values):
        raise SeedRLError(f"the processes disagree on {what}: {values}")


@dataclass
class SampleLayout:
    """The global step-sample list as every rank sees it: response lengths and teacher-signal flags
    of all samples in rank order, and where this rank's samples start in it."""

    lengths: list[int]
    signal: list[bool] | None
    offset: int
    count: int
    #: every rank's sample count, in rank order
    counts: tuple[int, ...] = ()

    def local(self, global_idx: list[int]) -> list[int]:
        """This rank's local indices among ``global_idx``, in that order."""
        return [i - self.offset for i in self.own(global_idx, global_idx)]

    def own(self, global_idx: list[int], values: list[Any]) -> list[Any]:
        """``values`` (one per index of ``global_idx``) of this rank's samples, aligned with :meth:`local`."""
        lo, hi = self.offset, self.offset + self.count
        return [v for v, i in zip(values, global_idx) if lo <= i < hi]

    def most_micro_batches(self, global_idx: list[int], micro_batch_size: int) -> int:
        """The largest number of micro-batches any rank cuts its share of ``global_idx`` into (what
        every rank must run when each backward is a collective, as under FSDP)."""
        counts = self.counts or (self.count,)
        starts = [sum(counts[:r]) for r in range(len(counts))]
        shares = [sum(1 for i in global_idx if lo <= i < lo + n) for lo, n in zip(starts, counts)]
        return max(-(-k // micro_batch_size) for k in shares)


def sample_layout(world: World, lengths: list[int], signal: list[bool] | None) -> SampleLayout:
    """Share every rank's per-sample response lengths and signal flags (one collective)."""
    if not world.active:
        return SampleLayout(lengths, signal, 0, len(lengths), (len(lengths),))
    parts = all_gather(world, (lengths, signal))
    offset = sum(len(p[0]) for p in parts[:world.rank])
    flags = None if signal is None else [f for p in parts for f in p[1]]
    return SampleLayout([n for p in parts for n in p[0]], flags, offset, len(lengths), tuple(len(p[0]) for p in parts))


def sum_stats(world: World, acc: dict[str, float]) -> dict[str, float]:
    """Key-wise sums over the ranks (a rank may miss keys: it had no sample of the mini-batch)."""
    if not world.active:
        return acc
    out: dict[str, float] = {}
    for part in all_gather(world, acc):
        for k, v in part.items():
            out[k] = out.get(k, 0.0) + v
    return out


def _sum_hook(state, bucket):
    """DDP communication hook: the bucket's gradients *summed* over the ranks (DDP's own hook
    averages them). Not annotated: DDP checks the annotations, which ``__future__`` turns into strings."""
    import torch.distributed as dist

    fut = dist.all_reduce(bucket.buffer(), async_op=True).get_future()
    return fut.then(lambda f: f.value()[0])


def data_parallel(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """``model`` under torch's DistributedDataParallel, with gradients summed over the ranks (every
    loss term is already divided by the mini-batch's global token count). Buffers are not broadcast
    at each forward: the replicas' buffers are equal, and a broadcast would make every forward a
    collective. The update runs its forwards through the wrapper; everything else uses ``model``."""
    from torch.nn.parallel import DistributedDataParallel

    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None,
                                  broadcast_buffers=False)
    ddp.register_comm_hook(None, _sum_hook)
    return ddp


def process_layout(cfg: Any, world: World, rollout_shards: int) -> int:
    """How many blocks a batch is played in: the processes of ``world``, or ``rollout_shards`` in a single
    process (tests: the per-block seeds of a run of that many processes). Refuses what does not run
    across processes yet, and a batch that does not cut into equal blocks (:func:`task_block`)."""
    if world.active and rollout_shards != 1:
        raise SeedRLError("rollout_shards is for a single process; several processes shard by rank")
    task_block(cfg.rollout.tasks_per_batch, world if world.active else World(0, rollout_shards))
    shards = world.size if world.active else rollout_shards
    if world.active and cfg.optim.split_distinct:
        raise SeedRLError("optim.split_distinct groups one process's identical samples into one mini-batch; "
                          "with several processes set optim.split_distinct=false")
    a = cfg.algo
    if shards != 1 and (a.dynamic_sampling or a.keep_group_frac < 1 or a.replay_coef > 0):
        raise SeedRLError("algo.dynamic_sampling, algo.keep_group_frac < 1 and algo.replay_coef > 0 run in a "
                          "single process for now; launch one process or turn them off")
    return shards
