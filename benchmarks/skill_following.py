"""Does a start read its skills? Follow rate, oracle lift and harm of a skill-literate start, as one command.

    python benchmarks/skill_following.py --start runs/household_literate_sft/model \
        --plain runs/household_sft/model --out benchmarks/results/skill_following

For every panel (default ``valid_seen``: held-out tasks under the training prior, and ``valid_unseen``: the
shifted prior) it runs ``seedrl eval --with-skills oracle --against <plain>`` on the start, and the same
probe on the plain start itself (its own follow rate and lift: what literacy added), and writes:

- ``<out>/<name>.json``: each ``seedrl eval`` result, as the command writes it;
- ``<out>/summary.json``: per panel ``follow_rate`` (share of decisions where the start switches to the
  action a counterfactual skill names, when that differs from its own choice), ``oracle_lift`` (success
  with minus without the correct skill, paired), ``mcnemar_p`` (exact, on the discordant tasks) and
  ``harm`` (the start's skill-free success minus the plain start's on the same tasks), the top-level keys
  being the first panel's; the sha256 of both starts' weights, the CPU's bf16 capability, the commit and
  the exact commands.

Acceptance of the literacy issue, checked on the first panel: follow rate >= 0.8, lift >= +0.20 with
McNemar p < 0.001, |harm| <= 0.02 (``acceptance`` in the summary; the script never changes a number to
meet it).
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from seedrl.experiments.compare import machine_info, weight_fingerprint  # noqa: E402
from seedrl.provenance import git_commit  # noqa: E402

KEYS = ("follow_rate", "oracle_lift", "mcnemar_p", "harm")


def seedrl_eval(checkpoint: str, out: Path, args: argparse.Namespace, skills: tuple[str, ...] = (),
                follow: tuple[str, ...] = ()) -> tuple[dict, list[str]]:
    """``seedrl eval`` of ``checkpoint`` on the panels and tasks of ``args`` (run unless ``out`` exists), with
    ``skills`` and ``follow`` options; its result and its command."""
    cmd = ["seedrl", "eval", "--checkpoint", checkpoint, "--env", args.env, "--env-kwargs", args.env_kwargs,
           *[x for sp in args.split for x in ("--split", sp)], "--max-steps", str(args.max_steps),
           "--history-length", str(args.history_length), *skills, "--num-tasks", str(args.num_tasks),
           "--batch-size", str(args.batch_size), *follow, "--out", str(out)]
    if args.panel_size is not None:
        cmd[-2:-2] = ["--panel-size", str(args.panel_size)]
    if not out.exists():
        subprocess.run([sys.executable, "-m", "seedrl.cli", *cmd[1:]], check=True, cwd=ROOT)
    return json.loads(out.read_text()), cmd


def probe(checkpoint: str, plain: str, out: Path, args: argparse.Namespace) -> tuple[dict, list[str]]:
    """The skill-lift and follow probe of ``checkpoint``, its harm against ``plain``."""
    return seedrl_eval(checkpoint, out, args, ("--with-skills", "oracle", "--against", plain),
                       ("--follow-decisions", str(args.follow_decisions)))


def twin_eval(twin: str, out: Path, args: argparse.Namespace) -> tuple[dict, list[str]]:
    """The twin's skill-free greedy play on the same panels and tasks."""
    return seedrl_eval(twin, out, args)


def acceptance(panel: dict) -> dict:
    return {"follow_rate>=0.8": panel["follow_rate"] is not None and panel["follow_rate"] >= 0.8,
            "oracle_lift>=0.20": panel["oracle_lift"] >= 0.20, "mcnemar_p<0.001": panel["mcnemar_p"] < 0.001,
            "|harm|<=0.02": panel["harm"] is not None and abs(panel["harm"]) <= 0.02}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--start", required=True, help="the skill-literate start (a model folder)")
    ap.add_argument("--plain", required=True, help="the plain start it is compared with (harm)")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--env", default="household")
    ap.add_argument("--env-kwargs", default="{prior_seed: 0}")
    ap.add_argument("--split", action="append", default=None)
    ap.add_argument("--max-steps", type=int, default=4)
    ap.add_argument("--history-length", type=int, default=3)
    ap.add_argument("--num-tasks", type=int, default=128)
    ap.add_argument("--panel-size", type=int, default=None,
                    help="build each panel with N tasks (household generates them; its default panel, 128, is the "
                    "first 128): with --num-tasks N, harm on more games than the default panel holds")
    ap.add_argument("--twin", default=None,
                    help="the plain start trained on the literate start's skill-free rows alone, as long (a model "
                    "folder): harm_twin, the start's skill-free success minus the twin's, is what the skill rows "
                    "cost, apart from what the extra training did")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--follow-decisions", type=int, default=3)
    args = ap.parse_args(argv)
    args.split = args.split or ["valid_seen", "valid_unseen"]
    args.out.mkdir(parents=True, exist_ok=True)
    literate, cmd_l = probe(args.start, args.plain, args.out / "literate.json", args)
    plain, cmd_p = probe(args.plain, args.plain, args.out / "plain.json", args)
    panels = {}
    for sp in args.split:
        lp, pp = literate["panels"][sp], plain["panels"][sp]
        panels[sp] = {k: lp[k] for k in KEYS} | {
            "decisions": lp["follow"]["decisions"] if lp.get("follow") else 0,
            "success_without_skill": lp["success_without_skill"], "success_with_skill": lp["success_with_skill"],
            "won_only_with_skill": lp["won_only_with_skill"], "won_only_without_skill": lp["won_only_without_skill"],
            "success_plain_start": lp["against"]["success"], "harm_mcnemar_p": lp["against"]["mcnemar_p"],
            "teacher_argmax_differs_frac": lp["teacher_argmax_differs_frac"],
            "plain_start": {k: pp[k] for k in ("follow_rate", "oracle_lift", "mcnemar_p")} | {
                "success_without_skill": pp["success_without_skill"], "success_with_skill": pp["success_with_skill"],
                "teacher_argmax_differs_frac": pp["teacher_argmax_differs_frac"]},
            "num_tasks": lp["num_tasks"], "panel_hash": lp["panel_hash"]}
    commands = [shlex.join(cmd_l), shlex.join(cmd_p)]
    if args.twin:
        from seedrl.experiments.stats import paired_outcomes

        twin, cmd_t = twin_eval(args.twin, args.out / "twin.json", args)
        commands.append(shlex.join(cmd_t))
        for sp in args.split:
            tw = {t["task_id"]: bool(t["won"]) for t in twin["panels"][sp]["tasks"]}
            h = paired_outcomes(tw, {t["task_id"]: bool(t["won"]) for t in literate["panels"][sp]["tasks"]})
            panels[sp] |= {"harm_twin": h["diff"], "harm_twin_mcnemar_p": h["p"],
                           "success_twin": twin["panels"][sp]["success_rate"]}
    first = panels[args.split[0]]
    summary = {k: first[k] for k in KEYS} | {
        "panel": args.split[0], "acceptance": acceptance(first), "panels": panels,
        "start": {"path": args.start, "sha256": weight_fingerprint(Path(args.start))[0]},
        "plain": {"path": args.plain, "sha256": weight_fingerprint(Path(args.plain))[0]},
        "machine": machine_info(), "precision": literate["precision"], "commit": git_commit(),
        **({"twin": {"path": args.twin, "sha256": weight_fingerprint(Path(args.twin))[0]},
            "harm_twin": first["harm_twin"]} if args.twin else {}),
        "commands": commands,
        "note": "follow_rate: switches to the action a counterfactual skill names (another plausible "
                "receptacle), among decisions where it differs from the start's own; oracle_lift: paired success "
                "with the oracle's correct hindsight skill minus without, on the same tasks; harm: skill-free "
                "success minus the plain start's; harm_twin (with --twin): minus the twin's, the plain start trained as "
                "long on the skill-free rows alone."}
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps({k: summary[k] for k in (*KEYS, "acceptance")}, indent=1))
    return summary


if __name__ == "__main__":
    main()
