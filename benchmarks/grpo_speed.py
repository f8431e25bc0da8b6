"""Episodes per CPU-second of an RL iteration, before and after the speed options.

    python benchmarks/grpo_speed.py --config configs/sokoban_grpo.yaml --iterations 4 \\
        --set model.name=runs/demo/sft/model --set env.train_split=valid_seen --set env.train_size=32

Runs ``--iterations`` of the config twice from the same start and seed (so both play the same tasks
while their policies agree): ``baseline`` with every log-prob pass computed as before
(``optim.old_logp=recompute``, ``optim.dedupe=false``) and ``fast`` with the generator's
log-probs as the PPO ratio's denominator and each distinct (prompt, response) pair scored once
(``optim.old_logp=rollout``, ``optim.dedupe=true``): the update itself is the same. ``fast+split``
adds ``optim.split_distinct`` (every copy of a sample in one mini-batch: each distinct sample runs
once per epoch; another split of the same batch, so not the same update bit for bit). ``+prefix``
adds ``optim.shared_prefix`` (each prompt prefix that samples share run once, in the scoring passes and
the update's forward/backward: the same log-probs and gradients up to float rounding); ``+gen`` adds
``rollout.shared_prefix`` (the prompts' common head run once in generation: the same tokens up to float
rounding). ``fast+split+prefix+vllm`` rolls out (and SEED's policy analyses) through an in-process vLLM
engine instead (``rollout.backend=vllm``; run the script in ``.venv-vllm``), with the old log-probs
recomputed (the config refuses an engine's as the ratio's denominator): its ``sync`` column is the
weight copy into the engine after each update; the engine's start (~8 s, once a run) is in no column.
Prints the
per-stage seconds per iteration, episodes per second and the speed-up as a markdown block for
benchmarks/RESULTS.md. Run it on a quiet machine: a second process on two cores halves either number.

    python benchmarks/grpo_speed.py ... --seed configs/sokoban_seed.yaml --summary benchmarks/results/speed/summary.json

also runs the SEED twin (that config with the same ``--set`` overrides and ``skills.analyzer=self``: the
policy writes its skills) with the last variant's options and writes the issue-44 summary: ``grpo_speedup`` (episodes/s of the last variant over
``baseline``), ``seed_over_grpo`` (a SEED iteration's seconds over the same variant's GRPO iteration),
``cpu`` (model name and capability), the command, the commit and every variant's stage table.
``--seed-model PATH`` runs that pair, the SEED twin and a GRPO twin of the last variant, from a Stage-1
start that writes skills (README, "SEED on a CPU"): a start that never closes a skill's JSON runs every
analysis to ``skills.max_new_tokens`` and writes no skill, so the teacher re-scores nothing, which is not
the cost of SEED. The table then also shows the analyzer's parse rate and answer length.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch

from seedrl.config import TrainConfig, load_config
from seedrl.experiments.compare import git_state, machine_info, weight_fingerprint
from seedrl.train.trainer import Trainer

#: "sync": copying the weights into a vLLM engine after the update (nothing to copy with the hf backend)
STAGES = ("rollout", "old_logp", "ref_logp", "analysis", "rescore", "advantage", "update", "sync")
VARIANTS = {
    "baseline": ["optim.old_logp=recompute", "optim.dedupe=false"],
    "fast": ["optim.old_logp=rollout", "optim.dedupe=true"],
    "fast+split": ["optim.old_logp=rollout", "optim.dedupe=true", "optim.split_distinct=true"],
    "fast+split+prefix": ["optim.old_logp=rollout", "optim.dedupe=true", "optim.split_distinct=true",
                          "optim.shared_prefix=true"],
    "fast+split+prefix+gen": ["optim.old_logp=rollout", "optim.dedupe=true", "optim.split_distinct=true",
                              "optim.shared_prefix=true", "rollout.shared_prefix=true"],
    # rollouts (and SEED's self-analyses) through an in-process vLLM engine: run in .venv-vllm; the trainer
    # recomputes the old log-probs (it does not take an engine's as the PPO ratio's denominator)
    "fast+split+prefix+vllm": ["optim.old_logp=recompute", "optim.dedupe=true", "optim.split_distinct=true",
                               "optim.shared_prefix=true", "rollout.backend=vllm"],
}
SEED = ["algo.name=seed", "skills.analyzer=self"]


def cpu_name() -> str:
    """The CPU's model name and what it computes natively (the compare report's ``machine_info``)."""
    m = machine_info()
    return f"{m['cpu_model'] or m['processor']}; {m['cpu_bf16']}"


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
    # what the update had to do: variants whose rollouts sample other tokens (another backend) play other
    # episodes, of other lengths, from the first update on
    out["samples"] = sum(r.get("rollout/samples", 0) for r in rows) / n
    out["success_rate"] = sum(r.get("rollout/success_rate", 0.0) for r in rows) / n
    if any("skills/parse_rate" in r for r in rows):  # a SEED run: did the analyzer write skills, and how long
        out["parse_rate"] = sum(r.get("skills/parse_rate", 0.0) for r in rows) / n
        answers = sum(r["sampling/episodes"] for r in rows)
        out["completion_tokens"] = sum(r.get("skills/completion_tokens", 0) for r in rows) / answers
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--iterations", type=int, default=4)
    ap.add_argument("--set", action="append", default=[], dest="overrides")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, from: " + ", ".join(VARIANTS))
    ap.add_argument("--seed", metavar="CONFIG", help="also time this SEED twin (self-analyzer) on the last variant")
    ap.add_argument("--seed-model", metavar="PATH",
                    help="run the SEED twin, and a GRPO twin of the last variant to divide it by, from this model "
                         "(a Stage-1 start that writes skills); without it both come from --set model.name")
    ap.add_argument("--summary", type=Path, help="write the speed summary JSON here")
    args = ap.parse_args()
    names = args.variants.split(",")
    if args.seed_model and not args.seed:
        ap.error("--seed-model names the start of the SEED twin: give --seed CONFIG as well")
    if unknown := [n for n in names if n not in VARIANTS]:
        ap.error(f"unknown variant(s) {', '.join(unknown)}; valid: {', '.join(VARIANTS)}")
    cfg = load_config(TrainConfig, args.config, args.overrides)
    episodes = cfg.rollout.tasks_per_batch * cfg.rollout.group_size
    runs = {name: (args.config, VARIANTS[name]) for name in names}
    stage1 = [f"model.name={args.seed_model}"] if args.seed_model else []
    grpo_twin = f"grpo, Stage-1 start ({names[-1]})" if args.seed_model else names[-1]
    if args.seed and args.seed_model:
        runs[grpo_twin] = (args.config, [*VARIANTS[names[-1]], *stage1])
    if args.seed:
        runs[f"seed ({names[-1]})"] = (args.seed, [*VARIANTS[names[-1]], *SEED, *stage1])
    res = {}
    for name, (path, extra) in runs.items():
        rows = run(path, args.iterations, [*args.overrides, *extra])  # extra last: the Stage-1 start wins
        for r in rows:
            r.setdefault("sampling/episodes", episodes)
        res[name] = summarize(rows)
    git = git_state()
    commit = git["commit"] + ("-dirty" if git["dirty"] else "")
    start = Path(cfg.model.name)
    start_sha = weight_fingerprint(start)[0] if start.is_dir() else None  # None: a built-in tiny model
    command = "python " + " ".join(sys.argv)
    print(f"command: {command}\ncommit: {commit}\nstart: {cfg.model.name} (sha256 {start_sha})\nmachine: "
          f"{cpu_name()}, torch {torch.__version__}, {torch.get_num_threads()} thread(s)\n")
    print("| variant | " + " | ".join(STAGES) + " | total s/iter | episodes/s | samples/iter | distinct samples "
          "| success |")
    print("|---" * (len(STAGES) + 6) + "|")
    for name, r in res.items():
        print(f"| {name} | " + " | ".join(f"{r[s]:.2f}" for s in STAGES)
              + f" | {r['total']:.2f} | {r['episodes_per_s']:.2f} | {r['samples']:.0f} | {r['unique_sample_frac']:.2f} "
                f"| {r['success_rate']:.2f} |")
    base = res.get("baseline")
    for name in [n for n in names if n != "baseline"] if base else []:
        print(f"\nspeed-up (episodes/s, {name} / baseline): {res[name]['episodes_per_s'] / base['episodes_per_s']:.2f}x")
    seed = res.get(f"seed ({names[-1]})")
    seed_sha = weight_fingerprint(Path(args.seed_model))[0] if args.seed_model else start_sha
    if seed:
        print(f"\nseed / grpo seconds per iteration ({grpo_twin}; start sha256 {seed_sha}): "
              f"{seed['total'] / res[grpo_twin]['total']:.2f}x; the analyzer parsed {seed['parse_rate']:.2f} of its "
              f"answers, {seed['completion_tokens']:.0f} tokens each on average")
    if args.summary:
        args.summary.parent.mkdir(parents=True, exist_ok=True)
        out = {"grpo_speedup": res[names[-1]]["episodes_per_s"] / base["episodes_per_s"] if base else None,
               "seed_over_grpo": seed["total"] / res[grpo_twin]["total"] if seed else None,
               "seed_start_sha256": seed_sha if seed else None,
               "cpu": cpu_name(), "torch_threads": torch.get_num_threads(), "command": command,
               "commit": commit, "start_sha256": start_sha, "iterations": args.iterations, "variants": res}
        args.summary.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
