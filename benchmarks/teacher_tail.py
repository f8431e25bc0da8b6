"""Where the skill moves the teacher: the tokens of a SEED run's traces with a large teacher - student shift.

SEED's gated OPD term acts through ``sigmoid(beta * (teacher - old))`` per response token. When the
middle of the shift's distribution sits at 0 (``teacher/delta_p10`` .. ``p90`` near 0), whatever the
skill tells the policy lives in a tail of tokens. This script reads the traces a run wrote
(``traces/iter_*.json``: a few trajectories per iteration, token by token) and reports, over the
response tokens that carry a teacher log-prob:

- the shift's size, its agreement with the advantage's sign and the gate's departure from 0.5, each
  weighted by ``1 - p_old`` (a sampled token's log-prob gradient scales with it, so near-certain
  tokens, most of them, carry no update whatever the gate says);
- how many move by more than ``--tail`` nats, split by token kind (markup such as ``<action>``,
  digits, words, other) and by the trajectory's outcome;
- on those tail tokens, how often the shift has the sign of the step's advantage (the teacher says what
  the outcome already says) and how often the opposite (it says something the outcome does not);
- the largest shifts with their step's action, the outcome and the skill, to read by eye.

    python benchmarks/teacher_tail.py runs/compare/sokoban66/seed+oracle_opd1-seed3 [--tail 1.0] [--top 15]

Several run folders pool their tokens. Traces hold ``log.trace_trajectories`` trajectories per
iteration (4 by default) chosen by a seeded shuffle, successes and failures alternating, so the
counts describe that sample, not the whole batch (the batch-wide ``teacher/delta_abs_gradw``,
``teacher/adv_agree_gradw`` and ``teacher/delta_tail_frac`` are in the run's ``metrics.jsonl``).
"""

from __future__ import annotations

import argparse
import json
import math
import re
from collections import Counter
from pathlib import Path


def token_kind(tok: str) -> str:
    t = tok.strip()
    if not t:
        return "space"
    if "<" in t or ">" in t:
        return "markup"
    if re.fullmatch(r"\d+", t):
        return "digit"
    if re.fullmatch(r"[A-Za-z]+", t):
        return "word"
    return "other"


def shifted_tokens(run_dirs: list[Path]) -> list[dict]:
    """One row per response token with a teacher log-prob, over every trace of the runs."""
    from seedrl.train.traces import trace_files

    rows = []
    for rd in run_dirs:
        files = trace_files(rd)
        if not files:
            raise SystemExit(f"{rd}: no traces/iter_*.json (a run with log.trace_trajectories > 0 writes them)")
        for it, path in files.items():
            tr = json.loads(path.read_text())
            for t in tr["trajectories"]:
                for s in t["steps"]:
                    if not s.get("teacher_logp") or not s.get("old_logp"):
                        continue
                    gates = s.get("gate") or [None] * len(s["tokens"])
                    for k, (tok, o, te, g) in enumerate(zip(s["tokens"], s["old_logp"], s["teacher_logp"], gates)):
                        if o is None or te is None:
                            continue
                        rows.append({"run": rd.name, "iteration": it, "task": t["task_id"], "won": t["won"],
                                     "skill": t.get("skill") or "", "step": s["step"], "action": s["action"],
                                     "pos": k, "token": tok, "kind": token_kind(tok), "delta": te - o, "gate": g,
                                     "w": 1.0 - math.exp(o),
                                     "adv": s.get("advantage")})
    return rows


def _sign(x: float | None) -> int:
    return 0 if not x else (1 if x > 0 else -1)


def report(rows: list[dict], tail: float, top: int) -> str:
    L = []
    n = len(rows)
    big = [r for r in rows if abs(r["delta"]) > tail]
    L.append(f"{n} response tokens with a teacher log-prob; {len(big)} ({len(big) / max(1, n):.1%}) move by more "
             f"than {tail} nat")
    gates = [r["gate"] for r in rows if r["gate"] is not None]
    if gates:  # how far the gated signal departs from the uniform gate of seed_nogate / grpo_opsd
        L.append(f"gate: mean {sum(gates) / len(gates):.4f}, mean |gate - 0.5| {sum(abs(g - 0.5) for g in gates) / len(gates):.4f}"
                 f", share of tokens with |gate - 0.5| > 0.1: {sum(abs(g - 0.5) > 0.1 for g in gates) / len(gates):.2%}")
    # a sampled token's log-prob gradient scales with 1 - p_old: weigh by it to see what the update sees
    w = sum(r["w"] for r in rows)
    if w > 0:
        mass = [abs(r["delta"]) * r["w"] * abs(_sign(r["adv"])) for r in rows]
        agree = sum(m * _sign(r["delta"]) * _sign(r["adv"]) for m, r in zip(mass, rows)) / max(1e-12, sum(mass))
        line = (f"weighted by 1 - p_old (mean weight {w / max(1, n):.3f}): mean |shift| "
                f"{sum(abs(r['delta']) * r['w'] for r in rows) / w:.3f}, agreement with the advantage's sign "
                f"{agree:+.3f} (-1 against, 0 unrelated, +1 the same)")
        gw = [(r["gate"], r["w"]) for r in rows if r["gate"] is not None]
        if gw and sum(x for _, x in gw) > 0:
            line += (f", |gate - 0.5| / 0.5 {sum(abs(g - 0.5) * x for g, x in gw) / (0.5 * sum(x for _, x in gw)):.3f}")
        L.append(line)
    kinds = Counter(r["kind"] for r in rows)
    big_kinds = Counter(r["kind"] for r in big)
    L.append("by token kind (tokens, tail tokens, tail share, mean shift):")
    for k, c in kinds.most_common():
        mean = sum(r["delta"] for r in rows if r["kind"] == k) / c
        L.append(f"  {k:7s} {c:6d} {big_kinds[k]:6d} {big_kinds[k] / c:7.1%} {mean:+.3f}")
    L.append("by outcome (tokens, tail tokens, mean shift, tail mean shift):")
    for won in (True, False):
        sub = [r for r in rows if r["won"] == won]
        sb = [r for r in sub if abs(r["delta"]) > tail]
        if sub:
            L.append(f"  {'won ' if won else 'lost'}    {len(sub):6d} {len(sb):6d} "
                     f"{sum(r['delta'] for r in sub) / len(sub):+.3f} "
                     f"{(sum(r['delta'] for r in sb) / len(sb)) if sb else float('nan'):+.3f}")
    signed = [r for r in big if _sign(r["adv"])]
    if signed:
        agree = sum(_sign(r["delta"]) == _sign(r["adv"]) for r in signed)
        L.append(f"tail tokens whose shift has the advantage's sign: {agree} of {len(signed)} "
                 f"({agree / len(signed):.1%}); up on a negative advantage: "
                 f"{sum(r['delta'] > 0 and r['adv'] < 0 for r in signed)}, down on a positive one: "
                 f"{sum(r['delta'] < 0 and r['adv'] > 0 for r in signed)}")
    L.append(f"the {top} largest shifts:")
    for r in sorted(big, key=lambda r: -abs(r["delta"]))[:top]:
        L.append(f"  {r['delta']:+6.2f}  {r['run']} it{r['iteration']} {r['task']} step {r['step']} "
                 f"{'won' if r['won'] else 'lost'} adv {r['adv'] if r['adv'] is None else round(r['adv'], 2)}  token {r['token']!r} of {r['action']!r}"
                 f"  skill: {r['skill'][:140]!r}")
    return "\n".join(L)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path, help="run folders with traces/")
    ap.add_argument("--tail", type=float, default=1.0, help="|teacher - old| in nats that counts as the tail")
    ap.add_argument("--top", type=int, default=15, help="largest shifts to list")
    a = ap.parse_args()
    print(report(shifted_tokens(a.runs), a.tail, a.top))


if __name__ == "__main__":
    main()
