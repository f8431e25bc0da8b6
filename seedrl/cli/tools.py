"""`seedrl envs`, `seedrl play`, `seedrl env` and `seedrl demo`: the environments, versions, the demo."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from seedrl.cli.common import SET_HELP, _fail, _setup_logging, app, console
from seedrl.envs.registry import DEFAULT_ENV
from seedrl.errors import SeedRLError


@app.command()
def envs() -> None:
    """List environments and their panels (size and content hash)."""
    from rich.table import Table

    from seedrl.envs.panels import build_panel
    from seedrl.envs.registry import env_class, env_names

    table = Table("env", "split", "tasks", "hash", "first task ids")
    for name in env_names():
        try:
            cls = env_class(name)
            for split in cls.splits:
                p = build_panel(name, split)
                table.add_row(name, split, str(len(p)), p.hash, ", ".join(p.task_ids[:3]))
        except Exception as exc:  # an env whose package is missing is listed, not fatal
            table.add_row(name, "-", "-", "-", f"unavailable: {exc}")
    console.print(table)


@app.command()
def play(env: str = typer.Option(DEFAULT_ENV, "--env"),
         task: Optional[str] = typer.Option(None, "--task", help="task id (default: first of the panel)"),
         split: str = typer.Option("valid_seen", "--split"),
         env_kwargs: Optional[str] = typer.Option(None, "--env-kwargs", help="env options as YAML, e.g. "
                                                  "'{dim: [5, 5], coords: true}'"),
         max_steps: int = typer.Option(50, "--max-steps")) -> None:
    """Play an environment yourself in the terminal (type 'expert' for a hint, 'quit' to stop)."""
    try:
        from seedrl.config import parse_yaml_value
        from seedrl.envs.panels import build_panel
        from seedrl.envs.registry import make_env

        if max_steps < 1:
            raise SeedRLError(f"--max-steps must be at least 1, got {max_steps}")
        kwargs = (parse_yaml_value(env_kwargs, "--env-kwargs") or {}) if env_kwargs else {}
        if not isinstance(kwargs, dict):
            raise SeedRLError(f"--env-kwargs must be a YAML mapping, got {env_kwargs!r}")
        e = make_env(env, **kwargs)
        task_id = task or build_panel(env, split, **kwargs).task_ids[0]
        obs = e.reset(task_id)
    except SeedRLError as exc:
        _fail(exc)
        return
    console.print(f"[bold]{env}[/] task {escape(task_id)}\nYour task is to: {escape(e.task_description)}\n")
    console.print(obs, highlight=False, markup=False)
    step, done, failed = 0, False, False
    while step < max_steps:  # a hint ('expert') is not a step
        adm = e.admissible_actions()
        if adm:
            console.print(f"[dim]actions: {escape(', '.join(adm))}[/]", highlight=False)
        try:
            action = input(f"[{step + 1}]> ").strip()
        except EOFError:
            break
        if action in ("quit", "exit"):
            break
        if action == "expert":
            console.print(f"expert: {e.expert_action()}", markup=False)
            continue
        step += 1
        try:
            obs, reward, done, info = e.step(action)
        except Exception as exc:  # an engine fault ends the episode, as it does in a rollout
            typer.echo(f"error: the environment failed: {type(exc).__name__}: {exc}", err=True)
            failed = True
            break
        console.print(obs, highlight=False, markup=False)
        if not info.get("action_valid", True):
            console.print("[yellow]invalid action[/]")
        if done:
            console.print(f"[bold]{'won' if info.get('won') else 'episode over'}[/] (reward {reward})")
            break
    if step >= max_steps and not done:
        console.print(f"[bold]step limit reached[/] ({max_steps} steps; --max-steps sets it)")
    e.close()
    if failed:
        raise typer.Exit(1)  # the session ended on an env fault, not by the player


@app.command("env")
def env_info() -> None:
    """Versions of everything that matters, for bug reports."""
    import importlib.metadata as md
    import platform

    import torch

    import seedrl
    from seedrl.models.precision import device_capability

    lines = [f"seedrl {seedrl.__version__}", f"python {sys.version.split()[0]} ({platform.platform()})",
             f"torch {torch.__version__} (cuda available: {torch.cuda.is_available()}, threads: "
             f"{torch.get_num_threads()})", f"compute: {device_capability('cpu').description}"
             + (f"; {device_capability('cuda').description}" if torch.cuda.is_available() else "")]
    from seedrl.envs.registry import env_class, env_names

    env_packages: set[str] = set()
    for name in env_names():  # the packages each environment runs on
        try:
            env_packages |= set(env_class(name).packages)
        except Exception:  # an env module that cannot even be imported is reported by `seedrl envs`
            pass
    for pkg in ("transformers", "tokenizers", "peft", "accelerate", "pydantic", "typer", *sorted(env_packages),
                "wandb"):
        try:
            lines.append(f"{pkg} {md.version(pkg)}")
        except md.PackageNotFoundError:
            lines.append(f"{pkg} not installed")
    console.print("\n".join(lines), highlight=False)


@app.command()
def demo(out: Path = typer.Option(Path("runs/demo"), "--out"),
         config: Path = typer.Option(Path("configs/demo_sokoban.yaml"), "--config"),
         sft_config: Path = typer.Option(Path("configs/demo_sokoban_sft.yaml"), "--sft-config"),
         set_: Optional[list[str]] = typer.Option(None, "--set", help=SET_HELP)) -> None:
    """Tiny model -> SFT warm start on expert demos -> GRPO on sokoban; success before/after RL."""
    _setup_logging(False)
    try:
        from seedrl.demo import run_demo

        run_demo(out, config, sft_config, set_ or [], console)
    except SeedRLError as exc:
        _fail(exc)

