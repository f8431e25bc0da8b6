"""The report of a comparison, rendered only from its cell JSONs.

``summarize(cells)`` computes every number the report shows (pure, deterministic: fixed bootstrap
seed); ``render_markdown(summary)`` and ``plot_curves(summary, path)`` only format it, so
``summary.json``, ``report.md`` and ``curves.png`` always agree.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from seedrl.errors import SeedRLError
from seedrl.experiments.stats import (
    N_BOOT,
    bootstrap_ci,
    efficiency_ratio,
    efficiency_ratio_ci,
    episodes_to_threshold,
    equal_per_iteration,
    intervals_overlap,
    mean_curve,
    paired_difference_ci,
    paired_task_bootstrap,
)

STAGE_ORDER = ("rollout", "old_logp", "ref_logp", "analysis", "rescore", "advantage", "update", "eval", "checkpoint")
DIAG_SHOWN = ("skills/parse_rate", "skills/signal_frac", "teacher/delta_mean", "teacher/delta_pos_frac",
              "teacher/delta_p10", "teacher/delta_p50", "teacher/delta_p90", "teacher/delta_abs_gradw",
              "teacher/adv_agree_gradw", "teacher/adv_agree_pgw", "teacher/outcome_agree_gradw", "teacher/delta_tail_frac",
              "teacher/delta_mean_adv_pos", "teacher/delta_mean_adv_neg", "opd/gate_mean")


def _ci(values: Sequence[float]) -> dict[str, Any]:
    mean, lo, hi = bootstrap_ci(values)
    return {"mean": mean, "ci95": [lo, hi], "n": len(values)}


def _distinct(values) -> list:
    out = []
    for v in values:
        if v not in out:
            out.append(v)
    return out


def _panel_at(cell: dict[str, Any], split: str, iteration: int) -> dict[str, Any] | None:
    point = next((p for p in cell["curve"] if p["iteration"] == iteration), None)
    return point["panels"][split] if point else None


def _outcomes(cell: dict[str, Any], kind: str, split: str) -> str | None:
    it = cell["curve"][-1]["iteration"] if kind == "final" else cell["best"]["iteration"]
    panel = _panel_at(cell, split, it)
    return panel.get("won") if panel else None


def _paired_outcomes(a_won: dict[int, str | None], b_won: dict[int, str | None], a_success: dict[int, float],
                     b_success: dict[int, float]) -> dict[str, Any]:
    """Paired difference a - b: the hierarchical seeds x tasks bootstrap where both sides of every common
    seed recorded per-task outcomes, else the bootstrap over seeds alone (which ignores the panel's
    evaluation noise)."""
    common = set(a_won) & set(b_won)
    if common and all(a_won[k] and b_won[k] and len(a_won[k]) == len(b_won[k]) for k in common):
        return paired_task_bootstrap({k: a_won[k] for k in common}, {k: b_won[k] for k in common})
    return paired_difference_ci(a_success, b_success) | {"method": "seeds"}


def _paired(by: dict[str, list[dict[str, Any]]], kind: str, m: str, base: str, split: str,
            per_seed: dict[str, Any]) -> dict[str, Any]:
    """Paired difference of method ``m`` to the baseline at its final or best checkpoint."""
    return _paired_outcomes({c["seed"]: _outcomes(c, kind, split) for c in by[m]},
                            {c["seed"]: _outcomes(c, kind, split) for c in by[base]},
                            per_seed[kind][m][split], per_seed[kind][base][split])


def _paired_at(a_cells: list[dict[str, Any]], b_cells: list[dict[str, Any]], split: str, a_it: int | None,
               b_it: int | None) -> dict[str, Any] | None:
    """Paired difference between two evaluation points of the same seeds: ``a_cells`` at iteration
    ``a_it`` minus ``b_cells`` at ``b_it`` (None: each cell's last). None where a seed lacks the point."""
    def points(cells: list[dict[str, Any]], it: int | None) -> dict[int, dict[str, Any] | None]:
        return {c["seed"]: _panel_at(c, split, c["curve"][-1]["iteration"] if it is None else it) for c in cells}

    a, b = points(a_cells, a_it), points(b_cells, b_it)
    common = set(a) & set(b)
    if not common or any(a[k] is None or b[k] is None for k in common):
        return None
    return _paired_outcomes({k: a[k].get("won") for k in common}, {k: b[k].get("won") for k in common},
                            {k: a[k]["success"] for k in common}, {k: b[k]["success"] for k in common})


def _paired_note(s: dict[str, Any]) -> str:
    used = {d.get("method") for kind in s.get("paired", {}).values() for m in kind.values() for d in m.values()}
    if "seeds x tasks" in used:
        return (" Paired differences resample seeds and, within each seed, the panel's tasks (the same tasks "
                "for both methods), so they include the evaluation noise of a finite panel"
                + ("; where a cell lacks per-task outcomes they resample seeds only." if "seeds" in used else "."))
    return ""


def summarize(cells: list[dict[str, Any]], baseline: str = "grpo",
              efficiency_split: str | None = None) -> dict[str, Any]:
    """Everything the report shows, from the cell JSONs of one comparison. ``efficiency_split``: the panel
    of the sample-efficiency table (default valid_unseen, else the last panel). Where the runs trained on
    part of an evaluated panel, its held-out part is read as one more panel, ``<split>_heldout``
    (:func:`seedrl.experiments.heldout.with_heldout_panels`)."""
    from seedrl.experiments.heldout import with_heldout_panels

    cells, derived = with_heldout_panels(cells)
    methods = _distinct(c["algo"] for c in sorted(cells, key=lambda c: (c["algo"] != baseline, c["algo"])))
    by = {m: sorted((c for c in cells if c["algo"] == m), key=lambda c: c["seed"]) for m in methods}
    splits = list(cells[0]["splits"])
    sel = cells[0].get("selected_on", splits[0])
    target = efficiency_split or ("valid_unseen" if "valid_unseen" in splits else splits[-1])
    if target not in splits:
        raise SeedRLError(f"--efficiency-split {target!r} is not a panel of these cells; panels: {', '.join(splits)}")
    s: dict[str, Any] = {"baseline": baseline if baseline in methods else None, "methods": methods, "splits": splits,
                         "selected_on": sel, "efficiency_split": target, "bootstrap": {"resamples": N_BOOT, "seed": 0}}
    s["header"] = {
        "commands": _distinct(c.get("command", "") for c in cells),
        "rendered_by": None,
        "commits": _distinct(f"{c.get('commit', 'unknown')}{' (dirty)' if c.get('dirty') else ''}" for c in cells),
        "config_hashes": {m: {str(c["seed"]): c["config_hash"] for c in by[m]} for m in methods},
        # tagged variants (--tag) differ from the others by their own --set overrides, on purpose
        "shared_config_hashes": _distinct(c["shared_config_hash"] for c in cells if c.get("method", c["algo"]) == c["algo"]),
        "variant_config_hashes": {c["algo"]: c["shared_config_hash"] for c in cells
                                  if c.get("method", c["algo"]) != c["algo"]},
        "panel_hashes": {k: _distinct(c["panel_hashes"][k] for c in cells) for k in ["train", *splits]
                         if k in cells[0]["panel_hashes"]},
        "machines": _distinct(c.get("machine", {}) for c in cells),
        "seeds": {m: [c["seed"] for c in by[m]] for m in methods},
        "env": _distinct(c["env"] for c in cells), "model": _distinct(c["model"] for c in cells),
        "budget_episodes": _distinct(c["budget_episodes"] for c in cells),
        "iterations": _distinct(c["iterations"] for c in cells),
        "episodes_per_iteration": _distinct(c["episodes_per_iteration"] for c in cells),
        "eval_every": _distinct(c["eval_every"] for c in cells),
        # cells renamed after they ran (a method name came to mean another method): {new: old}
        "relabelled": {c["algo"]: c["relabelled_from"] for c in cells if c.get("relabelled_from")},
        "derived_panels": derived,
        "starts": start_groups(cells),
    }
    per_seed = {kind: {m: {sp: {c["seed"]: (c["final"][sp] if kind == "final" else c["best"]["success"][sp])
                                for c in by[m]} for sp in splits} for m in methods}
                for kind in ("final", "best")}
    for kind in ("final", "best"):
        s[kind] = {m: {sp: _ci(list(per_seed[kind][m][sp].values())) | {"per_seed": {str(k): v for k, v in
                                                                                       per_seed[kind][m][sp].items()}}
                       for sp in splits} for m in methods}
    s["best_iterations"] = {m: {str(c["seed"]): c["best"]["iteration"] for c in by[m]} for m in methods}
    # paired differences to the baseline
    s["paired"] = {}
    if s["baseline"]:
        for kind in ("final", "best"):
            s["paired"][kind] = {
                m: {sp: _json_keys(_paired(by, kind, m, baseline, sp, per_seed)) for sp in splits}
                for m in methods if m != baseline}
    s["same_rollouts"] = same_rollouts(by, baseline) if s["baseline"] else {}
    # what RL changed: each method's final checkpoint against its own iteration-0 policy, same seeds
    s["learning"] = {m: {sp: _json_keys(d) for sp in splits if (d := _paired_at(by[m], by[m], sp, None, 0))}
                     for m in methods}
    # learning curves: mean over seeds with a bootstrap band at every evaluation point
    s["curves"] = {}
    for m in methods:
        s["curves"][m] = {}
        for sp in splits:
            pts: dict[int, list[float]] = {}
            its: dict[int, int] = {}
            for c in by[m]:
                for p in c["curve"]:
                    pts.setdefault(p["episodes"], []).append(p["panels"][sp]["success"])
                    its[p["episodes"]] = p["iteration"]
            s["curves"][m][sp] = [{"episodes": e, "iteration": its[e], **_ci(v)} for e, v in sorted(pts.items())]
    # sample efficiency: episodes to reach the baseline's final success on the target panel
    eff: dict[str, Any] = {"split": target, "threshold": None, "methods": {}}
    if s["baseline"]:
        thr = s["final"][baseline][target]["mean"]
        eff["threshold"] = thr
        curves = {m: mean_curve([[(p["episodes"], p["panels"][target]["success"]) for p in c["curve"]] for c in by[m]])
                  for m in methods}
        base_ep = episodes_to_threshold([(x, y) for x, y, _ in curves[baseline]], thr)
        for m in methods:
            ep = episodes_to_threshold([(x, y) for x, y, _ in curves[m]], thr)
            eff["methods"][m] = {"episodes": ep, "ratio_to_baseline": efficiency_ratio(ep, base_ep),
                                 "budget": max(x for x, _, _ in curves[m])}
            if m != baseline:
                by_seed = {mm: {c["seed"]: [(p["episodes"], p["panels"][target]["success"]) for p in c["curve"]]
                                for c in by[mm]} for mm in (m, baseline)}
                eff["methods"][m]["ratio_ci"] = efficiency_ratio_ci(by_seed[m], by_seed[baseline])
        # the same question with intervals: the paired difference to the baseline at every evaluation point
        episodes = {p["iteration"]: p["episodes"] for c in cells for p in c["curve"]}
        eff["paired_at"] = {m: [{"iteration": it, "episodes": episodes[it], **_json_keys(d)} for it in sorted(episodes)
                                if (d := _paired_at(by[m], by[baseline], target, it, it)) is not None]
                            for m in methods if m != baseline}
    s["efficiency"] = eff
    # cost
    s["cost"] = {}
    for m in methods:
        stages = _distinct(k for c in by[m] for k in c["stage_s"])
        s["cost"][m] = {
            "wall_s": _ci([c["wall_s"] for c in by[m]]),
            "stage_s": {k: sum(c["stage_s"].get(k, 0.0) for c in by[m]) / len(by[m])
                        for k in sorted(stages, key=lambda k: (STAGE_ORDER.index(k) if k in STAGE_ORDER else 99, k))},
            "tokens": {k: sum(c["tokens"].get(k, 0) for c in by[m]) / len(by[m])
                       for k in ("rollout", "analysis", "total", "analysis_prompt")},
            "initial_eval_reused": sum(bool(c.get("initial_eval_reused")) for c in by[m]),
        }
    # diagnostics
    s["diagnostics"] = {}
    for m in methods:
        keys = _distinct(k for c in by[m] for k in c.get("diagnostics", {}))
        if keys:
            s["diagnostics"][m] = {k: _ci([c["diagnostics"][k]["mean"] for c in by[m] if k in c["diagnostics"]])
                                   for k in keys}
    s["findings"] = findings(s)
    return s


NOT_RECORDED = "not recorded"


def start_groups(cells: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The cells grouped by the fingerprint of the model they started from (``start.fingerprint``, the
    sha256 of its weights: :func:`seedrl.experiments.compare.start_record`): ``{fingerprint: {"of": what
    was hashed, "cells": {method: [seeds]}}}``, in the order first met; cells written before they recorded
    it, or whose start could not be hashed, are grouped under ``"not recorded"``."""
    out: dict[str, dict[str, Any]] = {}
    for c in sorted(cells, key=lambda c: (c["algo"], c["seed"])):
        start = c.get("start") or {}
        g = out.setdefault(start.get("fingerprint") or NOT_RECORDED, {"of": start.get("of"), "cells": {}})
        g["cells"].setdefault(c["algo"], []).append(c["seed"])
    return out


def _start_line(groups: dict[str, dict[str, Any]]) -> str:
    """The report's line on the start model: its fingerprint, or which cells started from which."""
    head = "- start model (sha256 of its weights): "
    if not groups:
        return head + NOT_RECORDED
    if len(groups) == 1:
        ((fp, g),) = groups.items()
        return head + (f"{NOT_RECORDED} (cells written before cells recorded it)" if fp == NOT_RECORDED
                       else f"{fp[:16]}, the same for every cell ({g['of']})")

    def who(g: dict[str, Any]) -> str:
        return "; ".join(f"{m} seed{'s' if len(v) > 1 else ''} {', '.join(map(str, v))}" for m, v in g["cells"].items())

    recorded = [fp for fp in groups if fp != NOT_RECORDED]
    warn = ("**cells started from different models**: " if len(recorded) > 1 else
            "**not recorded for every cell, so not known to be the same**: ")
    return head + warn + ", ".join(f"{NOT_RECORDED} for {who(g)}" if fp == NOT_RECORDED else
                                   f"{fp[:16]} for {who(g)} ({g['of']})" for fp, g in groups.items())


def same_rollouts(by: dict[str, list[dict[str, Any]]], baseline: str) -> dict[str, dict[str, list[list[int]]]]:
    """{method: {seed: [[iteration, episodes equal to the baseline's, episodes], ...]}} for every cell whose
    baseline twin (same seed) recorded rollout digests: how long the two runs trained on the same episodes.
    Once a cell's rollouts differ from its twin's they follow another sampling branch, and their paired
    difference mixes the branch with the method's effect."""
    def digests(c: dict[str, Any]) -> dict[int, dict[int, str]]:
        return {int(it): dict(enumerate(d)) for it, d in (c.get("rollout_digests") or {}).items()}

    twins = {c["seed"]: digests(c) for c in by.get(baseline, [])}
    out: dict[str, dict[str, list[list[int]]]] = {}
    for m, cells in by.items():
        if m == baseline:
            continue
        for c in cells:
            rows = [[it, k, n] for it, (k, n) in equal_per_iteration(digests(c), twins.get(c["seed"], {})).items()]
            if rows:
                out.setdefault(m, {})[str(c["seed"])] = rows
    return out


def _json_keys(d: dict[str, Any]) -> dict[str, Any]:
    return d | {"per_seed": {str(k): v for k, v in d["per_seed"].items()}}


def findings(s: dict[str, Any]) -> list[str]:
    """Plain statements of what the numbers do and do not show; a difference is only called a
    difference when its paired 95% CI excludes 0."""
    out = []
    base = s["baseline"]
    if base and len(s["methods"]) == 1:
        return [f"Only {base} cells: nothing to compare yet."]
    if not base:
        return ["No baseline cells: paired differences and sample efficiency are not computed."]
    for sp, d in s["learning"].get(base, {}).items():
        lo, hi = d["ci95"]
        if d["n_seeds"] >= 2:
            verdict = (f"{'raised' if d['mean'] > 0 else 'lowered'} it by {d['mean']:+.3f} (paired 95% CI" if d["significant"]
                       else f"no significant change ({d['mean']:+.3f}, paired 95% CI")
            out.append(f"{base}'s training, final vs its iteration-0 policy on {sp}: {verdict} [{lo:+.3f}, {hi:+.3f}] "
                       f"over {d['n_seeds']} seeds).")
    for m, by_split in s["paired"].get("final", {}).items():
        for sp, d in by_split.items():
            lo, hi = d["ci95"]
            overlap = intervals_overlap(s["final"][m][sp]["ci95"], s["final"][base][sp]["ci95"])
            if d["n_seeds"] < 2:
                out.append(f"{m} vs {base}, final {sp}: {d['n_seeds']} paired seed(s), no interval; nothing can be concluded.")
            elif d["significant"]:
                word = "higher" if d["mean"] > 0 else "lower"
                out.append(f"{m} vs {base}, final {sp}: {m} is {word} by {d['mean']:+.3f} (paired 95% CI "
                           f"[{lo:+.3f}, {hi:+.3f}] over {d['n_seeds']} seeds excludes 0).")
            else:
                out.append(f"{m} vs {base}, final {sp}: no significant difference ({d['mean']:+.3f}, paired 95% CI "
                           f"[{lo:+.3f}, {hi:+.3f}] over {d['n_seeds']} seeds includes 0; the per-method CIs "
                           f"{'overlap' if overlap else 'do not overlap'}).")
    eff = s["efficiency"]
    for m, e in eff["methods"].items():
        if m == base:
            continue
        if e["episodes"] is None:
            out.append(f"{m} never reached {base}'s final {eff['split']} success ({eff['threshold']:.3f}) within "
                       f"{e['budget']:.0f} episodes (mean curve).")
    return out


# ---------------------------------------------------------------------------------------- markdown
def _f(x: float | None, nd: int = 3) -> str:
    return "–" if x is None else f"{x:.{nd}f}"


def _dci(d: dict[str, Any]) -> str:
    """A paired difference with its CI and verdict."""
    tag = "significant" if d["significant"] else "not significant"
    return f"{d['mean']:+.3f} [{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}] ({tag})"


def _secs(x: float) -> str:
    return f"{x:.1f}" if x < 100 else f"{x:.0f}"


def _mci(d: dict[str, Any]) -> str:
    return f"{_f(d['mean'])} [{_f(d['ci95'][0])}, {_f(d['ci95'][1])}]"


def _ratio_ci(ci: dict[str, Any] | None) -> str:
    if not ci or ci["ci95"][0] is None:
        return "–"
    lo, hi = ci["ci95"]
    return f"[{lo:.2f}, {'not reached' if hi is None else f'{hi:.2f}'}] ({ci['n_seeds']} paired seeds)"


def _table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def render_markdown(s: dict[str, Any], notes: str | None = None) -> str:
    """The report; ``notes`` (the comparison folder's hand-written ``notes.md``) closes it."""
    h = s["header"]
    base = s["baseline"]
    sp_all = s["splits"]
    L: list[str] = ["# Comparison: " + ", ".join(s["methods"]) + f" on {', '.join(h['env'])}", ""]
    L.append("Produced by:")
    L += [f"```\n{c}\n```" for c in h["commands"] if c]
    if h.get("rendered_by") and h["rendered_by"] not in h["commands"]:
        L.append(f"Report rendered by: `{h['rendered_by']}`")
    for new, old in h.get("relabelled", {}).items():
        L.append(f"Relabelled: the `{new}` cells ran as `{old}` (the commands above give the name they ran under); "
                 f"the method is unchanged, its old name now means another method.")
    L += ["",
          f"- commit: {', '.join(h['commits'])}" + (" **(cells from different commits)**" if len(h["commits"]) > 1 else ""),
          f"- model: {', '.join(map(str, h['model']))}; env: {', '.join(h['env'])}",
          f"- budget: {', '.join(map(str, h['budget_episodes']))} episodes per cell = "
          f"{', '.join(map(str, h['iterations']))} iterations x {', '.join(map(str, h['episodes_per_iteration']))} "
          f"episodes; evaluation every {', '.join(map(str, h['eval_every']))} iterations and at iteration 0",
          "- seeds: " + "; ".join(f"{m}: {', '.join(map(str, v))}" for m, v in h["seeds"].items()),
          "- shared config hash (all but method and seed): " + ", ".join(h["shared_config_hashes"])
          + (" **(cells differ in config: not a controlled comparison)**" if len(h["shared_config_hashes"]) > 1 else "")
          + "".join(f"; variant {m} (its --tag overrides): {v}" for m, v in h.get("variant_config_hashes", {}).items()),
          "- config hashes: " + "; ".join(f"{m}: " + ", ".join(f"seed {k} {v}" for k, v in d.items())
                                         for m, d in h["config_hashes"].items()),
          _start_line(h.get("starts", {})),
          "- panel hashes: " + "; ".join(f"{k} {', '.join(v)}" for k, v in h["panel_hashes"].items()),
          *(f"- panel {k}: {v}" for k, v in h.get("derived_panels", {}).items()),
          "- machine: " + "; ".join(f"{mm.get('platform', '?')}, {mm.get('cpu_count', '?')} CPUs"
                                    + (f" ({mm['cpu_bf16']})" if mm.get("cpu_bf16") else "")
                                    + (f", {mm['gpu']}" if mm.get("gpu") else "") for mm in h["machines"]),
          "",
          f"Numbers are means over training seeds with a 95% percentile-bootstrap CI over seeds "
          f"({s['bootstrap']['resamples']} resamples, RNG seed {s['bootstrap']['seed']}) in brackets. With few "
          f"seeds these intervals are crude; a difference is only stated where its paired CI excludes 0."
          + _paired_note(s), ""]
    L += ["## Findings", ""] + [f"- {x}" for x in s["findings"]] + [""]
    for kind, title in (("final", "Final-step success"),
                        ("best", f"Best-checkpoint success (checkpoint selected on {s['selected_on']})")):
        L += [f"## {title}", ""]
        rows = [[m, *[_mci(s[kind][m][sp]) for sp in sp_all]] for m in s["methods"]]
        L += [_table(["method", *sp_all], rows), ""]
        if kind == "best":
            L += ["Selecting on the seen panel makes its own best number optimistic; the other panels are "
                  "measured at the selected checkpoint.", ""]
        if base and s["paired"].get(kind):
            L += [f"Paired per-seed difference to {base} ({kind}):", ""]
            rows = []
            for m, by_split in s["paired"][kind].items():
                rows.append([f"{m} - {base}", *[_dci(by_split[sp]) for sp in sp_all]])
            L += [_table(["difference", *sp_all], rows), ""]
    if s.get("same_rollouts"):
        its = sorted({r[0] for d in s["same_rollouts"].values() for rows in d.values() for r in rows})
        L += [f"## Same rollouts as {base}", "",
              f"Training episodes (per iteration) in which a cell took exactly the actions its {base} twin of the same "
              "seed took (equal response tokens in every turn; `rollout/digests`). While all are equal the two runs "
              "trained on the same data; after the first difference they follow different sampling branches, and "
              "their paired difference mixes that branch with the method's effect.", ""]
        rows = []
        for m, d in s["same_rollouts"].items():
            for seed, r in d.items():
                at = {it: f"{n}/{tot}" for it, n, tot in r}
                rows.append([f"{m}, seed {seed}", *[at.get(it, "–") for it in its]])
        L += [_table(["cell \\ iteration", *map(str, its)], rows), ""]
    if any(s["learning"].values()):
        L += ["## What training changed (final - iteration 0)", "",
              "Each method's final checkpoint against its own iteration-0 policy (the same initial model for "
              "all), paired on seeds and, where recorded, on the panel's tasks.", ""]
        rows = [[m, *[_dci(s["learning"][m][sp]) if sp in s["learning"][m] else "–" for sp in sp_all]]
                for m in s["methods"]]
        L += [_table(["method", *sp_all], rows), ""]
    eff = s["efficiency"]
    if eff["threshold"] is not None:
        L += ["## Sample efficiency", "",
              f"Episodes each method's mean curve needs to first reach {base}'s final {eff['split']} success "
              f"({_f(eff['threshold'])}), at the evaluation points; ratio = method / {base}.", ""]
        rows = []
        for m, e in eff["methods"].items():
            rows.append([m, "not reached" if e["episodes"] is None else f"{e['episodes']:.0f}",
                         _f(e["ratio_to_baseline"], 2) if e["ratio_to_baseline"] is not None else "–",
                         _ratio_ci(e.get("ratio_ci"))])
        L += [_table(["method", "episodes to threshold", f"ratio to {base}", "ratio 95% CI"], rows), "",
              f"No ratio (–) where a method never reached the threshold or {base} met it at 0 episodes "
              "(the initial policy). The interval is over the seeds both methods ran: it resamples them (the same draw for "
              "both) and recomputes "
              f"the threshold, both mean curves and the ratio; 'not reached' as its upper end means that in more "
              f"than 2.5% of the resamples the method's mean curve never reached {base}'s final success within the "
              "budget. It does not resample the panel's tasks, and with few seeds it is crude.", ""]
        paired_at = {m: pts for m, pts in eff.get("paired_at", {}).items() if pts}
        if paired_at:
            eps = [p["episodes"] for p in next(iter(paired_at.values()))]
            L += [f"The same question with intervals: paired difference to {base} on {eff['split']} at each "
                  "evaluation point (episodes).", ""]
            rows = [[f"{m} - {base}", *[_dci(p) for p in pts]] for m, pts in paired_at.items()]
            L += [_table(["difference \\ episodes", *map(str, eps)], rows), "",
                  f"Each point is its own test: with {len(eps) - 1} points after the start, one interval that "
                  "excludes 0 is weaker evidence than it looks.", ""]
    L += ["## Cost", "", "Mean per cell: wall time (with its CI over seeds), time per stage (s), tokens generated "
          "(rollout responses; analysis completions).", ""]
    stages = _distinct(k for m in s["methods"] for k in s["cost"][m]["stage_s"])
    rows = []
    for m in s["methods"]:
        c = s["cost"][m]
        rows.append([m, f"{_secs(c['wall_s']['mean'])} [{_secs(c['wall_s']['ci95'][0])}, {_secs(c['wall_s']['ci95'][1])}]",
                     *[_secs(c['stage_s'].get(k, 0.0)) for k in stages],
                     f"{c['tokens']['rollout']:.0f}", f"{c['tokens']['analysis']:.0f}", f"{c['tokens']['total']:.0f}"])
    L += [_table(["method", "wall s", *stages, "rollout tokens", "analysis tokens", "total tokens"], rows), ""]
    reused = {m: s["cost"][m]["initial_eval_reused"] for m in s["methods"] if s["cost"][m]["initial_eval_reused"]}
    if reused:
        L += ["The iteration-0 evaluation is identical for every method of a seed and was measured once; cells that "
              "reused it (" + ", ".join(f"{m}: {n}" for m, n in reused.items()) + ") count no time for it.", ""]
    if s["diagnostics"]:
        L += ["## Distillation diagnostics", "",
              "Per-iteration means averaged over the run, then over seeds. parse_rate: analyses that gave a skill; "
              "signal_frac: step samples with a teacher signal; delta = teacher_logp - logp over response tokens "
              "(pos_frac: share > 0); gate_mean: mean OPD gate.", ""]
        keys = [k for k in DIAG_SHOWN if any(k in d for d in s["diagnostics"].values())]
        keys += [k for k in _distinct(k for d in s["diagnostics"].values() for k in d) if k not in keys]
        rows = [[m, *[_mci(s["diagnostics"][m][k]) if k in s["diagnostics"][m] else "–" for k in keys]]
                for m in s["diagnostics"]]
        L += [_table(["method", *keys], rows), ""]
    L += ["## Learning curves", "", "![learning curves](curves.png)", "",
          "Mean success over seeds at each evaluation point (the bands of the plot and summary.json hold the "
          "95% bootstrap CIs):", ""]
    for sp in sp_all:
        eps = _distinct(p["episodes"] for m in s["methods"] for p in s["curves"][m][sp])
        eps.sort()
        rows = []
        for m in s["methods"]:
            at = {p["episodes"]: p for p in s["curves"][m][sp]}
            rows.append([m, *[_f(at[e]["mean"]) if e in at else "–" for e in eps]])
        L += [f"{sp}:", "", _table(["method \\ episodes", *[str(e) for e in eps]], rows), ""]
    if notes and notes.strip():
        L += ["## Investigation notes", "",
              "_Written by hand in `notes.md` next to this report, each figure with the command that produced "
              "it; not computed from the cells._", "", notes.strip(), ""]
    return "\n".join(L)


def read_notes(out: Path) -> str | None:
    p = Path(out) / "notes.md"
    return p.read_text() if p.is_file() else None


# ---------------------------------------------------------------------------------------- plot
def plot_curves(s: dict[str, Any], path: Path) -> None:
    """One panel per evaluation split: mean success over seeds vs episodes, 95% bootstrap band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    splits = s["splits"]
    fig, axes = plt.subplots(1, len(splits), figsize=(5.5 * len(splits), 4), squeeze=False)
    for ax, sp in zip(axes[0], splits):
        for m in s["methods"]:
            pts = s["curves"][m][sp]
            x = [p["episodes"] for p in pts]
            ax.plot(x, [p["mean"] for p in pts], marker="o", ms=3, label=f"{m} (n={max(p['n'] for p in pts)})")
            ax.fill_between(x, [p["ci95"][0] for p in pts], [p["ci95"][1] for p in pts], alpha=0.2)
        ax.set_title(sp)
        ax.set_xlabel("environment episodes")
        ax.set_ylabel("success rate")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize=8)
    fig.suptitle("success rate: mean over training seeds, 95% bootstrap band over seeds", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_report(cells: list[dict[str, Any]], out: Path, baseline: str = "grpo",
                 rendered_by: str | None = None, efficiency_split: str | None = None) -> dict[str, Any]:
    """summary.json, report.md and curves.png under ``out``, all from ``cells`` (plus ``out/notes.md``,
    if present, at the end of report.md)."""
    out.mkdir(parents=True, exist_ok=True)
    s = summarize(cells, baseline, efficiency_split)
    s["header"]["rendered_by"] = rendered_by
    (out / "summary.json").write_text(json.dumps(s, indent=1))
    (out / "report.md").write_text(render_markdown(s, read_notes(out)))
    plot_curves(s, out / "curves.png")
    return s
