"""The lessons of a run: the hindsight skills of ``skills.jsonl`` grouped into recurring lessons.

Every method with skills (SEED and its family, the static-skill methods) appends one row per
analysed trajectory to ``<run_dir>/skills.jsonl`` (``seedrl.train.traces.write_skills``: iteration, traj_id,
task_id, success, skill, summary, error, raw). This module groups the skills that say the same thing
and reports, per lesson, how often it recurs per iteration, whether it fades as training goes on
(the policy has distilled it) or keeps coming back, the success rate of the trajectories it was
written for, and whether it recurs often enough (``min_recur``, 3 by default) to be a
*system-design candidate*: something to build into the environment, the prompt or the evaluation
rather than to leave to distillation.

Grouping (no model, no download; deterministic):

1. **Normalise** each skill: lowercase, keep only letter words (so "drawer 3" -> "drawer" and
   coordinates or ids disappear), drop stop words and filler ("you must ... first, then ...") and
   one-letter words, and strip common suffixes (a tiny stemmer: "taking"/"take" -> "tak",
   "boxes" -> "box").
2. **TF-IDF** over the distinct normalised skills: term weight ``1 + ln(tf)``, smoothed
   ``idf = ln((1 + N) / (1 + df)) + 1``, vectors L2-normalised; similarity is the cosine.
3. **Leader clustering** with a threshold: the distinct normalised skills are visited by count
   (descending), then alphabetically; each joins the existing lesson whose *leader* (its first,
   most frequent skill) it is most similar to, if that cosine is >= ``threshold`` (ties: the older
   lesson), else it leads a new lesson. Comparing with the leader only (not single-link) keeps
   chains of half-similar skills from merging different lessons.
4. The lesson's **text** is its most central member: the distinct skill with the highest
   count-weighted mean cosine to all the lesson's skills (its most frequent wording).

Skills that failed to parse (no skill in the row) are counted (``analysed`` vs ``parsed``) but not
grouped. The trend compares a lesson's rate per *parsed* skill in the first and second halves of
the run's iterations (the middle one of an odd count is left out), so a falling parse rate does not
look like distillation: ``fading`` (late <= half the early rate), ``rising`` (late >= twice the
early rate), ``persistent`` otherwise, ``n/a`` with fewer than two iterations; the least-squares
slope of the per-iteration rate is reported with it. The kind of a candidate (environment check /
prompt rule / evaluation test) is a keyword heuristic, only a hint.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from seedrl.errors import SeedRLError
from seedrl.fileio import atomic_write
from seedrl.skills.facts import agreement

DEFAULT_THRESHOLD = 0.5
DEFAULT_MIN_RECUR = 3
MAX_MEMBERS = 5
MAX_EXAMPLES = 5
TABLE_ROWS = 30  # non-candidate lessons shown in the Markdown table
DETAILS = 20  # candidates whose details the Markdown shows (the JSON has all)

_STOP = frozenset("""
a about above after again against all also am an and any are as at be because been before being
below between both but by can could did do does doing done down during each else even ever every
few for from further had has have having he her here hers him his how however i if in into is it
its itself just let lets ll may me might more most must my myself need needs no nor now of off on
once only onto or other our ours out over own same she should so some such than that the their
them then there these they this those through thus to too under until up upon us ve very was we
were what when where whether which while who whom why will with within would yet you your yours
first next finally always instead also make sure rather try trying still already
""".split())

# keyword heuristic for the kind of a system-design candidate (normalised like the skills)
_KIND_WORDS = {
    "environment check": """admissible invalid valid format command commands copy copied exactly exact list
        nothing happens corner corners deadlock deadlocked wall walls stuck blocked cannot impossible undo
        oscillate oscillating repeat repeated loop legal""",
    "prompt rule": """visit visiting search searching explore plan step steps order straight wander each
        receptacle receptacles look examine go carry push pushing move strategy systematically""",
    "evaluation test": """task names named wrong object objects second two both three count verify finish
        complete completed goal target targets required requires exact exactly match matching""",
}
KINDS = tuple(_KIND_WORDS)


# ------------------------------------------------------------------------------------ normalising
def _stem(w: str) -> str:
    for suf in ("ing", "ed", "es", "s"):
        if w.endswith(suf) and len(w) - len(suf) >= 3 and not (suf == "s" and w.endswith("ss")):
            w = w[: -len(suf)]
            if suf in ("ing", "ed") and len(w) > 3 and w[-1] == w[-2] and w[-1] not in "lsz":
                w = w[:-1]  # putting -> put, stopped -> stop
            break
    if w.endswith("e") and len(w) > 3:
        w = w[:-1]
    return w


def normalise(text: str) -> list[str]:
    """The words of a skill that carry its meaning: lowercase letter words, no numbers or object
    ids ("drawer 3" -> "drawer"), no stop words, lightly stemmed."""
    words = re.findall(r"[a-z]+", text.lower().replace("'", ""))
    return [_stem(w) for w in words if len(w) > 1 and w not in _STOP]


_KIND_STEMS = {k: frozenset(_stem(w) for w in v.split()) for k, v in _KIND_WORDS.items()}


def suggest_kind(text: str) -> str:
    """A *heuristic* guess of where a recurring lesson belongs: an environment check (the env could
    refuse or flag it: invalid commands, deadlocks, repeated moves), an evaluation test (the task's
    own requirement: the right object, how many, the goal) or a prompt rule (a general strategy).
    The first clause with any keyword decides (a skill states its point first; boilerplate such as
    "copy commands exactly" tends to trail); most hits wins, ties go to the earlier kind in
    ``KINDS``; no hits anywhere: a prompt rule."""
    for part in [*re.split(r"(?<=[.;:!?])\s+", text.strip()), text]:
        words = set(normalise(part))
        hits = {k: len(words & _KIND_STEMS[k]) for k in KINDS}
        best = max(hits.values())
        if best:
            return next(k for k in KINDS if hits[k] == best)
    return "prompt rule"


# ------------------------------------------------------------------------------------ TF-IDF
def tfidf(docs: Sequence[Sequence[str]]) -> list[dict[str, float]]:
    """Sparse L2-normalised TF-IDF vectors ({word: weight}) of tokenised documents."""
    n = len(docs)
    df = Counter(w for d in docs for w in set(d))
    out = []
    for d in docs:
        v = {w: (1.0 + math.log(c)) * (math.log((1 + n) / (1 + df[w])) + 1.0) for w, c in Counter(d).items()}
        norm = math.sqrt(sum(x * x for x in v.values()))
        out.append({w: x / norm for w, x in sorted(v.items())} if norm else {})
    return out


def cosine(a: dict[str, float], b: dict[str, float]) -> float:
    if len(a) > len(b):
        a, b = b, a
    return sum(x * b[w] for w, x in a.items() if w in b)


def group(texts: Sequence[str], threshold: float = DEFAULT_THRESHOLD) -> list[list[int]]:
    """Leader clustering of skill texts (see the module docstring): lists of indices into ``texts``,
    one per lesson, the largest (by number of texts) first, ties by first index. Deterministic:
    the result does not depend on the order of ``texts`` beyond the indices it returns."""
    by_key: dict[str, list[int]] = defaultdict(list)
    tokens: dict[str, list[str]] = {}
    for i, t in enumerate(texts):
        toks = normalise(t)
        key = " ".join(toks) if toks else "\0" + " ".join(t.lower().split())
        by_key[key].append(i)
        tokens[key] = toks
    keys = sorted(by_key, key=lambda k: (-len(by_key[k]), k))
    vecs = dict(zip(keys, tfidf([tokens[k] for k in keys]), strict=True))
    leaders: list[str] = []
    members: list[list[str]] = []
    index: dict[str, list[int]] = defaultdict(list)  # word -> lessons whose leader has it
    for k in keys:
        v = vecs[k]
        sims: dict[int, float] = defaultdict(float)
        for w, x in v.items():
            for c in index[w]:
                sims[c] += x * vecs[leaders[c]][w]
        best = min(((-s, c) for c, s in sims.items() if s >= threshold - 1e-12), default=None)
        if best is None:
            for w in v:
                index[w].append(len(leaders))
            leaders.append(k)
            members.append([k])
        else:
            members[best[1]].append(k)
    clusters = [sorted(i for k in ks for i in by_key[k]) for ks in members]
    return sorted(clusters, key=lambda c: (-len(c), c[0]))


def _central(idx: list[int], texts: Sequence[str]) -> str:
    """The most central text of a lesson: highest count-weighted mean cosine to all its texts
    (= cosine to the weighted centroid), then the most frequent, then alphabetical."""
    counts = Counter(texts[i] for i in idx)
    distinct = sorted(counts)
    vecs = dict(zip(distinct, tfidf([normalise(t) for t in distinct]), strict=True))
    centroid: dict[str, float] = defaultdict(float)
    for t in distinct:
        for w, x in vecs[t].items():
            centroid[w] += counts[t] * x
    return min(distinct, key=lambda t: (-round(cosine(vecs[t], centroid), 9), -counts[t], t))


# ------------------------------------------------------------------------------------ reading
def _methods_with_skills() -> str:
    from seedrl.methods import METHODS

    return ", ".join(sorted(m for m, s in METHODS.items() if s.uses_skills))


def _run_method(run_dir: Path) -> str | None:
    """The method (``algo.name``) of the run in ``run_dir``, from its config.yaml; None when unreadable."""
    from seedrl.config import read_config_file

    if not (Path(run_dir) / "config.yaml").is_file():
        return None
    try:
        algo = read_config_file(Path(run_dir) / "config.yaml").get("algo")
    except SeedRLError:
        return None
    name = algo.get("name", "grpo") if isinstance(algo, dict) else "grpo"  # grpo: the config default
    return name if isinstance(name, str) else None


def _iterations_note(run_dir: Path) -> str:
    """How far the run got, from its metrics.jsonl: ``no iteration finished``, ``3 iterations, each
    skipped by dynamic sampling``, ``2 iterations``."""
    path = Path(run_dir) / "metrics.jsonl"
    rows = []
    if path.is_file():
        for line in path.read_text(errors="replace").splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict):
                rows.append(row)
    if not rows:
        return "no iteration finished"
    skipped = sum(1 for r in rows if r.get("update/skipped"))
    its = f"{len(rows)} iteration{'s' if len(rows) != 1 else ''}"
    if skipped == len(rows):
        return f"{its}, every one skipped by dynamic sampling before its analysis"
    return its


def _no_skills_reason(run_dir: Path, path: Path, what: str) -> str:
    """Why ``run_dir`` has no skill row (``what``: "not found" or "holds no skill row"): its method
    writes no skills, or it is a run of a method that does which analysed nothing."""
    from seedrl.methods import METHODS

    method = _run_method(run_dir)
    spec = METHODS.get(method) if method else None
    if spec is not None and not spec.uses_skills:
        return (f"{path} {what}: {method} runs write no skills (only these methods do: {_methods_with_skills()}); "
                f"give a run folder of such a method, or a comparison folder holding them")
    if spec is not None:
        return (f"{path} {what}: this {method} run analysed no trajectory ({_iterations_note(run_dir)}); "
                f"there is nothing to group yet")
    return (f"{path} {what}: {run_dir} is not a run folder of a method with skills ({_methods_with_skills()}); "
            f"give such a run folder, or a comparison folder holding them")


def skills_path(run_dir: Path) -> Path:
    path = Path(run_dir) / "skills.jsonl"
    if not path.is_file():
        raise SeedRLError(_no_skills_reason(Path(run_dir), path, "not found"))
    return path


def expand_runs(paths: Sequence[Path]) -> list[Path]:
    """Run folders from the given paths: a folder with skills.jsonl is a run; a folder without one
    whose subfolders have it (a comparison) stands for those subfolders (sorted); anything else is
    an error that names the missing file."""
    out: list[Path] = []
    for p in paths:
        p = Path(p)
        if not (p / "skills.jsonl").is_file() and p.is_dir():
            cells = sorted(c for c in p.iterdir() if (c / "skills.jsonl").is_file())
            if cells:
                out.extend(cells)
                continue
        skills_path(p)
        out.append(p)
    return list(dict.fromkeys(out))


def read_skills(run_dir: Path) -> tuple[list[dict[str, Any]], int]:
    """The rows of a run's skills.jsonl and the number of unreadable lines (a run killed while
    writing can leave a cut last line)."""
    rows, bad = [], 0
    for line in skills_path(run_dir).read_text().splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            bad += 1
            continue
        if isinstance(row, dict) and isinstance(row.get("iteration"), int):
            rows.append(row)
        else:
            bad += 1
    return rows, bad


def _labels(runs: Sequence[Path]) -> list[str]:
    names = [p.resolve().name for p in runs]
    if len(set(names)) == len(names):
        return names
    return [f"{p.resolve().parent.name}/{p.resolve().name}" for p in runs]


# ------------------------------------------------------------------------------------ the report
def _trend(its: list[int], counts: dict[int, int], parsed: dict[int, int]) -> tuple[str, dict[str, Any]]:
    n = len(its)
    if n < 2:
        return "n/a", {"early": None, "late": None, "slope": None}
    early, late = its[: n // 2], its[(n + 1) // 2:]

    def rate(part: list[int]) -> float | None:
        tot = sum(parsed[i] for i in part)
        return sum(counts.get(i, 0) for i in part) / tot if tot else None

    e, la = rate(early), rate(late)
    pts = [(i, counts.get(i, 0) / parsed[i]) for i in its if parsed[i]]
    slope = None
    if len(pts) >= 2:
        mx = sum(x for x, _ in pts) / len(pts)
        my = sum(y for _, y in pts) / len(pts)
        sxx = sum((x - mx) ** 2 for x, _ in pts)
        slope = sum((x - mx) * (y - my) for x, y in pts) / sxx if sxx else None
    if e is None or la is None or (e == 0 and la == 0):
        label = "n/a"
    elif la <= 0.5 * e:
        label = "fading"
    elif la >= 2 * e:
        label = "rising"
    else:
        label = "persistent"
    return label, {"early": _round(e), "late": _round(la), "slope": None if slope is None else round(slope, 6)}


def _id_key(traj_id: Any) -> tuple[int, Any]:
    return (0, traj_id) if isinstance(traj_id, int) else (1, str(traj_id))


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def _spread(items: list[Any], k: int) -> list[Any]:
    """Up to k items evenly spread over the list (first and last included)."""
    if len(items) <= k:
        return list(items)
    return [items[round(j * (len(items) - 1) / (k - 1))] for j in range(k)]


def lessons_report(run_dir: Path | Sequence[Path], threshold: float = DEFAULT_THRESHOLD,
                   min_recur: int = DEFAULT_MIN_RECUR) -> dict[str, Any]:
    """The lessons of one run folder, or of several (a comparison's cells: iterations are pooled by
    number, example trajectories are named ``"<run>:<traj_id>"``). JSON-able; ``markdown`` holds the
    rendered report. Raises SeedRLError for a folder without skills.jsonl."""
    if not 0.0 < threshold <= 1.0:
        raise SeedRLError(f"--threshold is a cosine similarity in (0, 1], got {threshold}")
    if min_recur < 1:
        raise SeedRLError(f"--min-recur must be at least 1, got {min_recur}")
    runs = expand_runs([run_dir] if isinstance(run_dir, str | os.PathLike) else list(run_dir))
    labels = _labels(runs)
    many = len(runs) > 1
    rows: list[dict[str, Any]] = []
    unreadable = 0
    for label, run in zip(labels, runs, strict=True):
        rs, bad = read_skills(run)
        unreadable += bad
        rows.extend(r | {"_run": label} for r in rs)
    if not rows:  # an empty report would read as "no lessons", which it is not
        extra = f" ({unreadable} unreadable lines)" if unreadable else ""
        if len(runs) == 1:
            raise SeedRLError(_no_skills_reason(runs[0], runs[0] / "skills.jsonl", "holds no skill row" + extra))
        raise SeedRLError(f"none of the skills.jsonl of the {len(runs)} runs ({', '.join(labels)}) holds a skill "
                          f"row{extra}; their runs analysed no trajectory")
    rows.sort(key=lambda r: (r["_run"], r["iteration"], _id_key(r.get("traj_id"))))
    parsed_rows = [r for r in rows if isinstance(r.get("skill"), str) and r["skill"].strip()]
    its = sorted({r["iteration"] for r in rows})
    parsed_by_it = Counter(r["iteration"] for r in parsed_rows)
    parsed_by_it.update({i: 0 for i in its})
    texts = [" ".join(r["skill"].split()) for r in parsed_rows]
    lessons = []
    for idx in group(texts, threshold):
        members = [parsed_rows[i] for i in idx]
        rep = _central(idx, texts)
        variants = Counter(texts[i] for i in idx)
        by_it = Counter(r["iteration"] for r in members)
        trend, rates = _trend(its, by_it, parsed_by_it)
        count = len(members)
        won = sum(1 for r in members if r.get("success"))
        facts, _ = agreement(r.get("fact_agrees") for r in members)
        examples = [f"{r['_run']}:{r['traj_id']}" if many else r["traj_id"] for r in _spread(members, MAX_EXAMPLES)]
        candidate = count >= min_recur
        lessons.append({
            "text": rep, "count": count, "iterations": {str(i): by_it[i] for i in sorted(by_it)},
            "trend": trend, "rates": rates, "success_rate": round(won / count, 4), "examples": examples,
            "fact_agreement": _round(facts),
            "candidate": candidate, "kind": suggest_kind(rep) if candidate else None,
            "members": [rep] + [t for t, _ in sorted(variants.items(), key=lambda kv: (-kv[1], kv[0]))
                                if t != rep][: MAX_MEMBERS - 1],
            "variants": len(variants),
        })
    lessons.sort(key=lambda x: (-x["count"], x["text"]))
    for i, les in enumerate(lessons, 1):
        les["id"] = i
    fact_agreement = {}
    for tag, want in (("all", None), ("success", True), ("failure", False)):
        share, n = agreement(r.get("fact_agrees") for r in parsed_rows if want is None or bool(r.get("success")) is want)
        fact_agreement[tag] = {"share": _round(share), "checked": n}
    report = {
        "runs": [str(p) for p in runs], "run_labels": labels, "analysed": len(rows), "parsed": len(parsed_rows),
        "fact_agreement": fact_agreement,
        "parse_failures": len(rows) - len(parsed_rows), "unreadable_lines": unreadable, "iterations": its,
        "threshold": threshold, "min_recur": min_recur,
        "method": "TF-IDF cosine, leader clustering (see seedrl/experiments/lessons.py)",
        "lessons": [{k: les[k] for k in ("id", "text", "count", "iterations", "trend", "rates", "success_rate",
                                          "fact_agreement", "examples", "candidate", "kind", "members", "variants")}
                    for les in lessons],
    }
    report["markdown"] = render_markdown(report)
    return report


def lessons_report_many(run_dirs: Sequence[Path], threshold: float = DEFAULT_THRESHOLD,
                        min_recur: int = DEFAULT_MIN_RECUR) -> dict[str, Any]:
    """``lessons_report`` over several run folders pooled together."""
    return lessons_report(list(run_dirs), threshold, min_recur)


def _cell(text: str, limit: int = 220) -> str:
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


def _trend_cell(les: dict[str, Any]) -> str:
    r = les["rates"]
    if r["early"] is None and r["late"] is None:
        return les["trend"]
    return f"{les['trend']} ({_pct(r['early'])} → {_pct(r['late'])})"


def render_markdown(rep: dict[str, Any]) -> str:
    les = rep["lessons"]
    cands = [x for x in les if x["candidate"]]
    others = [x for x in les if not x["candidate"]]
    its = rep["iterations"]
    parse_rate = rep["parsed"] / rep["analysed"] if rep["analysed"] else None
    out = [f"# Lessons: {', '.join(rep['run_labels'])}", ""]
    out.append(f"- analysed trajectories: {rep['analysed']}; parsed skills: {rep['parsed']} ({_pct(parse_rate)}); "
               f"parse failures (counted, not grouped): {rep['parse_failures']}"
               + (f"; unreadable lines: {rep['unreadable_lines']}" if rep["unreadable_lines"] else ""))
    out.append(f"- iterations: {its[0]}–{its[-1]} ({len(its)})" if its else "- iterations: none")
    fa = rep.get("fact_agreement") or {}
    if fa.get("all", {}).get("checked"):
        out.append(f"- facts that agree with the env's oracle: {_pct(fa['all']['share'])} of {fa['all']['checked']} "
                   f"checkable skills (of won episodes {_pct(fa['success']['share'])} of {fa['success']['checked']}, "
                   f"of lost ones {_pct(fa['failure']['share'])} of {fa['failure']['checked']})")
    out.append(f"- grouping: {rep['method']}, threshold {rep['threshold']}; {len(les)} lessons, "
               f"{len(cands)} recurring at least {rep['min_recur']} times (system-design candidates)")
    out.append("- trend: rate per parsed skill, first half → second half of the iterations; fading = late "
               "≤ half the early rate, rising = late ≥ twice it, else persistent. Kind: a keyword heuristic.")
    out.append("")
    head = ["| # | count | trend | success | facts agree | kind | lesson |", "|---:|---:|---|---:|---:|---|---|"]

    def row(x: dict[str, Any]) -> str:
        return (f"| {x['id']} | {x['count']} | {_trend_cell(x)} | {_pct(x['success_rate'])} | "
                f"{_pct(x.get('fact_agreement'))} | {x['kind'] or ''} | {_cell(x['text'])} |")

    out.append(f"## System-design candidates (≥ {rep['min_recur']} occurrences)")
    out.append("")
    out.extend(head + [row(x) for x in cands] if cands else ["None."])
    out.append("")
    if others:
        out.append("## Other lessons" + (f" (first {TABLE_ROWS} of {len(others)})" if len(others) > TABLE_ROWS else ""))
        out.append("")
        out.extend(head + [row(x) for x in others[:TABLE_ROWS]])
        out.append("")
    if cands:
        out.append("## Candidate details" + (f" (first {DETAILS} of {len(cands)})" if len(cands) > DETAILS else ""))
        out.append("")
    for x in cands[:DETAILS]:
        out.append(f"### {x['id']}. {x['kind']} ({x['count']} times, {x['variants']} wordings)")
        out.append("")
        out.append(f"> {_cell(x['text'], 1000)}")
        out.append("")
        slope = x["rates"]["slope"]
        out.append(f"- per iteration: {', '.join(f'{i}: {c}' for i, c in x['iterations'].items())}; trend "
                   f"{_trend_cell(x)}" + ("" if slope is None else f", slope {slope:+.4f}/iteration"))
        out.append(f"- success of its trajectories: {_pct(x['success_rate'])}; examples: "
                   f"{', '.join(str(e) for e in x['examples'])}")
        for m in x["members"][1:]:
            out.append(f"- also: {_cell(m, 400)}")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def main_lessons(paths: Sequence[Path], out: Path | None = None, threshold: float = DEFAULT_THRESHOLD,
                 min_recur: int = DEFAULT_MIN_RECUR) -> str:
    """`seedrl lessons PATH...`: writes the Markdown report to ``out`` (default
    ``<run_dir>/lessons.md``; for several folders, ``lessons.md`` in their common folder) and the
    JSON next to it (``.json``); returns the Markdown's path."""
    if not paths:
        raise SeedRLError("give at least one run folder (or a comparison folder)")
    paths = [Path(p) for p in paths]
    rep = lessons_report(paths if len(paths) > 1 else paths[0], threshold, min_recur)
    if out is None:
        base = paths[0] if len(paths) == 1 else Path(os.path.commonpath([p.resolve() for p in paths]))
        out = base / "lessons.md"
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(out, rep["markdown"])
    if out.suffix != ".json":
        atomic_write(out.with_suffix(".json"), json.dumps({k: v for k, v in rep.items() if k != "markdown"},
                                                          indent=1) + "\n")
    return str(out)
