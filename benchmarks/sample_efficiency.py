"""The sample-efficiency comparison: SEED and its siblings against GRPO where GRPO learns, one command.

The setting is the GRPO ladder's fit check with its CPU recipe (``benchmarks/results/grpo_ladder/notes.md``):
the ``make demo`` warm start (``runs/demo/sft/model``), trained on the first 32 rooms of sokoban's
``valid_seen`` panel with GRPO + DAPO dynamic sampling + replay of the warm start's expert demos
(``algo.replay_coef 1.0``), lr 1e-4, 4 PPO epochs. Every cell is evaluated greedily on all 128
``valid_seen`` rooms (the report adds ``valid_seen_heldout``, the 96 no run trained on) and on 128
``valid_unseen`` rooms of another shape (6 x 5, ``env.kwargs.unseen_dim``). The methods:

- ``grpo``: the baseline;
- ``grpo+replay_only``: the policy gradient switched off (``pos_adv_coef = neg_adv_coef = 0``), only
  the replay trains: what the recipe gains without the reward;
- ``seed+oracle``: SEED (gated OPD, the paper's ``opd_coef`` 0.01, ``opd_beta`` 5) with the oracle's
  privileged hindsight skills, the positive control;
- ``grpo_opsd``, ``sdar``: SDAR's baselines with the env's static skill file.

SEED with its own self-analyzer is not a cell here: the demo start writes no parsable skill, and
its Stage-1 training and per-trajectory analysis do not fit a CPU session (README).

Each cell is one ``seedrl compare`` call (the command is recorded in the report); cells run
seed-major, ``--parallel`` at a time, and a finished cell is never re-run, so the script resumes.
After ``--deadline-s`` no new cell starts; the report is rendered from whatever finished. CPU (the
committed ``benchmarks/results/sample_efficiency``, two cells at a time with one thread each)::

    python benchmarks/sample_efficiency.py --out benchmarks/results/sample_efficiency --budget-episodes 1536

GPU (one H200; 512 episodes per iteration in lockstep, 4 cells at a time; the tiny start, 11 MB,
travels with ``carry: [runs/demo/sft/model]``). Not yet run: no session so far was lent a GPU, so its
time is not measured; ``--gpu`` sets ``--deadline-s 420`` so that no cell starts after 7 minutes and the
report is rendered from the cells that finished::

    python benchmarks/sample_efficiency.py --gpu --out benchmarks/results/sample_efficiency_gpu

The device machine (Python 3.12, torch, transformers, peft, typer, rich, yaml, no pydantic) needs
pydantic's wheels (2.7 MB), fetched here once into an ignored folder and carried with the start::

    echo /.whl/ >> .git/info/exclude
    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux2014_x86_64 -d .whl pydantic==2.14.4 pydantic_core==2.50.5 \
        annotated-types==0.8.0 typing-inspection==0.4.5
    # device run, carry: [runs/demo/sft/model, .whl]
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:.
    python3 benchmarks/sample_efficiency.py --gpu --out /tmp/se; tar czf $OUT/se.tgz -C /tmp se  # 8 files come back
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import time
from pathlib import Path

# the fit check's recipe, identical for every cell (the GRPO ladder, configs/demo_sokoban.yaml)
RECIPE = ["env.kwargs.unseen_dim=[6,5]", "env.train_split=valid_seen", "env.train_size=32", "save_every=0",
          "optim.lr=1e-4", "optim.ppo_epochs=4", "algo.replay_coef=1.0", "algo.dynamic_sampling=true",
          "algo.dynamic_sampling_rounds=1", "optim.old_logp=rollout", "optim.dedupe=true",
          "optim.split_distinct=true"]
# name -> (algo.name, --tag, the method's own overrides)
METHODS: dict[str, tuple[str, str | None, list[str]]] = {
    "grpo": ("grpo", None, []),
    "grpo+replay_only": ("grpo", "replay_only", ["algo.pos_adv_coef=0", "algo.neg_adv_coef=0"]),
    "seed+oracle": ("seed", "oracle", ["skills.analyzer=oracle"]),
    "grpo_opsd": ("grpo_opsd", None, []),
    "sdar": ("sdar", None, []),
}
SEEDRL = [sys.executable, "-m", "seedrl.cli"]  # the CLI of this interpreter's seedrl
# a GPU makes large lockstep batches cheap: 64 rooms x 8 episodes per iteration
GPU_SETS = ["model.device=cuda", "rollout.tasks_per_batch=64", "optim.mini_batch_size=512",
            "optim.micro_batch_size=256", "eval.batch_size=128", "env.workers=8"]


def cell_command(method: str, seed: int, a: argparse.Namespace) -> list[str]:
    """The ``seedrl compare`` call of one (method, seed) cell (``method`` one of :data:`METHODS`)."""
    algo, tag, own = METHODS[method]
    sets = [f"model.name={a.model}", f"torch_threads={a.threads}", *RECIPE, *(GPU_SETS if a.gpu else []),
            *own, *a.set]
    cmd = ["seedrl", "compare", "--config", "configs/sokoban_grpo.yaml", "--algos", algo, "--seeds", f"{seed},",
           "--budget-episodes", str(a.budget_episodes), "--eval-every", str(a.eval_every), "--out", str(a.out),
           "--split", "valid_seen", "--split", "valid_unseen", "--efficiency-split", "valid_seen_heldout"]
    if a.runs_dir:
        cmd += ["--runs-dir", str(a.runs_dir)]
    if tag:
        cmd += ["--tag", tag]
    for s in sets:
        cmd += ["--set", s]
    return cmd


def done(out: Path, method: str, seed: int) -> bool:
    from seedrl.experiments.compare import cell_name

    return (out / "cells" / f"{cell_name(method, seed)}.json").is_file()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--runs-dir", type=Path, default=None)
    ap.add_argument("--model", default="runs/demo/sft/model", help="the warm start (make demo's SFT stage)")
    ap.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated, of: {', '.join(METHODS)}")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--gpu", action="store_true", help="model on cuda, 512 episodes per iteration")
    ap.add_argument("--budget-episodes", type=int, default=None, help="per cell (default 1536; 6144 with --gpu)")
    ap.add_argument("--eval-every", type=int, default=None, help="iterations (default 8; 3 with --gpu)")
    ap.add_argument("--parallel", type=int, default=None, help="cells at a time (default 2; 4 with --gpu)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per cell")
    ap.add_argument("--deadline-s", type=float, default=None, help="start no cell after this many seconds")
    ap.add_argument("--set", action="append", default=[], help="one more override for every cell")
    ap.add_argument("--dry-run", action="store_true", help="print the cells' commands only")
    a = ap.parse_args(argv)
    a.budget_episodes = a.budget_episodes or (6144 if a.gpu else 1536)
    a.eval_every = a.eval_every or (3 if a.gpu else 8)
    a.parallel = a.parallel or (4 if a.gpu else 2)
    if a.gpu and a.deadline_s is None:
        a.deadline_s = 420.0
    if not a.dry_run and "/" in a.model and not (Path(a.model) / "config.json").is_file():
        raise SystemExit(f"no model at {a.model}: build the warm start first with "
                         f"`seedrl sft --config configs/demo_sokoban_sft.yaml --set run_dir=runs/demo/sft`")
    cells = [(m, int(s)) for s in a.seeds.split(",") if s.strip() for m in a.methods.split(",") if m.strip()]
    for m, _ in cells:
        if m not in METHODS:
            raise SystemExit(f"unknown method {m!r}; methods: {', '.join(METHODS)}")
    todo = [(m, s) for m, s in cells if not done(a.out, m, s)]
    if a.dry_run:
        for m, s in todo:
            print(shlex.join(cell_command(m, s, a)))
        return 0
    start, running, failed = time.monotonic(), [], []
    a.out.mkdir(parents=True, exist_ok=True)
    while todo or running:
        while todo and len(running) < a.parallel and (a.deadline_s is None or time.monotonic() - start < a.deadline_s):
            m, s = todo.pop(0)
            log = open(a.out / f"{m}-seed{s}.log", "w")
            print(f"start {m} seed {s} ({time.monotonic() - start:.0f}s)", flush=True)
            running.append((m, s, log, subprocess.Popen(SEEDRL + cell_command(m, s, a)[1:], stdout=log, stderr=subprocess.STDOUT)))
        if a.deadline_s is not None and time.monotonic() - start >= a.deadline_s and todo:
            print(f"deadline {a.deadline_s:.0f}s: {len(todo)} cells not started", flush=True)
            todo = []
        for r in list(running):
            if r[3].poll() is not None:
                running.remove(r)
                r[2].close()
                print(f"{'done' if r[3].returncode == 0 else 'FAILED'} {r[0]} seed {r[1]} "
                      f"({time.monotonic() - start:.0f}s)", flush=True)
                if r[3].returncode != 0:
                    failed.append(f"{r[0]} seed {r[1]} (log {a.out / f'{r[0]}-seed{r[1]}.log'})")
        time.sleep(1)
    if any((a.out / "cells").glob("*.json")):
        subprocess.run([*SEEDRL, "compare", "--report-only", "--out", str(a.out), "--efficiency-split",
                        "valid_seen_heldout"], check=True)
    if failed:
        print("failed cells: " + "; ".join(failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
