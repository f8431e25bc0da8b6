"""Where the skill moves the teacher, token by token, in a SEED run's traces.

SEED's gated OPD term weighs each sampled response token by ``sigmoid(beta * (teacher - old))``, and a
token's log-prob gradient scales with ``1 - p_old``. Most tokens of a trained policy are near-certain
and train nothing, so the plain quantiles of the shift can sit at 0 while the tokens that train move a
lot. This script reads the traces a run wrote (``traces/iter_*.json``: a few trajectories per
iteration, token by token) and reports, over the response tokens with a teacher log-prob:

- the trainer's own shift statistics (:func:`seedrl.train.metrics.shift_stats`: size weighted by
  ``1 - p_old``, agreement with the advantage's sign, share above one nat, 1st/99th percentiles),
  and the gate's departure from the uniform 0.5 of ``seed_nogate``/``grpo_opsd``, plain and weighted;
- token counts, tail tokens and mean shift by token kind (markup such as ``<action>``, digits,
  words, other) and by the trajectory's outcome;
- on the decision tokens (the content of the ``<action>`` block) apart from the format tokens: the
  shift's agreement with the advantage's sign and with the episode's outcome (won +1, lost -1), and the
  share of decision tokens whose advantage sign contradicts their episode's outcome (a group whose
  episodes all won or all lost ranks them by the invalid-action penalty alone);
- how much the OPD term weighs per unit ``opd_coef`` against the policy gradient on these tokens;
- for ``go to X`` actions in runs whose skills say where the object was (``was in X``: household's
  oracle and Stage-1 skills), the shift and gate by whether the action goes there, and by outcome;
- the largest shifts with their step's action, advantage, outcome and skill, to read by eye.

    python benchmarks/teacher_tail.py runs/compare/sokoban66/seed+oracle_opd1-seed3 [--tail 1.0] [--top 15]

Several run folders pool their tokens. Traces hold ``log.trace_trajectories`` trajectories per
iteration (4 by default) chosen by a seeded shuffle, successes and failures alternating, so the
figures describe that sample; the batch-wide ones are in the run's ``metrics.jsonl``.
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
    from seedrl.agent.parsing import action_span
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
                    span = action_span("".join(s["tokens"])) or (0, 0)
                    place = re.search(r"was in (\w+ \d+)", t.get("skill") or "")
                    action = s["action"] or ""
                    goes = action[len("go to "):].strip() if action.startswith("go to ") else None
                    at = 0
                    for k, (tok, o, te, g) in enumerate(zip(s["tokens"], s["old_logp"], s["teacher_logp"], gates)):
                        decision, at = span[0] <= at < span[1], at + len(tok)
                        if o is None or te is None:
                            continue
                        rows.append({"run": rd.name, "iteration": it, "task": t["task_id"], "won": t["won"],
                                     "decision": decision,
                                     "to_skill_place": None if goes is None or place is None else goes == place.group(1),
                                     "skill": t.get("skill") or "", "step": s["step"], "action": s["action"],
                                     "pos": k, "token": tok, "kind": token_kind(tok), "delta": te - o, "gate": g,
                                     "old": o, "w": 1.0 - math.exp(o),
                                     "adv": s.get("advantage")})
    return rows


def report(rows: list[dict], tail: float, top: int) -> str:
    import torch

    from seedrl.train.metrics import shift_stats

    n = len(rows)
    big = [r for r in rows if abs(r["delta"]) > tail]
    stats = shift_stats(torch.tensor([r["delta"] for r in rows]), torch.tensor([r["old"] for r in rows]),
                        torch.tensor([r["adv"] or 0.0 for r in rows]).sign())
    L = [f"{n} response tokens with a teacher log-prob; {len(big)} ({len(big) / max(1, n):.1%}) move by more "
         f"than {tail} nat"]
    if stats:
        L.append(f"shift: mean {stats['teacher/delta_mean']:+.4f}, 1st-99th percentile "
                 f"{stats['teacher/delta_p01']:+.3f} to {stats['teacher/delta_p99']:+.3f}")
    if "teacher/delta_abs_gradw" in stats:
        L.append(f"weighted by 1 - p_old (mean weight {sum(r['w'] for r in rows) / n:.3f}): mean |shift| "
                 f"{stats['teacher/delta_abs_gradw']:.3f}, agreement with the advantage's sign "
                 f"{stats.get('teacher/adv_agree_gradw', float('nan')):+.3f} (-1 against, 0 unrelated, +1 the same)")
    gw = [(r["gate"], r["w"]) for r in rows if r["gate"] is not None]
    if gw:  # how far the gated signal departs from the uniform gate of seed_nogate / grpo_opsd
        dev = [abs(g - 0.5) for g, _ in gw]
        line = (f"gate: mean {sum(g for g, _ in gw) / len(gw):.4f}, mean |gate - 0.5| {sum(dev) / len(dev):.4f}, "
                f"share of tokens with |gate - 0.5| > 0.1: {sum(d > 0.1 for d in dev) / len(dev):.2%}")
        wsum = sum(x for _, x in gw)
        if wsum > 0:
            line += f", weighted |gate - 0.5| / 0.5 {sum(d * x for d, (_, x) in zip(dev, gw)) / (0.5 * wsum):.3f}"
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
    L += agreement_lines(rows)
    L.append(f"the {top} largest shifts:")
    for r in sorted(big, key=lambda r: -abs(r["delta"]))[:top]:
        adv = "none" if r["adv"] is None else f"{r['adv']:+.2f}"
        L.append(f"  {r['delta']:+6.2f}  {r['run']} it{r['iteration']} {r['task']} step {r['step']} "
                 f"{'won' if r['won'] else 'lost'} adv {adv}  token {r['token']!r} of {r['action']!r}"
                 f"  skill: {r['skill'][:140]!r}")
    return "\n".join(L)


def agreement_lines(rows: list[dict]) -> list[str]:
    """Decision tokens against format tokens, and ``go to`` decisions by whether they go where the skill
    says: tokens, mean shift, gate weighted by ``1 - p_old``, and the shift's agreement with the
    advantage's sign and with the outcome (:func:`seedrl.train.metrics.shift_stats`)."""
    import torch

    from seedrl.train.metrics import shift_stats

    def line(name: str, sub: list[dict]) -> str:
        if not sub:
            return f"  {name:34s}      0"
        st = shift_stats(torch.tensor([r["delta"] for r in sub]), torch.tensor([r["old"] for r in sub]),
                         torch.tensor([r["adv"] or 0.0 for r in sub]).sign(),
                         torch.tensor([1.0 if r["won"] else -1.0 for r in sub]))
        gw = [(r["gate"], r["w"]) for r in sub if r["gate"] is not None]
        wsum = sum(x for _, x in gw)
        gate = f"{sum(g * x for g, x in gw) / wsum:.3f}" if wsum > 0 else "  –  "
        return (f"  {name:34s} {len(sub):6d} {st['teacher/delta_mean']:+.3f} {gate} "
                f"{st.get('teacher/adv_agree_gradw', float('nan')):+.3f} "
                f"{st.get('teacher/outcome_agree_gradw', float('nan')):+.3f}")

    dec = [r for r in rows if r["decision"]]
    flipped = [r for r in dec if r["adv"] and (r["adv"] > 0) != r["won"]]
    L = ["agreement where it trains (tokens, mean shift, gate weighted by 1 - p_old, agreement with the "
         "advantage's sign, with the outcome):",
         line("decision tokens", dec), line("format tokens", [r for r in rows if not r["decision"]])]
    for place in (True, False):
        for won in (True, False):
            L.append(line(f"{'go where the skill says' if place else 'go elsewhere'}, {'won' if won else 'lost'}",
                          [r for r in dec if r["to_skill_place"] is place and r["won"] == won]))
    L.append(f"decision tokens whose advantage sign contradicts the outcome: {len(flipped)} of "
             f"{sum(1 for r in dec if r['adv'])} with an advantage")
    # SEED's OPD gradient on a sampled token is opd_coef * gate * grad log p, the policy gradient's A * grad log p
    gated = [r for r in rows if r["gate"] is not None]
    pg = sum(abs(r["adv"] or 0.0) * r["w"] for r in gated)
    if pg > 0:
        L.append(f"OPD gradient weight per unit opd_coef against the policy gradient's, sum gate*(1-p) / "
                 f"sum |A|*(1-p): {sum(r['gate'] * r['w'] for r in gated) / pg:.3f}")
    return L


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path, help="run folders with traces/")
    ap.add_argument("--tail", type=float, default=1.0, help="|teacher - old| in nats that counts as the tail")
    ap.add_argument("--top", type=int, default=15, help="largest shifts to list")
    a = ap.parse_args()
    print(report(shifted_tokens(a.runs), a.tail, a.top))


if __name__ == "__main__":
    main()
