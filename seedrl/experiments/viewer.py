"""``seedrl view``: one self-contained HTML page (inline CSS, JS and SVG; no network) to see inside
a run, a comparison folder or a Stage-1 data file. It only reads files.

- a **run folder** (``metrics.jsonl``, ``eval.jsonl``, ``skills.jsonl``, ``traces/``): line charts of
  the key metrics, the traced trajectories (:mod:`seedrl.train.traces`) step by step with each
  response token coloured by the teacher - student log-prob shift (green: the skill-conditioned
  teacher prefers the sampled token, red: it does not; the numbers and the gate in the tooltip),
  the trajectory's skill (or the analyzer's raw answer and error) beside it, filterable by outcome,
  task type and parse status; a step with images (a vision-language run: the trace's ``frames``) shows
  its frames beside its tokens; a "Lessons" section when :mod:`seedrl.experiments.lessons` exists;
- a **comparison folder** (``cells/*.json``): every cell's success curve per panel, the report, and
  where a cell's run folder is here, a few of its skills, cells side by side;
- a **Stage-1 data file** (``seedrl analyze`` JSONL): each analysis' outcome, trajectory and target.

Filters can be set in the URL hash, e.g. ``view.html#outcome=failed&parse=parsed&iter=all``.
Everything from the files is escaped: Python writes text through :func:`html.escape`, and the page's
script builds the trajectories from an inline JSON block with ``textContent`` only (the JSON has
``<``, ``>`` and ``&`` escaped, so no model output can close the script or inject markup). Frames are
written by Python as ``<img>`` with a ``data:image/png;base64`` source (only strings of the base64
alphabet pass), one block per step keyed ``iteration/trajectory/step``, which the script moves into
that step.
"""

from __future__ import annotations

import base64
import html
import json
import logging
import re
from pathlib import Path
from typing import Any

import yaml

from seedrl.errors import SeedRLError
from seedrl.train.traces import trace_files

log = logging.getLogger(__name__)

#: iterations of traces one page embeds at most (evenly spread, first and last included)
MAX_TRACE_ITERATIONS = 30
#: Stage-1 rows one page embeds at most
MAX_ANALYSES = 400
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f")
RUN_CHARTS = (
    ("Success", ("rollout/success_rate", "eval/success_rate")),
    ("Losses", ("loss/pg", "loss/opd", "loss/skill_sd", "loss/kl", "loss/entropy")),
    ("Skills", ("skills/signal_frac", "skills/parse_rate", "teacher/delta_pos_frac", "teacher/delta_tail_frac",
                "opd/gate_mean")),
    # does the skill move the teacher the way the advantage / the episode's outcome points (+1) or against it (-1)
    ("Teacher shift agrees with", ("teacher/adv_agree_gradw", "teacher/adv_agree_pgw", "teacher/outcome_agree_gradw")),
    # the share of self-written skills whose facts the env's oracle confirms (envs with the check)
    ("Skill facts agree with the oracle", ("skills/fact_agreement", "skills/fact_agreement_success",
                                           "skills/fact_agreement_failure")),
    # p01/p99 stay in metrics.jsonl: on one axis their tails flatten every other line
    ("Teacher - student shift", ("teacher/delta_p10", "teacher/delta_mean", "teacher/delta_p90")),
    ("Shift where it trains", ("teacher/delta_abs_gradw", "teacher/delta_mean_adv_pos",
                               "teacher/delta_mean_adv_neg")),
)
TABLE_KEYS = ("rollout/success_rate", "eval/success_rate", "loss/pg", "loss/opd", "skills/parse_rate",
              "skills/signal_frac", "teacher/delta_mean")


def e(x: Any) -> str:
    return html.escape("" if x is None else str(x), quote=True)


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue  # a torn last line of a running run
        if isinstance(row, dict):
            rows.append(row)
    return rows


def _fmt(v: Any) -> str:
    if isinstance(v, float) and abs(v) < 1e-6:
        return "0"
    if isinstance(v, float):
        return f"{v:.4g}"
    return "" if v is None else str(v)


# ------------------------------------------------------------------ SVG
def svg_chart(title: str, series: dict[str, list[tuple[float, float]]], width: int = 290, height: int = 150,
              xlabel: str = "iteration") -> str:
    """A small line chart: one polyline per series, a dot per point with its value as tooltip."""
    series = {k: [(float(x), float(y)) for x, y in v if y is not None] for k, v in series.items()}
    series = {k: v for k, v in series.items() if v}
    if not series:
        return ""
    xs = [x for v in series.values() for x, _ in v]
    ys = [y for v in series.values() for _, y in v]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    if x1 == x0:
        x1 = x0 + 1
    if y1 == y0:
        y0, y1 = y0 - 0.5, y1 + 0.5
    left, right, top, bottom = 50, 8, 20, 30
    pw, ph = width - left - right, height - top - bottom

    def px(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * pw

    def py(y: float) -> float:
        return top + (1 - (y - y0) / (y1 - y0)) * ph

    out = [f'<svg class="chart" width="{width}" height="{height + 16 * ((len(series) + 1) // 2)}" '
           f'xmlns="http://www.w3.org/2000/svg" role="img"><title>{e(title)}</title>',
           f'<text x="{left}" y="14" class="ct">{e(title)}</text>',
           f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" class="frame"/>']
    for y in (y0, (y0 + y1) / 2, y1):
        out.append(f'<text x="{left - 4}" y="{py(y) + 4:.1f}" class="ax" text-anchor="end">{_fmt(y)}</text>')
    for x in (x0, x1):
        out.append(f'<text x="{px(x):.1f}" y="{top + ph + 14}" class="ax" text-anchor="middle">{_fmt(x)}</text>')
    out.append(f'<text x="{left + pw / 2}" y="{top + ph + 14}" class="ax" text-anchor="middle">{e(xlabel)}</text>')
    for i, (name, pts) in enumerate(series.items()):
        c = PALETTE[i % len(PALETTE)]
        pts = sorted(pts)
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
        out.append(f'<polyline fill="none" stroke="{c}" stroke-width="1.6" points="{path}"/>')
        for x, y in pts:
            out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="2.3" fill="{c}">'
                       f'<title>{e(name)} @ {_fmt(x)}: {_fmt(y)}</title></circle>')
        lx, ly = 4 + (i % 2) * (width // 2), height + 16 * (i // 2) + 2
        out.append(f'<rect x="{lx}" y="{ly - 8}" width="10" height="3" fill="{c}"/>'
                   f'<text x="{lx + 14}" y="{ly}" class="ax">{e(name)}</text>')
    out.append("</svg>")
    return "".join(out)


# ------------------------------------------------------------------ page
CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:0 24px 40px;color:#222}
h1{font-size:20px}h2{font-size:17px;border-bottom:1px solid #ddd;margin-top:28px}
.charts{display:flex;flex-wrap:wrap;gap:12px}.chart .ct{font-weight:600;font-size:12px}
.chart .ax{font-size:10px;fill:#555}.chart .frame{fill:#fafafa;stroke:#ccc}
table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ddd;padding:2px 6px;text-align:right}
th{background:#f3f3f3}td.l,th.l{text-align:left}
.filters{position:sticky;top:0;background:#fff;padding:6px 0;border-bottom:1px solid #eee;z-index:2}
.filters label{margin-right:12px}
.item{display:flex;gap:14px;border:1px solid #ddd;border-radius:6px;margin:10px 0;padding:8px}
.item[hidden]{display:none}.item .main{flex:3;min-width:0}.item .side{flex:2;min-width:0;font-size:13px}
.won{border-left:6px solid #2ca02c}.failed{border-left:6px solid #d62728}
.badge{display:inline-block;padding:0 6px;border-radius:8px;background:#eee;margin-right:4px;font-size:12px}
.step{border-top:1px dashed #ddd;padding:4px 0}.obs,.pre{white-space:pre-wrap;font:12px/1.3 monospace;
background:#f7f7f7;padding:4px;max-height:220px;overflow:auto;margin:2px 0}
.resp{font:13px/1.7 monospace;white-space:pre-wrap;word-break:break-all}
.tok{border-radius:2px;padding:0 1px;margin:0 1px 0 0;box-shadow:inset 0 0 0 1px #e6e6e6}
.skill{background:#eef6ff;border:1px solid #b8d8ff;padding:6px;border-radius:4px;white-space:pre-wrap}
.err{background:#fff1f0;border:1px solid #ffc9c4;padding:6px;border-radius:4px;white-space:pre-wrap}
.cols{display:flex;gap:12px;align-items:flex-start}.cols>div{flex:1;min-width:0}
.legend span{padding:0 6px;margin-right:6px}.muted{color:#777;font-size:12px}
.sbody{display:flex;gap:10px;align-items:flex-start}.sbody>.stext{flex:1;min-width:0}
.frames img{display:block;width:160px;max-width:40vw;image-rendering:pixelated;border:1px solid #ccc;margin:2px 0}
"""

JS = r"""
(function(){
const DATA = JSON.parse(document.getElementById('viewer-data').textContent);
// steps are numbered as the run's analysis prompt numbered them, so the analyzer's summary agrees
const STEP_BASE = DATA.step_base || 0;
const el = (tag, cls, text) => { const n = document.createElement(tag); if (cls) n.className = cls;
  if (text !== undefined && text !== null) n.textContent = String(text); return n; };
// each step's frames: a block Python wrote into #frame-store, keyed iteration/trajectory/step
const FRAMES = new Map();
for (const b of document.querySelectorAll('#frame-store .frames')) FRAMES.set(b.dataset.step, b);
const frameBlock = (it, traj, step) => FRAMES.get(it + '/' + traj + '/' + step) || null;
const fmt = v => (v === null || v === undefined) ? '-' : (Math.abs(v) >= 100 ? v.toFixed(0) : v.toFixed(3));
function tokenSpan(tok, old, teacher, gate) {
  const s = el('span', 'tok', tok);
  if (old !== null && old !== undefined) s.dataset.old = old;
  let title = 'student logp ' + fmt(old);
  if (teacher !== null && teacher !== undefined && old !== null && old !== undefined) {
    const shift = teacher - old, a = Math.min(1, Math.abs(shift) / 2) * 0.75 + 0.05;
    s.classList.add('shifted');
    s.dataset.teacher = teacher; s.dataset.shift = shift.toFixed(4);
    s.style.backgroundColor = shift >= 0 ? 'rgba(0,160,60,' + a.toFixed(3) + ')' : 'rgba(220,30,30,' + a.toFixed(3) + ')';
    title += ' | teacher logp ' + fmt(teacher) + ' | shift ' + (shift >= 0 ? '+' : '') + fmt(shift);
    if (gate !== null && gate !== undefined) { s.dataset.gate = gate; title += ' | gate ' + fmt(gate); }
  }
  s.title = title;
  return s;
}
function renderTraj(it, t) {
  const outcome = t.won ? 'won' : 'failed';
  const card = el('div', 'item traj ' + outcome);
  card.id = 'traj-' + t.traj_id;
  card.dataset.outcome = outcome; card.dataset.type = t.task_type || ''; card.dataset.parse = t.parse;
  card.dataset.iter = it;
  const main = el('div', 'main'), side = el('div', 'side');
  const head = el('div');
  head.append(el('b', null, 'iteration ' + it + ' · trajectory ' + t.traj_id + ' '),
              el('span', 'badge', outcome), el('span', 'badge', 'task ' + t.task_id),
              el('span', 'badge', 'type ' + (t.task_type || '?')), el('span', 'badge', 'reward ' + t.episode_reward),
              el('span', 'badge', t.num_steps + ' steps' + (t.truncated ? ' (truncated)' : '')));
  if (t.error) head.append(el('span', 'badge', 'env error: ' + t.error));
  main.append(head);
  if (t.task) main.append(el('div', 'muted', t.task));
  for (const s of t.steps) {
    const st = el('div', 'step');
    const sh = el('div');
    sh.append(el('b', null, 'step ' + (s.step + STEP_BASE) + ' '), el('span', 'badge', 'action ' + (s.action === null ? '(none)' : s.action)),
              el('span', 'badge', s.action_valid ? 'valid' : 'invalid'),
              el('span', 'badge', s.format_valid ? 'format ok' : 'format broken'),
              el('span', 'badge', 'reward ' + s.reward), el('span', 'badge', 'adv ' + fmt(s.advantage)));
    const body = el('div', 'sbody'), text = el('div', 'stext');
    const frames = frameBlock(it, t.traj_id, s.step);
    if (frames) body.append(frames);  // the frames the policy saw, beside the step's tokens
    text.append(el('div', 'obs', s.observation + (s.obs_chars > s.observation.length ? ' …' : '')));
    const resp = el('div', 'resp');
    for (let i = 0; i < s.tokens.length; i++)
      resp.append(tokenSpan(s.tokens[i], s.old_logp ? s.old_logp[i] : null,
                            s.teacher_logp ? s.teacher_logp[i] : null, s.gate ? s.gate[i] : null));
    text.append(resp);
    body.append(text);
    st.append(sh, body);
    main.append(st);
  }
  if (t.steps_omitted) main.append(el('div', 'muted', t.steps_omitted + ' more steps left out (trace size cap)'));
  if (t.parse === 'parsed') {
    side.append(el('b', null, 'skill'), el('div', 'skill', t.skill));
    if (t.fact_agrees === true || t.fact_agrees === false)
      side.append(el('div', t.fact_agrees ? 'muted' : 'err',
                     t.fact_agrees ? "facts agree with the env's oracle" : "facts contradict the env's oracle"));
    if (t.summary) side.append(el('div', 'muted', 'summary: ' + t.summary));
    if (t.step_skills) for (const [k, v] of Object.entries(t.step_skills))
      side.append(el('div', 'muted', 'step ' + (Number(k) + STEP_BASE) + ': ' + v));
  } else if (t.parse === 'error') {
    side.append(el('b', null, 'no skill: ' + (t.analysis_error || 'parse error')));
    side.append(el('div', 'err', t.raw || '(empty answer)'));
  } else side.append(el('span', 'muted', 'no analysis (this method has no skills)'));
  card.append(main, side);
  return card;
}
function renderAnalysis(i, r) {
  const outcome = r.success ? 'won' : 'failed';
  const card = el('div', 'item analysis ' + outcome);
  card.dataset.outcome = outcome; card.dataset.type = r.task_type || ''; card.dataset.parse = 'parsed';
  card.dataset.iter = '';
  const main = el('div', 'main'), side = el('div', 'side');
  const head = el('div');
  head.append(el('b', null, '#' + i + ' '), el('span', 'badge', outcome), el('span', 'badge', 'task ' + r.task_id));
  main.append(head, el('div', 'pre', r.trajectory));
  side.append(el('b', null, 'target skill'), el('div', 'skill', r.response));
  card.append(main, side);
  return card;
}
const list = document.getElementById('items');
const sel = {};
for (const k of ['iter', 'outcome', 'type', 'parse']) sel[k] = document.getElementById('f-' + k);
function options(select, values) {
  if (!select) return;
  for (const v of values) { const o = el('option', null, v); o.value = v; select.append(o); }
}
if (DATA.traces) {
  options(sel.iter, DATA.traces.map(t => String(t.iteration)));
  options(sel.type, [...new Set(DATA.traces.flatMap(t => t.trajectories.map(x => x.task_type || '')))].filter(x => x).sort());
  if (sel.iter && DATA.traces.length) sel.iter.value = String(DATA.traces[DATA.traces.length - 1].iteration);
} else if (DATA.analyses) {
  options(sel.type, [...new Set(DATA.analyses.map(r => r.task_type || ''))].filter(x => x).sort());
}
let built = false;
function build() {
  if (built) return; built = true;
  if (DATA.traces) for (const tr of DATA.traces) for (const t of tr.trajectories) list.append(renderTraj(tr.iteration, t));
  if (DATA.analyses) DATA.analyses.forEach((r, i) => list.append(renderAnalysis(i, r)));
}
function apply(fromHash) {
  if (fromHash) {
    const h = new URLSearchParams(location.hash.replace(/^#/, ''));
    for (const [k, v] of h) if (sel[k]) sel[k].value = v;
  }
  build();
  let shown = 0, total = 0;
  for (const c of list.children) {
    total++;
    const ok = Object.entries(sel).every(([k, s]) => !s || s.value === 'all' || c.dataset[k] === s.value);
    c.hidden = !ok; if (ok) shown++;
  }
  document.getElementById('shown').textContent = shown + ' of ' + total + ' shown';
  if (!fromHash) {
    const h = new URLSearchParams();
    for (const [k, s] of Object.entries(sel)) if (s && s.value !== 'all') h.set(k, s.value);
    history.replaceState(null, '', '#' + h.toString());
  }
}
for (const s of Object.values(sel)) if (s) s.addEventListener('change', () => apply(false));
window.addEventListener('hashchange', () => apply(true));
apply(true);
document.body.dataset.ready = '1';
})();
"""

def _scale() -> str:
    """The token colour scale: the opacity the page's script gives a shift (|shift| / 2, capped at 2 nats)."""
    cells = []
    for shift in (-2, -1, -0.5, -0.1, 0, 0.1, 0.5, 1, 2):
        a = min(1.0, abs(shift) / 2) * 0.75 + 0.05
        rgb = "0,160,60" if shift >= 0 else "220,30,30"
        cells.append(f'<span style="background:rgba({rgb},{a:.3f})">{shift:+g}</span>')
    return "".join(cells)


LEGEND = ('<div class="legend muted">tokens: <span style="background:rgba(0,160,60,.6)">teacher &gt; student</span>'
          '<span style="background:rgba(220,30,30,.6)">teacher &lt; student</span>'
          '<span class="tok">no teacher</span> (the shift is teacher − student log-prob of the sampled token; '
          'hover a token for the numbers and the gate)<br>scale, nats: ' + _scale() + ' (2 and beyond: full '
          'colour)</div>')


def _filters(parts: tuple[str, ...]) -> str:
    opts = {"iter": ("iteration", ["all"]), "outcome": ("outcome", ["all", "won", "failed"]),
            "type": ("task type", ["all"]), "parse": ("analysis", ["all", "parsed", "error", "none"])}
    out = ['<div class="filters">']
    for k in parts:
        label, values = opts[k]
        o = "".join(f'<option value="{e(v)}">{e(v)}</option>' for v in values)
        out.append(f'<label>{e(label)} <select id="f-{k}">{o}</select></label>')
    out.append('<span id="shown" class="muted"></span></div>')
    return "".join(out)


def _data_block(data: dict[str, Any]) -> str:
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    text = text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
    text = text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    return f'<script id="viewer-data" type="application/json">{text}</script>'


def page(title: str, body: str, data: dict[str, Any] | None = None) -> str:
    script = f"{_data_block(data)}<script>{JS}</script>" if data is not None else ""
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{e(title)}</title>'
            f'<meta name="viewport" content="width=device-width,initial-scale=1"><style>{CSS}</style></head>'
            f'<body><h1>{e(title)}</h1>{body}{script}</body></html>')


def _table(header: list[str], rows: list[list[Any]], left: int = 1) -> str:
    th = "".join(f'<th class="{"l" if i < left else ""}">{e(h)}</th>' for i, h in enumerate(header))
    trs = "".join("<tr>" + "".join(f'<td class="{"l" if i < left else ""}">{e(_fmt(v))}</td>'
                                   for i, v in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><tr>{th}</tr>{trs}</table>"


# ------------------------------------------------------------------ run folder
_BASE64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")


def _frame_store(traces: list[dict[str, Any]]) -> str:
    """Takes each traced step's ``frames`` out of ``traces`` (so the data block stays text) and returns the
    hidden store of ``<img>`` blocks, one per step with frames, keyed ``iteration/trajectory/step``, that
    the page's script moves into the step beside its tokens. A frame that is not a base64 string is
    skipped (a file is never trusted to hold markup)."""
    blocks = []
    for tr in traces:
        for t in tr.get("trajectories") or []:
            for s in t.get("steps") or []:
                frames = s.pop("frames", None) if isinstance(s, dict) else None
                if not isinstance(frames, list):
                    continue
                stride = s.get("frames_stride") or []
                imgs = []
                for i, f in enumerate(frames):
                    if not (isinstance(f, str) and _BASE64.fullmatch(f)):
                        continue
                    k = stride[i] if i < len(stride) and isinstance(stride[i], int) else 1
                    label = f"frame {i + 1} of {len(frames)}" + (f" (every {k}th pixel)" if k > 1 else "")
                    imgs.append(f'<img class="frame" alt="{e(label)}" title="{e(label)}" '
                                f'src="data:image/png;base64,{f}">')
                if imgs:
                    key = f"{tr.get('iteration')}/{t.get('traj_id')}/{s.get('step')}"
                    blocks.append(f'<div class="frames" data-step="{e(key)}">{"".join(imgs)}</div>')
    return f'<div id="frame-store" hidden>{"".join(blocks)}</div>' if blocks else ""


def _spread(items: list[Any], n: int) -> list[Any]:
    """At most ``n`` of ``items``, evenly spread, first and last kept."""
    if len(items) <= n:
        return items
    idx = sorted({round(i * (len(items) - 1) / (n - 1)) for i in range(n)})
    return [items[i] for i in idx]


def _lessons_section(run_dir: Path) -> str:
    if not (run_dir / "skills.jsonl").exists():  # a method without skills has no lessons
        return ""
    try:
        from seedrl.experiments.lessons import lessons_report  # another module; optional
    except ImportError:
        return ""
    try:
        rep = lessons_report(run_dir)
    except Exception as exc:  # noqa: BLE001 - the page still shows everything else
        log.warning("lessons of %s: %s", run_dir, exc)
        return f'<h2>Lessons</h2><p class="muted">no lessons: {e(exc)}</p>'
    lessons = rep.get("lessons") or []
    if not lessons:
        return '<h2>Lessons</h2><p class="muted">no lessons found</p>'
    rows = []
    for x in lessons:
        its = x.get("iterations") or {}
        spread = ", ".join(f"{k}: {v}" for k, v in sorted(its.items(), key=lambda kv: int(kv[0]))[:12])
        rows.append(f'<tr><td class="l">{e(x.get("id"))}</td><td class="l">{e(x.get("text"))}</td>'
                    f'<td>{e(x.get("count"))}</td><td>{e(_fmt(x.get("success_rate")))}</td>'
                    f'<td class="l">{e(spread)}</td><td class="l">{e(", ".join(str(t) for t in (x.get("examples") or [])[:8]))}'
                    f'</td><td>{"yes" if x.get("candidate") else ""}</td></tr>')
    return ('<h2 id="lessons-h">Lessons</h2><table id="lessons"><tr><th class="l">id</th><th class="l">lesson</th><th>count</th>'
            '<th>success rate</th><th class="l">iterations (iteration: count)</th><th class="l">example trajectories'
            '</th><th>candidate</th></tr>' + "".join(rows) + "</table>")


def step_base(run_dir: Path) -> int:
    """The first step number of the run's analysis prompt (:data:`seedrl.skills.prompts.STEP_BASE`), read
    as :func:`seedrl.config.load_run_config` reads the run (a run saved before ``skills.analysis_prompt``
    ran the legacy prompt); SEED's prompt where the config cannot be read."""
    from seedrl.config import load_run_config
    from seedrl.skills.prompts import STEP_BASE

    try:
        return STEP_BASE[load_run_config(run_dir / "config.yaml").skills.analysis_prompt]
    except (SeedRLError, OSError):
        return STEP_BASE["seed"]


def render_run(run_dir: Path, max_iterations: int = MAX_TRACE_ITERATIONS) -> str:
    run_dir = Path(run_dir)
    metrics = _read_jsonl(run_dir / "metrics.jsonl")
    evals = _read_jsonl(run_dir / "eval.jsonl")
    cfg: dict[str, Any] = {}
    if (run_dir / "config.yaml").exists():
        try:
            cfg = yaml.safe_load((run_dir / "config.yaml").read_text()) or {}
        except yaml.YAMLError:
            cfg = {}
    parts = []
    about = {"method": (cfg.get("algo") or {}).get("name"), "env": (cfg.get("env") or {}).get("name"),
             "model": (cfg.get("model") or {}).get("name"), "iterations done": len(metrics),
             "iterations planned": cfg.get("iterations")}
    parts.append("<p>" + " · ".join(f"<b>{e(k)}</b> {e(v)}" for k, v in about.items() if v is not None) + "</p>")
    charts = []
    for title, keys in RUN_CHARTS:
        series = {k: [(r["iteration"], r[k]) for r in metrics if isinstance(r.get(k), (int, float))]
                  for k in keys if k != "eval/success_rate"}
        if "eval/success_rate" in keys:
            for r in evals:
                if isinstance(r.get("success_rate"), (int, float)):
                    series.setdefault(f"eval/{r.get('split', '?')}", []).append((r.get("iteration", 0),
                                                                                  r["success_rate"]))
        charts.append(svg_chart(title, series))
    parts.append('<h2 id="metrics">Metrics</h2><div class="charts">' + "".join(charts) + "</div>")
    keys = [k for k in TABLE_KEYS if any(k in r for r in metrics)]
    if metrics:
        rows = [[r.get("iteration")] + [r.get(k) for k in keys] for r in metrics]
        parts.append("<details><summary>every iteration</summary>" + _table(["iteration", *keys], rows) + "</details>")
    lessons = _lessons_section(run_dir)
    files = trace_files(run_dir)
    chosen = _spread(list(files.items()), max_iterations)
    traces = []
    for _it, p in chosen:
        try:
            traces.append(json.loads(p.read_text(errors="replace")))
        except ValueError:
            log.warning("%s is not JSON; skipped", p)
    frames = _frame_store(traces)
    base = step_base(run_dir)
    note = (f"{len(traces)} of {len(files)} traced iterations shown" if len(files) > len(traces)
            else f"{len(traces)} traced iterations") + f"; steps numbered from {base}, as the analysis prompt numbers them"
    if not files:
        note = "no traces in this run (log.trace_trajectories = 0, or a run from before traces)"
    parts.append(f'<h2 id="trajectories">Trajectories</h2><p class="muted">{e(note)}</p>' + LEGEND
                 + _filters(("iter", "outcome", "type", "parse")) + '<div id="items"></div>' + frames + lessons)
    nav = ('<p class="muted"><a href="#metrics">metrics</a> · <a href="#trajectories">trajectories</a>'
           + (' · <a href="#lessons-h">lessons</a>' if lessons else "") + "</p>")
    parts.insert(1, nav)
    return page(f"seedrl run: {run_dir.name}", "".join(parts), {"traces": traces, "step_base": base})


# ------------------------------------------------------------------ comparison folder
def _find_run(folder: Path, run_dir: str | None) -> Path | None:
    if not run_dir:
        return None
    p = Path(run_dir)
    for base in (Path.cwd(), *folder.resolve().parents):
        q = p if p.is_absolute() else base / p
        if (q / "skills.jsonl").exists():
            return q
    return None


#: how a comparison's skill list marks the oracle's verdict on a skill's facts
_FACTS = {True: " · facts agree with the oracle", False: " · facts contradict the oracle"}


def render_comparison(folder: Path, skills_per_cell: int = 4) -> str:
    folder = Path(folder)
    cells = []
    for p in sorted((folder / "cells").glob("*.json")):
        try:
            c = json.loads(p.read_text())
        except ValueError:
            continue
        c["_name"] = p.stem
        cells.append(c)
    if not cells:
        raise SeedRLError(f"{folder}/cells holds no cell JSON; give a comparison folder (seedrl compare --out)")
    parts = []
    splits = sorted({s for c in cells for pt in c.get("curve") or [] for s in (pt.get("panels") or {})})
    charts = []
    for split in splits:
        series = {c["_name"]: [(pt.get("episodes", pt.get("iteration", 0)), pt["panels"][split].get("success"))
                               for pt in c.get("curve") or [] if split in (pt.get("panels") or {})] for c in cells}
        charts.append(svg_chart(f"success on {split}", series, width=560, height=260, xlabel="episodes"))
    parts.append('<h2>Curves</h2><div class="charts">' + "".join(charts) + "</div>")
    rows = [[c["_name"], c.get("method") or c.get("algo"), c.get("seed"),
             *[(c.get("final") or {}).get(s) for s in splits], c.get("wall_s")] for c in cells]
    parts.append(_table(["cell", "method", "seed", *[f"final {s}" for s in splits], "wall s"], rows, left=2))
    cols = []
    for c in cells:
        run = _find_run(folder, c.get("run_dir"))
        if run is None:
            continue
        rows_ = [r for r in _read_jsonl(run / "skills.jsonl") if r.get("skill")]
        seen, picked = set(), []
        for r in reversed(rows_):  # the latest distinct skills
            if r["skill"] not in seen:
                seen.add(r["skill"])
                picked.append(r)
            if len(picked) >= skills_per_cell:
                break
        items = "".join(f'<div class="skill" style="margin:4px 0"><span class="muted">iteration {e(r.get("iteration"))}'
                        f' · {"won" if r.get("success") else "failed"}'
                        f'{_FACTS.get(r.get("fact_agrees"), "")}</span><br>{e(r["skill"])}</div>' for r in picked)
        cols.append(f'<div class="cellskills"><b>{e(c["_name"])}</b> <span class="muted">{e(run)}</span>'
                    f'{items or "<p class=muted>no parsed skill</p>"}</div>')
    if cols:
        parts.append('<h2>Skills, side by side</h2><div class="cols">' + "".join(cols) + "</div>")
    png = folder / "curves.png"
    if png.exists() and png.stat().st_size < 2_000_000:
        parts.append('<h2>curves.png</h2><img alt="curves" style="max-width:100%" src="data:image/png;base64,'
                     + base64.b64encode(png.read_bytes()).decode() + '">')
    if (folder / "report.md").exists():
        parts.append('<h2>report.md</h2><div class="pre">' + e((folder / "report.md").read_text(errors="replace"))
                     + "</div>")
    return page(f"seedrl comparison: {folder.name}", "".join(parts))


# ------------------------------------------------------------------ Stage-1 data
def _trajectory_text(row: dict[str, Any]) -> str:
    msgs = row.get("messages")
    if isinstance(msgs, list):
        user = [m.get("content", "") for m in msgs if isinstance(m, dict) and m.get("role") == "user"]
        return "\n\n".join(str(u) for u in user) or json.dumps(msgs, ensure_ascii=False)
    return str(row.get("prompt", ""))


def render_stage1(path: Path, max_rows: int = MAX_ANALYSES) -> str:
    rows = _read_jsonl(Path(path))
    if not rows or not any("response" in r for r in rows):
        raise SeedRLError(f"{path}: no rows with a 'response'; give a run folder, a comparison folder or a "
                          f"`seedrl analyze` JSONL file")
    shown = rows[:max_rows]
    analyses = [{"success": bool(r.get("success")), "task_id": r.get("task_id"),
                 "task_type": str(r.get("task_id", "")).split("-")[0] or None,
                 "trajectory": _trajectory_text(r)[:20_000], "response": str(r.get("response", ""))} for r in shown]
    won = sum(bool(r.get("success")) for r in rows)
    body = (f'<p><b>{len(rows)}</b> analyses: {won} of trajectories that won, {len(rows) - won} of failed ones'
            + (f"; the first {len(shown)} shown" if len(rows) > len(shown) else "") + "</p>"
            + _filters(("outcome", "type")) + '<div id="items"></div>')
    return page(f"seedrl Stage-1 data: {Path(path).name}", body, {"analyses": analyses})


# ------------------------------------------------------------------ entry point
def render(path: Path) -> str:
    """The page for a run folder, a comparison folder or a Stage-1 JSONL file."""
    path = Path(path)
    if not path.exists():
        raise SeedRLError(f"{path} does not exist; give a run folder, a comparison folder or a Stage-1 JSONL file")
    if path.is_dir():
        if (path / "cells").is_dir():
            return render_comparison(path)
        if any((path / n).exists() for n in ("metrics.jsonl", "config.yaml", "traces")):
            return render_run(path)
        raise SeedRLError(f"{path} is neither a run folder (metrics.jsonl, traces/) nor a comparison folder (cells/)")
    return render_stage1(path)


def default_out(path: Path) -> Path:
    path = Path(path)
    return path / "view.html" if path.is_dir() else path.with_name(path.name + ".html")


def write_view(path: Path, out: Path | None = None) -> Path:
    out = Path(out) if out else default_out(path)
    text = render(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    return out
