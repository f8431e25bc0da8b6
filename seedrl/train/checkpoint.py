"""Atomic checkpoints: model, optimizer, RNG states, iteration and panel position.

A checkpoint is written into a temporary folder, marked complete, then renamed into place; the
``latest`` pointer is replaced atomically afterwards. A kill at any moment therefore leaves either
the previous ``latest`` or the new one, never a half-written checkpoint that ``--resume`` would load.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from seedrl.errors import SeedRLError

COMPLETE = "COMPLETE"


def _atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)


def rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(ckpt_root: str | Path, iteration: int, model, tokenizer, optimizer, state: dict[str, Any],
                    keep: int = 2, scheduler=None) -> Path:
    """Write ``ckpt_root/iter_XXXXXX`` atomically and point ``ckpt_root/latest`` at it."""
    from seedrl.models.loading import save_model

    root = Path(ckpt_root)
    root.mkdir(parents=True, exist_ok=True)
    name = f"iter_{iteration:06d}"
    tmp = root / f".tmp-{name}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    save_model(model, tokenizer, tmp / "model")  # a plain HF folder: `seedrl eval` and `--model` load it
    if hasattr(model, "peft_config"):  # exact adapter weights for resuming LoRA runs
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(tmp / "trainable.safetensors"))
    torch.save({"optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict() if scheduler is not None else None,
                "rng": rng_state()}, tmp / "trainer.pt")
    (tmp / "state.json").write_text(json.dumps({"iteration": iteration, **state}, indent=1))
    (tmp / COMPLETE).write_text("ok\n")
    final = root / name
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    _atomic_write_text(root / "latest", name + "\n")
    for old in sorted(p for p in root.glob("iter_*") if p.is_dir())[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    return final


def latest_checkpoint(ckpt_root: str | Path) -> Path | None:
    """The checkpoint ``latest`` points at, if it is complete; else the newest complete one."""
    root = Path(ckpt_root)
    pointer = root / "latest"
    if pointer.exists():
        cand = root / pointer.read_text().strip()
        if (cand / COMPLETE).exists():
            return cand
    done = sorted(p for p in root.glob("iter_*") if (p / COMPLETE).exists())
    return done[-1] if done else None


def load_trainer_state(ckpt: Path, model, optimizer, scheduler=None) -> dict[str, Any]:
    """Restore weights (in place), optimizer, scheduler and RNG; return ``state.json``."""
    if not (ckpt / COMPLETE).exists():
        raise SeedRLError(f"checkpoint {ckpt} is incomplete (no {COMPLETE} marker)")
    from safetensors.torch import load_file

    if (ckpt / "trainable.safetensors").exists():
        model.load_state_dict(load_file(str(ckpt / "trainable.safetensors")))
    else:
        sd: dict[str, torch.Tensor] = {}
        for f in sorted((ckpt / "model").glob("*.safetensors")):
            sd.update(load_file(str(f)))
        missing, unexpected = model.load_state_dict(sd, strict=False)
        # tied embeddings are saved once; anything else missing is a real mismatch
        missing = [k for k in missing if not k.endswith("lm_head.weight")]
        if missing or unexpected:
            raise SeedRLError(f"checkpoint {ckpt} does not match the model: missing {missing[:3]}, "
                              f"unexpected {unexpected[:3]}")
    blob = torch.load(ckpt / "trainer.pt", weights_only=False)
    optimizer.load_state_dict(blob["optimizer"])
    if scheduler is not None and blob.get("scheduler") is not None:
        scheduler.load_state_dict(blob["scheduler"])
    set_rng_state(blob["rng"])
    return json.loads((ckpt / "state.json").read_text())
