"""The RL loop shared by every method, and its state. An iteration reads as its stages, each a call
into its own module (and timed: ``time/<stage>`` in the metrics):

    collect (collect) -> score: old and reference log-probs (scoring)
            -> analyze and re-score with skills (scoring; methods with skills) -> advantages (scoring)
            -> update (update) -> evaluate (evaluation) -> save (checkpoint)

with the batch's metrics (metrics), the run folder and resume checks (resume) and the trained model's
setup (policy) beside. A method is a configuration of this loop (``algo.name``, one entry of
:mod:`seedrl.methods`), never a copy of it: the loop asks the method for its analyzer, its teacher
prompts and its signal, and names no method.
"""

from __future__ import annotations

import json
import logging
import random
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from seedrl.config import TrainConfig, save_config
from seedrl.envs.panels import build_panel
from seedrl.errors import SeedRLError
from seedrl.fileio import atomic_write
from seedrl.methods.runtime import build_method
from seedrl.rollout.backends import backend_options, make_backend
from seedrl.rollout.executors import EnvExecutor
from seedrl.rollout.types import StepSample, Trajectory
from seedrl.skills.analyzers.base import AnalysisResult
from seedrl.train import fsdp
from seedrl.train.checkpoint import checkpoint_dirs, cut_rows, fsync_file, remove_orphans, save_checkpoint
from seedrl.train.collect import env_pool, next_tasks, play, sample_groups, warn_skip_streak
from seedrl.train.distributed import World, barrier, process_layout, rank_device, setup
from seedrl.train.evaluation import (
    Evaluator,
    eval_metrics,
    evaluates_first,
    evaluates_last,
    evaluates_now,
    saves_now,
)
from seedrl.train.logger import MetricsLogger
from seedrl.train.metrics import COLLAPSED_NLL, batch_metrics, skill_metrics, stage_timer, whole_batch
from seedrl.train.policy import build_trained
from seedrl.train.resume import (
    check_resume_config,
    record_resume_config,
    restore_checkpoint,
    rewind_rows,
    used_run_dir,
)
from seedrl.train.runlock import RunLock, lock_run_dir
from seedrl.train.scoring import Scorer, unique_pairs
from seedrl.train.threads import apply_threads
from seedrl.train.traces import cut_traces, save_iteration_trace, write_skills
from seedrl.train.update import (
    UpdateBatch,
    Updater,
    check_samples,
    replay_pool,
    sample_keys,
    training_samples,
)

log = logging.getLogger(__name__)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


class Trainer:
    """One RL run in ``cfg.run_dir``.

    A new run refuses a run folder that already holds checkpoints or metric rows; ``resume=True``
    continues one: its config is checked against the run's (:mod:`seedrl.train.resume`: unsafe
    changes are refused, safe ones recorded), the newest intact checkpoint loaded and the rows cut
    back to its iteration, so the resumed run writes exactly the rows an uninterrupted one would.

    Several processes (``accelerate launch``/``torchrun``, see :mod:`seedrl.train.distributed`):
    each rank plays its block of the batch's tasks and the update is the one of the whole global
    batch; rank 0 writes every file. ``rollout_shards`` (single process only, for tests): play the
    batch as that many blocks with the per-block seeds a run of that many processes uses, so a
    single process reproduces a multi-process run (one generate call per block and turn)."""

    def __init__(self, cfg: TrainConfig, resume: bool = False, rollout_shards: int = 1) -> None:
        self.cfg = cfg
        #: this process's rank and the number of processes (a single process: SINGLE)
        self.world: World = setup(cfg.model.device)
        self.rollout_shards = process_layout(cfg, self.world, rollout_shards)
        main = self.world.main
        #: ``torch_threads: auto``'s governor (None: a fixed number, set here)
        self.threads = apply_threads(cfg.torch_threads)
        self.run_dir = Path(cfg.run_dir)
        self.ckpt_dir = self.run_dir / "checkpoints"
        #: one live process per run folder (seedrl.train.runlock), taken before the folder is read
        self._lock: RunLock | None = lock_run_dir(self.run_dir) if main else None
        has_ckpt = bool(checkpoint_dirs(self.ckpt_dir))
        problem = None if resume else used_run_dir(self.run_dir, has_ckpt)
        if problem:
            self._release_lock()
            raise SeedRLError(problem)
        changes = check_resume_config(self.run_dir, cfg) if resume and has_ckpt else {}
        barrier(self.world)  # every rank has checked the run folder before rank 0 writes into it
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if main and (not resume or not has_ckpt):
            save_config(cfg, self.run_dir / "config.yaml")
        seed_everything(cfg.seed)
        # a bare "cuda" means this rank's GPU; the config (and config.yaml) keep the name as given
        m = cfg.model.model_copy(update={"device": rank_device(self.world, cfg.model.device)})
        self.device = torch.device(m.device)

        #: the policy (FSDP-sharded when the accelerate config asks for it, else DDP replicas over several
        #: processes: ``_ddp``), its tokenizer and precision, and the KL term's reference model (or None)
        trained = build_trained(cfg, m, self.world)
        self.tokenizer, self.model, self.precision = trained.tokenizer, trained.model, trained.precision
        self.ref_model, self.fsdp_plan, self._ddp = trained.ref_model, trained.fsdp_plan, trained.ddp
        if main:
            atomic_write(self.run_dir / "precision.json", json.dumps(asdict(self.precision), indent=1))
        #: hf shares the policy's weights; vllm holds a copy, synced after every update (and a resume)
        self.backend = make_backend(cfg.rollout.backend, self.model, self.tokenizer, bf16=self.precision.bf16,
                                    seed=cfg.seed, **backend_options(cfg.rollout))
        #: the method: its table entry (skills, placement), its signal object and its analyzer
        self.method = build_method(cfg, self.backend, self.tokenizer, bf16=self.precision.bf16)
        self.analyzer = self.method.analyzer
        #: the log-probs (old, reference, teacher) and advantages of a batch
        self.scorer = Scorer(cfg, self.model, self.ref_model, self.tokenizer, self.precision, self.method)
        #: which skill text a static-skill run (sdar, skill_sd, grpo_opsd) uses: layout, folder, hash
        self.skill_source: dict[str, Any] | None = getattr(self.analyzer, "source", None)
        if self.skill_source is not None and main:
            log.info("static skills: %s layout in %s (sha256 %s)", self.skill_source["layout"],
                     self.skill_source["dir"], self.skill_source["sha256"][:12])
            atomic_write(self.run_dir / "skill_source.json", json.dumps(self.skill_source, indent=1))

        e = cfg.env
        self.train_panel = build_panel(e.name, e.train_split, e.train_size, **e.kwargs)
        #: every evaluated panel, primary (``eval.split`` or the first of ``eval.splits``) first
        self.eval_panels = {s: build_panel(e.name, s, cfg.eval.panel_size, **e.kwargs)
                            for s in cfg.eval.split_list}
        self.eval_panel = next(iter(self.eval_panels.values()))
        #: (prompt ids, response ids) of the expert demonstrations replayed in every mini-batch (PPO-ptx)
        self.replay_pairs = replay_pool(cfg, self.tokenizer) if cfg.algo.replay_coef > 0 else []
        #: the PPO update, with the optimizer and the learning-rate scheduler (both in every checkpoint)
        self.updater = Updater(cfg, self.world, self.model, self._ddp, self.method, self.tokenizer, self.precision,
                               self.device, self.replay_pairs, self.ckpt_dir)
        self.optimizer, self.scheduler = self.updater.optimizer, self.updater.scheduler
        self.evaluator = Evaluator(cfg, self.backend, self.tokenizer, self.eval_panels, self.run_dir)
        if main:
            self.evaluator.warn_oversized()
            self.train_panel.save(self.run_dir / "panel_train.json")
            for split, panel in self.eval_panels.items():
                panel.save(self.run_dir / f"panel_{split}.json")

        self.iteration = self.panel_position = self.traj_counter = 0  # the state a checkpoint keeps
        #: seconds the last checkpoint save took; logged as ``time/checkpoint`` in the next row
        #: (the row of an iteration is written before its checkpoint, see :meth:`train`)
        self._checkpoint_s: float | None = None
        self._pool: EnvExecutor | None = None
        self._restarts_seen = 0  # the pool's restart count at the last iteration's metrics
        #: iterations in a row that made no update (dynamic sampling kept no group), and this process's
        #: iterations and updates: a run that stops learning says so, louder as it goes on
        self._skip_streak = 0
        self._iterations_run = self._updates_run = 0
        #: rank 0 writes the rows; the other ranks have no logger
        self.logger: MetricsLogger | None = MetricsLogger(self.run_dir, cfg.log, resume=resume) if main else None
        if main and not resume:
            cut_traces(self.run_dir, 0)  # a new run in a folder: no traces of an earlier attempt
        if resume:
            state = restore_checkpoint(self.ckpt_dir, self.model, self.optimizer, self.scheduler, self.world,
                                       self.train_panel)
            if state is not None:
                self.iteration, self.panel_position, self.traj_counter = (
                    state["iteration"], state["panel_position"], state["traj_counter"])
            if main:  # rows and traces back to the checkpoint's iteration (none: no rows at all)
                rewind_rows(self.run_dir, self.logger.row_files, None if state is None else self.iteration)
                if state is not None:
                    record_resume_config(self.run_dir, cfg, self.iteration, changes)
            if state is not None:
                self._sync_backend()  # the checkpoint's weights, not the initial ones
        barrier(self.world)

    def _sync_backend(self) -> None:
        """Make the generation backend sample from the policy's current weights (vLLM: an in-place
        copy, LoRA merged, prefix cache reset; hf: nothing to copy)."""
        sync = getattr(self.backend, "sync_weights", None)
        if sync is not None:
            with fsdp.gathered(self.model):
                sync(self.model)

    # ------------------------------------------------------------------ stages
    def collect(self, timings: dict[str, float], round_: int = 0) -> list[Trajectory]:
        """This process's trajectories of the next batch (:func:`seedrl.train.collect.play`) on the
        next ``tasks_per_batch`` tasks; ``round_`` > 0: a further round of dynamic sampling."""
        tasks = next_tasks(self.train_panel, self.cfg.seed, self.panel_position, self.cfg.rollout.tasks_per_batch)
        self.panel_position += len(tasks)
        base = self.cfg.seed * 100_003 + self.iteration + round_ * 10_000_019
        trajs = play(self.backend, self.tokenizer, self.cfg, tasks, base, self.traj_counter, round_, self.world,
                     self.rollout_shards, timings, self._env_pool())
        self.traj_counter += len(tasks) * self.cfg.rollout.group_size
        return trajs

    def collect_batch(self, timings: dict[str, float]) -> tuple[list[Trajectory], dict[str, float]]:
        """The trajectories of this iteration's update and the ``sampling/*`` metrics
        (:func:`seedrl.train.collect.sample_groups`)."""
        return sample_groups(self.cfg, self.collect(timings), lambda r: self.collect(timings, round_=r),
                             self.scorer.returns)

    def _env_pool(self) -> EnvExecutor | None:
        """The run's warm env worker pool (:func:`seedrl.train.collect.env_pool`), started at the first
        rollout; :meth:`close` ends it."""
        if self._pool is None:
            self._pool = env_pool(self.cfg)
        return self._pool

    def close(self) -> None:
        """End the env worker pool (a no-op for threads; also done at interpreter exit) and the
        generation engine (vLLM)."""
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
            self._restarts_seen = 0
        close = getattr(self.backend, "close", None)
        if close is not None:
            close()
        self._release_lock()

    def _release_lock(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def update(self, batch: UpdateBatch) -> dict[str, float]:
        """This iteration's update on ``batch`` (:meth:`seedrl.train.update.Updater.update`)."""
        return self.updater.update(batch, self.iteration)

    # ------------------------------------------------------------------ loop
    def _evaluate(self, initial: dict[str, dict[str, Any]] | None = None, first: bool = False) -> dict[str, Any]:
        """Rank 0 evaluates (``first``: the starting policy, reusing ``initial``; see
        :class:`~seedrl.train.evaluation.Evaluator`) on full weights and logs the rows."""
        with fsdp.gathered(self.model):
            evals = (self.evaluator.initial(initial) if first
                     else self.evaluator.run(f"iter_{self.iteration:06d}", self.iteration))
        for res in evals.values():
            self.logger.log_eval(res)
        return evals

    def train_iteration(self) -> dict[str, Any]:
        """One iteration: collect -> score (old, reference log-probs) -> analyze and re-score (methods with
        skills) -> advantages -> update; returns its metrics row. Each stage is timed (``time/<stage>``)."""
        if self.threads is not None:
            self.threads.step()
        timings: dict[str, float] = {}
        stage = stage_timer(timings)
        rollout_t: dict[str, float] = {}
        scored = None
        # sharded (FSDP): full weights from the rollout to the re-scoring, sharded again for the update
        with fsdp.gathered(self.model):
            with stage("rollout"):
                trajs, sampling = self.collect_batch(rollout_t)
            if not trajs and sampling:  # dynamic sampling found no group with mixed outcomes: no update
                return self._skipped(sampling, timings)
            samples = training_samples(trajs)
            check_samples(self.world, trajs, samples)
            with stage("old_logp"):
                old_logp = self.scorer.old_logprobs(samples)
            with stage("ref_logp"):
                ref_logp = self.scorer.reference_logprobs(samples)
            if self.method.uses_skills:  # stages "analysis" and "rescore"
                scored = self.scorer.skill_signal(self.analyzer, trajs, samples, stage)
        teacher_logp, signal = (None, None) if scored is None else (scored[1], scored[2])
        with stage("advantage"):
            adv = self.scorer.advantages(trajs, samples) if samples else torch.zeros(0)
        sleep = getattr(self.backend, "sleep", None)
        if sleep is not None:
            sleep()  # vLLM sleep mode on CUDA: its KV cache and weights are freed for the update
        with stage("update"):
            ub = UpdateBatch(samples, old_logp, adv, ref_logp, teacher_logp, signal)
            if self.cfg.optim.dedupe:
                ub.keys = sample_keys(ub)
            upd = self.update(ub)
        with stage("sync"):
            self._sync_backend()  # before the evaluation and the next rollout
        if self.world.main and self.cfg.log.trace_trajectories:
            with stage("trace"):  # rank 0's own trajectories (see seedrl.train.traces)
                self.save_trace(trajs, samples, old_logp, adv, teacher_logp, signal,
                                None if scored is None else scored[0])
        # the rows describe the whole batch: with several processes, every rank's part of it
        m_trajs, m_samples, m_old, m_adv, scored = whole_batch(self.world, trajs, samples, old_logp, adv, scored)
        skill_stats: dict[str, Any] = {}
        if scored is not None:
            if self.world.main:
                write_skills(self.run_dir, self.iteration + 1, m_trajs, scored[0])
            skill_stats = skill_metrics(scored, m_trajs, m_samples, m_old, m_adv)
        self.iteration += 1
        self._iterations_run += 1
        self._updates_run += 1
        self._skip_streak = 0
        metrics = batch_metrics(self.tokenizer, m_trajs, m_samples, m_old, m_adv, skill_stats | upd | sampling)
        if self.iteration == 1 and metrics.get("rollout/decision_nll", 1.0) < COLLAPSED_NLL and self.world.main:
            log.warning("the starting policy is nearly deterministic where it decides (sampled action tokens' NLL "
                        "%.3f < %.2f): its groups mostly come out uniform and carry no advantage; start from a "
                        "less sharpened warm start (fewer SFT epochs)", metrics["rollout/decision_nll"], COLLAPSED_NLL)
        if self._pool is not None:
            # env worker processes replaced this iteration (a dead or hung env; its neighbours were replayed)
            metrics["rollout/env_worker_restarts"] = self._pool.restarts - self._restarts_seen
            self._restarts_seen = self._pool.restarts
        # distinct (prompt, response) pairs per step sample (this process's): what a scoring pass computes
        metrics["rollout/unique_sample_frac"] = len(unique_pairs(samples)[1]) / max(1, len(samples))
        metrics |= {f"time/{k}": v for k, v in timings.items()}
        metrics |= {f"time/rollout_{k}": v for k, v in rollout_t.items()}
        metrics["iteration"] = self.iteration
        if self.threads is not None:  # torch_threads: auto, the threads this iteration ran with
            metrics["sys/torch_threads"] = torch.get_num_threads()
        if self.world.active or fsdp.is_sharded(self.model):
            metrics |= {"dist/world_size": self.world.size, "dist/fsdp": int(fsdp.is_sharded(self.model)),
                        "dist/ddp": int(self._ddp is not None)}
        return metrics

    def _skipped(self, sampling: dict[str, float], timings: dict[str, float]) -> dict[str, Any]:
        """An iteration whose dynamic sampling kept no group: no update; its metrics row."""
        self.iteration += 1
        self.updater.step_lr("iteration")  # no update: the rate stays a function of the iteration
        log.warning("iteration %d: dynamic sampling kept no group in %d rounds (%d episodes); no update",
                    self.iteration, sampling["sampling/rounds"], sampling["sampling/episodes"])
        self._iterations_run += 1
        self._skip_streak += 1
        warn_skip_streak(self._skip_streak, self.iteration)
        return sampling | {"update/skipped": 1, "iteration": self.iteration} | {
            f"time/{k}": v for k, v in timings.items()}

    def save_trace(self, trajs: list[Trajectory], samples: list[StepSample], old_logp: list[torch.Tensor],
                   adv: torch.Tensor, teacher_logp: list[torch.Tensor] | None, signal: torch.Tensor | None,
                   results: list[AnalysisResult] | None) -> Path:
        """``traces/iter_XXXXXX.json`` of this iteration (``self.iteration + 1``, as its rows): a few
        trajectories token by token (:mod:`seedrl.train.traces`), fsynced before the checkpoint."""
        return save_iteration_trace(self.run_dir, self.cfg, self.iteration + 1, trajs, samples, old_logp, adv,
                                    teacher_logp, signal, results, self.tokenizer, self.method.signal)

    def save(self) -> None:
        """Rank 0 writes the checkpoint (the ranks' states are identical; a sharded model's full
        weights and optimizer state are gathered on rank 0 first); the others wait for it."""
        model_state = optimizer_state = None
        if fsdp.is_sharded(self.model):  # collectives: every rank takes part
            model_state = fsdp.full_model_state(self.model)
            optimizer_state = fsdp.full_optimizer_state(self.model, self.optimizer)
        if self.world.main:
            save_checkpoint(self.ckpt_dir, self.iteration, self.model, self.tokenizer, self.optimizer,
                            {"panel_position": self.panel_position, "traj_counter": self.traj_counter,
                             "train_panel_hash": self.train_panel.hash, "seed": self.cfg.seed}
                            | ({"world_size": self.world.size} if self.world.active else {}),
                            keep=self.cfg.keep_checkpoints, scheduler=self.scheduler, model_state=model_state,
                            optimizer_state=optimizer_state)
        barrier(self.world)

    def train(self, stop_after: int | None = None,
              initial_eval: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
        """Run until ``cfg.iterations`` (or ``stop_after`` more iterations, for tests and preemption).

        Evaluates every panel of ``eval.split_list`` at iteration 0, every ``eval.every`` iterations
        and at the end (rows in eval.jsonl, files in eval/). ``summary["eval_before"/"eval_after"]``
        is the primary panel's result, ``summary["evals_before"/"evals_after"]`` all of them.
        ``initial_eval``: iteration-0 results to reuse instead of measuring them again.

        Each iteration's rows (skills, eval, metrics) are written and fsynced *before* its
        checkpoint is committed: a kill anywhere leaves rows of at most one iteration past the last
        checkpoint, which a resume cuts and redoes (a kill after the commit loses nothing). The time
        a save takes is therefore logged as ``time/checkpoint`` in the next iteration's row.

        Several processes: only rank 0 evaluates and writes (the others wait at a barrier and
        return an empty summary)."""
        if self.world.main and self._lock is None:  # a trainer trained again after close()
            self._lock = lock_run_dir(self.run_dir)
        try:
            if not self.world.main:
                return self._train_follower(stop_after)
            return self._train_main(stop_after, initial_eval)
        finally:
            self.close()

    def _train_main(self, stop_after: int | None,
                    initial_eval: dict[str, dict[str, Any]] | None) -> dict[str, Any]:
        c = self.cfg
        remove_orphans(self.ckpt_dir)
        summary: dict[str, Any] = {} if self.skill_source is None else {"skill_source": self.skill_source}
        if evaluates_first(c, self.iteration):
            evals = self._evaluate(initial_eval, first=True)
            summary["evals_before"] = evals
            summary["eval_before"] = next(iter(evals.values()))
        barrier(self.world)
        target = c.iterations if stop_after is None else min(c.iterations, self.iteration + stop_after)
        with self.logger.progress(total=c.iterations, start=self.iteration) as advance:
            while self.iteration < target:
                metrics = self.train_iteration()
                if evaluates_now(c, self.iteration):
                    t0 = time.perf_counter()
                    metrics |= eval_metrics(self._evaluate())
                    metrics["time/eval"] = time.perf_counter() - t0
                    barrier(self.world)
                if self._checkpoint_s is not None:
                    metrics["time/checkpoint"] = self._checkpoint_s
                    self._checkpoint_s = None
                self.logger.log(metrics)
                for p in self.logger.row_files:
                    fsync_file(p)
                advance(metrics)
                if saves_now(c, self.iteration):
                    t0 = time.perf_counter()
                    self.save()
                    self._checkpoint_s = time.perf_counter() - t0
        if self._iterations_run and not self._updates_run:
            log.warning("no iteration of this run updated the policy: all %d it ran were skipped (dynamic sampling "
                        "kept no group with mixed outcomes); its weights are the ones it started from",
                        self._iterations_run)
        if evaluates_last(c, self.iteration):
            if self.iteration > 0:  # rows of an earlier final evaluation of this iteration (a resumed run)
                cut_rows(self.logger.eval_path, self.iteration - 1)
            evals = self._evaluate()
            summary["evals_after"] = evals
            summary["eval_after"] = next(iter(evals.values()))
        self.logger.close()
        barrier(self.world)
        return summary

    def _train_follower(self, stop_after: int | None) -> dict[str, Any]:
        """The loop of a rank > 0: the same iterations and collectives as rank 0, no files; it
        waits at rank 0's evaluations (taking part in gathering a sharded model's weights for them)
        and checkpoints."""
        c = self.cfg
        self._wait_for_evaluation(evaluates_first(c, self.iteration))  # rank 0's initial evaluation
        target = c.iterations if stop_after is None else min(c.iterations, self.iteration + stop_after)
        while self.iteration < target:
            self.train_iteration()
            if evaluates_now(c, self.iteration):
                self._wait_for_evaluation(True)
            if saves_now(c, self.iteration):
                self.save()
        self._wait_for_evaluation(evaluates_last(c, self.iteration))  # rank 0's final evaluation
        return {}

    def _wait_for_evaluation(self, evaluates: bool) -> None:
        """A rank > 0 while rank 0 evaluates (``evaluates``) or not: take part in gathering a sharded
        model's weights for it, then wait at the barrier that follows it on rank 0."""
        if evaluates:
            with fsdp.gathered(self.model):
                pass
        barrier(self.world)
