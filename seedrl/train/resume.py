"""Which run folder a run may start or resume in, and which settings a resume may change.

A new run refuses a folder that already holds checkpoints or metric rows (:func:`used_run_dir`). A
resume checks its config against the run's ``config.yaml`` (read as that run's version of the config
wrote it, :func:`seedrl.config.load_run_config` and its ``config_version``): only the changes of
:data:`RESUME_SAFE_KEYS` are allowed (:func:`check_resume_config`), and they are recorded
(:func:`record_resume_config`): ``config.yaml`` is always the config in effect, the first config is kept
once as ``config.original.yaml`` and each change is a row of ``config_changes.jsonl``.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from pathlib import Path
from typing import Any

from seedrl.config import TrainConfig, load_run_config, save_config
from seedrl.errors import SeedRLError
from seedrl.methods import MICRO_BATCH_MEAN
from seedrl.train.checkpoint import cut_rows, fsync_file, load_latest
from seedrl.train.distributed import World, check_same
from seedrl.train.traces import cut_traces
from seedrl.train.update import warmup_schedule

log = logging.getLogger(__name__)

#: files of a run folder whose rows carry an "iteration" (MetricsLogger.row_files)
ROW_FILES = ("metrics.jsonl", "eval.jsonl", "skills.jsonl")


#: config keys a resumed run may change: none of them changes what the run computes (its task
#: stream, batch shapes, method, model, environment, seed or update math), only how long it runs,
#: how often it saves, what is logged and evaluated, and how fast or where it computes. Entries
#: are keys or sections (a section covers every key under it). Every other change is refused.
#: ``optim.micro_batch_size`` only splits a mini-batch into gradient-accumulation pieces (the same
#: update up to float rounding; not with ``algo.opd_agg`` micro_batch_mean, see
#: :func:`unsafe_in_this_run`), as ``optim.dedupe`` only merges identical samples (the same update
#: up to float rounding); ``model.gradient_checkpointing`` trades memory for recomputation;
#: ``env.workers``/``env.step_timeout_s`` are the env pool's parallelism and hang guard (results
#: never depend on the number of workers); ``skills.api.{base_url,api_key_env,timeout_s,concurrency}``
#: say where and how fast the analyzer endpoint is reached, not which model answers. Refused, for
#: example: ``seed``, ``model.*`` (also ``model.device``: with ``precision=auto`` it can switch the
#: compute precision), ``env.*``, ``rollout.*``, ``algo.*``, ``skills.*``, the rest of ``optim.*``.
RESUME_SAFE_KEYS = (
    "run_dir", "iterations", "save_every", "keep_checkpoints", "torch_threads", "log", "eval",
    "env.workers", "env.step_timeout_s", "env.executor", "env.ray_address", "model.gradient_checkpointing",
    "optim.micro_batch_size", "optim.dedupe", "optim.shared_prefix", "skills.api.base_url", "skills.api.api_key_env",
    "skills.api.timeout_s", "skills.api.concurrency", "rollout.vllm_gpu_memory_utilization", "rollout.vllm_kv_cache_gb",
    "rollout.vllm_enforce_eager", "rollout.vllm_sleep",
)


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out |= _flatten(v, key + ".")
        else:
            out[key] = v
    return out


def config_changes(old: TrainConfig, new: TrainConfig) -> dict[str, tuple[Any, Any]]:
    """{dotted key: (old value, new value)} for every setting that differs."""
    a, b = _flatten(old.model_dump(mode="json")), _flatten(new.model_dump(mode="json"))
    return {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}


def resume_safe(key: str) -> bool:
    return any(key == s or key.startswith(s + ".") for s in RESUME_SAFE_KEYS)


def unsafe_in_this_run(old: TrainConfig, new: TrainConfig) -> dict[str, str]:
    """{key: why} for the keys of :data:`RESUME_SAFE_KEYS` whose change from ``old`` to ``new`` does
    change what this run computes: ``iterations`` when ``optim.warmup_ratio`` spreads the warm-up
    over them and the warm-up length (``int(warmup_ratio * iterations)``) changes;
    ``optim.micro_batch_size`` when the OPD term is a mean over micro-batches (``algo.opd_agg``)."""
    out: dict[str, str] = {}
    if old.opd_per_micro_batch or new.opd_per_micro_batch:
        out["optim.micro_batch_size"] = f"algo.opd_agg {MICRO_BATCH_MEAN} averages the OPD term over micro-batches"
    a = warmup_schedule(old.optim.warmup_steps, old.optim.warmup_ratio, old.iterations)
    b = warmup_schedule(new.optim.warmup_steps, new.optim.warmup_ratio, new.iterations)
    if a[0] and b[0] and a != b:
        out["iterations"] = f"optim.warmup_ratio warms up over {a[1]} -> {b[1]} iterations"
    return out


def used_run_dir(run_dir: Path, has_checkpoint: bool) -> str | None:
    """Why a *new* run cannot start in ``run_dir`` (it holds checkpoints, or rows of an earlier run);
    None when it can."""
    rows = [n for n in ROW_FILES if (run_dir / n).exists() and (run_dir / n).stat().st_size > 0]
    if has_checkpoint:
        return f"{run_dir} already holds checkpoints; pass --resume to continue it or choose another run_dir"
    if rows:
        return (f"{run_dir} holds {', '.join(rows)} of an earlier run but no checkpoint; pass --resume to restart "
                f"it from scratch in place (its rows are discarded) or choose another run_dir")
    return None


def check_resume_config(run_dir: Path, cfg: TrainConfig) -> dict[str, tuple[Any, Any]]:
    """The safe changes of ``cfg`` against the run's ``config.yaml``; a one-line SeedRLError
    naming every unsafe one (see :data:`RESUME_SAFE_KEYS`)."""
    path = run_dir / "config.yaml"
    if not path.exists():
        log.warning("--resume: %s is missing; the settings of the run cannot be checked", path)
        return {}
    try:
        old = load_run_config(path)
    except SeedRLError as exc:
        raise SeedRLError(f"cannot resume: {path} is unreadable ({exc})") from None
    except Exception as exc:  # noqa: BLE001 - a damaged YAML file
        raise SeedRLError(f"cannot resume: {path} is unreadable ({type(exc).__name__})") from None
    changes = config_changes(old, cfg)
    here = unsafe_in_this_run(old, cfg)
    unsafe = {k: v for k, v in changes.items() if not resume_safe(k) or k in here}
    if unsafe:
        listed = ", ".join(f"{k} {json.dumps(a)} -> {json.dumps(b)}" + (f" ({here[k]})" if k in here else "")
                           for k, (a, b) in unsafe.items())
        raise SeedRLError(f"cannot resume {run_dir}: these settings change what the run computes: "
                          f"{listed}; resume with the run's settings (its config.yaml) or start a new run_dir")
    return changes


def record_resume_config(run_dir: Path, cfg: TrainConfig, iteration: int,
                         changes: dict[str, tuple[Any, Any]]) -> None:
    """Keep ``config.yaml`` the config in effect (``cfg``); the first config survives as
    ``config.original.yaml`` and every change is a row of ``config_changes.jsonl``."""
    cfg_path = run_dir / "config.yaml"
    if not changes and cfg_path.exists():
        return
    if changes:
        original = run_dir / "config.original.yaml"
        if cfg_path.exists() and not original.exists():
            shutil.copyfile(cfg_path, original)
        row = {"iteration": iteration, "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
               "changes": {k: {"old": a, "new": b} for k, (a, b) in changes.items()}}
        with (run_dir / "config_changes.jsonl").open("a") as f:
            f.write(json.dumps(row) + "\n")
        fsync_file(run_dir / "config_changes.jsonl")
        log.warning("--resume at iteration %d with changed settings (recorded in config_changes.jsonl): %s",
                    iteration, ", ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in changes.items()))
    save_config(cfg, cfg_path)


def restore_checkpoint(ckpt_dir: Path, model: Any, optimizer: Any, scheduler: Any, world: World,
                       train_panel: Any) -> dict[str, Any] | None:
    """Load the newest intact checkpoint of ``ckpt_dir`` into ``model``, ``optimizer`` and ``scheduler``
    (damaged ones are skipped with a warning, :func:`seedrl.train.checkpoint.load_latest`), the same one
    on every rank; its state (iteration, panel position, trajectory counter), or None (a warning: the run
    starts from scratch). A checkpoint of another train panel is refused."""
    found = load_latest(ckpt_dir, model, optimizer, scheduler)
    check_same(world, None if found is None else found[1]["iteration"], "the checkpoint to resume from")
    if found is None:
        log.warning("--resume: no checkpoint in %s; starting from scratch (rows of the earlier "
                    "attempt discarded)", ckpt_dir)
        return None
    ckpt, state = found
    if not train_panel.matches(state.get("train_panel_hash")):  # format-1 hashes too
        raise SeedRLError(f"cannot resume: train panel changed ({state.get('train_panel_hash')} "
                          f"-> {train_panel.hash})")
    log.info("resumed from %s at iteration %d", ckpt, state["iteration"])
    return state


def rewind_rows(run_dir: Path, row_files: list[Path], iteration: int | None) -> None:
    """Cut the row files and traces of ``run_dir`` back to ``iteration`` (the resumed checkpoint's), so
    the resumed run writes exactly the rows an uninterrupted one would; None (no checkpoint): remove
    them all."""
    for p in row_files:
        if iteration is None:
            p.unlink(missing_ok=True)
        else:
            cut_rows(p, iteration)
    cut_traces(run_dir, iteration or 0)  # traces are rows too
