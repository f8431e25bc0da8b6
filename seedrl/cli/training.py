"""`seedrl train`, `seedrl sft` and `seedrl analyze` (SEED Stage 1: data for `seedrl sft --data`)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from seedrl.cli.common import (
    MODEL_HELP,
    SET_HELP,
    _check_jsonl,
    _check_run_dir,
    _check_temperature,
    _fail,
    _setup_logging,
    _with_model,
    app,
    console,
)
from seedrl.errors import SeedRLError


@app.command()
def train(config: Path = typer.Option(..., "--config", "-c", help="YAML preset, e.g. configs/sokoban_grpo.yaml"),
          set_: Optional[list[str]] = typer.Option(None, "--set", help=SET_HELP),
          model: Optional[str] = typer.Option(None, "--model", help=MODEL_HELP),
          resume: bool = typer.Option(False, "--resume", help="Continue from the run's latest checkpoint."),
          verbose: bool = typer.Option(False, "--verbose", "-v")) -> None:
    """RL training (rollout -> advantages -> PPO update -> eval -> checkpoint)."""
    _setup_logging(verbose)
    try:
        from seedrl.config import TrainConfig, load_config

        cfg = load_config(TrainConfig, config, _with_model(set_, model))
        _check_run_dir(cfg.run_dir)
        from seedrl.train.trainer import Trainer  # torch: after the cheap checks

        trainer = Trainer(cfg, resume=resume)
        console.print(trainer.precision.describe(), markup=False)
        summary = trainer.train()
    except SeedRLError as exc:
        _fail(exc)
        return
    for k in ("eval_before", "eval_after"):
        if k in summary:
            r = summary[k]
            console.print(f"{k}: success {r['success_rate']:.3f} (95% CI {r['ci95'][0]:.3f}-{r['ci95'][1]:.3f}) "
                          f"on {r['num_tasks']} tasks of {r['env']}/{r['split']} [panel {r['panel_hash']}]", markup=False)
    console.print(f"run folder: {cfg.run_dir}")


@app.command()
def sft(config: Optional[Path] = typer.Option(None, "--config", "-c", help="YAML SFT preset"),
        data: Optional[Path] = typer.Option(None, "--data", help="JSONL of {messages|prompt, response}; "
                                            "default: expert demonstrations from the env"),
        set_: Optional[list[str]] = typer.Option(None, "--set", help=SET_HELP),
        model: Optional[str] = typer.Option(None, "--model", help=MODEL_HELP),
        verbose: bool = typer.Option(False, "--verbose", "-v")) -> None:
    """Supervised fine-tuning (warm start on expert demonstrations, or a JSONL dataset)."""
    _setup_logging(verbose)
    try:
        from seedrl.config import SFTConfig, load_config

        overrides = _with_model(set_, model) + ([f"data={data}"] if data else [])
        cfg = load_config(SFTConfig, config, overrides)
        _check_run_dir(cfg.run_dir)
        if cfg.data:
            _check_jsonl(cfg.data)
        from seedrl.train.sft import run_sft  # torch: after the cheap checks

        summary = run_sft(cfg)
    except SeedRLError as exc:
        _fail(exc)
        return
    console.print(f"{summary['examples']} examples, {summary['steps']} steps, loss {summary['loss_first']:.3f} -> "
                  f"{summary['loss_last']:.3f}; model saved to {cfg.run_dir}/model")
    if "eval_after" in summary:
        r = summary["eval_after"]
        console.print(f"success {r['success_rate']:.3f} (95% CI {r['ci95'][0]:.3f}-{r['ci95'][1]:.3f}) on "
                      f"{r['num_tasks']} tasks of {r['env']}/{r['split']}")


@app.command()
def analyze(out: Path = typer.Option(..., "--out", help="JSONL of (analysis prompt -> skill JSON) pairs"),
            config: Optional[Path] = typer.Option(None, "--config", "-c", help="YAML preset (env, model, skills)"),
            env: Optional[str] = typer.Option(None, "--env"),
            model: Optional[str] = typer.Option(None, "--model", help=MODEL_HELP),
            analyzer: str = typer.Option("oracle", "--analyzer", help="oracle | api | self"),
            tasks: int = typer.Option(180, "--tasks", help="train tasks to play"),
            task_sampling: str = typer.Option("per_type", "--task-sampling", help="per_type: as many tasks of "
                                              "each task type as possible, seeded (SEED: 30 of each ALFWorld "
                                              "type); first: the first --tasks in panel order (earlier data)"),
            skip_tasks: int = typer.Option(0, "--skip-tasks", help="start after this many train tasks (e.g. the "
                                           "warm start's demonstration tasks, which it plays far better than RL's)"),
            rollouts: int = typer.Option(8, "--rollouts", help="rollouts per task"),
            temperature: Optional[float] = typer.Option(None, "--temperature", help="sampling temperature of the "
                                                        "played trajectories (default: the config's RL rollout "
                                                        "temperature, so the data holds the failures RL meets)"),
            min_failure_frac: float = typer.Option(0.0, "--min-failure-frac", help="keep at least this share of "
                                                   "failed trajectories among the rows (successes are dropped)"),
            max_failure_frac: float = typer.Option(1.0, "--max-failure-frac", help="keep at most this share of "
                                                   "failed trajectories among the rows (failures are dropped)"),
            max_target_tokens: Optional[int] = typer.Option(None, "--max-target-tokens", help="drop answers longer "
                                                            "than this (default: half of skills.max_new_tokens)"),
            set_: Optional[list[str]] = typer.Option(None, "--set", help=SET_HELP),
            verbose: bool = typer.Option(False, "--verbose", "-v")) -> None:
    """SEED Stage 1: label the policy's trajectories with an analyzer, for `seedrl sft --data`."""
    _setup_logging(verbose)
    try:
        from seedrl.config import TrainConfig, load_config

        for flag, value in (("--tasks", tasks), ("--rollouts", rollouts), ("--max-target-tokens", max_target_tokens)):
            if value is not None and value < 1:
                raise SeedRLError(f"{flag} must be at least 1, got {value}")
        if skip_tasks < 0:
            raise SeedRLError(f"--skip-tasks must be 0 or more, got {skip_tasks}")
        if temperature is not None and temperature <= 0:
            raise SeedRLError(f"--temperature must be > 0 (the trajectories are sampled), got {temperature}")
        if temperature is not None:
            _check_temperature(temperature)
        if out.is_dir():
            raise SeedRLError(f"--out {str(out)!r} is a folder; give a file path such as data/skills.jsonl")
        overrides = _with_model(set_, model) + [f"skills.analyzer={analyzer}"] + ([f"env.name={env}"] if env else [])
        cfg = load_config(TrainConfig, config, overrides)
        from seedrl.train.stage1 import run_analyze  # torch: after the cheap checks

        s = run_analyze(cfg, out, tasks, rollouts, temperature, min_failure_frac=min_failure_frac,
                        max_failure_frac=max_failure_frac,
                        max_target_tokens=max_target_tokens, skip_tasks=skip_tasks, task_sampling=task_sampling)
        if not s["kept"]:
            raise SeedRLError(_why_none_kept(s, out))
    except SeedRLError as exc:
        _fail(exc)
        return
    console.print(f"{s['kept']}/{s['trajectories']} trajectories labelled by {s['analyzer']} at temperature "
                  f"{s['temperature']} (policy success {s['success_rate']:.3f}; rows {s['failure_frac']:.2f} failures; "
                  f"{s['unparsed']} without a skill, {s['too_long']} answers over {s['max_target_tokens']} tokens; "
                  f"tasks per type {s['task_types']}) -> {out}", markup=False)
    if s["tasks"] < tasks:
        typer.echo(f"warning: --tasks {tasks} is more than the {s['tasks']} tasks of {s['panel']} after "
                   f"--skip-tasks {s['skip_tasks']}; played all {s['tasks']} (a generated env takes --set "
                   f"env.train_size=N for more)", err=True)
    if s["failure_frac_note"]:
        typer.echo(f"warning: {s['failure_frac_note']}", err=True)


def _why_none_kept(s: dict, out: Path) -> str:
    """Why `seedrl analyze` wrote no row, and what to change."""
    n = s["trajectories"]
    if not n:
        return (f"no trajectory kept: none was played without an error, so {out} holds no row; rerun with "
                f"--verbose to see why, or check the env and --tasks")
    reasons = []
    if s["unparsed"]:
        reasons.append(f"{s['unparsed']} got no skill from the {s['analyzer']} analyzer (rerun with --verbose; for "
                       f"--analyzer api check the server and skills.api.*)")
    if s["too_long"]:
        reasons.append(f"{s['too_long']} answers were over {s['max_target_tokens']} tokens (raise "
                       f"--max-target-tokens)")
    return f"0 of {n} trajectories kept, so {out} holds no row: " + "; ".join(reasons or ["none had a skill"])

