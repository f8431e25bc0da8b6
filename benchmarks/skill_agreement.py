"""Do the policy's own hindsight skills say what the privileged oracle says?

Rolls out a model on train tasks (as a SEED iteration does), then labels the same trajectories
twice: with the policy itself (``self``, SEED's analyzer) and with the ``oracle`` analyzer (privileged
state). Reports the self parse rate, word-level F1 between the two skills, and, for sokoban, whether
both give the same *kind* of advice (a success workflow, a deadlock rule, oscillation, blocked moves,
wandering, invalid replies) and the same push direction.

    python benchmarks/skill_agreement.py --config configs/sokoban_seed.yaml --tasks 32 --rollouts 2
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from pathlib import Path

from seedrl.config import TrainConfig, load_config
from seedrl.envs.panels import build_panel
from seedrl.envs.registry import make_env
from seedrl.methods.sources import make_analyzer
from seedrl.models.loading import load_model, load_tokenizer
from seedrl.provenance import git_commit
from seedrl.rollout.backends import make_backend
from seedrl.rollout.runner import rollout
from seedrl.skills.analyzers.oracle import OracleAnalyzer
from seedrl.train.collect import rollout_settings

#: the kinds of advice the sokoban oracle writes, recognised by their wording (first match wins)
SOKOBAN_KINDS = [
    ("invalid", re.compile(r"<action>|admissible|one of the moves", re.I)),
    # "never push it <direction>": the success workflow also says "never push it against a wall"
    ("deadlock", re.compile(r"never push it (?:up|down|left|right)|never push a box (?:up|down|left|right) into|"
                            r"(?:can|could) never reach a target", re.I)),
    ("oscillation", re.compile(r"undo your previous move|oscillat", re.I)),
    ("blocked", re.compile(r"square in that direction|blocked move", re.I)),
    ("wander", re.compile(r"do not wander|uses up the step limit", re.I)),
    ("workflow", re.compile(r"walk around to stand|push one box at a time|push it (?:up|down|left|right)", re.I)),
]
_PUSH = re.compile(r"push (?:it|the box) (up|down|left|right)", re.I)


def words(text: str) -> list[str]:
    return re.findall(r"[a-z]+", text.lower())


def word_f1(a: str, b: str) -> float:
    """Bag-of-words F1 between two texts (SQuAD-style)."""
    wa, wb = Counter(words(a)), Counter(words(b))
    common = sum((wa & wb).values())
    if not common:
        return 0.0
    p, r = common / sum(wa.values()), common / sum(wb.values())
    return 2 * p * r / (p + r)


def kind(skill: str) -> str:
    return next((name for name, rx in SOKOBAN_KINDS if rx.search(skill)), "other")


def first_push(skill: str) -> str | None:
    m = _PUSH.search(skill)
    return m.group(1).lower() if m else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="configs/sokoban_seed.yaml")
    ap.add_argument("--set", action="append", default=[], dest="overrides")
    ap.add_argument("--tasks", type=int, default=32)
    ap.add_argument("--rollouts", type=int, default=2)
    ap.add_argument("--out", default=None, help="JSON with every (self, oracle) pair")
    args = ap.parse_args()
    cfg = load_config(TrainConfig, args.config, args.overrides + ["skills.analyzer=self", "algo.name=seed"])
    m, e = cfg.model, cfg.env
    tok = load_tokenizer(m.name)
    model = load_model(m.name, m.dtype, m.device, None, m.init_seed, tokenizer=tok)
    backend = make_backend(cfg.rollout.backend, model, tok)
    task_ids = list(build_panel(e.name, e.train_split, e.train_size, **e.kwargs).task_ids[:args.tasks])
    t0 = time.perf_counter()
    trajs = rollout(backend, tok, lambda: make_env(e.name, **e.kwargs), task_ids, args.rollouts,
                    rollout_settings(cfg), seed=cfg.seed)
    trajs = [t for t in trajs if t.error is None and t.steps]
    t_roll = time.perf_counter() - t0
    t0 = time.perf_counter()
    mine = make_analyzer(cfg, backend, tok, source="hindsight").analyze(trajs)
    t_self = time.perf_counter() - t0
    oracle = OracleAnalyzer(env_name=e.name, min_words=cfg.skills.min_words).analyze(trajs)
    pairs = []
    for t, a, o in zip(trajs, mine, oracle):
        pairs.append({"task_id": t.task_id, "won": t.won, "self": a.skill, "oracle": o.skill,
                      "self_error": a.error, "f1": word_f1(a.skill, o.skill) if a.skill and o.skill else None,
                      "self_kind": kind(a.skill) if a.skill else None, "oracle_kind": kind(o.skill) if o.skill else None,
                      "self_push": first_push(a.skill or ""), "oracle_push": first_push(o.skill or "")})
    both = [p for p in pairs if p["f1"] is not None]
    dirs = [p for p in both if p["self_push"] and p["oracle_push"]]
    summary = {
        "command": " ".join([Path(sys.argv[0]).name] + sys.argv[1:]), "commit": git_commit(), "model": m.name,
        "trajectories": len(pairs), "success_rate": sum(t.won for t in trajs) / max(1, len(trajs)),
        "self_parse_rate": len(both) / max(1, len(pairs)),
        "word_f1_mean": sum(p["f1"] for p in both) / max(1, len(both)),
        "kind_agreement": sum(p["self_kind"] == p["oracle_kind"] for p in both) / max(1, len(both)),
        "kind_agreement_success": _rate([p for p in both if p["won"]]),
        "kind_agreement_failure": _rate([p for p in both if not p["won"]]),
        "push_direction_agreement": sum(p["self_push"] == p["oracle_push"] for p in dirs) / max(1, len(dirs)),
        "push_direction_pairs": len(dirs),
        "self_kinds": dict(Counter(p["self_kind"] for p in both)),
        "oracle_kinds": dict(Counter(p["oracle_kind"] for p in both)),
        "seconds": {"rollout": round(t_roll, 1), "self_analysis": round(t_self, 1)},
    }
    print(json.dumps(summary, indent=1))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"summary": summary, "pairs": pairs}, indent=1))


def _rate(ps: list[dict]) -> float | None:
    return sum(p["self_kind"] == p["oracle_kind"] for p in ps) / len(ps) if ps else None


if __name__ == "__main__":
    main()
