"""What every `seedrl` command shares: the typer app, the one place user errors become one line
(:class:`_OneLineErrors`, :func:`user_error_message`), logging setup, and the cheap checks commands run
before they import torch."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

import click
import typer
from rich.console import Console
from typer.core import TyperGroup

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
