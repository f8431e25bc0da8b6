"""A run's evaluations and when they happen.

Every panel of ``eval.split_list`` (primary first) is evaluated with plain prompts, never a skill, at
iteration 0 (:func:`evaluates_first`; results measured for the same initial policy may be reused), every
``eval.every`` iterations (:func:`evaluates_now`) and at the end (:func:`evaluates_last`); each result is
written as ``eval/<tag>_<split>.json``. ``eval.num_tasks: 0`` turns evaluation off. The checkpoint
schedule (:func:`saves_now`) keeps the same rhythm beside it."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from seedrl.config import TrainConfig
from seedrl.envs.panels import Panel
from seedrl.eval.evaluate import evaluate
from seedrl.fileio import atomic_write

log = logging.getLogger(__name__)


def evaluates_first(cfg: TrainConfig, iteration: int) -> bool:
    """The run evaluates its starting policy (``iteration`` 0)."""
    return iteration == 0 and cfg.eval.num_tasks != 0


def evaluates_now(cfg: TrainConfig, iteration: int) -> bool:
    """The run evaluates after ``iteration`` (every ``eval.every``; the last one: :func:`evaluates_last`)."""
    return bool(cfg.eval.every and cfg.eval.num_tasks != 0 and iteration % cfg.eval.every == 0
                and iteration < cfg.iterations)


def evaluates_last(cfg: TrainConfig, iteration: int) -> bool:
    """The run evaluates its final policy (``iteration`` reached ``iterations``)."""
    return iteration >= cfg.iterations and cfg.eval.num_tasks != 0


def saves_now(cfg: TrainConfig, iteration: int) -> bool:
    """The run checkpoints after ``iteration`` (every ``save_every``, and the last one)."""
    return bool(cfg.save_every and (iteration % cfg.save_every == 0 or iteration == cfg.iterations))


def eval_metrics(results: dict[str, dict[str, Any]]) -> dict[str, float]:
    """What an evaluation adds to its iteration's metrics row: the primary panel's success rate and
    each panel's."""
    return ({"eval/success_rate": next(iter(results.values()))["success_rate"]}
            | {f"eval/{s}/success_rate": r["success_rate"] for s, r in results.items()})


class Evaluator:
    """Evaluates the policy behind ``backend`` on ``panels`` ({split: panel}, primary first) as ``cfg``
    says, writing the results under ``run_dir/eval``."""

    def __init__(self, cfg: TrainConfig, backend: Any, tokenizer: Any, panels: dict[str, Panel],
                 run_dir: Path) -> None:
        self.cfg, self.backend, self.tokenizer, self.panels, self.run_dir = cfg, backend, tokenizer, panels, run_dir

    def warn_oversized(self) -> None:
        """A warning for each panel smaller than ``eval.num_tasks`` (``subset()`` plays all of its tasks)."""
        n = self.cfg.eval.num_tasks
        for split, panel in self.panels.items():
            if n and n > len(panel.task_ids):
                log.warning("eval.num_tasks=%d is more than the %d tasks of %s/%s; evaluating all %d "
                            "(eval.panel_size=N builds larger panels)",
                            n, len(panel.task_ids), self.cfg.env.name, split, len(panel.task_ids))

    def run(self, tag: str, iteration: int) -> dict[str, dict[str, Any]]:
        """Evaluate the current policy on every panel of ``eval.split_list`` (plain prompts, never a
        skill); write ``eval/<tag>_<split>.json`` each; return {split: result}, primary first."""
        c = self.cfg
        out = {}
        for split, panel in self.panels.items():
            res = evaluate(self.backend, self.tokenizer, panel, max_steps=c.eval.max_steps or c.env.max_steps,
                           history_length=c.env.history_length, max_new_tokens=c.rollout.max_new_tokens,
                           max_prompt_tokens=c.rollout.max_prompt_tokens, greedy=c.eval.greedy,
                           temperature=c.eval.temperature, batch_size=c.eval.batch_size, seed=c.seed,
                           num_tasks=c.eval.num_tasks, step_timeout_s=c.env.step_timeout_s,
                           env_workers=c.env.workers, executor=c.env.executor,
                           ray_address=c.env.ray_address)
            res["iteration"] = iteration
            out[split] = res
        self.write(tag, out)
        return out

    def initial(self, reuse: dict[str, dict[str, Any]] | None) -> dict[str, dict[str, Any]]:
        """The iteration-0 evaluation; ``reuse`` = results already measured for this exact initial
        policy and panels (``seedrl compare`` shares them between the methods of a seed)."""
        played = {s: p.subset(self.cfg.eval.num_tasks) for s, p in self.panels.items()}
        if reuse is not None and all(s in reuse and played[s].matches(reuse[s].get("panel_hash"))
                                     for s in self.panels):
            out = {s: dict(reuse[s], iteration=0, reused=True) for s in self.panels}
            self.write("iter_000000", out)
            return out
        return self.run("iter_000000", 0)

    def write(self, tag: str, results: dict[str, dict[str, Any]]) -> None:
        (self.run_dir / "eval").mkdir(exist_ok=True)
        for split, res in results.items():
            atomic_write(self.run_dir / "eval" / f"{tag}_{split}.json", json.dumps(res, indent=1))
