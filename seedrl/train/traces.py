"""Traces: what the policy, the teacher and the gate saw, token by token, for a few trajectories.

Per iteration, :func:`build_trace` picks ``log.trace_trajectories`` of the trajectories (a seeded
shuffle, successes and failures alternating where both exist) and records every step: the
observation, the response tokens (ids and decoded strings), the action, its validity, reward and
advantage, and per response token the student log-prob (``old_logp``: the rollout-time weights,
the trainer's recomputation), the teacher log-prob (the same weights with the skill in the prompt)
and the gate ``sigmoid(beta * (teacher - old))`` of a gated signal (SEED's OPD; at the first PPO
step the student log-prob is ``old_logp``, so this is the gate the update starts from). The
trajectory carries its skill, or the analyzer's raw answer and parse error. A step whose prompt had
images (a vision-language policy on an env with images: ``StepSample.images.raw``) also records
``frames``: each image as a base64 PNG, lossless; a frame whose longer side exceeds
:data:`MAX_FRAME_SIDE` pixels is downscaled by keeping every k-th row and column (the smallest
integer k that fits; ``frames_stride`` says k). A text step has no ``frames`` key.

:func:`write_trace` writes ``run_dir/traces/iter_XXXXXX.json`` (atomically, fsynced: it belongs to
the iteration's rows, written before its checkpoint); the file never exceeds
``log.trace_max_bytes``, frames included (steps past the budget are dropped and counted in ``steps_omitted``).
:func:`cut_traces` removes traces of iterations past a resumed checkpoint. Several processes: rank 0
writes the traces of its own trajectories only (its block of the batch's tasks).
"""

from __future__ import annotations

import base64
import io
import json
import math
import os
import random
import re
from pathlib import Path
from typing import Any

import torch

from seedrl.envs.registry import env_class
from seedrl.rollout.types import StepSample, Trajectory
from seedrl.skills.analyzers.base import AnalysisResult

TRACE_DIR = "traces"
TRACE_FORMAT = 1
#: characters kept of an observation, of an analyzer's raw answer and of a skill
MAX_OBS_CHARS = 3000
MAX_RAW_CHARS = 2000
#: pixels a traced frame keeps along its longer side; a larger frame is subsampled (every k-th row and column)
MAX_FRAME_SIDE = 512
_NAME = re.compile(r"^iter_(\d{6,})\.json$")


def trace_path(run_dir: Path, iteration: int) -> Path:
    return Path(run_dir) / TRACE_DIR / f"iter_{iteration:06d}.json"


def trace_files(run_dir: Path) -> dict[int, Path]:
    """{iteration: file} of the run's traces, in iteration order."""
    d = Path(run_dir) / TRACE_DIR
    if not d.is_dir():
        return {}
    found = {int(m.group(1)): p for p in d.iterdir() if (m := _NAME.match(p.name))}
    return dict(sorted(found.items()))


def cut_traces(run_dir: Path, iteration: int) -> int:
    """Delete the traces of iterations after ``iteration`` (and leftover temporary files); returns
    how many were deleted. A resumed run redoes those iterations and writes them again."""
    n = 0
    for it, p in trace_files(run_dir).items():
        if it > iteration:
            p.unlink(missing_ok=True)
            n += 1
    d = Path(run_dir) / TRACE_DIR
    if d.is_dir():
        for p in d.glob("*.tmp"):
            p.unlink(missing_ok=True)
    return n


def pick_trajectories(trajs: list[Trajectory], k: int, seed: int) -> list[Trajectory]:
    """``k`` trajectories in a seeded order, successes and failures alternating while both last
    (episodes that ended by an env error come last)."""
    if k <= 0:
        return []
    order = list(trajs)
    random.Random(seed).shuffle(order)
    ok = [t for t in order if t.error is None and t.steps]
    won, lost = [t for t in ok if t.won], [t for t in ok if not t.won]
    out: list[Trajectory] = []
    while (won or lost) and len(out) < k:
        for bucket in (won, lost):
            if bucket and len(out) < k:
                out.append(bucket.pop(0))
    chosen = {id(t) for t in out}
    rest = [t for t in order if id(t) not in chosen]
    return out + rest[:k - len(out)]


def _r(x: float) -> float | None:
    """4 decimals; None for a non-finite value (JSON has no NaN)."""
    return round(float(x), 4) + 0.0 if math.isfinite(float(x)) else None  # + 0.0: no "-0.0"


def frame_png(image: Any) -> tuple[str, int]:
    """``image`` (uint8 ``H x W x 3``) as a base64 PNG (lossless) and the stride it was subsampled by: 1
    unless its longer side exceeds :data:`MAX_FRAME_SIDE`."""
    import numpy as np
    from PIL import Image

    a = np.asarray(image, dtype=np.uint8)
    k = max(1, math.ceil(max(a.shape[:2]) / MAX_FRAME_SIDE))
    if k > 1:
        a = a[::k, ::k]
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(a), "RGB").save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode("ascii"), k


def _frames(s: StepSample) -> dict[str, Any]:
    """``{"frames": [...]}`` (and ``frames_stride`` where a frame was subsampled) of a step with images; {}."""
    raw = getattr(s.images, "raw", None) if s.images is not None else None
    if not raw:
        return {}
    encoded = [frame_png(im) for im in raw]
    out: dict[str, Any] = {"frames": [b for b, _ in encoded]}
    if any(k > 1 for _, k in encoded):
        out["frames_stride"] = [k for _, k in encoded]
    return out


def _step_record(s: StepSample, tokens: list[str], old: torch.Tensor | None, teacher: torch.Tensor | None,
                 gate_beta: float | None, adv: float | None) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "step": s.step, "observation": s.observation[:MAX_OBS_CHARS],
        "obs_chars": len(s.observation), "action": s.action, "action_valid": s.action_valid,
        "format_valid": s.format_valid, "reward": s.reward, "advantage": None if adv is None else _r(adv),
        "ids": list(s.response_ids), "tokens": tokens,
        "old_logp": None if old is None else [_r(v) for v in old.tolist()],
        "teacher_logp": None, "gate": None,
    } | _frames(s)
    if teacher is not None and old is not None:
        rec["teacher_logp"] = [_r(v) for v in teacher.tolist()]
        if gate_beta is not None:
            rec["gate"] = [_r(v) for v in torch.sigmoid(gate_beta * (teacher.float() - old.float())).tolist()]
    return rec


def _size(obj: Any) -> int:
    return len(_dumps(obj).encode())


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def build_trace(iteration: int, trajs: list[Trajectory], samples: list[StepSample], old_logp: list[torch.Tensor],
                adv: torch.Tensor, teacher_logp: list[torch.Tensor] | None, signal: torch.Tensor | None,
                results: list[AnalysisResult] | None, *, k: int, max_bytes: int, seed: int, tokenizer,
                gate_beta: float | None, method: str, signal_name: str,
                task_type=None) -> dict[str, Any]:
    """The trace of one iteration (see the module docstring), at most ``max_bytes`` as written by
    :func:`write_trace`. ``samples``/``old_logp``/``adv``/``teacher_logp``/``signal`` are aligned as
    in the trainer's ``UpdateBatch``; steps outside ``samples`` (empty responses, episodes ended by
    an env error) have no log-probs. ``results``: the analysis of ``trajs`` (None: no skills)."""
    index = {id(s): i for i, s in enumerate(samples)}
    by_result = {r.traj_id: r for r in results or []}
    picked = pick_trajectories(trajs, k, seed)
    head: dict[str, Any] = {"format": TRACE_FORMAT, "iteration": iteration, "method": method,
                            "signal": signal_name, "gate_beta": gate_beta, "max_bytes": max_bytes,
                            "batch_trajectories": len(trajs), "trajectories": []}
    budget = max_bytes - _size(head)
    out = []
    for n, t in enumerate(picked):
        r = by_result.get(t.traj_id)
        if results is None:
            parse = "none"
        elif r is None or not r.skill:
            parse = "error"
        else:
            parse = "parsed"
        tr: dict[str, Any] = {
            "traj_id": t.traj_id, "group_id": t.group_id, "task_id": t.task_id,
            "task_type": task_type(t.task_id) if task_type else None,
            "task": t.task_description[:MAX_OBS_CHARS], "won": t.won, "truncated": t.truncated,
            "error": t.error, "episode_reward": t.episode_reward, "num_steps": len(t.steps), "parse": parse,
            "skill": r.skill if r else None, "summary": r.summary if r else None,
            "analysis_error": r.error if r else None, "fact_agrees": r.fact_agrees if r else None,
            "raw": (r.raw or "")[:MAX_RAW_CHARS] if r and not r.skill else None,
            "step_skills": ({str(a): b for a, b in sorted(r.step_skills.items())} if r and r.step_skills else None),
            "steps_omitted": 0, "steps": [],
        }
        share = budget // max(1, len(picked) - n)  # an even share; what one leaves goes to the next
        used = _size(tr) + 1
        if used > share:
            break
        texts = tokenizer.batch_decode([[i] for s in t.steps for i in s.response_ids]) if t.steps else []
        pos = 0
        for s in t.steps:
            toks = texts[pos:pos + len(s.response_ids)]
            pos += len(s.response_ids)
            i = index.get(id(s))
            has_t = (i is not None and teacher_logp is not None and signal is not None and float(signal[i]) > 0)
            rec = _step_record(s, toks, None if i is None else old_logp[i], teacher_logp[i] if has_t else None,
                               gate_beta, None if i is None else float(adv[i]))
            size = _size(rec) + 1
            if used + size > share:
                tr["steps_omitted"] = len(t.steps) - len(tr["steps"])
                used += len(str(tr["steps_omitted"]))
                break
            tr["steps"].append(rec)
            used += size
        out.append(tr)
        budget -= used
    head["trajectories"] = out
    while _size(head) > max_bytes and out:  # the accounting above is exact up to a few digits
        last = out[-1]
        if last["steps"]:
            last["steps"].pop()
            last["steps_omitted"] += 1
        else:
            out.pop()
    return head


def write_trace(run_dir: Path, trace: dict[str, Any]) -> Path:
    """``traces/iter_XXXXXX.json``, written to a temporary file, fsynced and renamed."""
    path = trace_path(run_dir, trace["iteration"])
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    with tmp.open("w", encoding="utf-8") as f:
        f.write(_dumps(trace))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def save_iteration_trace(run_dir: Path, cfg: Any, iteration: int, trajs: list[Trajectory], samples: list[StepSample],
                         old_logp: list[torch.Tensor], adv: torch.Tensor, teacher_logp: list[torch.Tensor] | None,
                         signal: torch.Tensor | None, results: list[AnalysisResult] | None, tokenizer: Any,
                         method_signal: Any) -> Path:
    """Build (:func:`build_trace`, as the run config ``cfg`` says) and write the trace of ``iteration``."""
    trace = build_trace(iteration, trajs, samples, old_logp, adv, teacher_logp, signal, results,
                        k=cfg.log.trace_trajectories, max_bytes=cfg.log.trace_max_bytes,
                        seed=cfg.seed * 9_973 + iteration, tokenizer=tokenizer,
                        gate_beta=getattr(method_signal, "beta", None), method=cfg.algo.name,
                        signal_name=method_signal.name, task_type=env_class(cfg.env.name).task_type)
    return write_trace(run_dir, trace)


def write_skills(run_dir: Path, iteration: int, trajs: list[Trajectory], results: list[AnalysisResult]) -> None:
    """One ``skills.jsonl`` row per analysed trajectory of ``iteration``, so a run's skills can be read later."""
    by_id = {t.traj_id: t for t in trajs}
    with (run_dir / "skills.jsonl").open("a") as f:
        for r in results:
            t = by_id[r.traj_id]
            f.write(json.dumps({"iteration": iteration, "traj_id": r.traj_id, "task_id": t.task_id,
                                "success": t.won, "skill": r.skill, "summary": r.summary, "error": r.error,
                                "fact_agrees": r.fact_agrees, "raw": r.raw[:2000]}
                               | ({"step_skills": {str(k): v for k, v in sorted(r.step_skills.items())}}
                                  if r.skill and r.step_skills else {})) + "\n")
