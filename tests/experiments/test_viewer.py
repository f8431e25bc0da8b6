"""`seedrl view` and the traces it reads: what the trainer stores per iteration (bounded, cut on
resume), that the page shows the trainer's own numbers, that it escapes model output, and that the
page works in a real browser (headless Chromium: trajectories, skills, coloured tokens, filters)."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from seedrl.cli import app
from seedrl.experiments.viewer import render, write_view
from seedrl.rollout.types import StepSample, Trajectory
from seedrl.train.traces import build_trace, cut_traces, pick_trajectories, trace_files, trace_path
from tests.helpers import SKILL, FixedAnalyzer, tiny_cfg

DATA = Path(__file__).parent / "data"
EVIL = "</script><script>alert(1)</script><b>&amp;"


def _page_data(text: str) -> dict:
    m = re.search(r'<script id="viewer-data" type="application/json">(.*?)</script>', text, re.S)
    assert m, "no data block"
    return json.loads(m.group(1))


# ------------------------------------------------------------------ a tiny real SEED run, traced
@pytest.fixture(scope="module")
def seed_run(tmp_path_factory):
    """Two SEED iterations of the tiny model with skills on even trajectories; the trainer's own
    update batches (old and teacher log-probs) and the trace inputs are captured."""
    from seedrl.train.trainer import Trainer

    run = tmp_path_factory.mktemp("view") / "run"
    cfg = tiny_cfg(run, **{"algo.name": "seed", "iterations": 2, "save_every": 1, "eval.num_tasks": 2,
                           "log.trace_trajectories": 4})
    tr = Trainer(cfg)
    tr.analyzer = FixedAnalyzer()
    batches, trace_args = [], []
    update, save_trace = tr.update, tr.save_trace

    def capture_update(batch):
        batches.append((tr.iteration + 1, batch))
        return update(batch)

    def capture_trace(*args):
        trace_args.append((tr.iteration + 1, args))
        return save_trace(*args)

    tr.update, tr.save_trace = capture_update, capture_trace
    tr.train()
    return {"run": run, "cfg": cfg, "batches": batches, "trace_args": trace_args, "tokenizer": tr.tokenizer,
            "html": write_view(run)}


@pytest.mark.slow
def test_each_iteration_has_a_trace_within_the_cap(seed_run):
    files = trace_files(seed_run["run"])
    assert list(files) == [1, 2]
    cap = seed_run["cfg"].log.trace_max_bytes
    for it, p in files.items():
        size = p.stat().st_size
        assert 0 < size <= cap, (it, size)
        t = json.loads(p.read_text())
        assert t["iteration"] == it and t["method"] == "seed" and t["gate_beta"] == 5.0
        trajs = t["trajectories"]
        assert len(trajs) == 4
        # FixedAnalyzer: even ids have the skill, odd ids the parse error (and the raw answer)
        for x in trajs:
            assert x["parse"] == ("parsed" if x["traj_id"] % 2 == 0 else "error")
            assert (x["skill"] == SKILL) == (x["traj_id"] % 2 == 0)
            assert x["steps"] and all(len(s["ids"]) == len(s["tokens"]) == len(s["old_logp"]) for s in x["steps"])
            assert all((s["teacher_logp"] is not None) == (x["parse"] == "parsed") for s in x["steps"])


@pytest.mark.slow
def test_a_small_cap_drops_steps_and_holds(seed_run):
    """The same inputs under the smallest allowed cap: the file fits and says what it left out."""
    it, args = seed_run["trace_args"][0]
    trajs, samples, old, adv, teacher, signal, results = args
    for cap in (4096, 6000, 9000):
        t = build_trace(it, trajs, samples, old, adv, teacher, signal, results, k=6, max_bytes=cap, seed=1,
                        tokenizer=seed_run["tokenizer"], gate_beta=5.0, method="m", signal_name="opd")
        size = len(json.dumps(t, ensure_ascii=False, separators=(",", ":")).encode())
        assert size <= cap
        assert sum(x["steps_omitted"] for x in t["trajectories"]) > 0 or len(t["trajectories"]) < 6


@pytest.mark.slow
def test_the_page_shows_the_trainers_own_log_probs_and_gate(seed_run):
    """Round trip: every token value the page carries equals the trainer's old/teacher log-prob of
    that token in the update batch of that iteration (to the 4 decimals traces keep), and the gate
    is sigmoid(beta * (teacher - old))."""
    data = _page_data(seed_run["html"].read_text())
    batches = dict(seed_run["batches"])
    checked = 0
    for tr in data["traces"]:
        b = batches[tr["iteration"]]
        where = {(s.traj_id, s.step): i for i, s in enumerate(b.samples)}
        for t in tr["trajectories"]:
            for s in t["steps"]:
                i = where[(t["traj_id"], s["step"])]
                assert s["ids"] == b.samples[i].response_ids
                for k, v in enumerate(s["old_logp"]):
                    assert abs(v - float(b.old_logp[i][k])) <= 6e-5
                if s["teacher_logp"] is not None:
                    assert float(b.signal[i]) == 1.0
                    for k, v in enumerate(s["teacher_logp"]):
                        o, te = float(b.old_logp[i][k]), float(b.teacher_logp[i][k])
                        assert abs(v - te) <= 6e-5
                        assert abs(s["gate"][k] - 1 / (1 + math.exp(-5.0 * (te - o)))) <= 6e-5
                        checked += 1
                else:
                    assert float(b.signal[i]) == 0.0
    assert checked > 0


@pytest.mark.slow
def test_resume_deletes_traces_past_the_checkpoint(seed_run, tmp_path):
    from seedrl.train.trainer import Trainer

    run = tmp_path / "run"
    shutil.copytree(seed_run["run"], run)
    # an iteration killed after its trace, before its checkpoint
    (run / "traces" / "iter_000003.json").write_text("{}")
    (run / "traces" / "iter_000004.json.tmp").write_text("{")
    tr = Trainer(seed_run["cfg"].model_copy(update={"run_dir": str(run)}), resume=True)
    tr.close()
    assert tr.iteration == 2 and list(trace_files(run)) == [1, 2]
    assert not list((run / "traces").glob("*.tmp"))


# ------------------------------------------------------------------ headless Chromium
def _chromium() -> str | None:
    found = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing on CI (.ci/run installs it): the viewer's browser test must run there")
        pytest.skip("no chromium here (apt-get install chromium); CI runs this test")
    return found


def dump_dom(html_file: Path, fragment: str = "") -> str:
    out = subprocess.run([_chromium(), "--headless", "--disable-gpu", "--no-sandbox", "--virtual-time-budget=5000",
                          "--dump-dom", html_file.resolve().as_uri() + fragment],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert 'data-ready="1"' in out.stdout, "the page's script did not finish"
    return out.stdout


def _cards(dom: str) -> list[tuple[str, bool]]:
    """(attributes, visible) of every trajectory card."""
    return [(m.group(1), " hidden" not in m.group(1) and 'hidden=""' not in m.group(1))
            for m in re.finditer(r'<div (class="item [^>]*)>', dom)]


@pytest.mark.slow
def test_the_page_in_a_browser_shows_trajectories_skills_tokens_and_filters(seed_run):
    page = seed_run["html"]
    traces = _page_data(page.read_text())["traces"]
    n = sum(len(t["trajectories"]) for t in traces)
    parsed = sum(x["parse"] == "parsed" for t in traces for x in t["trajectories"])
    won = sum(x["won"] for t in traces for x in t["trajectories"])

    dom = dump_dom(page, "#iter=all")
    cards = _cards(dom)
    assert len(cards) == n and all(v for _, v in cards)
    assert SKILL in dom and "parse: no JSON object" in dom
    shifted = re.findall(r'<span class="tok shifted"([^>]*)>', dom)
    assert shifted
    for attrs in shifted:  # coloured by the sign of teacher - student; the numbers in data and tooltip
        a = dict(re.findall(r'([\w-]+)="([^"]*)"', attrs))
        shift = float(a["data-teacher"]) - float(a["data-old"])
        assert abs(shift - float(a["data-shift"])) < 1e-3 and 0 <= float(a["data-gate"]) <= 1
        assert a["style"].startswith("background-color: rgba(0, 160, 60," if shift >= 0 else
                                     "background-color: rgba(220, 30, 30,")
        assert "teacher logp" in a["title"] and "gate" in a["title"]
    assert re.search(r'<span class="tok" data-old="[-\d.]+" title="student logp', dom)  # no teacher: uncoloured
    assert f"{n} of {n} shown" in dom

    dom = dump_dom(page, "#iter=all&parse=parsed")
    cards = _cards(dom)
    assert sum(v for _, v in cards) == parsed and 0 < parsed < n
    assert all(v == ('data-parse="parsed"' in a) for a, v in cards)

    dom = dump_dom(page, "#iter=all&outcome=won")
    assert sum(v for _, v in _cards(dom)) == won
    dom = dump_dom(page)  # default: the latest iteration only
    assert all(v == (f'data-iter="{traces[-1]["iteration"]}"' in a) for a, v in _cards(dom))


@pytest.mark.slow
def test_stage1_data_with_hostile_text_opens_escaped_in_a_browser(tmp_path):
    rows = [{"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": f"played {EVIL}"}],
             "response": f"skill {EVIL}", "task_id": "a-1", "success": i % 2 == 0} for i in range(3)]
    f = tmp_path / "data.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    page = write_view(f)
    dom = dump_dom(page, "#outcome=failed")
    assert "<script>alert(1)" not in dom and "&lt;/script&gt;&lt;script&gt;alert(1)" in dom
    assert sum(v for _, v in _cards(dom)) == 1 and len(_cards(dom)) == 3


# ------------------------------------------------------------------ without a browser
def test_model_output_never_becomes_markup(tmp_path):
    rows = [{"prompt": f"traj {EVIL}", "response": EVIL, "task_id": EVIL, "success": True}]
    (tmp_path / "d.jsonl").write_text(json.dumps(rows[0]) + "\n")
    text = render(tmp_path / "d.jsonl")
    body = text[text.index('<script id="viewer-data"'):]
    assert EVIL not in text and "</script><script>alert" not in text
    assert body.count("</script>") == 2  # the data block's and the page script's own
    assert _page_data(text)["analyses"][0]["response"] == EVIL  # the text itself survives, as data


def test_comparison_folder_shows_curves_and_cells_skills(tmp_path):
    folder = tmp_path / "cmp"
    shutil.copytree(DATA / "compare_fixture", folder)
    cell = json.loads((folder / "cells" / "seed-seed0.json").read_text())
    run = tmp_path / "runs" / "seed0"
    run.mkdir(parents=True)
    (run / "skills.jsonl").write_text(json.dumps({"iteration": 3, "traj_id": 1, "success": True,
                                                  "skill": f"push right {EVIL}"}) + "\n"
                                      + json.dumps({"iteration": 3, "traj_id": 2, "success": False,
                                                    "skill": "The apple was in drawer 2.", "fact_agrees": False})
                                      + "\n")
    cell["run_dir"] = str(run)
    (folder / "cells" / "seed-seed0.json").write_text(json.dumps(cell))
    text = render(folder)
    assert text.count('<svg class="chart"') >= 1 and "polyline" in text
    assert "Skills, side by side" in text and "push right &lt;/script&gt;" in text and EVIL not in text
    assert text.count("facts contradict the oracle") == 1 and "facts agree with the oracle" not in text
    assert "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "")  # nothing from a network


def test_pick_mixes_outcomes_deterministically():
    trajs = [Trajectory(i, i // 2, "t", steps=[StepSample([1], [2], [0.0], i, i // 2, 0, 0.0, True)], won=i < 2)
             for i in range(8)]
    a = [t.traj_id for t in pick_trajectories(trajs, 4, seed=3)]
    assert a == [t.traj_id for t in pick_trajectories(trajs, 4, seed=3)]
    assert sorted(t < 2 for t in a) == [False, False, True, True]  # both wins, two failures
    assert pick_trajectories(trajs, 0, seed=3) == []


def test_cut_traces_keeps_iterations_up_to_the_checkpoint(tmp_path):
    for it in (1, 2, 3, 10):
        trace_path(tmp_path, it).parent.mkdir(exist_ok=True)
        trace_path(tmp_path, it).write_text("{}")
    (tmp_path / "traces" / "iter_000004.json.tmp").write_text("{")
    assert cut_traces(tmp_path, 2) == 2
    assert list(trace_files(tmp_path)) == [1, 2] and not list((tmp_path / "traces").glob("*.tmp"))


def test_view_command_errors_are_one_line(tmp_path):
    r = CliRunner().invoke(app, ["view", str(tmp_path / "nope")])
    assert r.exit_code == 2 and "error: " in r.output and "does not exist" in r.output
    (tmp_path / "empty").mkdir()
    r = CliRunner().invoke(app, ["view", str(tmp_path / "empty")])
    assert r.exit_code == 2 and "neither a run folder" in r.output


def test_token_colour_scale_matches_the_pages_script_and_charts_keep_tails_apart():
    """The legend's scale is computed with the script's own opacity rule (|shift| / 2, capped, × 0.75 + 0.05),
    and the extreme quantiles p01/p99 are not drawn on the axis of the other shift lines."""
    from seedrl.experiments import viewer

    page_js = Path(viewer.__file__).read_text()
    assert "Math.min(1, Math.abs(shift) / 2) * 0.75 + 0.05" in page_js
    assert 'rgba(0,160,60,0.425)">+1</span>' in viewer.LEGEND and 'rgba(220,30,30,0.800)">-2</span>' in viewer.LEGEND
    charted = [k for _, keys in viewer.RUN_CHARTS for k in keys]
    assert "teacher/delta_p01" not in charted and "teacher/delta_p99" not in charted
    assert all(len(keys) <= 6 for _, keys in viewer.RUN_CHARTS)  # legends stay readable


@pytest.mark.slow
def test_steps_are_numbered_as_the_runs_analysis_prompt_numbers_them(seed_run, tmp_path):
    """The viewer's step labels and step-skill keys follow the analysis prompt (0-based for SEED's
    prompt, 1-based for the legacy one), so the analyzer's summary ("at step 3 ...") points at the step
    the page labels 3."""
    from seedrl.experiments.viewer import step_base

    run = tmp_path / "run"
    shutil.copytree(seed_run["run"], run)
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    # saved before the key (and config_version) existed: the legacy prompt
    del cfg["skills"]["analysis_prompt"], cfg["config_version"]
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    assert step_base(run) == 1
    assert step_base(tmp_path / "no_run") == 0
    for prompt, first in (("seed", 0), ("legacy", 1)):
        cfg = yaml.safe_load((run / "config.yaml").read_text())
        cfg["skills"]["analysis_prompt"] = prompt
        (run / "config.yaml").write_text(yaml.safe_dump(cfg))
        page = write_view(run)
        assert _page_data(page.read_text())["step_base"] == first
        dom = dump_dom(page, "#iter=all")
        labels = [int(x) for x in re.findall(r"<b>step (\d+) </b>", dom)]
        traces = _page_data(page.read_text())["traces"]
        assert labels == [s["step"] + first for t in traces for x in t["trajectories"] for s in x["steps"]]
        assert f"steps numbered from {first}" in dom
