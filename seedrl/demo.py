"""`make demo`: the whole pipeline on a laptop CPU in about ten minutes.

tiny model built from config -> SFT warm start on expert (BFS solver) demonstrations -> RL on
sokoban with the recipe of ``configs/demo_sokoban.yaml`` (GRPO whose every update also replays expert
demonstrations, ``algo.replay_coef``) -> success on the fixed valid panel before and after RL, with 95%
intervals, written to ``<out>/results.json`` and ``<out>/results.md``. The RL stage is named by its
recipe (:func:`rl_stage`): most of its gain on this start comes from the replay, not from the reward.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from seedrl.config import SFTConfig, TrainConfig, load_config
from seedrl.experiments.stats import mcnemar_exact
from seedrl.provenance import git_commit
from seedrl.train.sft import run_sft
from seedrl.train.trainer import Trainer


def rl_recipe(cfg: TrainConfig) -> str:
    """What the RL stage runs, in words: the method, and the replay of expert demonstrations where the
    update has one (``algo.replay_coef`` > 0; with the policy gradient off, ``algo.pos_adv_coef =
    neg_adv_coef = 0``, the replay alone)."""
    a = cfg.algo
    replay = f"expert replay (replay_coef {a.replay_coef})"
    if a.replay_coef > 0 and a.pos_adv_coef == 0 and a.neg_adv_coef == 0:
        return f"{replay} alone, {a.name.upper()}'s policy gradient off"
    return a.name.upper() + (f" + {replay}" if a.replay_coef > 0 else "")


def rl_stage(cfg: TrainConfig) -> str:
    """The RL stage's row in the results table, named by its recipe (:func:`rl_recipe`)."""
    return f"after {cfg.iterations} iterations of {rl_recipe(cfg)}"


def run_demo(out: Path, config: Path, sft_config: Path, overrides: list[str], console: Console) -> dict:
    t_start = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    sft_cfg = load_config(SFTConfig, sft_config, [f"run_dir={out / 'sft'}"])
    console.rule("1/2  SFT warm start on expert demonstrations")
    t0 = time.perf_counter()
    sft = run_sft(sft_cfg)
    sft_s = time.perf_counter() - t0
    console.print(f"{sft['examples']} examples, {sft['steps']} steps, loss {sft['loss_first']:.3f} -> "
                  f"{sft['loss_last']:.3f} in {sft_s:.0f}s")

    cfg = load_config(TrainConfig, config, [f"run_dir={out / 'grpo'}", f"model.name={out / 'sft' / 'model'}",
                                            *overrides])
    console.rule(f"2/2  RL: {rl_recipe(cfg)}")
    t0 = time.perf_counter()
    trainer = Trainer(cfg, resume=False)
    summary = trainer.train()
    rl_s = time.perf_counter() - t0
    before, after = summary["eval_before"], summary["eval_after"]
    result = {
        "commit": git_commit(), "seconds_total": time.perf_counter() - t_start, "seconds_sft": sft_s,
        "seconds_rl": rl_s, "rl_iterations": cfg.iterations, "rl_stage": rl_stage(cfg),
        "panel": f"{before['env']}/{before['split']}",
        "panel_hash": before["panel_hash"], "num_tasks": before["num_tasks"],
        "success_before_rl": before["success_rate"], "ci95_before_rl": before["ci95"],
        "success_after_rl": after["success_rate"], "ci95_after_rl": after["ci95"],
        "invalid_rate_before_rl": before["invalid_rate"], "invalid_rate_after_rl": after["invalid_rate"],
    }
    # paired view: the same tasks before and after, so flips are the evidence, not two noisy rates
    won_before = {t["task_id"] for t in before["tasks"] if t["won"]}
    won_after = {t["task_id"] for t in after["tasks"] if t["won"]}
    result["tasks_won_only_before_rl"] = len(won_before - won_after)
    result["tasks_won_only_after_rl"] = len(won_after - won_before)
    result["mcnemar_p"] = mcnemar_exact(result["tasks_won_only_before_rl"], result["tasks_won_only_after_rl"])
    (out / "results.json").write_text(json.dumps(result, indent=1))
    table = Table(title=escape(f"{result['panel']} [panel {result['panel_hash']}], {result['num_tasks']} tasks, "
                               f"greedy"))
    for col in ("stage", "success", "95% CI", "invalid-action rate"):
        table.add_column(col)
    rows = [("after SFT, before RL", before), (rl_stage(cfg), after)]
    md = ["| stage | success | 95% CI | invalid-action rate |", "|---|---|---|---|"]
    for name, r in rows:
        cells = (name, f"{r['success_rate']:.3f}", f"{r['ci95'][0]:.3f}–{r['ci95'][1]:.3f}", f"{r['invalid_rate']:.3f}")
        table.add_row(*cells)
        md.append("| " + " | ".join(cells) + " |")
    flips = (f"paired on the same {result['num_tasks']} tasks: {result['tasks_won_only_after_rl']} won only after "
             f"RL, {result['tasks_won_only_before_rl']} won only before (exact McNemar p = {result['mcnemar_p']:.3g})")
    (out / "results.md").write_text("\n".join(md) + f"\n\n{flips}; commit {result['commit']}, "
                                    f"{result['seconds_total']:.0f} s total\n")
    console.print(table)
    console.print(flips)
    console.print(f"total {result['seconds_total']:.0f}s (SFT {sft_s:.0f}s, RL {rl_s:.0f}s); results in {out}")
    return result
