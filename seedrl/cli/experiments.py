"""`seedrl compare`, `seedrl view` and `seedrl lessons`: comparisons of methods and what is inside runs."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from seedrl.cli.common import SET_HELP, _fail, _setup_logging, app, console
from seedrl.errors import SeedRLError


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

