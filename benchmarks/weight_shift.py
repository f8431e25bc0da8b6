"""How far one method's weights end from another's, against how far training moved them at all.

SEED adds a distillation term to GRPO's loss. When both cells of a comparison share model init, task
stream and seed, the distance between their checkpoints at the same iteration, set against the
distance each travelled from the start, says how much the extra term changed the update: near 0 %
means SEED *is* GRPO at that coefficient, whatever the evaluation says. A large distance does not mean the
term steered the update: once any perturbation tips one sampled action, the two runs train on different
rollouts and drift apart by as much as two GRPO seeds (benchmarks/results/sokoban_stage1f_self3/notes.md,
§ 5: runs of one seed sit 1-2 % apart while their traced rollouts match, 15-55 % once they differ).

    python benchmarks/weight_shift.py --base runs/sokoban_literate_stage1d/model \\
        runs/compare/sokoban_literate_self3/grpo-seed0 runs/compare/sokoban_literate_self3/seed-seed0

For run folders it also prints, per iteration, how many episodes the two runs played identically: from
``rollout/digests`` in ``metrics.jsonl`` (every episode), or, for runs recorded before those, from the
trajectories both traced (``traces/iter_*.json``, same ``traj_id``; a few per iteration, so a match there
does not exclude a divergence elsewhere). Where all are equal the runs still train on the same rollouts,
and the distance is the term's own effect.

Each run is a run folder (its latest intact checkpoint's model is used), a checkpoint folder or a model
folder. The first run is the reference; each further run prints ||b - a||, ||a - base||, ||b - base||
(L2 over all floating-point parameters) and the ratio ||b - a|| / ||a - base||.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path


def model_files(spec: Path) -> list[Path]:
    """The safetensors file(s) of a run folder (latest intact checkpoint), checkpoint folder or model
    folder, resolved as ``seedrl eval --checkpoint`` resolves it: ``model.safetensors``, or every shard
    that ``model.safetensors.index.json`` names (real models are saved sharded)."""
    import json

    from seedrl.errors import SeedRLError
    from seedrl.train.checkpoint import resolve_checkpoint

    try:
        path, _ = resolve_checkpoint(str(spec))
    except SeedRLError as e:  # a missing folder, a run without an intact checkpoint: one line, no traceback
        raise SystemExit(str(e)) from None
    folder = Path(path)
    if (folder / "model.safetensors").is_file():
        return [folder / "model.safetensors"]
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        missing = [s for s in shards if not (folder / s).is_file()]
        if missing:
            raise SystemExit(f"{index} names shards that are not there: {', '.join(missing)}")
        return [folder / s for s in shards]
    raise SystemExit(f"no model.safetensors (or sharded index) in {path} (resolved from {spec})")


def load_weights(spec: Path) -> dict:
    """All tensors of :func:`model_files`, shards merged into one state dict."""
    from safetensors.torch import load_file

    out: dict = {}
    for f in model_files(spec):
        out.update(load_file(f))
    return out


def l2_distance(a: dict, b: dict) -> float:
    """L2 norm of ``a - b`` over the floating-point tensors both state dicts hold (same shapes)."""
    keys = sorted(k for k in a if a[k].is_floating_point())
    missing = [k for k in keys if k not in b]
    if missing:
        raise ValueError(f"state dicts differ: {len(missing)} tensors of the first are missing, e.g. {missing[0]}")
    total = 0.0
    for k in keys:
        if a[k].shape != b[k].shape:
            raise ValueError(f"{k}: shape {tuple(a[k].shape)} vs {tuple(b[k].shape)}")
        total += float(((a[k].double() - b[k].double()) ** 2).sum())
    return math.sqrt(total)


def episodes(run: Path, source: str) -> dict[int, dict[int, object]]:
    """{iteration: {trajectory: what it played}} of a run folder from ``source``: ``digests`` (the
    ``rollout/digests`` of every episode) or ``traces`` (the traced trajectories' actions); empty for a
    model or checkpoint folder, or a run that did not record them."""
    import json

    from seedrl.experiments.compare import read_metrics
    from seedrl.train.traces import trace_files

    if source == "digests":
        return {int(m["iteration"]): dict(enumerate(m["rollout/digests"]))
                for m in read_metrics(run) if m.get("rollout/digests")}
    return {it: {t["traj_id"]: tuple(s["action"] for s in t["steps"])
                 for t in json.loads(f.read_text())["trajectories"]}
            for it, f in trace_files(run).items()}


def same_episodes(a: Path, b: Path) -> tuple[str, dict[int, tuple[int, int]]]:
    """(source, {iteration: (played identically, compared)}): every episode where both runs recorded
    digests, else the trajectories both traced."""
    from seedrl.experiments.stats import equal_per_iteration

    source = "digests" if episodes(a, "digests") and episodes(b, "digests") else "traces"
    return source, equal_per_iteration(episodes(a, source), episodes(b, source))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", type=Path, required=True, help="the model every run started from")
    ap.add_argument("runs", type=Path, nargs="+", help="reference run first, then the runs to compare with it")
    a = ap.parse_args()
    if len(a.runs) < 2:
        ap.error("give a reference run and at least one more")
    base = load_weights(a.base)
    ref_path, *others = a.runs
    ref = load_weights(ref_path)
    moved_ref = l2_distance(ref, base)
    for other in others:
        b = load_weights(other)
        d, moved = l2_distance(b, ref), l2_distance(b, base)
        ratio = f"{d / moved_ref:.2%}" if moved_ref else "undefined (a did not move)"
        print(f"{other} vs {ref_path}: ||b-a|| {d:.5f}; ||a-base|| {moved_ref:.5f}; ||b-base|| {moved:.5f}; "
              f"ratio {ratio}")
        source, same = same_episodes(ref_path, other)
        print(f"  episodes played identically ({source}), per iteration: " +
              ("; ".join(f"{it}: {k}/{n}" for it, (k, n) in same.items()) or "none recorded by both"))


if __name__ == "__main__":
    main()
