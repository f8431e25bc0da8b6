"""The `seedrl` command: the typer app (:mod:`.common`) and its commands, one module a group, imported
here in the order `seedrl --help` lists them: :mod:`.training` (train, sft, analyze), :mod:`.evaluation`
(eval), :mod:`.experiments` (compare, view, lessons), :mod:`.tools` (envs, play, env, demo). Runs as
``seedrl`` or ``python -m seedrl.cli``."""

from __future__ import annotations

from seedrl.cli.common import _write_out, app, user_error_message

# importing a command module registers its commands; `seedrl --help` lists them in this order
# isort: off
from seedrl.cli import training  # noqa: F401
from seedrl.cli import evaluation  # noqa: F401
from seedrl.cli import experiments  # noqa: F401
from seedrl.cli import tools  # noqa: F401
# isort: on

__all__ = ["_write_out", "app", "main", "user_error_message"]


def main() -> None:
    app()

