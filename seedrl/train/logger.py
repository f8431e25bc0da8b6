"""Metrics: one JSONL file per run, a rich progress line, optional TensorBoard and wandb."""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from seedrl.config import LogConfig
from seedrl.fileio import writing

SHOWN = ("rollout/success_rate", "rollout/invalid_rate", "loss/pg", "loss/kl", "adv/zero_frac",
         "skills/parse_rate", "loss/opd")


class MetricsLogger:
    def __init__(self, run_dir: Path, cfg: LogConfig, resume: bool = False) -> None:
        self.path = run_dir / "metrics.jsonl"
        self.eval_path = run_dir / "eval.jsonl"
        #: files whose rows carry an "iteration": cleared on a new run, cut back on resume
        self.row_files = (self.path, self.eval_path, run_dir / "skills.jsonl")
        self.cfg = cfg
        if not resume:
            for p in self.row_files:
                p.unlink(missing_ok=True)
        self.tb = None
        self.wandb = None
        if cfg.tensorboard:
            from torch.utils.tensorboard import SummaryWriter  # needs the `tensorboard` extra

            self.tb = SummaryWriter(str(run_dir / "tensorboard"))
        if cfg.wandb:
            import wandb  # the `wandb` extra

            self.wandb = wandb.init(project=cfg.wandb_project, dir=str(run_dir), resume="allow")

    def log(self, metrics: dict[str, Any]) -> None:
        # appended: a failed write leaves at most a torn last line, which a resume drops (cut_rows)
        with writing(self.path), self.path.open("a") as f:
            f.write(json.dumps(metrics) + "\n")
        step = metrics.get("iteration", 0)
        if self.tb is not None:
            for k, v in metrics.items():
                if isinstance(v, (int, float)):
                    self.tb.add_scalar(k, v, step)
        if self.wandb is not None:
            self.wandb.log({k: v for k, v in metrics.items() if not isinstance(v, list)}, step=step)

    def log_eval(self, res: dict[str, Any]) -> None:
        row = {k: v for k, v in res.items() if k != "tasks"}
        with writing(self.eval_path), self.eval_path.open("a") as f:
            f.write(json.dumps(row) + "\n")
        if self.tb is not None:
            self.tb.add_scalar(f"eval/{res['split']}/success_rate", res["success_rate"], res.get("iteration", 0))

    @contextmanager
    def progress(self, total: int, start: int):
        if not self.cfg.progress:
            yield lambda metrics: None
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      TextColumn("{task.description}"), transient=False) as prog:
            task = prog.add_task("", total=total, completed=start)

            def advance(metrics: dict[str, Any]) -> None:
                desc = "  ".join(f"{k.split('/')[-1]}={metrics[k]:.3g}" for k in SHOWN if k in metrics)
                prog.update(task, advance=1, description=desc)

            yield advance

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()
        if self.wandb is not None:
            self.wandb.finish()
