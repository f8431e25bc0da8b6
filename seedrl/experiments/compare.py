"""`seedrl compare`: several methods under identical conditions, one (method, seed) cell at a time.

Every cell of a comparison shares the model initialisation (the config's model), the training-task
stream (``seed`` = the cell's seed, the same for every method), the number of environment episodes
(``iterations = budget_episodes / (tasks_per_batch * group_size)``) and the evaluation schedule
(iteration 0, every ``eval_every`` iterations and the last one, on every panel of ``splits``). Only
``algo.name`` differs between the cells of a seed.

A finished cell is a small JSON file ``<out>/cells/<algo>-seed<k>.json`` and is never rerun (its
config hash must match, or the command refuses); an interrupted cell resumes from its run folder's
latest checkpoint. The iteration-0 evaluation is the same for every method of a seed (same weights,
same panels, same evaluation seed), so it is measured once per seed and reused.
"""

from __future__ import annotations

import gc
import hashlib
import json
import logging
import os
import platform
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from seedrl.config import TrainConfig, load_config, load_run_config
from seedrl.errors import SeedRLError
from seedrl.methods.signals import SIGNAL_PREFIXES

log = logging.getLogger(__name__)

CELL_FORMAT = 1
DEFAULT_SPLITS = ("valid_seen", "valid_unseen")
#: metric-name prefixes of the distillation diagnostics logged by the trainer (averaged per cell)
DIAGNOSTIC_PREFIXES = ("skills/", "teacher/", *SIGNAL_PREFIXES)
#: config keys that never change a number (where files go, logging, parallelism, checkpoint cadence)
_NEUTRAL_KEYS = ("run_dir", "save_every", "keep_checkpoints", "torch_threads", "log")
_NEUTRAL_ENV_KEYS = ("workers", "step_timeout_s")


@dataclass
class CompareSpec:
    base_config: Path
    algos: list[str]
    seeds: list[int]
    budget_episodes: int
    eval_every: int
    out: Path
    runs_dir: Path
    overrides: list[str] = field(default_factory=list)
    splits: list[str] = field(default_factory=lambda: list(DEFAULT_SPLITS))
    command: str = ""
    baseline: str = "grpo"
    #: a variant label: this invocation's cells are named ``<algo>+<tag>`` (e.g. ``seed+oracle`` for
    #: ``--set skills.analyzer=oracle``), so variants of a method share one results folder and report
    tag: str = ""
    #: the panel of the sample-efficiency table (None: valid_unseen, else the last panel)
    efficiency_split: str | None = None

    def label(self, algo: str) -> str:
        return f"{algo}+{self.tag}" if self.tag else algo


# ---------------------------------------------------------------------------------------- inputs
def resolve_base_config(config: str | Path | None, env: str | None, configs_dir: Path = Path("configs")) -> Path:
    """``--config`` as given, or for ``--env NAME`` the GRPO preset ``configs/<NAME>_grpo.yaml``
    (``-`` in the name may also be spelt ``_``)."""
    if config is not None:
        return Path(config)
    if not env:
        raise SeedRLError("give --config (a YAML preset) or --env (uses configs/<env>_grpo.yaml)")
    for stem in dict.fromkeys((env, env.replace("-", "_"))):
        p = configs_dir / f"{stem}_grpo.yaml"
        if p.exists():
            return p
    have = sorted(p.name for p in configs_dir.glob("*_grpo.yaml")) if configs_dir.is_dir() else []
    raise SeedRLError(f"no base config for --env {env}: expected {configs_dir}/{env}_grpo.yaml; "
                      f"GRPO presets: {', '.join(have) or 'none'}")


def parse_seeds(spec: str) -> list[int]:
    """``"3"`` -> seeds 0, 1, 2; ``"0,2,5"`` -> exactly those seeds."""
    s = str(spec).strip()
    try:
        if "," in s:
            seeds = [int(x) for x in s.split(",") if x.strip()]
        else:
            seeds = list(range(int(s)))
    except ValueError:
        raise SeedRLError(f"--seeds expects a count (3) or a list (0,1,2), got {spec!r}") from None
    if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise SeedRLError(f"--seeds must name at least one seed, each once and >= 0; got {spec!r}")
    return seeds


def episodes_per_iteration(cfg: TrainConfig) -> int:
    return cfg.rollout.tasks_per_batch * cfg.rollout.group_size


def iterations_for_budget(cfg: TrainConfig, budget_episodes: int) -> int:
    """The number of iterations that plays exactly ``budget_episodes`` episodes; an error (naming
    the two nearest valid budgets) when the budget is not a multiple of the episodes per iteration."""
    per = episodes_per_iteration(cfg)
    if budget_episodes <= 0:
        raise SeedRLError(f"--budget-episodes must be positive, got {budget_episodes}")
    if budget_episodes % per:
        lo = budget_episodes // per * per
        raise SeedRLError(f"--budget-episodes {budget_episodes} is not a multiple of the {per} episodes of an "
                          f"iteration (tasks_per_batch {cfg.rollout.tasks_per_batch} x group_size "
                          f"{cfg.rollout.group_size}); use " + (f"{lo} or {lo + per}" if lo else f"{per}"))
    return budget_episodes // per


def cell_name(algo: str, seed: int) -> str:
    return f"{algo}-seed{seed}"


def cell_config(spec: CompareSpec, algo: str, seed: int) -> TrainConfig:
    """The run config of one cell: the base config and the user's overrides, then the controlled
    keys (method, seed, budget, evaluation schedule and panels, run folder)."""
    base = load_config(TrainConfig, spec.base_config, list(spec.overrides))
    iters = iterations_for_budget(base, spec.budget_episodes)
    user_keys = {o.split("=", 1)[0].strip() for o in spec.overrides}
    forced = [f"run_dir={spec.runs_dir / cell_name(spec.label(algo), seed)}", f"seed={seed}", f"algo.name={algo}",
              f"iterations={iters}", f"eval.every={spec.eval_every}", f"eval.splits={json.dumps(spec.splits)}",
              f"eval.split={spec.splits[0]}"]
    if "save_every" not in user_keys:  # a checkpoint at every evaluation point: resume loses little
        forced.append(f"save_every={spec.eval_every}")
    cfg = load_config(TrainConfig, spec.base_config, list(spec.overrides) + forced)
    if cfg.eval.num_tasks == 0:
        raise SeedRLError("eval.num_tasks=0 disables evaluation; a comparison needs it")
    return cfg


def _sha(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _measured(cfg: TrainConfig) -> dict[str, Any]:
    d = cfg.model_dump(mode="json")
    for k in _NEUTRAL_KEYS:
        d.pop(k, None)
    for k in _NEUTRAL_ENV_KEYS:
        d["env"].pop(k, None)
    return d


def config_hash(cfg: TrainConfig) -> str:
    """Hash of everything in a cell's config that can change a number (not run_dir, logging,
    env workers, checkpoint cadence)."""
    return _sha(_measured(cfg))


def shared_config_hash(cfg: TrainConfig) -> str:
    """:func:`config_hash` without the method and the seed: equal for every cell of a comparison."""
    d = _measured(cfg)
    d.pop("seed", None)
    d["algo"].pop("name", None)
    return _sha(d)


def initial_eval_key(cfg: TrainConfig) -> str:
    """What the iteration-0 evaluation depends on: the initial weights, the env, the decoding and
    the evaluation settings and seed. Equal keys = identical iteration-0 results."""
    e, r = cfg.env, cfg.rollout
    ev = cfg.eval.model_dump(mode="json")
    ev.pop("every", None)
    return _sha({"model": cfg.model.model_dump(mode="json"), "seed": cfg.seed, "eval": ev,
                 "env": {"name": e.name, "kwargs": e.kwargs, "max_steps": e.max_steps,
                         "history_length": e.history_length},
                 "rollout": {"backend": r.backend, "max_new_tokens": r.max_new_tokens,
                             "max_prompt_tokens": r.max_prompt_tokens}})


def cpu_model() -> str:
    """The CPU's model name (Linux ``/proc/cpuinfo``; ``platform.processor()`` is empty there), or ""."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor()
    return next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")), "")


def machine_info() -> dict[str, Any]:
    import torch

    from seedrl.models.precision import device_capability

    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    info: dict[str, Any] = {"platform": platform.platform(), "machine": platform.machine(),
                            "processor": platform.processor(), "cpu_model": cpu_model(),
                            "cpu_count": os.cpu_count(), "cpus_usable": usable,
                            "python": platform.python_version(), "torch": torch.__version__,
                            "torch_threads": torch.get_num_threads(),
                            "cpu_bf16": device_capability("cpu").description}
    if torch.cuda.is_available():
        info["gpu"] = device_capability("cuda").description
    return info


def git_state() -> dict[str, Any]:
    from seedrl.provenance import git_commit

    try:
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                                    text=True, check=True).stdout.strip())
    except Exception:
        dirty = None
    return {"commit": git_commit(), "dirty": dirty}


def attempts_git_state(attempts: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``commit``/``dirty`` a cell records, from its attempt rows: each row holds the git state taken
    when that attempt *started* (the code it ran), not when the cell finished. A cell resumed across
    commits names them all, oldest first, joined by "+"; a row without one (written before rows carried
    it) counts as "unknown"."""
    commits = list(dict.fromkeys(r.get("commit", "unknown") for r in attempts))
    dirty = [r.get("dirty") for r in attempts]
    return {"commit": "+".join(commits), "dirty": None if None in dirty else any(dirty)}


# ---------------------------------------------------------------------------------------- the start
#: the weight files of a model folder, by kind, in the order transformers prefers them: the first kind
#: present is what is hashed (a folder holding model.safetensors and a pytorch_model.bin twin loads the
#: former; training_args.bin, optimizer.pt and the like are not weights)
_WEIGHT_GLOBS = (("*.safetensors",), ("pytorch_model*.bin", "adapter_model.bin"), ("*.gguf",))


def _model_folder(name: str) -> Path | None:
    """The local folder ``model.name`` loads from: a path, a packaged model's converted folder, or a hub
    name's snapshot in the local Hugging Face cache; None where there is none."""
    from seedrl.models.packaged import PACKAGED, converted_dir

    if name in PACKAGED:
        return converted_dir(name)
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(name, local_files_only=True))
    except Exception:
        return None


def weight_fingerprint(folder: Path) -> tuple[str | None, dict[str, str]]:
    """``(fingerprint, {file: sha256})`` of a model folder's weight files (:data:`_WEIGHT_GLOBS`): one
    file's sha256 is the fingerprint itself (``sha256sum model.safetensors`` prints it); several files
    are fingerprinted by the sha256 of their ``sha256sum``-style manifest (``<sha256>  <name>`` lines
    in name order). None where the folder holds no weight file."""
    from seedrl.models.packaged import file_sha256

    for globs in _WEIGHT_GLOBS:
        files = sorted({p for g in globs for p in folder.glob(g) if p.is_file()})
        if files:
            shas = {p.name: file_sha256(p) for p in files}
            if len(shas) == 1:
                return next(iter(shas.values())), shas
            manifest = "".join(f"{h}  {n}\n" for n, h in shas.items())
            return hashlib.sha256(manifest.encode()).hexdigest(), shas
    return None, {}


def sft_origin(folder: Path) -> dict[str, Any] | None:
    """The config of the ``seedrl sft`` run that wrote ``folder`` (its ``run_dir/model``: the run's
    ``config.yaml`` and ``summary.json`` lie beside it), as that run resolved it; None otherwise."""
    from seedrl.config import SFTConfig

    run = folder.parent
    if folder.name != "model" or not (run / "config.yaml").is_file() or not (run / "summary.json").is_file():
        return None
    try:
        return load_config(SFTConfig, run / "config.yaml").model_dump(mode="json")
    except SeedRLError:  # another kind of run, or an SFT config this version cannot read
        return None


def start_record(model) -> dict[str, Any]:
    """What a cell starts from (``model``: a :class:`~seedrl.config.ModelConfig`): ``fingerprint`` (the
    sha256 of the start model's weight files, :func:`weight_fingerprint`; for a built-in tiny model,
    whose weights are built from its name and ``model.init_seed``, the sha256 of those two), ``of`` (what
    was hashed), ``files`` and, where the start is a ``seedrl sft`` run's model, ``sft`` (that run's
    config: what the start learnt from, :func:`sft_origin`)."""
    from seedrl.models.loading import TINY_CONFIGS

    name = model.name
    if name in TINY_CONFIGS:
        return {"fingerprint": hashlib.sha256(f"{name}\ninit_seed={model.init_seed}".encode()).hexdigest(),
                "of": f"built-in {name}, init_seed {model.init_seed} (its name and init seed fix its weights)",
                "files": {}, "sft": None}
    folder = _model_folder(name)
    if folder is None:
        return {"fingerprint": None, "of": f"{name}: no local folder to hash", "files": {}, "sft": None}
    fp, files = weight_fingerprint(folder)
    return {"fingerprint": fp, "of": f"{folder}: " + (", ".join(files) if files else "no weight files"),
            "files": files, "sft": sft_origin(folder)}


def attempts_start(attempts: list[dict[str, Any]], start: dict[str, Any]) -> dict[str, Any]:
    """A cell's ``start`` record: ``start`` (the last attempt's) with the fingerprints every attempt
    found when it started (``start_sha256`` of its row), oldest first, joined by "+" where they differ
    (the start folder changed while the cell resumed); rows written before attempts hashed it are left
    out."""
    seen = list(dict.fromkeys(r["start_sha256"] for r in attempts if r.get("start_sha256")))
    return start | ({"fingerprint": "+".join(seen)} if seen else {})


# ---------------------------------------------------------------------------------------- a cell
def _rows(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


def read_evals(run_dir: Path) -> dict[int, dict[str, dict[str, Any]]]:
    """eval.jsonl as {iteration: {split: row}}; a repeated (iteration, split) keeps the last row."""
    out: dict[int, dict[str, dict[str, Any]]] = {}
    for r in _rows(run_dir / "eval.jsonl"):
        out.setdefault(int(r.get("iteration", 0)), {})[r["split"]] = r
    return dict(sorted(out.items()))


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """metrics.jsonl, one row per iteration (a repeated iteration keeps the last row)."""
    by_it = {int(r["iteration"]): r for r in _rows(run_dir / "metrics.jsonl")}
    return [by_it[k] for k in sorted(by_it)]


def task_outcomes(run_dir: Path, iteration: int, split: str) -> str | None:
    """The per-task outcomes of one evaluation as a "0"/"1" string in panel order (for the paired
    task-level bootstrap), from ``eval/iter_<it>_<split>.json``; None where the file is missing."""
    f = Path(run_dir) / "eval" / f"iter_{iteration:06d}_{split}.json"
    if not f.exists():
        return None
    return "".join("1" if t.get("won") else "0" for t in json.loads(f.read_text()).get("tasks", []))


def add_task_outcomes(cell: dict[str, Any]) -> bool:
    """Fill in per-task outcomes of a cell written before they were recorded, from its run folder;
    True if the cell changed."""
    changed = False
    for p in cell["curve"]:
        for s, panel in p["panels"].items():
            if "won" not in panel:
                won = task_outcomes(Path(cell["run_dir"]), p["iteration"], s)
                if won is not None and len(won) == panel["num_tasks"]:
                    panel["won"], changed = won, True
    return changed


def build_cell(cfg: TrainConfig, algo: str, seed: int, splits: list[str], *, wall_s: float,
               extra: dict[str, Any] | None = None, start: dict[str, Any] | None = None) -> dict[str, Any]:
    """The cell JSON of a finished run folder: learning curve, final and best points, cost and
    diagnostics. ``best`` is the evaluation point with the highest success on the first panel
    (``valid_seen``: selection on the seen panel, the earliest on ties), reported on every panel.
    ``start``: what the run started from (:func:`start_record`, taken when its attempts started); None:
    taken now, from ``model.name``."""
    from seedrl.eval.evaluate import wilson_interval

    run_dir = Path(cfg.run_dir)
    per_it = episodes_per_iteration(cfg)
    evals = read_evals(run_dir)
    curve = []
    for it, by_split in evals.items():
        if not all(s in by_split for s in splits):
            continue
        panels = {}
        for s in splits:
            r = by_split[s]
            n = int(r["num_tasks"])
            panels[s] = {"success": r["success_rate"],
                         "ci95": list(r.get("ci95") or wilson_interval(round(r["success_rate"] * n), n)),
                         "num_tasks": n, "score": r.get("score"), "mean_steps": r["mean_steps"],
                         "invalid_rate": r["invalid_rate"], "panel_hash": r["panel_hash"]}
            won = task_outcomes(run_dir, it, s)
            if won is not None:
                panels[s]["won"] = won
        curve.append({"iteration": it, "episodes": it * per_it, "panels": panels})
    if not curve or curve[-1]["iteration"] != cfg.iterations:
        raise SeedRLError(f"{run_dir}: the evaluation at the last iteration ({cfg.iterations}) is missing")
    sel = splits[0]
    best = max(curve, key=lambda p: (p["panels"][sel]["success"], -p["iteration"]))

    metrics = read_metrics(run_dir)
    stages: dict[str, float] = {}
    rollout_split: dict[str, float] = {}
    for m in metrics:
        for k, v in m.items():
            if not k.startswith("time/") or not isinstance(v, (int, float)) or k == "time/eval":
                continue
            name = k[5:]
            if name.startswith("rollout_"):
                rollout_split[name[8:]] = rollout_split.get(name[8:], 0.0) + v
            else:
                stages[name] = stages.get(name, 0.0) + v
    eval_rows = [r for by in evals.values() for r in by.values()]
    stages["eval"] = sum(float(r.get("time_s", 0.0)) for r in eval_rows if not r.get("reused"))
    rollout_tokens = sum(m.get("rollout/response_tokens", 0.0) * m.get("rollout/samples", 0) for m in metrics)
    analysis_tokens = sum(m.get("skills/completion_tokens", 0) for m in metrics)
    diag_keys = sorted({k for m in metrics for k, v in m.items()
                        if k.startswith(DIAGNOSTIC_PREFIXES) and isinstance(v, (int, float))})
    diagnostics = {}
    for k in diag_keys:
        vals = [m[k] for m in metrics if isinstance(m.get(k), (int, float))]
        diagnostics[k] = {"mean": sum(vals) / len(vals), "iterations": len(vals)}
    train_panel = json.loads((run_dir / "panel_train.json").read_text())
    cell = {
        "format": CELL_FORMAT, "algo": algo, "seed": seed, "env": cfg.env.name, "model": cfg.model.name,
        "iterations": cfg.iterations, "episodes_per_iteration": per_it, "budget_episodes": cfg.iterations * per_it,
        "eval_every": cfg.eval.every, "splits": splits, "selected_on": sel,
        "curve": curve,
        "final": {s: curve[-1]["panels"][s]["success"] for s in splits},
        "best": {"iteration": best["iteration"], "episodes": best["episodes"],
                 "success": {s: best["panels"][s]["success"] for s in splits}},
        "wall_s": wall_s, "stage_s": stages, "rollout_split_s": rollout_split,
        "tokens": {"rollout": int(round(rollout_tokens)), "analysis": int(analysis_tokens),
                   "total": int(round(rollout_tokens)) + int(analysis_tokens),
                   "analysis_prompt": int(sum(m.get("skills/prompt_tokens", 0) for m in metrics))},
        "diagnostics": diagnostics,
        # per iteration, one hash per episode (seedrl.train.metrics.rollout_digests): which episodes twin cells share
        "rollout_digests": {str(m["iteration"]): m["rollout/digests"] for m in metrics if m.get("rollout/digests")},
        "config_hash": config_hash(cfg), "shared_config_hash": shared_config_hash(cfg),
        "panel_hashes": {"train": train_panel["hash"], **{s: curve[-1]["panels"][s]["panel_hash"] for s in splits}},
        "config": cfg.model_dump(mode="json"), "run_dir": str(run_dir),
        "start": start if start is not None else start_record(cfg.model),
    }
    return cell | (extra or {})


def _write_json(path: Path, obj: Any) -> None:
    """Write via a temporary file and a rename, so a killed process never leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1))
    os.replace(tmp, path)


def _load_initial_eval(path: Path, key: str) -> dict[str, dict[str, Any]] | None:
    if not path.exists():
        return None
    d = json.loads(path.read_text())
    return d["results"] if d.get("key") == key else None


def _store_initial_eval(path: Path, key: str, run_dir: Path, splits: list[str]) -> None:
    files = {s: run_dir / "eval" / f"iter_000000_{s}.json" for s in splits}
    if path.exists() or not all(f.exists() for f in files.values()):
        return
    results = {s: json.loads(f.read_text()) for s, f in files.items()}
    if any(r.get("reused") for r in results.values()):
        return
    _write_json(path, {"key": key, "source": str(run_dir), "results": results})


def run_cell(spec: CompareSpec, algo: str, seed: int, echo: Callable[[str], None]) -> dict[str, Any]:
    """Run (or resume, or skip) one cell; return its cell JSON."""
    from seedrl.train.checkpoint import latest_checkpoint
    from seedrl.train.resume import ROW_FILES
    from seedrl.train.trainer import Trainer

    name = cell_name(spec.label(algo), seed)
    cfg = cell_config(spec, algo, seed)
    h = config_hash(cfg)
    cell_path = spec.out / "cells" / f"{name}.json"
    if cell_path.exists():
        cell = json.loads(cell_path.read_text())
        if cell.get("config_hash") != h:
            raise SeedRLError(f"{cell_path} was measured with another config (hash {cell.get('config_hash')}, now "
                              f"{h}); use another --out, or delete the cell to rerun it")
        echo(f"cell {name}: done, skipped ({cell_path})")
        return cell
    run_dir = Path(cfg.run_dir)
    ckpt = latest_checkpoint(run_dir / "checkpoints")
    # a cell killed before its first checkpoint left rows: it restarts in place (Trainer(resume=True)
    # without a checkpoint discards them), after the same config check as a resumed one
    started = ckpt is not None or any((run_dir / n).exists() for n in ROW_FILES)
    if started and (run_dir / "config.yaml").exists():
        old = config_hash(load_run_config(run_dir / "config.yaml"))
        if old != h:
            raise SeedRLError(f"run folder {run_dir} holds a run with another config (hash {old}, now {h}); "
                              f"use another --runs-dir or delete it")
    init_path = spec.runs_dir / "initial_eval" / f"seed{seed}.json"
    key = initial_eval_key(cfg)
    reuse = _load_initial_eval(init_path, key)
    echo(f"cell {name}: {'resuming from ' + ckpt.name if ckpt else 'starting'} ({cfg.iterations} iterations, "
         f"{cfg.iterations * episodes_per_iteration(cfg)} episodes{', reusing the iteration-0 eval' if reuse and not ckpt else ''})")
    state = git_state()  # the code this attempt runs: later commits may land while it trains
    start = start_record(cfg.model)  # the weights it starts from: the folder may be rewritten meanwhile
    state["start_sha256"] = start["fingerprint"]
    t0 = time.perf_counter()
    trainer = Trainer(cfg, resume=started)
    try:
        final_done = all((run_dir / "eval" / f"iter_{cfg.iterations:06d}_{s}.json").exists() for s in spec.splits)
        if not (trainer.iteration >= cfg.iterations and final_done):
            trainer.train(initial_eval=reuse)
    finally:
        del trainer
        gc.collect()
        _empty_cuda_cache()
        attempt = time.perf_counter() - t0
        with (run_dir / "compare_attempts.jsonl").open("a") as f:
            f.write(json.dumps({"wall_s": attempt, "finished_at": time.time(), **state}) + "\n")
    attempts = _rows(run_dir / "compare_attempts.jsonl")
    wall = sum(r["wall_s"] for r in attempts)  # + attempts ended by an exception or Ctrl-C (not by SIGKILL)
    _store_initial_eval(init_path, key, run_dir, spec.splits)
    cell = build_cell(cfg, algo, seed, spec.splits, wall_s=wall, start=attempts_start(attempts, start),
                      extra={"algo": spec.label(algo), "method": algo, "command": spec.command,
                             **attempts_git_state(attempts), "machine": machine_info(),
                             "attempts": len(attempts), "initial_eval_reused": bool(reuse),
                             "finished_at": time.strftime("%Y-%m-%d %H:%M:%S")})
    _write_json(cell_path, cell)
    echo(f"cell {name}: finished in {attempt:.0f}s; final " +
         ", ".join(f"{s} {v:.3f}" for s, v in cell["final"].items()))
    return cell


def _empty_cuda_cache() -> None:
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except Exception:
        pass


def load_cells(out: Path) -> list[dict[str, Any]]:
    cells_dir = out / "cells"
    if not cells_dir.is_dir():
        return []
    return [json.loads(p.read_text()) for p in sorted(cells_dir.glob("*.json"))]


def run_compare(spec: CompareSpec, echo: Callable[[str], None] = print, report_only: bool = False) -> dict[str, Any]:
    """Run every (method, seed) cell not yet done, seed-major (so every seed's iteration-0 eval is
    measured once, by its first method), then render the report from all cells under ``out``."""
    from seedrl.experiments.heldout import HELDOUT_SUFFIX
    from seedrl.experiments.report import write_report

    if not report_only:
        # every cell's config is built (so every method, option and split is validated) before the first trains
        cfg0 = [cell_config(spec, algo, seed) for seed in spec.seeds for algo in spec.algos][0]
        from seedrl.envs.registry import env_class

        valid = list(env_class(cfg0.env.name).splits)
        bad = [s for s in spec.splits if s not in valid]
        if bad:
            raise SeedRLError(f"env {cfg0.env.name} has no split {bad[0]!r}; splits: {', '.join(valid)}")
        if spec.efficiency_split is not None and spec.efficiency_split.removesuffix(HELDOUT_SUFFIX) not in spec.splits:
            raise SeedRLError(f"--efficiency-split {spec.efficiency_split!r} is not an evaluated panel; panels: "
                              f"{', '.join(spec.splits)} (or <panel>{HELDOUT_SUFFIX}, its tasks outside the train "
                              f"panel, where the runs train on part of it)")
        eff = spec.efficiency_split or ""
        if eff.endswith(HELDOUT_SUFFIX) and cfg0.env.train_split != eff.removesuffix(HELDOUT_SUFFIX):
            raise SeedRLError(f"--efficiency-split {eff}: these runs train on {cfg0.env.train_split!r}, not on part of "
                              f"{eff.removesuffix(HELDOUT_SUFFIX)!r}, so that panel has no held-out part (it is all "
                              f"held out: use --efficiency-split {eff.removesuffix(HELDOUT_SUFFIX)})")
        if spec.eval_every <= 0:
            raise SeedRLError(f"--eval-every must be a positive number of iterations, got {spec.eval_every}")
        total = len(spec.algos) * len(spec.seeds)
        echo(f"compare: {total} cells ({', '.join(spec.algos)} x seeds {', '.join(map(str, spec.seeds))}), "
             f"{cfg0.iterations} iterations = {spec.budget_episodes} episodes each, eval every "
             f"{spec.eval_every} iterations on {', '.join(spec.splits)}")
        for seed in spec.seeds:
            for algo in spec.algos:
                run_cell(spec, algo, seed, echo)
    for f in sorted((spec.out / "cells").glob("*.json")) if (spec.out / "cells").is_dir() else []:
        cell = json.loads(f.read_text())
        if add_task_outcomes(cell):
            _write_json(f, cell)
            echo(f"cell {f.stem}: per-task outcomes added from {cell['run_dir']}")
    cells = load_cells(spec.out)
    if not cells:
        raise SeedRLError(f"no finished cells under {spec.out / 'cells'}")
    stored = spec.out / "summary.json"  # a re-render keeps the folder's efficiency panel unless told otherwise
    split = spec.efficiency_split or (json.loads(stored.read_text()).get("efficiency_split") if stored.exists() else None)
    summary = write_report(cells, spec.out, baseline=spec.baseline, rendered_by=spec.command, efficiency_split=split)
    echo(f"report: {spec.out / 'report.md'}, {spec.out / 'curves.png'}, {spec.out / 'summary.json'}")
    return summary
