"""Episodes per CPU-second of an RL iteration, before and after the speed options.

    python benchmarks/grpo_speed.py --config configs/sokoban_grpo.yaml --iterations 4 \\
        --set model.name=runs/demo/sft/model --set env.train_split=valid_seen --set env.train_size=32

Runs ``--iterations`` of the config twice from the same start and seed (so both play the same tasks
while their policies agree): ``baseline`` with every log-prob pass computed as before
(``optim.old_logp=recompute``, ``optim.dedupe=false``) and ``fast`` with the generator's
log-probs as the PPO ratio's denominator and each distinct (prompt, response) pair scored once
(``optim.old_logp=rollout``, ``optim.dedupe=true``): the update itself is the same. ``fast+split``
adds ``optim.split_distinct`` (every copy of a sample in one mini-batch: each distinct sample runs
once per epoch; another split of the same batch, so not the same update bit for bit). Prints the
per-stage seconds per iteration, episodes per second and the speed-up as a markdown block for
benchmarks/RESULTS.md. Run it on a quiet machine: a second process on two cores halves either number.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import tempfile
from pathlib import Path

import torch

from seedrl.config import TrainConfig, load_config
from seedrl.train.trainer import Trainer

STAGES = ("rollout", "old_logp", "ref_logp", "advantage", "update")
VARIANTS = {
    "baseline": ["optim.old_logp=recompute", "optim.dedupe=false"],
    "fast": ["optim.old_logp=rollout", "optim.dedupe=true"],
    "fast+split": ["optim.old_logp=rollout", "optim.dedupe=true", "optim.split_distinct=true"],
}


def run(cfg_path: str, iterations: int, overrides: list[str]) -> list[dict]:
    with tempfile.TemporaryDirectory() as d:
        cfg = load_config(TrainConfig, cfg_path, [*overrides, f"run_dir={d}", f"iterations={iterations}",
                                                   "save_every=0", "eval.num_tasks=0", "log.progress=false"])
        Trainer(cfg).train()
        return [json.loads(x) for x in (Path(d) / "metrics.jsonl").read_text().splitlines()]


def summarize(rows: list[dict]) -> dict[str, float]:
    n = len(rows)
    out = {s: sum(r.get(f"time/{s}", 0.0) for r in rows) / n for s in STAGES}
    total = sum(out.values())
    out["total"] = total
    out["episodes_per_s"] = sum(r["sampling/episodes"] for r in rows) / (total * n)
    out["unique_sample_frac"] = sum(r.get("rollout/unique_sample_frac", 1.0) for r in rows) / n
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--iterations", type=int, default=4)
    ap.add_argument("--set", action="append", default=[], dest="overrides")
    args = ap.parse_args()
    cfg = load_config(TrainConfig, args.config, args.overrides)
    episodes = cfg.rollout.tasks_per_batch * cfg.rollout.group_size
    res = {}
    for name, extra in VARIANTS.items():
        rows = run(args.config, args.iterations, [*args.overrides, *extra])
        for r in rows:
            r.setdefault("sampling/episodes", episodes)
        res[name] = summarize(rows)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"config {args.config} {' '.join('--set ' + o for o in args.overrides)}; {args.iterations} iterations "
          f"each; commit {commit}; {platform.processor() or platform.machine()}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} thread(s)\n")
    print("| variant | " + " | ".join(STAGES) + " | total s/iter | episodes/s | distinct samples |")
    print("|---" * (len(STAGES) + 4) + "|")
    for name, r in res.items():
        print(f"| {name} | " + " | ".join(f"{r[s]:.2f}" for s in STAGES)
              + f" | {r['total']:.2f} | {r['episodes_per_s']:.2f} | {r['unique_sample_frac']:.2f} |")
    for name in list(res)[1:]:
        print(f"\nspeed-up (episodes/s, {name} / baseline): "
              f"{res[name]['episodes_per_s'] / res['baseline']['episodes_per_s']:.2f}x")


if __name__ == "__main__":
    main()
