"""`seedrl compare`: the statistics against hand-computed cases, the report against a stored
fixture, an end-to-end run of the tiny model (resumable), and independence from env workers."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from seedrl.cli import app
from seedrl.errors import SeedRLError
from seedrl.experiments.stats import (
    bootstrap_ci,
    efficiency_ratio,
    episodes_to_threshold,
    mean_curve,
    paired_difference_ci,
    paired_differences,
    paired_task_bootstrap,
)

runner = CliRunner()
FIXTURE = Path(__file__).parent / "data" / "compare_fixture"
RESULTS = Path(__file__).parents[2] / "benchmarks" / "results"


# ------------------------------------------------------------------------------------ statistics
def test_bootstrap_ci_hand_cases():
    assert bootstrap_ci([0.5, 0.5, 0.5]) == (0.5, 0.5, 0.5)  # no spread, no width
    assert bootstrap_ci([0.3]) == (0.3, 0.3, 0.3)  # one seed: a point, not an interval
    assert all(math.isnan(x) for x in bootstrap_ci([]))
    # two values: resample means are 0, 0.5, 1 with probability 1/4, 1/2, 1/4 -> the 2.5% and
    # 97.5% percentiles are the extremes
    assert bootstrap_ci([0.0, 1.0]) == (0.5, 0.0, 1.0)
    # [0, 0, 1]: P(mean = 0) = 8/27 and P(mean = 1) = 1/27 = 3.7% > 2.5% -> [0, 1]
    mean, lo, hi = bootstrap_ci([0.0, 0.0, 1.0])
    assert mean == pytest.approx(1 / 3) and (lo, hi) == (0.0, 1.0)
    # [0, 0, 0, 0, 0, 0, 0, 0, 0, 1]: P(all zeros) = 0.9^10 = 35% -> lo = 0; P(mean >= 0.3) ~ 7% -> hi >= 0.3
    mean, lo, hi = bootstrap_ci([0.0] * 9 + [1.0])
    assert mean == pytest.approx(0.1) and lo == 0.0 and 0.3 <= hi <= 0.4
    assert bootstrap_ci([0.1, 0.4, 0.9]) == bootstrap_ci([0.1, 0.4, 0.9])  # fixed RNG seed
    with pytest.raises(ValueError):
        bootstrap_ci([0.1, float("nan")])


def test_paired_differences_use_common_seeds_and_call_significance_by_the_ci():
    assert paired_differences({0: 0.5, 1: 0.6, 2: 0.7}, {0: 0.4, 1: 0.5, 3: 0.9}) == pytest.approx({0: 0.1, 1: 0.1})
    same_sign = paired_difference_ci({0: 0.5, 1: 0.75, 2: 1.0}, {0: 0.25, 1: 0.5, 2: 0.5})  # +0.25, +0.25, +0.5
    assert same_sign["mean"] == pytest.approx(1 / 3) and same_sign["ci95"] == [0.25, 0.5]
    assert same_sign["significant"]
    mixed = paired_difference_ci({0: 0.5, 1: 0.4, 2: 0.6}, {0: 0.3, 1: 0.5, 2: 0.55})  # +0.2, -0.1, +0.05
    assert mixed["ci95"][0] < 0 < mixed["ci95"][1] and not mixed["significant"]
    assert not paired_difference_ci({0: 0.9}, {0: 0.1})["significant"]  # one seed: never
    zero = paired_difference_ci({0: 0.5, 1: 0.5}, {0: 0.5, 1: 0.5})
    assert zero["ci95"] == [0.0, 0.0] and not zero["significant"]


def test_episodes_to_threshold_hand_cases():
    curve = [(0, 0.25), (64, 0.4), (128, 0.5), (192, 0.45)]
    assert episodes_to_threshold(curve, 0.5) == 128
    assert episodes_to_threshold(curve, 0.45) == 128  # first point at or above, not the last
    assert episodes_to_threshold(curve, 0.6) is None  # never reached
    assert episodes_to_threshold(curve, 0.25) == 0  # the initial policy already meets it
    assert episodes_to_threshold(curve, 0.1) == 0
    assert episodes_to_threshold(list(reversed(curve)), 0.4) == 64  # order of the points does not matter
    # ties: a mean of thirds equals the threshold despite floating point
    assert episodes_to_threshold([(0, 0.0), (10, (0.1 + 0.2 + 0.6) / 3)], 0.3) == 10
    assert efficiency_ratio(64, 128) == 0.5
    assert efficiency_ratio(None, 128) is None and efficiency_ratio(64, None) is None
    assert efficiency_ratio(0, 0) is None and efficiency_ratio(64, 0) is None
    assert mean_curve([[(0, 0.0), (8, 0.5)], [(0, 1.0), (8, 0.5)]]) == [(0.0, 0.5, 2), (8.0, 0.5, 2)]


# ------------------------------------------------------------------------------------ report
@pytest.mark.slow
def test_report_rendered_from_the_stored_fixture_shows_its_numbers(tmp_path):
    from seedrl.experiments.compare import load_cells
    from seedrl.experiments.report import write_report

    s = write_report(load_cells(FIXTURE), tmp_path, baseline="grpo")
    md = (tmp_path / "report.md").read_text()
    assert (tmp_path / "curves.png").stat().st_size > 1000
    assert json.loads((tmp_path / "summary.json").read_text())["final"] == s["final"]
    assert s["methods"] == ["grpo", "grpo_opsd", "seed"]  # baseline first
    # final-step success: mean over seeds [percentile bootstrap CI]
    assert "| grpo | 0.500 [0.500, 0.500] | 0.500 [0.250, 0.750] |" in md
    assert "| seed | 0.833 [0.750, 1.000] | 0.667 [0.500, 0.750] |" in md
    assert "| grpo_opsd | 0.500 [0.500, 0.500] | 0.250 [0.250, 0.250] |" in md
    # best checkpoint, selected on valid_seen (earliest on ties), reported on both panels
    assert "| grpo | 0.583 [0.500, 0.750] | 0.333 [0.250, 0.500] |" in md
    assert "| seed | 0.833 [0.750, 1.000] | 0.667 [0.500, 0.750] |" in md
    # paired differences: seen +0.25, +0.25, +0.5 (all positive); unseen +0.25, +0.25, 0 (CI touches 0)
    assert ("| seed - grpo | +0.333 [+0.250, +0.500] (significant) | +0.167 [+0.000, +0.250] (not significant) |"
            in md)
    assert "| grpo_opsd - grpo | +0.000 [+0.000, +0.000] (not significant) | -0.250 [-0.500, +0.000] (not significant) |" in md
    assert "seed is higher by +0.333" in md and "no significant difference (+0.167" in md
    assert "beats" not in md
    # sample efficiency: threshold = grpo's final unseen 0.5; grpo's mean curve 0.25, 0.417, 0.5 -> 128;
    # seed's 0.25, 0.583 -> 64 (ratio 0.5); grpo_opsd flat at 0.25 -> not reached
    assert "| grpo | 128 | 1.00 |" in md and "| seed | 64 | 0.50 |" in md and "| grpo_opsd | not reached | – |" in md
    assert s["efficiency"]["threshold"] == 0.5
    # the same question with intervals, point by point (seed - grpo on valid_unseen: 0, +1/6, +1/6)
    assert ("| seed - grpo | +0.000 [+0.000, +0.000] (not significant) | +0.167 [+0.000, +0.250] (not significant) "
            "| +0.167 [+0.000, +0.250] (not significant) |") in md
    # what training changed, each method against its own iteration 0: seed's valid_seen 0.25, 0.25, 0.5
    assert "| seed | +0.333 [+0.250, +0.500] (significant) | +0.417 [+0.250, +0.500] (significant) |" in md
    assert "grpo's training, final vs its iteration-0 policy on valid_unseen: no significant change (+0.250" in md
    # cost and diagnostics
    assert "| grpo | 110 [100, 120] | 40.0 | 10.0 | 30.0 | 20.0 | 0.0 | 0.0 | 1000 | 0 | 1000 |" in md
    assert "0.800 [0.700, 0.900]" in md  # seed's parse rate
    # header
    for needle in ("--budget-episodes 128", "abc1234", "seenhash", "unseenhash", "trainhash", "shared0",
                   "grpo: 0, 1, 2", "Linux-test, 2 CPUs"):
        assert needle in md, needle


def test_sample_efficiency_on_a_chosen_panel():
    """--efficiency-split valid_seen: the threshold is the baseline's final success on *that* panel and
    every method's mean curve on it is searched; a panel the cells lack is refused, naming the panels."""
    from seedrl.experiments.compare import load_cells
    from seedrl.experiments.report import summarize

    cells = load_cells(FIXTURE)
    assert summarize(cells, baseline="seed")["efficiency"]["threshold"] == pytest.approx(2 / 3)  # valid_unseen
    eff = summarize(cells, baseline="seed", efficiency_split="valid_seen")["efficiency"]
    # seed's final valid_seen 0.75, 0.75, 1.0 -> 0.833; its mean curve 0.5, 0.833, 0.833 reaches it at 64;
    # grpo's 0.5, 0.583, 0.5 never does
    assert eff["split"] == "valid_seen" and eff["threshold"] == pytest.approx(5 / 6)
    assert eff["methods"]["seed"]["episodes"] == 64 and eff["methods"]["grpo"]["episodes"] is None
    with pytest.raises(SeedRLError, match="valid_seen, valid_unseen"):
        summarize(cells, efficiency_split="test")


def test_report_only_keeps_the_folders_efficiency_panel(tmp_path):
    shutil.copytree(FIXTURE / "cells", tmp_path / "cells")
    r = runner.invoke(app, ["compare", "--report-only", "--out", str(tmp_path), "--efficiency-split", "valid_seen"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["compare", "--report-only", "--out", str(tmp_path)])  # a plain re-render
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "summary.json").read_text())["efficiency"]["split"] == "valid_seen"
    assert "reach grpo's final valid_seen success" in (tmp_path / "report.md").read_text()


def test_training_gain_pairs_each_cell_with_its_own_initial_policy_on_tasks():
    """With per-task outcomes, final - iteration 0 is the seeds x tasks bootstrap on the same tasks."""
    import copy

    from seedrl.experiments.compare import load_cells
    from seedrl.experiments.report import summarize

    cells = copy.deepcopy(load_cells(FIXTURE))
    for c in cells:  # 4 tasks: iteration 0 wins tasks 0 and 1; the last point also wins task 2 (grpo only)
        for p in c["curve"]:
            last = p is c["curve"][-1]
            p["panels"]["valid_seen"]["won"] = "1110" if last and c["algo"] == "grpo" else "1100"
    d = summarize(cells)["learning"]
    assert d["grpo"]["valid_seen"]["method"] == "seeds x tasks"
    assert d["grpo"]["valid_seen"]["mean"] == pytest.approx(0.25)
    assert d["seed"]["valid_seen"]["mean"] == 0.0 and not d["seed"]["valid_seen"]["significant"]
    assert d["grpo"]["valid_unseen"]["method"] == "seeds"  # no outcomes recorded there: seeds alone


def test_equal_per_iteration_counts_shared_keys_with_equal_values():
    from seedrl.experiments.stats import equal_per_iteration

    a = {1: {0: "a", 1: "b"}, 2: {0: "c", 1: "d", 2: "e"}, 3: {0: "f"}}
    b = {2: {0: "c", 1: "X", 5: "e"}, 1: {0: "a", 1: "b"}, 4: {0: "f"}}
    # iterations both hold, in order; keys both hold (2 and 5 are not shared); 3 and 4 only one side
    assert equal_per_iteration(a, b) == {1: (2, 2), 2: (1, 2)}
    assert list(equal_per_iteration(a, b)) == [1, 2] and equal_per_iteration(a, {}) == {}


def test_same_rollouts_counts_the_episodes_each_cell_shared_with_its_twin():
    """Per seed and iteration, a cell's episode digests against its baseline twin's; cells without digests
    (recorded before them, or a twin without them) are left out, and then the report has no such section."""
    import copy

    from seedrl.experiments.compare import load_cells
    from seedrl.experiments.report import render_markdown, summarize

    cells = copy.deepcopy(load_cells(FIXTURE))
    assert "Same rollouts" not in render_markdown(summarize(cells))
    grpo = {"1": ["a", "b", "c", "d"], "2": ["e", "f", "g", "h"]}
    for c in cells:
        if c["algo"] == "grpo" and c["seed"] in (0, 1):
            c["rollout_digests"] = grpo
        elif c["algo"] == "seed" and c["seed"] == 0:
            c["rollout_digests"] = {"1": ["a", "b", "c", "d"], "2": ["e", "x", "g", "y"]}
        elif c["algo"] == "seed" and c["seed"] == 2:  # its twin recorded none
            c["rollout_digests"] = grpo
        elif c["algo"] == "grpo_opsd" and c["seed"] == 1:
            c["rollout_digests"] = {"1": ["a", "b", "c", "d"]}  # only the iterations both recorded count
    s = summarize(cells)
    assert s["same_rollouts"] == {"seed": {"0": [[1, 4, 4], [2, 2, 4]]}, "grpo_opsd": {"1": [[1, 4, 4]]}}
    md = render_markdown(s)
    assert "## Same rollouts as grpo" in md
    assert "| seed, seed 0 | 4/4 | 2/4 |" in md and "| grpo_opsd, seed 1 | 4/4 | – |" in md
    assert "seed, seed 2" not in md


def test_hand_written_notes_close_the_report(tmp_path):
    from seedrl.experiments.compare import load_cells
    from seedrl.experiments.report import write_report

    write_report(load_cells(FIXTURE), tmp_path, baseline="grpo")
    assert "Investigation notes" not in (tmp_path / "report.md").read_text()
    (tmp_path / "notes.md").write_text("The parse rate was 0.8 (`seedrl compare ...`).\n")
    write_report(load_cells(FIXTURE), tmp_path, baseline="grpo")
    md = (tmp_path / "report.md").read_text()
    assert md.index("## Learning curves") < md.index("## Investigation notes") < md.index("The parse rate was 0.8")


@pytest.mark.parametrize("result_dir", sorted(p.parent for p in RESULTS.glob("*/cells")) or [None])
def test_committed_reports_match_the_cells_they_were_rendered_from(tmp_path, result_dir):
    if result_dir is None:
        pytest.skip("no committed comparison under benchmarks/results")
    from seedrl.experiments.compare import load_cells
    from seedrl.experiments.report import read_notes, render_markdown, summarize

    committed = (result_dir / "report.md").read_text()
    stored = json.loads((result_dir / "summary.json").read_text())
    s = summarize(load_cells(result_dir), baseline="grpo", efficiency_split=stored["efficiency_split"])
    s["header"]["rendered_by"] = stored["header"]["rendered_by"]
    assert render_markdown(s, read_notes(result_dir)) == committed


# ------------------------------------------------------------------------------------ the start's fingerprint
def test_the_start_is_fingerprinted_by_the_sha256_of_its_weight_files(tmp_path):
    """Seen red on: the file names hashed instead of their bytes (a changed weight keeps the fingerprint);
    every file of the folder hashed (a training_args.bin or a .bin twin beside the safetensors changes it);
    a tiny model's init seed left out (two different starts share a fingerprint)."""
    import hashlib

    from seedrl.config import ModelConfig
    from seedrl.experiments.compare import start_record

    def record(folder):
        return start_record(ModelConfig(name=str(folder)))

    m = tmp_path / "m"
    m.mkdir()
    (m / "config.json").write_text("{}")
    assert record(m)["fingerprint"] is None and "no weight files" in record(m)["of"]
    (m / "model.safetensors").write_bytes(b"weights-a")
    r = record(m)
    assert r["fingerprint"] == hashlib.sha256(b"weights-a").hexdigest()  # what `sha256sum model.safetensors` prints
    assert r["files"] == {"model.safetensors": r["fingerprint"]} and "model.safetensors" in r["of"]
    assert r["sft"] is None
    (m / "model.safetensors").write_bytes(b"weights-b")  # the same name, other weights
    assert record(m)["fingerprint"] == hashlib.sha256(b"weights-b").hexdigest()
    (m / "pytorch_model.bin").write_bytes(b"a twin")  # transformers loads the safetensors first
    (m / "training_args.bin").write_bytes(b"not weights")
    (m / "config.json").write_text('{"other": 1}')
    assert record(m)["fingerprint"] == hashlib.sha256(b"weights-b").hexdigest()
    (m / "model.safetensors").unlink()  # .bin shards only: training_args.bin is still not a weight file
    assert record(m)["files"] == {"pytorch_model.bin": hashlib.sha256(b"a twin").hexdigest()}
    # shards: the sha256 of their sha256sum manifest
    s = tmp_path / "shards"
    s.mkdir()
    for i, data in enumerate([b"one", b"two"], 1):
        (s / f"model-0000{i}-of-00002.safetensors").write_bytes(data)
    manifest = "".join(f"{hashlib.sha256(d).hexdigest()}  model-0000{i}-of-00002.safetensors\n"
                       for i, d in enumerate([b"one", b"two"], 1))
    assert record(s)["fingerprint"] == hashlib.sha256(manifest.encode()).hexdigest()
    # a built-in tiny model: its name and init seed make its weights
    tiny = [start_record(ModelConfig(name=n, init_seed=k))["fingerprint"]
            for n, k in (("tiny-micro", 0), ("tiny-micro", 0), ("tiny-micro", 1), ("tiny-3m", 0))]
    assert tiny[0] == tiny[1] and len(set(tiny)) == 3
    assert start_record(ModelConfig(name=str(tmp_path / "absent")))["fingerprint"] is None


def test_a_start_written_by_seedrl_sft_records_that_runs_config(tmp_path):
    """A start that is a ``seedrl sft`` run's ``model`` folder (config.yaml and summary.json beside it)
    carries that run's resolved config: what the start learnt from, for the held-out check."""
    from seedrl.config import ModelConfig, SFTConfig, load_config, save_config
    from seedrl.experiments.compare import start_record
    from seedrl.models.loading import load_model, load_tokenizer, save_model
    from seedrl.models.packaged import file_sha256

    run = tmp_path / "sft"
    tok = load_tokenizer("tiny-micro")
    save_model(load_model("tiny-micro", tokenizer=tok), tok, run / "model")
    r = start_record(ModelConfig(name=str(run / "model")))
    assert r["fingerprint"] and r["sft"] is None  # no SFT run beside it (yet)
    assert r["fingerprint"] == file_sha256(run / "model" / "model.safetensors")
    save_config(load_config(SFTConfig, None, ["demo_tasks=12", "demo_noise=0.3", "seed=5"]), run / "config.yaml")
    assert start_record(ModelConfig(name=str(run / "model")))["sft"] is None  # an unfinished run: no summary
    (run / "summary.json").write_text("{}")
    sft = start_record(ModelConfig(name=str(run / "model")))["sft"]
    assert (sft["demo_tasks"], sft["demo_noise"], sft["seed"]) == (12, 0.3, 5) and sft["env"]["name"]


def test_a_cell_keeps_the_fingerprint_every_attempt_started_from():
    from seedrl.experiments.compare import attempts_start

    start = {"fingerprint": "b" * 64, "of": "now", "files": {}, "sft": None}
    assert attempts_start([{"start_sha256": "b" * 64}], start) == start
    # the folder was rewritten between attempts: both, oldest first; rows from before attempts hashed it: skipped
    rows = [{"wall_s": 1}, {"start_sha256": "a" * 64}, {"start_sha256": "b" * 64}]
    assert attempts_start(rows, start)["fingerprint"] == "a" * 64 + "+" + "b" * 64
    assert attempts_start([{"wall_s": 1}], start) == start


def test_the_report_says_when_cells_started_from_different_models():
    """Seen red on: a header that prints the first cell's fingerprint only (different starts unflagged)."""
    import copy

    from seedrl.experiments.compare import load_cells
    from seedrl.experiments.report import render_markdown, summarize

    cells = copy.deepcopy(load_cells(FIXTURE))  # written before cells recorded their start
    line = "- start model (sha256 of its weights): "
    assert line + "not recorded (cells written before cells recorded it)\n" in render_markdown(summarize(cells))
    for c in cells:
        c["start"] = {"fingerprint": "a" * 64, "of": "runs/sft/model: model.safetensors"}
    md = render_markdown(summarize(cells))
    assert line + "a" * 16 + ", the same for every cell (runs/sft/model: model.safetensors)\n" in md
    assert "different models" not in md
    other = next(c for c in cells if c["algo"] == "seed" and c["seed"] == 2)
    other["start"] = {"fingerprint": "c" * 64, "of": "runs/sft/model: model.safetensors"}
    s = summarize(cells)
    assert s["header"]["starts"]["c" * 64]["cells"] == {"seed": [2]}
    md = render_markdown(s)
    assert (line + "**cells started from different models**: " + "a" * 16 + " for grpo seeds 0, 1, 2; grpo_opsd seeds "
            "0, 1, 2; seed seeds 0, 1 (runs/sft/model: model.safetensors), " + "c" * 16 + " for seed seed 2 (") in md
    del other["start"]  # an old cell among new ones: not known to be the same start
    md = render_markdown(summarize(cells))
    assert "**not recorded for every cell, so not known to be the same**" in md and "not recorded for seed seed 2" in md


# ------------------------------------------------------------------------------------ end to end
TINY = ["model.name=tiny-micro", "model.precision=fp32", "torch_threads=1", "env.max_steps=3",
        "env.history_length=0", "env.workers=2", "rollout.tasks_per_batch=2", "rollout.group_size=2",
        "rollout.max_new_tokens=8", "optim.mini_batch_size=8", "optim.micro_batch_size=8", "eval.num_tasks=4",
        "eval.batch_size=4", "skills.analyzer=oracle", "skills.max_new_tokens=16", "log.progress=false"]


def _compare(tmp_path, *extra):
    args = ["compare", "--config", "configs/sokoban_grpo.yaml", "--algos", "grpo,seed", "--seeds", "2",
            "--budget-episodes", "8", "--eval-every", "1", "--out", str(tmp_path / "out"),
            "--runs-dir", str(tmp_path / "runs")]
    for s in TINY:
        args += ["--set", s]
    return runner.invoke(app, args + list(extra))  # later options win


@pytest.mark.slow
def test_compare_end_to_end_is_resumable_and_shares_the_initial_eval(tmp_path, monkeypatch):
    r = _compare(tmp_path)
    assert r.exit_code == 0, r.output
    out = tmp_path / "out"
    cells = sorted(p.name for p in (out / "cells").glob("*.json"))
    assert cells == ["grpo-seed0.json", "grpo-seed1.json", "seed-seed0.json", "seed-seed1.json"]
    for f in ("report.md", "curves.png", "summary.json"):
        assert (out / f).stat().st_size > 0, f
    cell = json.loads((out / "cells" / "seed-seed1.json").read_text())
    assert [p["iteration"] for p in cell["curve"]] == [0, 1, 2] and [p["episodes"] for p in cell["curve"]] == [0, 4, 8]
    assert set(cell["curve"][0]["panels"]) == {"valid_seen", "valid_unseen"}
    assert cell["initial_eval_reused"] and cell["budget_episodes"] == 8 and cell["tokens"]["rollout"] > 0
    assert "skills/parse_rate" in cell["diagnostics"] and "analysis" in cell["stage_s"]
    grpo = json.loads((out / "cells" / "grpo-seed1.json").read_text())
    # one digest per episode and iteration; before the first update both methods sample from the same
    # weights with the same seed, so they play the same episodes
    assert {k: len(v) for k, v in cell["rollout_digests"].items()} == {"1": 4, "2": 4}
    assert cell["rollout_digests"]["1"] == grpo["rollout_digests"]["1"]
    assert grpo["shared_config_hash"] == cell["shared_config_hash"] and grpo["config_hash"] != cell["config_hash"]
    assert grpo["panel_hashes"] == cell["panel_hashes"] and grpo["curve"][0] == cell["curve"][0]
    from seedrl.config import ModelConfig
    from seedrl.experiments.compare import start_record

    tiny = start_record(ModelConfig(name="tiny-micro"))  # TINY's model, init seed 0
    # seen red on: build_cell without its "start" (KeyError); run_cell passing the last attempt's record
    # instead of every attempt's fingerprints (the resumed cell below names one start, not two)
    assert cell["start"] == grpo["start"] == tiny and tiny["fingerprint"]
    md = (out / "report.md").read_text()
    assert f"start model (sha256 of its weights): {tiny['fingerprint'][:16]}, the same for every cell" in md
    assert "seedrl compare --config configs/sokoban_grpo.yaml --algos grpo,seed --seeds 2" in md

    # the reused iteration-0 eval is what a fresh `seed` trainer measures
    from seedrl.config import TrainConfig, load_config
    from seedrl.train.trainer import Trainer

    cfg = load_config(TrainConfig, tmp_path / "runs" / "seed-seed1" / "config.yaml",
                      [f"run_dir={tmp_path / 'fresh'}"])
    fresh = Trainer(cfg).evaluator.run("check", 0)
    shared = json.loads((tmp_path / "runs" / "initial_eval" / "seed1.json").read_text())["results"]
    assert {k: v["tasks"] for k, v in fresh.items()} == {k: v["tasks"] for k, v in shared.items()}

    # a second invocation reruns nothing; an interrupted cell resumes from its checkpoint
    mtimes = {p.name: p.stat().st_mtime_ns for p in (out / "cells").glob("*.json")}
    (out / "cells" / "grpo-seed1.json").unlink()
    shutil.rmtree(tmp_path / "runs" / "grpo-seed1" / "checkpoints" / "iter_000002")
    # the resumed attempt runs "another commit", and one more lands while it trains: the cell names the
    # commit each attempt started from, not the one checked out when it finished
    import seedrl.experiments.compare as compare_mod

    states = iter([{"commit": "resumed", "dirty": False}])
    monkeypatch.setattr(compare_mod, "git_state", lambda: next(states, {"commit": "landed-later", "dirty": True}))
    # ... and finds another start (its folder rewritten meanwhile): the cell names both fingerprints
    monkeypatch.setattr(compare_mod, "start_record", lambda model: tiny | {"fingerprint": "f" * 64})
    r2 = _compare(tmp_path)
    assert r2.exit_code == 0, r2.output
    assert r2.output.count("done, skipped") == 3 and "cell grpo-seed1: resuming from iter_000001" in r2.output
    for name, t in mtimes.items():
        if name != "grpo-seed1.json":
            assert (out / "cells" / name).stat().st_mtime_ns == t, name
    again = json.loads((out / "cells" / "grpo-seed1.json").read_text())
    assert again["curve"] == grpo["curve"] and again["attempts"] == 2
    assert again["commit"] == grpo["commit"] + "+resumed" and again["dirty"] == grpo["dirty"]
    assert again["start"]["fingerprint"] == tiny["fingerprint"] + "+" + "f" * 64
    assert "**cells started from different models**" in (out / "report.md").read_text()
    monkeypatch.undo()

    # the report alone, and a config change is refused rather than mixed in
    r3 = runner.invoke(app, ["compare", "--report-only", "--out", str(out)])
    assert r3.exit_code == 0, r3.output
    r4 = _compare(tmp_path, "--set", "optim.lr=1e-2")
    assert r4.exit_code == 2 and "another config" in r4.output

    # a tagged variant (another analyzer) joins the same folder and report as its own method
    r5 = _compare(tmp_path, "--algos", "seed", "--tag", "self", "--set", "skills.analyzer=self")
    assert r5.exit_code == 0, r5.output
    variant = json.loads((out / "cells" / "seed+self-seed0.json").read_text())
    assert variant["algo"] == "seed+self" and variant["method"] == "seed"
    assert variant["config"]["skills"]["analyzer"] == "self" and variant["initial_eval_reused"]
    assert "| seed+self |" in (out / "report.md").read_text()


def test_a_cell_names_the_commits_its_attempts_started_from():
    from seedrl.experiments.compare import attempts_git_state

    rows = [{"wall_s": 1, "commit": "a1", "dirty": False}, {"wall_s": 2, "commit": "a1", "dirty": False}]
    assert attempts_git_state(rows) == {"commit": "a1", "dirty": False}
    rows.append({"wall_s": 3, "commit": "b2", "dirty": True})
    assert attempts_git_state(rows) == {"commit": "a1+b2", "dirty": True}
    # a row from before attempts carried their commit: unknown, not silently the last one
    assert attempts_git_state([{"wall_s": 1}, {"wall_s": 2, "commit": "b2", "dirty": False}]) == \
        {"commit": "unknown+b2", "dirty": None}


def test_compare_budget_must_fill_whole_iterations(tmp_path):
    r = _compare(tmp_path / "x", "--budget-episodes", "10")
    assert r.exit_code == 2 and "not a multiple of the 4 episodes" in r.output and "use 8 or 12" in r.output
    r = runner.invoke(app, ["compare", "--env", "nope", "--budget-episodes", "8", "--eval-every", "1",
                            "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and "sokoban_grpo.yaml" in r.output
    # a sample-efficiency panel that is not evaluated is refused before any cell runs
    r = _compare(tmp_path / "y", "--efficiency-split", "train")
    assert r.exit_code == 2 and "'train' is not an evaluated panel" in r.output and not (tmp_path / "y" / "runs").exists()
    # a held-out panel of a split the runs do not train on is refused before any cell runs
    r = _compare(tmp_path / "v", "--efficiency-split", "valid_seen_heldout")
    assert r.exit_code == 2 and "these runs train on 'train', not on part of 'valid_seen'" in r.output
    assert not (tmp_path / "v" / "runs").exists()
    # a budget below one iteration names the one valid budget once ("use 4", not "use 4 or 4")
    r = _compare(tmp_path / "z", "--budget-episodes", "2")
    assert r.exit_code == 2 and r.output.count("use 4") == 1 and "use 4 or" not in r.output
    # an unknown method anywhere in --algos is refused before the first cell trains
    r = _compare(tmp_path / "w", "--algos", "grpo,ppo")
    assert r.exit_code == 2 and "unknown method 'ppo'" in r.output and not (tmp_path / "w" / "runs").exists()


# ------------------------------------------------------------------------------------ env workers
@pytest.mark.slow
def test_results_never_depend_on_the_number_of_env_workers(tmp_path):
    from seedrl.eval.evaluate import evaluate
    from seedrl.train.trainer import Trainer
    from tests.helpers import tiny_cfg

    def run(workers: int):
        tr = Trainer(tiny_cfg(tmp_path / f"w{workers}", **{"env.workers": workers, "eval.num_tasks": 0,
                                                           "rollout.group_size": 2, "seed": 3}))
        streams = []
        trajs = []
        for _ in range(2):
            batch = tr.collect({})
            streams.append([t.task_id for t in batch])
            trajs += [(t.task_id, t.won, t.episode_reward, [(s.prompt_ids, s.response_ids, s.reward, s.action_valid)
                                                              for s in t.steps]) for t in batch]
        ev = evaluate(tr.backend, tr.tokenizer, tr.eval_panel, max_steps=3, history_length=1, max_new_tokens=10,
                      greedy=False, temperature=1.0, num_tasks=3, env_workers=workers, seed=5)
        return tr.train_panel.hash, tr.eval_panel.hash, streams, trajs, ev["tasks"]

    one, four = run(1), run(4)
    assert one[0] == four[0] and one[1] == four[1]  # panels
    assert one[2] == four[2]  # training-task stream
    assert one[3] == four[3]  # trajectories: tokens, rewards
    assert one[4] == four[4]  # evaluation


def test_paired_task_bootstrap_counts_panel_noise():
    base = "1" * 32 + "0" * 32
    # each of three seeds differs from the baseline by one task of 64: the seeds-only bootstrap
    # calls that certain (zero-width interval), the task-level one does not
    one_more = {s: "1" * 33 + "0" * 31 for s in range(3)}
    d = paired_task_bootstrap(one_more, {s: base for s in range(3)})
    assert d["mean"] == pytest.approx(1 / 64) and d["ci95"][0] <= 0 < d["ci95"][1] and not d["significant"]
    assert paired_difference_ci({s: 33 / 64 for s in range(3)}, {s: 0.5 for s in range(3)})["significant"]
    # identical outcomes: exactly zero; a method that wins every task the baseline loses: exactly +0.5
    same = paired_task_bootstrap({0: base, 1: base}, {0: base, 1: base})
    assert same["mean"] == 0 and same["ci95"] == [0.0, 0.0] and not same["significant"]
    flip = paired_task_bootstrap({0: "1" * 64, 1: "1" * 64}, {0: base, 1: base})
    assert flip["mean"] == 0.5 and flip["significant"] and flip["ci95"][0] > 0.3
    # a large consistent gain over many tasks is significant; one seed never is
    big = {s: "1" * 48 + "0" * 16 for s in range(3)}
    assert paired_task_bootstrap(big, {s: base for s in range(3)})["significant"]
    assert not paired_task_bootstrap({0: "1" * 64}, {0: base})["significant"]
    # losses count negative: swapping the methods flips the sign exactly
    worse = paired_task_bootstrap({s: base for s in range(3)}, big)
    assert worse["mean"] == pytest.approx(-0.25) and worse["ci95"][1] < 0 and worse["significant"]
    mixed = paired_task_bootstrap({0: "10" * 32}, {0: "01" * 32})
    assert mixed["mean"] == 0 and -1 <= mixed["ci95"][0] <= mixed["ci95"][1] <= 1
    with pytest.raises(ValueError):
        paired_task_bootstrap({0: "101"}, {0: "10"})
