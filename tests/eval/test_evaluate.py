"""Fixed-panel evaluation: `seedrl eval` on several panels and seeds, the per-type breakdown, the
trainer's evaluation on several panels, and plain (skill-free) evaluation prompts."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from seedrl.cli import app
from seedrl.eval.evaluate import combine_seeds, summarize_rows, wilson_interval
from seedrl.skills.injection import has_skill
from seedrl.train.trainer import Trainer
from tests.helpers import tiny_cfg

runner = CliRunner()


def test_summaries_of_episode_rows_hand_case():
    rows = [{"task_id": "a-1", "type": "a", "won": True, "reward": 10.0, "steps": 2, "invalid": 0},
            {"task_id": "a-2", "type": "a", "won": False, "reward": 0.0, "steps": 4, "invalid": 1},
            {"task_id": "b-1", "type": "b", "won": False, "reward": 0.0, "steps": 4, "invalid": 3}]
    s = summarize_rows(rows)
    assert s["success_rate"] == pytest.approx(1 / 3) and s["score"] == pytest.approx(10 / 3)
    assert s["mean_steps"] == pytest.approx(10 / 3) and s["invalid_rate"] == pytest.approx(4 / 10)
    assert s["ci95"] == list(wilson_interval(1, 3))
    res = [{"env": "e", "split": "s", "panel_hash": "h", "num_tasks": 2, "greedy": False, "temperature": 0.4,
            "seed": sd, "success_rate": w / 2, "score": 5.0 * w, "time_s": 1.0,
            "tasks": [r | {"won": i < w, "reward": 10.0 * (i < w)} for i, r in enumerate(rows[:2])]}
           for sd, w in ((0, 1), (1, 2))]
    c = combine_seeds(res)
    assert c["num_tasks"] == 4 and c["success_rate"] == 0.75 and c["seeds"] == [0, 1]
    assert [p["success_rate"] for p in c["per_seed"]] == [0.5, 1.0] and c["by_type"]["a"]["num_tasks"] == 4


@pytest.mark.slow
def test_eval_command_on_two_panels_with_sampled_seeds(tmp_path):
    out = tmp_path / "res.json"
    r = runner.invoke(app, ["eval", "--checkpoint", "tiny-micro", "--env", "sokoban", "--split", "valid_seen",
                            "--split", "valid_unseen", "--num-tasks", "2", "--max-steps", "2", "--sample",
                            "--seeds", "0,1", "--out", str(out)])
    assert r.exit_code == 0, r.output
    res = json.loads(out.read_text())
    assert set(res["panels"]) == {"valid_seen", "valid_unseen"} and res["seeds"] == [0, 1]
    assert res["temperature"] == 0.4 and res["commit"] and res["config"]["eval"]["max_steps"] == 2
    for split, p in res["panels"].items():
        assert res["panel_hashes"][split] == p["panel_hash"]
        assert p["num_tasks"] == 4 and [s["seed"] for s in p["per_seed"]] == [0, 1]  # 2 tasks x 2 seeds
        assert {"success_rate", "ci95", "score", "mean_steps", "invalid_rate", "by_type"} <= set(p)
        assert sum(t["num_tasks"] for t in p["by_type"].values()) == 4
    assert "valid_seen" in r.output and "valid_unseen" in r.output


def test_greedy_eval_takes_one_seed():
    r = runner.invoke(app, ["eval", "--checkpoint", "tiny-micro", "--env", "sokoban", "--seeds", "0,1"])
    assert r.exit_code == 2 and "--sample" in r.output


@pytest.mark.slow
def test_trainer_evaluates_every_panel_on_schedule(tmp_path):
    tr = Trainer(tiny_cfg(tmp_path / "r", iterations=2, save_every=0, **{
        "eval.splits": "[valid_seen, valid_unseen]", "eval.every": 1, "eval.num_tasks": 2}))
    summary = tr.train()
    rows = [json.loads(x) for x in (tmp_path / "r" / "eval.jsonl").read_text().splitlines()]
    assert [(r["iteration"], r["split"]) for r in rows] == [
        (i, s) for i in (0, 1, 2) for s in ("valid_seen", "valid_unseen")]
    for i in (0, 1, 2):
        for s in ("valid_seen", "valid_unseen"):
            assert (tmp_path / "r" / "eval" / f"iter_{i:06d}_{s}.json").exists()
            assert (tmp_path / "r" / f"panel_{s}.json").exists()
    metrics = [json.loads(x) for x in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    assert "eval/valid_unseen/success_rate" in metrics[0] and "eval/valid_unseen/success_rate" not in metrics[1]
    assert summary["eval_after"]["split"] == "valid_seen" and set(summary["evals_after"]) == {"valid_seen",
                                                                                              "valid_unseen"}


def test_eval_panel_size_builds_each_panel_and_the_default_panel_is_its_head(tmp_path):
    from seedrl.envs.panels import build_panel

    tr = Trainer(tiny_cfg(tmp_path / "r", iterations=0, save_every=0, **{
        "eval.splits": "[valid_seen, valid_unseen]", "eval.num_tasks": "null", "eval.panel_size": 3}))
    tr.train()
    for s in ("valid_seen", "valid_unseen"):
        default = build_panel("sokoban", s)
        assert len(default.task_ids) > 3
        assert json.loads((tmp_path / "r" / f"panel_{s}.json").read_text())["task_ids"] == list(default.task_ids[:3])
    rows = [json.loads(x) for x in (tmp_path / "r" / "eval.jsonl").read_text().splitlines()]
    assert rows and {(r["split"], r["num_tasks"], r["panel_size"]) for r in rows} == {("valid_seen", 3, 3),
                                                                                       ("valid_unseen", 3, 3)}


@pytest.mark.slow
def test_evaluation_prompts_never_carry_a_skill(tmp_path, tiny_tokenizer):
    from tests.helpers import SKILL, FixedAnalyzer

    tr = Trainer(tiny_cfg(tmp_path / "r", iterations=1, **{"algo.name": "seed", "eval.num_tasks": 0,
                                                             "eval.splits": "[valid_seen, valid_unseen]"}))
    tr.analyzer = FixedAnalyzer()
    tr.train()  # an iteration with skills in the teacher prompts
    assert tr.analyzer.calls == 1
    seen: list[str] = []
    real = tr.backend.generate

    def recording(prompts, params, seed):
        seen.extend(tiny_tokenizer.decode(p) for p in prompts)
        return real(prompts, params, seed)

    tr.backend.generate = recording
    tr.cfg.eval.num_tasks = 2
    tr.evaluator.run("check", tr.iteration)
    assert len(seen) >= 4 and not any(has_skill(p) or SKILL in p for p in seen)


@pytest.mark.slow
@pytest.mark.faults
def test_env_executor_setting_reaches_training_rollouts_and_evaluation(tmp_path, monkeypatch):
    """`env.executor: process` is what the trainer's rollouts (one warm pool for the run) and its
    evaluations run on; two iterations give the same trajectories and metrics as threads, and no
    worker process outlives the run."""
    import multiprocessing

    from seedrl.rollout import runner
    from seedrl.train import collect as collect_mod

    made: dict[str, list[str]] = {"eval": [], "pool": []}

    def recording(where, real):
        def make(name, *a, **k):
            made[where].append(name)
            return real(name, *a, **k)
        return make

    monkeypatch.setattr(runner, "make_executor", recording("eval", runner.make_executor))
    make_pool = recording("pool", collect_mod.make_executor)

    def pool_with_restarts(*a, **k):  # as if two workers had been replaced before the first row
        pool = make_pool(*a, **k)
        pool.restarts = 2
        return pool

    monkeypatch.setattr(collect_mod, "make_executor", pool_with_restarts)
    rows = {}
    for ex in ("thread", "process"):
        made["eval"].clear()
        made["pool"].clear()
        cfg = tiny_cfg(tmp_path / ex, iterations=2, save_every=0, **{"env.executor": ex, "eval.num_tasks": 2})
        Trainer(cfg).train()
        assert made["eval"] and set(made["eval"]) == {ex}  # evaluations on the configured executor
        assert made["pool"] == ([] if ex == "thread" else ["process"])  # one pool serves both iterations
        assert not multiprocessing.active_children()
        rows[ex] = [json.loads(x) for x in (tmp_path / ex / "metrics.jsonl").read_text().splitlines()]
    # the process rows also count the workers replaced in each iteration
    assert [r.pop("rollout/env_worker_restarts") for r in rows["process"]] == [2, 0]
    strip = [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows["thread"]]
    assert strip == [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows["process"]]
