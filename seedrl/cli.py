"""The `seedrl` command."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import Optional

import click
import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperGroup

from seedrl.envs.registry import DEFAULT_ENV
from seedrl.errors import SeedRLError, describe_os_error

#: set by --verbose: a user error then also shows its traceback
_VERBOSE = False


def user_error_message(exc: BaseException) -> str | None:
    """The one line for an exception the user caused (bad config, bad YAML, a full or read-only
    disk, ...); None for anything else, which is a bug and keeps its traceback."""
    if isinstance(exc, SeedRLError):
        return str(exc)
    try:
        from pydantic import ValidationError
    except ImportError:  # pragma: no cover - pydantic is a dependency
        ValidationError = ()  # type: ignore[assignment]  # noqa: N806
    if ValidationError and isinstance(exc, ValidationError):
        parts = []
        for err in exc.errors():
            loc = ".".join(str(x) for x in err["loc"])
            parts.append(f"{loc}: {err['msg']}" if loc else err["msg"])
        return f"invalid {exc.title}: " + "; ".join(parts)
    import yaml

    if isinstance(exc, yaml.YAMLError):
        from seedrl.config import _yaml_problem

        return f"not valid YAML: {_yaml_problem(exc)}"
    if isinstance(exc, OSError):
        return describe_os_error(exc)
    from seedrl.fileio import os_error_of

    err = os_error_of(exc, None)  # a writer's full disk without an errno (safetensors' "os error 28", ...)
    return describe_os_error(err) if err is not None else None


class _OneLineErrors(TyperGroup):
    """The single place where user errors become ``error: <one line>`` on stderr with exit code 2
    (whatever the command, and whether it runs as ``seedrl`` or ``python -m seedrl.cli``); any other
    exception is a bug and shows its traceback."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except KeyboardInterrupt:
            typer.echo("interrupted (Ctrl-C); a training run continues from its last checkpoint with --resume",
                       err=True)
            raise typer.Exit(130) from None
        except Exception as exc:
            msg = user_error_message(exc)
            if msg is None:
                raise
            _fail(exc, msg)


app = typer.Typer(cls=_OneLineErrors, add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Train LLM agents with RL on multi-turn environments (GRPO, SEED).")
console = Console(highlight=False)
SET_HELP = "Override a config key, e.g. --set optim.lr=1e-5 (repeatable)."
MODEL_HELP = ("Hub name, local folder, built-in tiny-* model or packaged smollm2-135m-instruct (same as "
              "--set model.name=...).")


def _with_model(overrides: list[str] | None, model: str | None) -> list[str]:
    return list(overrides or []) + ([f"model.name={model}"] if model else [])


def _fail(exc: BaseException | str, line: str | None = None) -> None:
    """``error: <one line>`` on stderr, exit code 2; with --verbose the traceback first."""
    if _VERBOSE and isinstance(exc, BaseException) and exc.__traceback__ is not None:
        import traceback

        traceback.print_exception(exc)
    line = " ".join(str(exc if line is None else line).split())  # one plain line, never wrapped
    typer.echo(f"error: {line}", err=True)
    raise typer.Exit(2)


def _check_run_dir(run_dir: str) -> None:
    """A run folder that cannot be one fails now, before a model is built."""
    p = Path(run_dir).expanduser()
    for q in (p, *p.parents):
        if q.exists():
            if not q.is_dir():
                raise SeedRLError(f"run_dir {run_dir!r}: {str(q)!r} is a file, not a folder; remove it or choose "
                                  f"another run_dir (--set run_dir=...)")
            break


def _check_out(out: Path | None) -> None:
    """An output file that cannot be written fails now, not after the work that fills it: its folder is
    created and a probe file written there; a device or folder in its place is refused."""
    if out is None:
        return
    import tempfile

    if out.exists() and not out.is_file():
        raise SeedRLError(f"--out {str(out)!r} is {'a folder' if out.is_dir() else 'not a regular file'}; give "
                          f"a file path such as results/eval.json")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out.parent, prefix=".seedrl-probe-") as f:
            f.write(b"{}")
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise SeedRLError(f"--out {str(out)!r} cannot be written: {reason} in {str(out.parent)!r}; give a "
                          f"writable path") from None


def _write_out(out: Path, res: dict) -> None:
    """Write ``res`` to ``out`` atomically (a file written beside it, fsynced, renamed over it), so an
    earlier ``out`` is replaced whole or not at all; if the write fails after all (the disk filled
    meanwhile), the results go to a file in the temp folder and the one-line error names both, so nothing
    computed is lost."""
    import tempfile

    from seedrl.fileio import atomic_write

    text = json.dumps(res, indent=1)
    try:
        atomic_write(out, text)
    except OSError as exc:
        reason = describe_os_error(exc) or str(exc)
        try:
            fd, spare = tempfile.mkstemp(prefix="seedrl-eval-", suffix=".json")
            with os.fdopen(fd, "w") as f:
                f.write(text)
        except OSError:
            raise SeedRLError(f"could not write --out {str(out)!r} ({reason}), nor a copy in "
                              f"{tempfile.gettempdir()}: the results are lost") from None
        raise SeedRLError(f"could not write --out {str(out)!r} ({reason}); the results are in {spare}") from None


def _check_temperature(temperature: float) -> None:
    """A sampling temperature is finite and at most ``MAX_TEMPERATURE`` (as the config's are)."""
    from seedrl.config import MAX_TEMPERATURE

    if not 0 <= temperature <= MAX_TEMPERATURE:  # nan fails both comparisons
        raise SeedRLError(f"--temperature must be a number from 0 to {MAX_TEMPERATURE:g}, got {temperature}")


def _check_jsonl(path: str) -> None:
    """Every line of an SFT data file is a JSON object (the first bad one is named by file and line)."""
    p = Path(path).expanduser()
    if not p.exists():
        raise SeedRLError(f"SFT data {path!r} not found (no such file); give a JSONL file with --data (or data: in "
                          f"the config)")
    if p.is_dir():
        raise SeedRLError(f"SFT data {path!r} is a folder; give a JSONL file")
    examples = 0
    with p.open(encoding="utf-8", errors="strict") as f:
        try:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                examples += 1
                try:
                    row = json.loads(line)
                except ValueError as exc:
                    raise SeedRLError(f"{path}:{n}: not a JSON line ({exc.msg} at column {exc.colno}); each line "
                                      f"must be one JSON object like {{\"prompt\": ..., \"response\": ...}}") from None
                if not isinstance(row, dict):
                    raise SeedRLError(f"{path}:{n}: expected a JSON object with 'response' and 'messages' or "
                                      f"'prompt', got a {type(row).__name__}")
        except UnicodeDecodeError:
            raise SeedRLError(f"{path}: not UTF-8 text; SFT data must be a UTF-8 JSONL file") from None
    if not examples:  # the same line as seedrl.train.sft.empty_data_message, without importing torch
        raise SeedRLError(f"SFT data {path!r} holds no example (the file is empty or only blank lines); give a "
                          f"JSONL file with one {{\"prompt\" or \"messages\", \"response\"}} object per line")


def _setup_logging(verbose: bool) -> None:
    global _VERBOSE
    _VERBOSE = verbose
    import warnings

    # torch's two-line warning before it refuses a raw pickle: the refusal's one line says what matters
    warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("transformers", "httpx"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()  # weight loading/saving bars drown the training display
    else:  # the same, read by transformers when it is imported: a bad input fails before that import
        os.environ["TRANSFORMERS_VERBOSITY"] = "error"
        os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"


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


@app.command("eval")
def eval_(checkpoint: str = typer.Option(..., "--checkpoint", help="a run folder, a checkpoint folder, a model "
                                         "folder, a hub name or a built-in model (tiny-3m)"),
          env: Optional[str] = typer.Option(None, "--env", help="environment (default: the run's)"),
          env_kwargs: Optional[str] = typer.Option(None, "--env-kwargs", help="env options as YAML, e.g. "
                                                   "'{dim: [5, 5], coords: true}' (default: the run's)"),
          splits: Optional[list[str]] = typer.Option(None, "--split", "--panel",
                                                     help="panel: train | valid_seen | valid_unseen (repeatable; "
                                                     "default valid_unseen)"),
          num_tasks: Optional[int] = typer.Option(None, "--num-tasks", help="N tasks of each panel, seeded and stratified by task type"),
          max_steps: Optional[int] = typer.Option(None, "--max-steps"),
          history_length: Optional[int] = typer.Option(None, "--history-length"),
          greedy: bool = typer.Option(True, "--greedy/--sample", help="greedy decoding, or sampling at "
                                      "--temperature (0.4 as in the SEED paper)"),
          temperature: float = typer.Option(0.4, "--temperature"),
          seeds: str = typer.Option("0", "--seeds", "--seed", help="evaluation seeds, e.g. 0,1,2 (sampled "
                                    "evaluation; greedy takes one)"),
          batch_size: Optional[int] = typer.Option(None, "--batch-size", help="episodes per batched rollout"),
          workers: Optional[int] = typer.Option(None, "--workers", help="env worker threads (never changes a result)"),
          device: str = typer.Option("cpu", "--device"),
          dtype: str = typer.Option("float32", "--dtype"),
          precision: str = typer.Option("auto", "--precision", help="compute precision: auto (bf16 where the "
                                        "device computes it natively) | fp32 | bf16"),
          backend_name: str = typer.Option("hf", "--backend", help="generation backend: hf | vllm (the run's "
                                           "rollout.vllm_* settings, or their defaults)"),
          out: Optional[Path] = typer.Option(None, "--out", help="write the full result JSON here"),
          set_: Optional[list[str]] = typer.Option(None, "--set", help="override a key of the run's config (or "
                                                  "of the defaults), e.g. --set skills.max_obs_chars=400 for "
                                                  "the --with-skills analyzer (repeatable)"),
          with_skills: Optional[str] = typer.Option(None, "--with-skills", help="DIAGNOSTIC instead of the "
                                                    "evaluation: play each task, let the analyzer (oracle | self) "
                                                    "write a skill about it, play it again with the skill in the "
                                                    "prompt; reports the skill lift, never a success rate"),
          against: Optional[str] = typer.Option(None, "--against", help="with --with-skills: the plain start "
                                                "(a checkpoint) whose skill-free success the model's is compared "
                                                "with on the same tasks (the 'harm' of a literacy recipe)"),
          follow_decisions: int = typer.Option(3, "--follow-decisions", help="with --with-skills: the steps of "
                                               "each plain attempt where a counterfactual skill (another sensible "
                                               "action) is offered, where the env's oracle writes them; 0: none"),
          verbose: bool = typer.Option(False, "--verbose", "-v")) -> None:
    """Evaluate a model on fixed panels (plain prompts, never a skill): success, score, episode
    length, invalid-action rate, per task type; JSON with panel hashes, config and commit.
    With --with-skills, the skill-lift diagnostic instead (seedrl/eval/skill_lift.py)."""
    _setup_logging(verbose)
    try:
        from seedrl.config import RolloutConfig, TrainConfig
        from seedrl.envs.panels import build_panel
        from seedrl.eval.evaluate import combine_seeds, evaluate
        from seedrl.models.loading import load_model, load_tokenizer
        from seedrl.models.precision import resolve_precision
        from seedrl.provenance import git_commit
        from seedrl.rollout.backends import backend_options, make_backend
        from seedrl.train.checkpoint import check_finite_model, resolve_checkpoint

        try:
            seed_list = [int(x) for x in seeds.split(",") if x.strip()]
        except ValueError:
            raise SeedRLError(f"--seeds expects integers like 0,1,2, got {seeds!r}") from None
        if not seed_list:
            raise SeedRLError("--seeds names no seed")
        if greedy and len(seed_list) > 1:
            raise SeedRLError("greedy evaluation does not depend on the seed: give one --seeds value, or pass "
                              "--sample for sampled evaluation under several seeds")
        _check_out(out)
        for flag, value, lo in (("--num-tasks", num_tasks, 1), ("--max-steps", max_steps, 1),
                                ("--history-length", history_length, 0), ("--batch-size", batch_size, 1),
                                ("--workers", workers, 1)):
            if value is not None and value < lo:
                raise SeedRLError(f"{flag} must be at least {lo}, got {value}")
        if temperature < 0 or (not greedy and temperature == 0):
            raise SeedRLError(f"--temperature must be > 0 when sampling (--sample), got {temperature}")
        _check_temperature(temperature)
        from seedrl.config import check_device, parse_yaml_value

        device = check_device(device, "--device")
        if device.startswith("cuda"):
            import torch

            if not torch.cuda.is_available():
                raise SeedRLError(f"--device {device} but CUDA is not available here; use --device cpu")
        split_list = list(dict.fromkeys(splits or ["valid_unseen"]))
        model_path, run_cfg = resolve_checkpoint(checkpoint)
        if run_cfg is None and env is None and not Path(checkpoint).expanduser().exists():
            from seedrl.models.loading import builtin_names

            if checkpoint not in builtin_names():
                raise SeedRLError(f"checkpoint {checkpoint!r} does not exist (no such folder from {Path.cwd()}); give "
                                  f"a run folder, a checkpoint folder or a model folder (a hub name also needs --env)")
        if set_:
            from seedrl.config import with_overrides

            run_cfg = with_overrides(run_cfg or TrainConfig(), set_)
        env_name = env or (run_cfg.env.name if run_cfg else None)
        if env_name is None:
            raise SeedRLError("--env is required when the checkpoint is not inside a run folder")
        if env_kwargs is not None:
            kwargs = parse_yaml_value(env_kwargs, "--env-kwargs") or {}
            if not isinstance(kwargs, dict):
                raise SeedRLError(f"--env-kwargs must be a YAML mapping, got {env_kwargs!r}")
        else:
            kwargs = run_cfg.env.kwargs if run_cfg and run_cfg.env.name == env_name else {}
        panels = [build_panel(env_name, sp, None, **kwargs) for sp in split_list]
        for p in panels:
            if num_tasks is not None and num_tasks > len(p.task_ids):  # Panel.subset plays the whole panel
                typer.echo(f"warning: --num-tasks {num_tasks} is more than the {len(p.task_ids)} tasks of "
                           f"{env_name}/{p.split}; playing all {len(p.task_ids)}", err=True)
        settings = {
            "max_steps": max_steps or (run_cfg.env.max_steps if run_cfg else 15),
            "history_length": history_length if history_length is not None else (
                run_cfg.env.history_length if run_cfg else 2),
            "max_new_tokens": run_cfg.rollout.max_new_tokens if run_cfg else 64,
            "max_prompt_tokens": run_cfg.rollout.max_prompt_tokens if run_cfg else 2048,
            "greedy": greedy, "temperature": temperature,
            "batch_size": batch_size or (run_cfg.eval.batch_size if run_cfg else 32), "num_tasks": num_tasks,
            "step_timeout_s": run_cfg.env.step_timeout_s if run_cfg else 60.0,
            "env_workers": workers or (run_cfg.env.workers if run_cfg else 8),
            "executor": run_cfg.env.executor if run_cfg else "thread",
            "ray_address": run_cfg.env.ray_address if run_cfg else None,
        }
        prec = resolve_precision(precision, device)
        trust = bool(run_cfg and run_cfg.model.trust_remote_code)  # a run that chose to trust its model's code
        tok = load_tokenizer(model_path, trust)
        model = load_model(model_path, dtype, device, tokenizer=tok, trust_remote_code=trust)
        check_finite_model(model, f"checkpoint {checkpoint!r} ({model_path})")
        rollout_cfg = (run_cfg.rollout if run_cfg else RolloutConfig()).model_copy(update={"backend": backend_name})
        backend = make_backend(backend_name, model, tok, bf16=prec.bf16, seed=seed_list[0],
                               **backend_options(rollout_cfg))
        if against is not None and with_skills is None:
            raise SeedRLError("--against compares skill-free success under --with-skills; add --with-skills oracle")
        if with_skills is not None:
            _skill_lift(with_skills, backend, tok, model, panels, settings, seed_list, run_cfg, env_name, prec,
                        model_path, out, against=against, follow_decisions=follow_decisions, dtype=dtype,
                        device=device)
            return
        results = {p.split: combine_seeds([evaluate(backend, tok, p, seed=sd, **settings) for sd in seed_list])
                   for p in panels}
    except SeedRLError as exc:
        _fail(exc)
        return
    res = {"model": model_path, "env": env_name, "env_kwargs": kwargs, "commit": git_commit(),
           "greedy": greedy, "temperature": None if greedy else temperature, "seeds": seed_list,
           "precision": prec.describe(),
           "panel_hashes": {sp: r["panel_hash"] for sp, r in results.items()},
           "config": {"eval": settings, "run": run_cfg.model_dump(mode="json") if run_cfg else None},
           "panels": results}
    if out:
        _write_out(out, res)
    for sp, r in results.items():
        console.print(f"{env_name}/{sp} [panel {r['panel_hash']}]: success {r['success_rate']:.3f} "
                      f"(95% CI {r['ci95'][0]:.3f}-{r['ci95'][1]:.3f}) over {r['num_tasks']} episodes, score "
                      f"{r['score']:.2f}, {r['mean_steps']:.1f} steps, invalid-action rate {r['invalid_rate']:.3f} "
                      f"(format {r['invalid_format_rate']:.3f})",
                      markup=False)


def _skill_lift(source: str, backend, tok, model, panels, settings, seed_list, run_cfg, env_name, prec,
                model_path, out, *, against: str | None = None, follow_decisions: int = 3, dtype: str = "float32",
                device: str = "cpu") -> None:
    """``seedrl eval --with-skills``: the skill-lift diagnostic on every panel (one seed), with the
    skill-following probe where the env writes counterfactual skills, and with ``against``, the harm:
    the model's skill-free success minus the plain start's on the same tasks."""
    from seedrl.config import TrainConfig
    from seedrl.eval.evaluate import evaluate
    from seedrl.eval.skill_follow import has_counterfactual
    from seedrl.eval.skill_lift import skill_lift
    from seedrl.experiments.stats import mcnemar_exact, paired_outcomes
    from seedrl.methods.sources import make_analyzer
    from seedrl.models.loading import load_model, load_tokenizer
    from seedrl.provenance import git_commit
    from seedrl.rollout.backends import HFBackend
    from seedrl.train.checkpoint import resolve_checkpoint

    if source not in ("oracle", "self"):
        raise SeedRLError(f"--with-skills takes oracle or self, got {source!r}")
    if len(seed_list) > 1:
        raise SeedRLError("--with-skills runs one seed; give one --seeds value")
    base = run_cfg or TrainConfig()
    cfg = base.model_copy(update={"env": base.env.model_copy(update={"name": env_name}),
                                  "skills": base.skills.model_copy(update={"analyzer": source})})
    analyzer = make_analyzer(cfg, backend, tok, bf16=prec.bf16, source="hindsight")
    if follow_decisions < 0:
        raise SeedRLError(f"--follow-decisions must be at least 0, got {follow_decisions}")
    results = {p.split: skill_lift(backend, tok, model, p, analyzer, seed=seed_list[0], bf16=prec.bf16,
                                   follow_decisions=follow_decisions, **settings)
               for p in panels}
    for r in results.values():  # the headline keys of a skill-following result
        r["oracle_lift"] = r["lift"]
        r["mcnemar_p"] = mcnemar_exact(r["won_only_without_skill"], r["won_only_with_skill"])
        r["follow_rate"] = r["follow"]["follow_rate"] if r.get("follow") else None
        r["harm"] = None
    baseline_path = None
    if against is not None:
        baseline_path, base_cfg = resolve_checkpoint(against)
        trust = bool(base_cfg and base_cfg.model.trust_remote_code)
        btok = load_tokenizer(baseline_path, trust)
        bmodel = load_model(baseline_path, dtype, device, tokenizer=btok, trust_remote_code=trust)
        for p in panels:
            r = results[p.split]
            plain = evaluate(HFBackend(bmodel, btok, bf16=prec.bf16), btok, p, seed=seed_list[0], **settings)
            base_won = {t["task_id"]: bool(t["won"]) for t in plain["tasks"]}
            won = {t["task_id"]: bool(t["won"]) for t in r["tasks"]}
            try:
                h = paired_outcomes(base_won, won)
            except ValueError:
                raise SeedRLError(f"--against played other tasks on {p.split} than the model; this is a bug") from None
            r["against"] = {"model": baseline_path, "success": plain["success_rate"],
                            "won_only_by_start": h["only_before"], "won_only_by_model": h["only_after"],
                            "mcnemar_p": h["p"]}
            r["harm"] = h["diff"]
    res = {"diagnostic": "skill_lift", "model": model_path, "env": env_name, "analyzer": source,
           "commit": git_commit(), "precision": prec.describe(), "against": baseline_path,
           "config": {"eval": settings, "skills": cfg.skills.model_dump(mode="json"),
                      "follow_decisions": follow_decisions}, "panels": results}
    if out:
        _write_out(out, res)
    for sp, r in results.items():
        shift = ("n/a" if r["teacher_above_student_frac"] is None else
                 f"{r['teacher_above_student_frac']:.3f} of {r['teacher_tokens']} tokens, mean {r['teacher_delta_mean']:+.3f}; "
                 f"whole distribution: most likely token differs at {r['teacher_argmax_differs_frac']:.3f}, "
                 f"mean total variation {r['teacher_tv_mean']:.3f}")
        console.print(f"DIAGNOSTIC skill lift ({source} skills; not a success rate) {env_name}/{sp} "
                      f"[panel {r['panel_hash']}]: {r['with_skill']}/{r['num_tasks']} tasks got a skill; on them "
                      f"success {r['success_without_skill']:.3f} without -> {r['success_with_skill']:.3f} with the skill "
                      f"(won only with {r['won_only_with_skill']}, only without {r['won_only_without_skill']}, "
                      f"McNemar p {r['mcnemar_p']:.2g}); teacher above student: {shift}", markup=False)
        if r.get("facts_checked"):
            pct = lambda x: "n/a" if x is None else f"{x:.3f}"  # noqa: E731
            console.print(f"  {source} skills' facts agree with the env's oracle: {pct(r['fact_agreement'])} of "
                          f"{r['facts_checked']} checkable (first attempts won {pct(r['fact_agreement_success'])}, "
                          f"lost {pct(r['fact_agreement_failure'])})", markup=False)
        f = r.get("follow")
        if f is not None and f["decisions"]:
            console.print(f"  skill following: {f['follow_rate']:.3f} of {f['decisions']} decisions switch to the "
                          f"action a counterfactual skill names (kept their own {f['kept_rate']:.3f})", markup=False)
        elif f is not None:
            why = ("no plain step had a parsable action to disagree with" if has_counterfactual(env_name)
                   else "this env's oracle writes no counterfactual skills")
            console.print(f"  skill following: n/a ({why})", markup=False)
        if r["harm"] is not None:
            console.print(f"  skill-free success {r['success_plain_all']:.3f} vs the plain start's "
                          f"{r['against']['success']:.3f}: harm {r['harm']:+.3f} (McNemar p "
                          f"{r['against']['mcnemar_p']:.2g})", markup=False)


@app.command()
def compare(config: Optional[Path] = typer.Option(None, "--config", "-c", help="base YAML preset; the method is "
                                                  "set per cell with algo.name"),
            env: Optional[str] = typer.Option(None, "--env", help="use configs/<env>_grpo.yaml as the base config"),
            algos: str = typer.Option("grpo,seed", "--algos", help="methods, comma-separated; the first "
                                      "'grpo' is the baseline"),
            seeds: str = typer.Option("3", "--seeds", help="a count (3 = seeds 0,1,2) or a list (0,1,2); one "
                               "particular seed is a list of one: '2,'"),
            budget_episodes: Optional[int] = typer.Option(None, "--budget-episodes", help="environment episodes "
                                                          "per cell (a multiple of tasks_per_batch x group_size)"),
            eval_every: Optional[int] = typer.Option(None, "--eval-every", help="evaluate every K iterations "
                                                     "(and at iteration 0 and the end)"),
            out: Path = typer.Option(..., "--out", help="results folder: cells/*.json, report.md, curves.png, "
                                     "summary.json"),
            runs_dir: Optional[Path] = typer.Option(None, "--runs-dir", help="run folders (default "
                                                    "runs/compare/<out folder name>)"),
            splits: Optional[list[str]] = typer.Option(None, "--split", help="evaluation panels (repeatable; "
                                                       "default valid_seen and valid_unseen)"),
            tag: str = typer.Option("", "--tag", help="variant label: cells are named <algo>+<tag> (e.g. --tag "
                                    "oracle with --set skills.analyzer=oracle) and share the results folder"),
            efficiency_split: Optional[str] = typer.Option(None, "--efficiency-split", help="the panel of the "
                                                           "sample-efficiency table (default valid_unseen)"),
            report_only: bool = typer.Option(False, "--report-only", help="only render the report from the "
                                             "stored cells"),
            set_: Optional[list[str]] = typer.Option(None, "--set", help=SET_HELP),
            verbose: bool = typer.Option(False, "--verbose", "-v")) -> None:
    """Methods under identical conditions (model init, task stream, episodes, eval schedule), several
    seeds each, resumable cell by cell; report with bootstrap CIs, sample efficiency and curves."""
    import shlex

    _setup_logging(verbose)
    try:
        from seedrl.experiments.compare import (
            DEFAULT_SPLITS,
            CompareSpec,
            parse_seeds,
            resolve_base_config,
            run_compare,
        )

        algo_list = [a.strip() for a in algos.split(",") if a.strip()]
        if not algo_list or len(set(algo_list)) != len(algo_list):
            raise SeedRLError(f"--algos must name methods once each, got {algos!r}")
        split_list = list(dict.fromkeys(splits or DEFAULT_SPLITS))
        if not report_only and (budget_episodes is None or eval_every is None):
            raise SeedRLError("--budget-episodes and --eval-every are required (unless --report-only)")
        base = resolve_base_config(config, env) if not report_only or config or env else Path("-")
        seed_list = parse_seeds(seeds)
        runs = runs_dir or Path("runs/compare") / out.name
        if report_only:
            argv = ["seedrl", "compare", "--report-only", "--out", str(out)]
            argv += ["--efficiency-split", efficiency_split] if efficiency_split else []
        else:
            argv = ["seedrl", "compare"] + (["--env", env] if env and not config else ["--config", str(base)])
            argv += _compare_args(algo_list, seeds, budget_episodes, eval_every, out, runs_dir, splits, set_)
            argv += ["--tag", tag.strip()] if tag.strip() else []
            argv += ["--efficiency-split", efficiency_split] if efficiency_split else []
        spec = CompareSpec(base_config=base, algos=algo_list, seeds=seed_list, budget_episodes=budget_episodes or 0,
                           eval_every=eval_every or 0, out=out, runs_dir=runs, overrides=list(set_ or []),
                           splits=split_list, command=" ".join(shlex.quote(a) for a in argv),
                           baseline="grpo", tag=tag.strip(), efficiency_split=efficiency_split)
        run_compare(spec, echo=lambda msg: console.print(msg, markup=False), report_only=report_only)
    except SeedRLError as exc:
        _fail(exc)


def _compare_args(algos, seeds, budget, every, out, runs_dir, splits, sets) -> list[str]:
    """The canonical spelling of a compare command's options (recorded in every cell and the report)."""
    argv = ["--algos", ",".join(algos), "--seeds", seeds, "--budget-episodes", str(budget), "--eval-every", str(every),
            "--out", str(out)] + (["--runs-dir", str(runs_dir)] if runs_dir else [])
    for sp in splits or []:
        argv += ["--split", sp]
    for item in sets or []:
        argv += ["--set", item]
    return argv


@app.command()
def view(path: Path = typer.Argument(..., help="a run folder, a comparison folder (seedrl compare --out) or a "
                                     "Stage-1 JSONL file (seedrl analyze --out)"),
         out: Optional[Path] = typer.Option(None, "--out", help="the HTML file (default: PATH/view.html for a "
                                            "folder, PATH.html for a file)")) -> None:
    """One self-contained HTML page to see inside a run: metrics, traced trajectories token by token
    (coloured by the teacher - student shift), skills, lessons; or a comparison, or Stage-1 data."""
    from seedrl.experiments.viewer import write_view

    written = write_view(path, out)
    console.print(f"wrote {written} (open it in a browser: file://{written.resolve()})", markup=False,
                  soft_wrap=True)


@app.command()
def lessons(paths: list[Path] = typer.Argument(..., help="run folders with skills.jsonl (SEED-family methods), or "
                                               "a comparison's runs folder"),
            out: Optional[Path] = typer.Option(None, "--out", help="the Markdown report (default: "
                                               "<run_dir>/lessons.md; JSON beside it)"),
            threshold: float = typer.Option(0.5, "--threshold", help="TF-IDF cosine similarity at which two "
                                            "skills are one lesson"),
            min_recur: int = typer.Option(3, "--min-recur", help="a lesson written at least this often is a "
                                          "system-design candidate")) -> None:
    """Group the hindsight skills of a run into recurring lessons: how often each comes back per
    iteration (fading = distilled, persistent = not learnt), and which recur enough to belong in the
    system's design (an env check, a prompt rule, an evaluation test)."""
    from seedrl.experiments.lessons import main_lessons

    console.print(f"wrote {main_lessons(paths, out, threshold, min_recur)}", markup=False, soft_wrap=True)


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


def main() -> None:
    app()


if __name__ == "__main__":
    main()
