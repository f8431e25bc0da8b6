"""Atomic, verified checkpoints: model, optimizer, RNG states, iteration and panel position.

Layout of ``<root>/iter_XXXXXX``::

    model/                    a plain HF folder (``seedrl eval`` and ``--model`` load it)
    trainable.safetensors     exact adapter weights: the trainable parameters (LoRA runs only)
    trainer.pt                optimizer, scheduler and RNG states: tensors and plain data only
    state.json                iteration, panel position, trajectory counter, panel hash, seed
    MANIFEST.json             size and sha256 of every file above
    COMPLETE                  written last: the checkpoint is whole

Writing: every file goes into ``<root>/.tmp-iter_XXXXXX-<pid>``, is fsynced and hashed into the
manifest; then ``COMPLETE``, then the folder is renamed into place (the commit point) and the
``latest`` pointer is replaced atomically. A kill at any moment leaves either the previous
checkpoints or the new one, never a half-written checkpoint that ``--resume`` would load; the
orphaned ``.tmp-*`` folder of a killed save is removed by the next save or resume in the same root
(a folder whose pid is still alive on this machine is left alone).

Reading never unpickles code: ``trainer.pt`` is read with ``torch.load(weights_only=True)`` (RNG
states are stored as tensors, lists and numbers, not as numpy objects), weights are safetensors and
``state.json`` is JSON. :func:`latest_checkpoint` and :func:`load_latest` verify a checkpoint
against its manifest before using it; a damaged one is reported (``logging.warning`` naming the
file and the reason) and the newest intact older one is used instead; when none is intact the
error is one :class:`SeedRLError` line naming what is wrong. Checkpoints written before manifests
existed are loaded as *unverified* (a warning; only their structure is checked, and a file that
fails to load makes them count as damaged).
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import random
import re
import shutil
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from seedrl.errors import SeedRLError, describe_os_error
from seedrl.fileio import atomic_write, fsync_path, writing
from seedrl.models.loading import refused_global, safetensors_problem
from seedrl.models.packaged import file_sha256
from seedrl.models.pickles import first_pickle_global
from seedrl.train import fsdp

log = logging.getLogger(__name__)

COMPLETE = "COMPLETE"
MANIFEST = "MANIFEST.json"
MANIFEST_FORMAT = 1
_ITER = re.compile(r"^iter_(\d+)$")
_TMP = re.compile(r"^\.tmp-iter_\d+-(\d+)$")
_POINTER_TMP = re.compile(r"^\.latest\.tmp(\d+)$")


class CheckpointDamaged(SeedRLError):
    """A checkpoint that cannot be trusted: ``str(exc)`` names the file and the reason."""


def _fault(point: str) -> None:
    """A no-op at every step of :func:`save_checkpoint`; fault-injection tests replace it to
    simulate a kill at ``point`` (begin, model, trainable, trainer_state, state, manifest,
    complete, commit, pointer, rotate)."""


# ------------------------------------------------------------------------------------ file helpers
def _files(folder: Path) -> list[str]:
    """Relative paths of the files of a checkpoint folder, without the manifest and the marker."""
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")
                  if p.is_file() and p.name not in (MANIFEST, COMPLETE))


def _iteration_of(path: Path) -> int | None:
    m = _ITER.match(path.name)
    return int(m.group(1)) if m else None


def checkpoint_dirs(ckpt_root: str | Path) -> list[Path]:
    """Every ``iter_*`` folder of ``ckpt_root`` (whole or not), newest iteration first."""
    root = Path(ckpt_root)
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and _iteration_of(p) is not None]
    return sorted(found, key=lambda p: _iteration_of(p), reverse=True)


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return False  # this process saves one checkpoint at a time: its old tmp folders are dead
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_orphans(ckpt_root: str | Path) -> list[Path]:
    """Delete ``.tmp-iter_*`` folders (and ``.latest.tmp*`` files) left by killed saves; those of a
    process still alive on this machine are kept. Returns what was removed."""
    root = Path(ckpt_root)
    removed: list[Path] = []
    if not root.is_dir():
        return removed
    for p in root.iterdir():
        m = _TMP.match(p.name) or _POINTER_TMP.match(p.name)
        if m is None or _pid_alive(int(m.group(1))):
            continue
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
        log.info("removed %s, left by an interrupted checkpoint save", p)
        removed.append(p)
    return removed


# ------------------------------------------------------------------------------------ RNG states
def rng_state() -> dict[str, Any]:
    """Every RNG state as tensors, lists and numbers (loadable with ``weights_only=True``)."""
    name, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    version, internal, gauss_next = random.getstate()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": {"name": str(name), "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64).copy()),
                  "pos": int(pos), "has_gauss": int(has_gauss), "cached_gaussian": float(cached)},
        "python": {"version": int(version), "state": [int(x) for x in internal], "gauss_next": gauss_next},
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore :func:`rng_state` (also the tuple format of checkpoints written before manifests)."""
    torch.set_rng_state(state["torch"])
    npst = state["numpy"]
    if isinstance(npst, dict):
        keys = npst["keys"]
        keys = keys.numpy() if isinstance(keys, torch.Tensor) else np.asarray(keys)
        np.random.set_state((npst["name"], keys.astype(np.uint32), npst["pos"], npst["has_gauss"],
                             npst["cached_gaussian"]))
    else:
        np.random.set_state(npst)
    py = state["python"]
    if isinstance(py, dict):
        random.setstate((py["version"], tuple(py["state"]), py["gauss_next"]))
    else:
        random.setstate((py[0], tuple(py[1]), py[2]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# ------------------------------------------------------------------------------------ finite weights
def nonfinite_weights(named: Any) -> tuple[str, int] | None:
    """``(name of the first tensor holding NaN or inf, how many tensors do)`` among the floating
    tensors of ``named`` (``(name, tensor)`` pairs: ``named_parameters()``, ``state_dict().items()``),
    or None when every value is finite. A sharded tensor (DTensor) is checked on this rank's shard.
    One device sync for all of them."""
    names, flags = [], []
    for name, t in named:
        t = t.to_local() if hasattr(t, "to_local") else t
        if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel():
            names.append(name)
            flags.append(torch.isfinite(t.detach()).all())
    if not flags:
        return None
    bad = [n for n, ok in zip(names, torch.stack(flags).tolist()) if not ok]
    return (bad[0], len(bad)) if bad else None


def check_finite_model(model, what: str) -> None:
    """One :class:`SeedRLError` line when ``model`` (loaded from ``what``) holds a NaN or inf weight:
    such weights give 0 success at best, so an evaluation of them measures nothing."""
    bad = nonfinite_weights(model.named_parameters())
    if bad is not None:
        raise SeedRLError(f"{what} holds non-finite weights (NaN/inf in {bad[1]} tensor(s), first {bad[0]}): the run "
                          f"that wrote them diverged; evaluate an earlier checkpoint of it")


# ------------------------------------------------------------------------------------ saving
def save_checkpoint(ckpt_root: str | Path, iteration: int, model, tokenizer, optimizer, state: dict[str, Any],
                    keep: int = 2, scheduler=None, model_state: dict[str, torch.Tensor] | None = None,
                    optimizer_state: dict[str, Any] | None = None) -> Path:
    """Write ``ckpt_root/iter_XXXXXX`` atomically, with its manifest, and point ``latest`` at it.

    ``model_state``/``optimizer_state``: the full weights and the optimizer state in the
    one-process form, when the model is sharded (:mod:`seedrl.train.fsdp` gathers them on rank 0),
    written instead of ``model.state_dict()``/``optimizer.state_dict()``.

    A write that fails (a full disk: ``OSError(ENOSPC)``, safetensors' ``os error 28``, torch's
    ``unexpected pos``) removes the temporary folder and raises one :class:`SeedRLError` line naming
    the file, the space left and the newest checkpoint, which is untouched."""
    root = Path(ckpt_root)
    bad = nonfinite_weights(model_state.items() if model_state is not None else model.named_parameters())
    if bad is not None:  # never a checkpoint of a diverged model (the trainer stops before this; a guard)
        raise SeedRLError(f"iteration {iteration}: not saving a checkpoint with non-finite weights (NaN/inf in "
                          f"{bad[1]} tensor(s), first {bad[0]}); {newest_checkpoint_note(root)}")
    root.mkdir(parents=True, exist_ok=True)
    remove_orphans(root)
    name = f"iter_{iteration:06d}"
    tmp = root / f".tmp-{name}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    try:
        _write_checkpoint_files(tmp, iteration, model, tokenizer, optimizer, state, scheduler, model_state,
                                optimizer_state)
    except Exception as exc:  # a kill (BaseException) leaves the folder to remove_orphans
        line = describe_os_error(exc) if isinstance(exc, OSError) else None  # the space left, before cleaning
        shutil.rmtree(tmp, ignore_errors=True)  # a failed save frees what it wrote
        if line is None:
            raise
        raise SeedRLError(f"checkpoint {name} not saved: {line}; {newest_checkpoint_note(root)}") from exc
    final = root / name
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)  # the commit point
    fsync_path(root)
    _fault("commit")
    atomic_write(root / "latest", name + "\n")
    _fault("pointer")
    for old in checkpoint_dirs(root)[keep:] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    _fault("rotate")
    return final


def _write_checkpoint_files(tmp: Path, iteration: int, model, tokenizer, optimizer, state: dict[str, Any],
                            scheduler, model_state: dict[str, torch.Tensor] | None,
                            optimizer_state: dict[str, Any] | None) -> None:
    """Every file of a checkpoint into ``tmp``, fsynced, ``COMPLETE`` last; an OS fault of any
    writer is raised as an ``OSError`` naming the file (:func:`seedrl.fileio.writing`)."""
    from safetensors.torch import save_file

    from seedrl.models.loading import save_model

    _fault("begin")
    tmp.mkdir()
    with writing(tmp / "model"):  # a plain HF folder: `seedrl eval` loads it
        save_model(model, tokenizer, tmp / "model", state_dict=model_state)
    _fault("model")
    if hasattr(model, "peft_config"):  # exact adapter weights for resuming LoRA runs (the frozen base
        # comes from model.name; saving it too would also trip over tied embeddings, one shared tensor)
        with writing(tmp / "trainable.safetensors"):
            save_file({n: p.detach().contiguous() for n, p in model.named_parameters() if p.requires_grad},
                      str(tmp / "trainable.safetensors"))
        _fault("trainable")
    _torch_save({"optimizer": optimizer.state_dict() if optimizer_state is None else optimizer_state,
                 "scheduler": scheduler.state_dict() if scheduler is not None else None,
                 "rng": rng_state()}, tmp / "trainer.pt")
    _fault("trainer_state")
    with writing(tmp / "state.json"):
        (tmp / "state.json").write_text(json.dumps({"iteration": iteration, **state}, indent=1))
    _fault("state")
    files = {}
    for rel in _files(tmp):
        p = tmp / rel
        fsync_path(p)
        files[rel] = {"size": p.stat().st_size, "sha256": file_sha256(p)}
    with writing(tmp / MANIFEST):
        (tmp / MANIFEST).write_text(json.dumps({"format": MANIFEST_FORMAT, "iteration": iteration, "files": files},
                                               indent=1))
    fsync_path(tmp / MANIFEST)
    _fault("manifest")
    with writing(tmp / COMPLETE):
        (tmp / COMPLETE).write_text("ok\n")
    fsync_path(tmp / COMPLETE)
    for d in {tmp, *((tmp / rel).parent for rel in files)}:
        fsync_path(d)
    _fault("complete")


def newest_checkpoint_note(ckpt_root: str | Path) -> str:
    """``the newest checkpoint, iter_XXXXXX, is untouched`` (or that there is none), for error lines of
    a run that stops without saving."""
    dirs = checkpoint_dirs(ckpt_root)
    return f"the newest checkpoint, {dirs[0].name}, is untouched" if dirs else "no checkpoint was written"


def _torch_save(obj: Any, path: Path) -> None:
    """``torch.save``, whose failed write on a full disk is a C++ ``RuntimeError`` (inline_container.cc:
    ``unexpected pos``, ``file write failed``) without an errno: raised as the ``OSError(ENOSPC)`` it is
    when the disk is nearly full (:func:`seedrl.fileio.os_error_of`), so the CLI prints its one line."""
    with writing(path):
        torch.save(obj, path)


# ------------------------------------------------------------------------------------ verifying
_verified: dict[tuple, str | None] = {}


def verify_checkpoint(ckpt: str | Path) -> str | None:
    """Why ``ckpt`` cannot be trusted (one line naming the file and the reason), or None if intact.

    With a manifest: every listed file must exist with its size and sha256. Without one (written
    before manifests existed) only the structure is checked. Results are cached per file stats."""
    ckpt = Path(ckpt)
    if not ckpt.is_dir():
        return f"{ckpt} is missing"
    if not (ckpt / COMPLETE).exists():
        return f"{ckpt} is incomplete (no {COMPLETE} marker)"
    stats = tuple(sorted((p.relative_to(ckpt).as_posix(), p.stat().st_size, p.stat().st_mtime_ns)
                         for p in ckpt.rglob("*") if p.is_file()))
    key = (str(ckpt.resolve()), stats)
    if key not in _verified:
        _verified[key] = _verify(ckpt)
    return _verified[key]


def _verify(ckpt: Path) -> str | None:
    mpath = ckpt / MANIFEST
    if not mpath.exists():
        return _verify_structure(ckpt)
    try:
        manifest = json.loads(mpath.read_text())
        files = manifest["files"]
        if not isinstance(files, dict) or not files:
            raise ValueError("no files listed")
    except (ValueError, KeyError, TypeError) as exc:
        return f"{mpath} is unreadable ({_first_line(exc)})"
    for rel, want in sorted(files.items()):
        p = ckpt / rel
        if not p.is_file():
            return f"{p} is missing (listed in {MANIFEST})"
        size = p.stat().st_size
        if size != want.get("size"):
            return f"{p} has {size} bytes, {MANIFEST} says {want.get('size')} (truncated or overwritten)"
        if file_sha256(p) != want.get("sha256"):
            return f"{p} does not match its sha256 in {MANIFEST} (corrupted)"
    return _verify_structure(ckpt)


def _verify_structure(ckpt: Path) -> str | None:
    for rel in ("trainer.pt", "state.json"):
        p = ckpt / rel
        if not p.is_file():
            return f"{p} is missing"
        if p.stat().st_size == 0:
            return f"{p} is empty"
    weights = [ckpt / "trainable.safetensors"] if (ckpt / "trainable.safetensors").exists() else \
        sorted((ckpt / "model").glob("*.safetensors"))
    if not weights:
        return f"{ckpt / 'model'} holds no *.safetensors weights"
    for w in weights:
        problem = safetensors_problem(w)
        if problem:
            return f"{w} {problem}"
    try:
        state = json.loads((ckpt / "state.json").read_text())
        if not isinstance(state, dict) or not isinstance(state.get("iteration"), int):
            raise ValueError("no integer 'iteration'")
    except (ValueError, UnicodeDecodeError) as exc:
        return f"{ckpt / 'state.json'} is unreadable ({_first_line(exc)})"
    if _iteration_of(ckpt) is not None and state["iteration"] != _iteration_of(ckpt):
        return f"{ckpt / 'state.json'} says iteration {state['iteration']}, the folder {ckpt.name}"
    return None


def _first_line(exc: BaseException) -> str:
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200] if text else ''}".rstrip(": ")


def _warn_unverified(ckpt: Path) -> None:
    if not (ckpt / MANIFEST).exists():
        log.warning("checkpoint %s has no %s (written before checkpoints were verified); loading it unverified",
                    ckpt, MANIFEST)


def latest_checkpoint(ckpt_root: str | Path) -> Path | None:
    """The newest intact checkpoint of ``ckpt_root``; None when there is no checkpoint at all.

    A damaged newer checkpoint is skipped with a warning naming the file and the reason; when
    checkpoints exist but none is intact, a one-line :class:`SeedRLError` says why each failed."""
    root = Path(ckpt_root)
    dirs = checkpoint_dirs(root)
    if not dirs:
        return None
    problems = []
    for d in dirs:
        problem = verify_checkpoint(d)
        if problem is None:
            for bad, why in problems:
                log.warning("checkpoint %s is damaged, skipping it: %s", bad.name, why)
            return d
        problems.append((d, problem))
    raise SeedRLError(f"no intact checkpoint in {root}: " + "; ".join(why for _, why in problems))


# ------------------------------------------------------------------------------------ loading
def resolve_checkpoint(spec: str) -> tuple[str, Any]:
    """Map what ``seedrl eval --checkpoint`` accepts to ``(model path, run config or None)``.

    A run folder (``checkpoints/`` inside) gives its latest intact checkpoint's ``model/`` and the run's
    ``config.yaml``; a checkpoint folder gives its ``model/`` and the run's config two levels up; an SFT run
    folder gives its ``model/`` and a :class:`~seedrl.config.TrainConfig` carrying the SFT config's model, env
    and eval; anything else (a model folder, a hub name, a built-in tiny model) is returned as is, with
    ``None``. A spec that looks like a path but does not exist is a :class:`SeedRLError`.
    """
    from seedrl.config import SFTConfig, TrainConfig, load_config, load_run_config
    from seedrl.models.loading import _looks_like_path

    p = Path(spec)
    if (p / "checkpoints").is_dir():  # a run folder
        ck = latest_checkpoint(p / "checkpoints")
        if ck is None:
            raise SeedRLError(f"run folder {spec} has no complete checkpoint")
        return str(ck / "model"), load_run_config(p / "config.yaml")
    if (p / "model").is_dir():  # a checkpoint folder, or an SFT run folder (its model/ and config.yaml)
        if any((p / f).exists() for f in (COMPLETE, MANIFEST, "trainer.pt", "state.json")):  # a checkpoint
            problem = verify_checkpoint(p)
            if problem:
                raise SeedRLError(f"checkpoint {spec} cannot be trusted: {problem}")
        run_cfg = None
        if (p.parent.parent / "config.yaml").exists():
            run_cfg = load_run_config(p.parent.parent / "config.yaml")
        elif (p / "config.yaml").exists():
            sft = load_config(SFTConfig, p / "config.yaml")
            run_cfg = TrainConfig(model=sft.model, env=sft.env, eval=sft.eval)
        return str(p / "model"), run_cfg
    if (p / "config.yaml").is_file() and (p / "metrics.jsonl").is_file():  # a run folder without checkpoints
        raise SeedRLError(f"run folder {spec} saved no checkpoint (save_every=0, or it was stopped before its "
                          f"first save); evaluate a run that saves one, or its start (model.name in its config.yaml)")
    if not p.expanduser().exists() and _looks_like_path(spec):
        raise SeedRLError(f"checkpoint {spec!r} does not exist (no such folder from {Path.cwd()}); give a run "
                          f"folder, a checkpoint folder, a model folder, a hub name or a built-in model")
    return spec, None


def _numpy_globals() -> list:
    """What the RNG states of pre-manifest checkpoints need: numpy arrays and dtypes, nothing else."""
    try:
        from numpy._core.multiarray import _reconstruct
    except ImportError:  # numpy < 2
        from numpy.core.multiarray import _reconstruct
    out = [_reconstruct, np.ndarray, np.dtype, type(np.dtype(np.uint32))]
    return out


def _read(ckpt: Path, lora: bool) -> tuple[dict[str, torch.Tensor], dict[str, Any], dict[str, Any]]:
    """Weights, trainer state and ``state.json`` of ``ckpt``, read without changing anything;
    :class:`CheckpointDamaged` naming the file when one cannot be read."""
    from safetensors.torch import load_file

    problem = verify_checkpoint(ckpt)
    if problem:
        raise CheckpointDamaged(problem)
    trainable = ckpt / "trainable.safetensors"
    files = [trainable] if trainable.exists() else sorted((ckpt / "model").glob("*.safetensors"))
    if lora and not trainable.exists():
        raise SeedRLError(f"checkpoint {ckpt} has no trainable.safetensors, but the model has LoRA adapters")
    sd: dict[str, torch.Tensor] = {}
    for f in files:
        try:
            sd.update(load_file(str(f)))
        except Exception as exc:  # noqa: BLE001 - safetensors raises its own error types
            raise CheckpointDamaged(f"{f} cannot be read ({_first_line(exc)})") from None
    bad = nonfinite_weights(sd.items())
    if bad is not None:  # a diverged run's weights (saved before saves refused them): not a state to resume
        raise CheckpointDamaged(f"{ckpt} holds non-finite weights (NaN/inf in {bad[1]} tensor(s), first {bad[0]})")
    path = ckpt / "trainer.pt"
    try:
        with warnings.catch_warnings():  # a raw pickle's "Detected pickle protocol 4" warning: the line below says it
            warnings.simplefilter("ignore", UserWarning)
            if (ckpt / MANIFEST).exists():
                blob = torch.load(path, weights_only=True, map_location="cpu")
            else:
                with torch.serialization.safe_globals(_numpy_globals()):
                    blob = torch.load(path, weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as exc:
        what = refused_global(exc)
        if not what.startswith("it references"):  # a raw pickle: torch names an opcode, not the global
            name = first_pickle_global(path)
            what = f"it references {name}" if name else "a raw pickle, not torch's weights format"
        raise CheckpointDamaged(f"{path} holds more than tensors and plain data ({what}); refused, since "
                                f"unpickling it could run code") from None
    except (RuntimeError, EOFError, OSError, ValueError, AttributeError, TypeError) as exc:
        raise CheckpointDamaged(f"{path} cannot be read ({_first_line(exc)})") from None
    if not isinstance(blob, dict) or not isinstance(blob.get("optimizer"), dict) or not isinstance(blob.get("rng"), dict):
        raise CheckpointDamaged(f"{path} does not hold optimizer and RNG states")
    state = json.loads((ckpt / "state.json").read_text())  # verified above
    return sd, blob, state


def _apply(ckpt: Path, model, optimizer, scheduler, sd, blob) -> None:
    """Restore ``ckpt``'s weights, optimizer, scheduler and RNG (a sharded model: every rank loads
    the full checkpoint into its shards, see :mod:`seedrl.train.fsdp`)."""
    sharded = fsdp.is_sharded(model)
    if not (ckpt / "trainable.safetensors").exists():
        from seedrl.models.vision import is_vision_policy, saved_to_model_keys

        if is_vision_policy(model):  # save_pretrained wrote the hub layout of a VL model's names
            sd = saved_to_model_keys(sd, model)
    own = model.state_dict()  # a sharded model's DTensors report their full shapes
    wrong = [(k, tuple(v.shape), tuple(own[k].shape)) for k, v in sd.items()
             if k in own and tuple(v.shape) != tuple(own[k].shape)]
    if wrong:  # e.g. a hand-edited config.yaml that names another model: not a state_dict traceback
        k, theirs, ours = wrong[0]
        more = f" (and {len(wrong) - 1} more tensors)" if len(wrong) > 1 else ""
        raise SeedRLError(f"checkpoint {ckpt} does not fit the configured model: {k} is {list(theirs)} in the "
                          f"checkpoint, {list(ours)} in the model{more}; resume with the model the run was "
                          f"trained with")
    if (ckpt / "trainable.safetensors").exists():  # LoRA: the trainable parameters (or, before, everything)
        _, unexpected = model.load_state_dict(sd, strict=False)
        lost = sorted(n for n, p in model.named_parameters() if p.requires_grad and n not in sd)
        if lost or unexpected:
            raise SeedRLError(f"checkpoint {ckpt} does not match the model's adapters: missing {lost[:3]}, "
                              f"unexpected {list(unexpected)[:3]}")
    else:
        missing, unexpected = fsdp.load_full_state(model, sd) if sharded else model.load_state_dict(sd, strict=False)
        # tied embeddings are saved once; anything else missing is a real mismatch
        missing = [k for k in missing if not k.endswith("lm_head.weight")]
        if missing or unexpected:
            raise SeedRLError(f"checkpoint {ckpt} does not match the model: missing {missing[:3]}, "
                              f"unexpected {unexpected[:3]}")
    try:
        if sharded:
            fsdp.load_optimizer_state(model, optimizer, blob["optimizer"])
        else:
            optimizer.load_state_dict(blob["optimizer"])
        if scheduler is not None and blob.get("scheduler") is not None:
            scheduler.load_state_dict(blob["scheduler"])
        set_rng_state(blob["rng"])
    except (ValueError, KeyError, TypeError, RuntimeError) as exc:
        raise SeedRLError(f"checkpoint {ckpt}: optimizer/RNG state does not fit this run ({_first_line(exc)})") from None


def load_trainer_state(ckpt: Path, model, optimizer, scheduler=None) -> dict[str, Any]:
    """Verify ``ckpt``, then restore weights (in place), optimizer, scheduler and RNG; return
    ``state.json``. A damaged checkpoint raises :class:`CheckpointDamaged` before anything changes."""
    ckpt = Path(ckpt)
    sd, blob, state = _read(ckpt, lora=hasattr(model, "peft_config"))
    _warn_unverified(ckpt)
    _apply(ckpt, model, optimizer, scheduler, sd, blob)
    return state


def load_latest(ckpt_root: str | Path, model, optimizer, scheduler=None) -> tuple[Path, dict[str, Any]] | None:
    """Resume: remove orphaned temporary folders, then load the newest intact checkpoint.

    Damaged checkpoints are skipped with a warning; those newer than the one loaded are renamed
    ``damaged-iter_XXXXXX`` (kept for inspection, out of the way of rotation and of the next
    saves). Returns (checkpoint, state.json), None when there is no checkpoint at all, and raises
    one :class:`SeedRLError` line when none is intact."""
    root = Path(ckpt_root)
    remove_orphans(root)
    dirs = checkpoint_dirs(root)
    if not dirs:
        return None
    lora = hasattr(model, "peft_config")
    problems: list[tuple[Path, str]] = []
    for d in dirs:
        try:
            sd, blob, state = _read(d, lora)
        except CheckpointDamaged as exc:
            log.warning("checkpoint %s is damaged, skipping it: %s", d.name, exc)
            problems.append((d, str(exc)))
            continue
        _warn_unverified(d)
        _apply(d, model, optimizer, scheduler, sd, blob)
        for bad, _ in problems:
            aside = bad.with_name(f"damaged-{bad.name}")
            if aside.exists():
                shutil.rmtree(aside, ignore_errors=True)
            os.replace(bad, aside)
            log.warning("moved the damaged checkpoint %s to %s; resuming from %s", bad.name, aside.name, d.name)
        if problems:
            atomic_write(root / "latest", d.name + "\n")
        return d, state
    raise SeedRLError(f"cannot resume: no intact checkpoint in {root}: " + "; ".join(p for _, p in problems))


# ------------------------------------------------------------------------------------ row files
def cut_rows(path: str | Path, iteration: int) -> int:
    """Keep the JSONL rows of ``path`` whose ``iteration`` is <= ``iteration`` (rewritten atomically).

    A torn last line (a write cut by a kill) is dropped with a warning; an unreadable line
    elsewhere is real damage: one :class:`SeedRLError` line naming the file and line. Returns the
    number of rows kept."""
    path = Path(path)
    if not path.exists():
        return 0
    lines = path.read_text(errors="replace").split("\n")
    complete = lines[:-1]  # a well-formed file ends with "\n": the last piece is empty
    tail = lines[-1]
    rows: list[str] = []
    changed = bool(tail.strip())
    if tail.strip():
        try:  # a whole row whose newline was not written yet
            json.loads(tail)
            complete.append(tail)
        except ValueError:
            log.warning("%s: dropping a torn last line (an interrupted write): %.80s", path, tail)
        tail = ""
    for i, ln in enumerate(complete, 1):
        if not ln.strip():
            changed = True
            continue
        try:
            row = json.loads(ln)
        except ValueError:
            if i == len(complete) and not tail.strip():
                log.warning("%s: dropping a torn last line (an interrupted write): %.80s", path, ln)
                changed = True
                continue
            raise SeedRLError(f"{path}: line {i} is not JSON (the file is damaged; repair or remove that line)") from None
        if isinstance(row, dict) and row.get("iteration", 0) > iteration:
            changed = True
            continue
        rows.append(ln)
    if changed:
        atomic_write(path, "".join(r + "\n" for r in rows))
    return len(rows)


def fsync_file(path: str | Path) -> None:
    """Flush a file appended to (metrics rows) to disk."""
    if Path(path).exists():
        fsync_path(Path(path))
