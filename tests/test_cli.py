"""The `seedrl` command: clear one-line errors for bad input, and each subcommand doing its job."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from seedrl.cli import app
from seedrl.envs.registry import make_env

runner = CliRunner()


def one_line_error(result, *needles):
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.output.strip().splitlines() if ln.strip()]
    assert lines[-1].startswith("error:"), result.output
    text = " ".join(result.output.split())  # rich may wrap a long line
    for n in needles:
        assert n in text, (n, result.output)


def test_unknown_env_lists_valid_names():
    one_line_error(runner.invoke(app, ["play", "--env", "nope"]), "unknown environment 'nope'", "sokoban", "textworld")


def test_unknown_preset_lists_presets():
    one_line_error(runner.invoke(app, ["train", "--config", "configs/nope.yaml"]), "not found", "demo_sokoban.yaml")


def test_unknown_config_key_names_key_and_valid_keys(tmp_path):
    r = runner.invoke(app, ["train", "--config", "configs/demo_sokoban.yaml", "--set", "algo.clip=0.3",
                            "--set", f"run_dir={tmp_path}"])
    one_line_error(r, "unknown config key 'algo.clip'", "clip_ratio")


def test_bad_config_value_names_key(tmp_path):
    r = runner.invoke(app, ["train", "--config", "configs/demo_sokoban.yaml", "--set", "optim.lr=fast"])
    one_line_error(r, "optim.lr")


def test_envs_lists_panels_with_hashes():
    r = runner.invoke(app, ["envs"])
    assert r.exit_code == 0, r.output
    from seedrl.envs.panels import build_panel

    assert build_panel("sokoban", "valid_unseen").hash in r.output


def test_env_prints_versions():
    r = runner.invoke(app, ["env"])
    assert r.exit_code == 0 and "torch" in r.output and "transformers" in r.output


def test_play_a_sokoban_room_to_a_win():
    env = make_env("sokoban")
    env.reset("6x6-b1-s1000000")
    moves = []
    while (a := env.expert_action()) is not None:
        moves.append(a)
        if env.step(a)[2]:
            break
    r = runner.invoke(app, ["play", "--env", "sokoban", "--task", "6x6-b1-s1000000"],
                      input="jump\n" + "\n".join(moves) + "\n")
    assert r.exit_code == 0, r.output
    assert "invalid action" in r.output and "won" in r.output


def test_play_hints_are_not_steps_and_the_limit_is_said():
    # 2 steps allowed: two hints then two bad moves use the limit, which is announced
    r = runner.invoke(app, ["play", "--env", "sokoban", "--task", "6x6-b1-s1000000", "--max-steps", "2"],
                      input="expert\nexpert\njump\njump\nup\n")
    assert r.exit_code == 0, r.output
    assert r.output.count("expert: ") == 2 and r.output.count("invalid action") == 2
    assert "step limit reached" in r.output and "[3]>" not in r.output


def test_play_that_ends_on_an_env_fault_exits_1(monkeypatch):
    from seedrl.envs.sokoban.env import SokobanEnv

    def crash(self, action):
        raise RuntimeError("engine died")

    monkeypatch.setattr(SokobanEnv, "step", crash)
    r = runner.invoke(app, ["play", "--env", "sokoban", "--task", "6x6-b1-s1000000"], input="up\n")
    assert r.exit_code == 1 and "the environment failed: RuntimeError: engine died" in r.output


def test_play_takes_env_options():
    r = runner.invoke(app, ["play", "--env", "sokoban", "--env-kwargs", "{dim: [5, 5], coords: true}"], input="quit\n")
    assert r.exit_code == 0, r.output
    assert "5x5" in r.output
    one_line_error(runner.invoke(app, ["play", "--env", "sokoban", "--env-kwargs", "{dim: 5x5}"]), "dim")


def test_eval_a_builtin_model_on_a_panel(tmp_path):
    out = tmp_path / "res.json"
    r = runner.invoke(app, ["eval", "--checkpoint", "tiny-micro", "--env", "sokoban", "--panel", "valid_unseen",
                            "--num-tasks", "2", "--max-steps", "2", "--out", str(out)])
    assert r.exit_code == 0, r.output
    res = json.loads(out.read_text())["panels"]["valid_unseen"]
    assert res["num_tasks"] == 2 and res["split"] == "valid_unseen"
    assert all(t["task_id"].startswith("7x7") for t in res["tasks"])  # the unseen room size


def test_sft_on_missing_data_is_a_clear_error(tmp_path):
    r = runner.invoke(app, ["sft", "--data", str(tmp_path / "none.jsonl"), "--set", f"run_dir={tmp_path}/r",
                            "--set", "model.name=tiny-micro"])
    one_line_error(r, "not found")


def test_sft_on_jsonl_data_saves_a_loadable_model(tmp_path):
    data = tmp_path / "d.jsonl"
    rows = [{"prompt": f"room {i}", "response": "<think></think><action>up</action>"} for i in range(6)]
    rows.append({"messages": [{"role": "user", "content": "x"}], "response": "<action>left</action>"})
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    r = runner.invoke(app, ["sft", "--model", "tiny-micro", "--data", str(data), "--set", f"run_dir={tmp_path}/r",
                            "--set", "epochs=3", "--set", "batch_size=4", "--set", "eval.num_tasks=0",
                            "--set", "env.kwargs={dim: [5, 5]}"])
    assert r.exit_code == 0, r.output
    assert "7 examples" in r.output
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["loss_last"] < summary["loss_first"]
    from seedrl.models.loading import load_model

    load_model(str(tmp_path / "r" / "model"))
    # the SFT run folder is a checkpoint for `seedrl eval`: its env and env options come from its config
    r = runner.invoke(app, ["eval", "--checkpoint", str(tmp_path / "r"), "--num-tasks", "1", "--max-steps", "1",
                            "--split", "valid_seen", "--out", str(tmp_path / "e.json")])
    assert r.exit_code == 0, r.output
    res = json.loads((tmp_path / "e.json").read_text())
    assert res["model"] == str(tmp_path / "r" / "model") and res["env_kwargs"] == {"dim": [5, 5]}


def test_analyze_with_the_oracle_writes_sft_pairs_with_provenance(tmp_path):
    out = tmp_path / "stage1.jsonl"
    r = runner.invoke(app, ["analyze", "--env", "sokoban", "--model", "tiny-micro", "--analyzer", "oracle",
                            "--tasks", "2", "--rollouts", "2", "--out", str(out), "--set", "env.max_steps=3",
                            "--set", "rollout.max_new_tokens=8", "--set", "skills.max_new_tokens=400"])
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 4  # the oracle labels every trajectory, won or not
    from seedrl.skills.parsing import parse_skill

    for row in rows:
        assert parse_skill(row["response"]).skill  # the SFT target is the parsable skill JSON
        assert "episode_success" in row["messages"][-1]["content"]
        assert row["provenance"]["analyzer"] == "oracle" and row["provenance"]["panel_hash"]
    meta = json.loads((tmp_path / "stage1.jsonl.meta.json").read_text())
    assert meta["kept"] == 4 and meta["trajectories"] == 4
    from seedrl.envs.panels import build_panel

    train = build_panel("sokoban", "train").task_ids
    assert {r["task_id"] for r in rows} == set(train[:2])
    r = runner.invoke(app, ["analyze", "--env", "sokoban", "--model", "tiny-micro", "--tasks", "2", "--rollouts", "1",
                            "--skip-tasks", "3", "--out", str(out), "--set", "env.max_steps=3",
                            "--set", "rollout.max_new_tokens=8", "--set", "skills.max_new_tokens=400"])
    assert r.exit_code == 0, r.output
    assert [json.loads(x)["task_id"] for x in out.read_text().splitlines()] == list(train[3:5])  # after the skipped
    assert "more than the" not in r.stderr
    r = runner.invoke(app, ["analyze", "--env", "sokoban", "--model", "tiny-micro", "--tasks", "2", "--rollouts", "1",
                            "--skip-tasks", str(len(train) - 1), "--out", str(out), "--set", "env.max_steps=1",
                            "--set", "rollout.max_new_tokens=8", "--set", "skills.max_new_tokens=400"])
    assert r.exit_code == 0, r.output  # fewer tasks than asked: played, and said
    assert f"warning: --tasks 2 is more than the 1 tasks of sokoban/train after --skip-tasks {len(train) - 1}" \
        in r.stderr
    r = runner.invoke(app, ["analyze", "--env", "sokoban", "--model", "tiny-micro", "--skip-tasks", str(len(train)),
                            "--out", str(out)])
    one_line_error(r, f"--skip-tasks {len(train)} leaves no task")


@pytest.mark.slow
def test_demo_pipeline_writes_before_and_after_results(tmp_path):
    (tmp_path / "sft.yaml").write_text(
        "model: {name: tiny-micro}\nenv: {name: sokoban, max_steps: 3, history_length: 0}\n"
        "demo_tasks: 4\nepochs: 1\nbatch_size: 8\nmicro_batch_size: 8\neval: {num_tasks: 0}\n")
    (tmp_path / "rl.yaml").write_text(
        "iterations: 1\nsave_every: 1\nmodel: {name: tiny-micro}\nenv: {name: sokoban, max_steps: 3, history_length: 0}\n"
        "rollout: {tasks_per_batch: 2, group_size: 2, max_new_tokens: 8}\neval: {num_tasks: 4, batch_size: 4}\n"
        "log: {progress: false}\n")
    r = runner.invoke(app, ["demo", "--out", str(tmp_path / "d"), "--config", str(tmp_path / "rl.yaml"),
                            "--sft-config", str(tmp_path / "sft.yaml")])
    assert r.exit_code == 0, r.output
    res = json.loads((tmp_path / "d" / "results.json").read_text())
    assert res["num_tasks"] == 4 and res["panel"] == "sokoban/valid_seen" and res["rl_iterations"] == 1
    assert {"success_before_rl", "success_after_rl", "tasks_won_only_after_rl"} <= set(res)
    from seedrl.experiments.stats import mcnemar_exact

    assert res["mcnemar_p"] == mcnemar_exact(res["tasks_won_only_before_rl"], res["tasks_won_only_after_rl"])
    assert "paired on the same 4 tasks" in (tmp_path / "d" / "results.md").read_text()
    assert "McNemar p" in (tmp_path / "d" / "results.md").read_text()


def test_analyze_plays_at_the_rl_temperature_and_caps_answer_length(tmp_path):
    out = tmp_path / "s.jsonl"
    args = ["analyze", "--env", "sokoban", "--model", "tiny-micro", "--analyzer", "oracle", "--tasks", "2",
            "--rollouts", "2", "--out", str(out), "--set", "env.max_steps=3", "--set", "rollout.max_new_tokens=8",
            "--set", "rollout.temperature=0.9", "--set", "skills.max_new_tokens=400"]
    assert runner.invoke(app, args).exit_code == 0
    meta = json.loads((tmp_path / "s.jsonl.meta.json").read_text())
    assert meta["temperature"] == 0.9 and meta["max_target_tokens"] == 200  # half of skills.max_new_tokens
    assert 0 < meta["target_tokens"]["max"] <= 200 and meta["kept"] == 4
    r = runner.invoke(app, args + ["--max-target-tokens", "10"])
    meta = json.loads((tmp_path / "s.jsonl.meta.json").read_text())
    assert meta["kept"] == 0 and meta["too_long"] == 4 and out.read_text() == ""
    one_line_error(r, "0 of 4 trajectories kept", "raise --max-target-tokens")  # no row is a failure, said why


def test_num_tasks_beyond_the_panel_says_it_plays_them_all(tmp_path, caplog):
    """`--num-tasks` past a panel's size plays the whole panel (Panel.subset) and now says so; the trainer's
    eval.num_tasks too."""
    import logging

    r = runner.invoke(app, ["eval", "--checkpoint", "tiny-micro", "--env", "sokoban", "--num-tasks",
                            "5000", "--max-steps", "1", "--batch-size", "128"])
    assert r.exit_code == 0, r.output
    assert "warning: --num-tasks 5000 is more than the 128 tasks of sokoban/valid_unseen; playing all 128" in r.stderr
    assert "over 128 episodes" in r.stdout
    from seedrl.train.trainer import Trainer
    from tests.helpers import tiny_cfg

    with caplog.at_level(logging.WARNING, logger="seedrl.train.evaluation"):
        Trainer(tiny_cfg(tmp_path / "run", **{"eval.num_tasks": 5000})).close()
    assert any("eval.num_tasks=5000 is more than the" in r.getMessage() for r in caplog.records)


def test_panel_size_builds_a_larger_panel_of_a_generated_env(tmp_path):
    """`--panel-size N` builds each panel with N tasks (harm on more games than the default 128); household's
    default panel is its first tasks, so the 128 games every committed number used stay inside it."""
    from seedrl.envs.household.env import HouseholdEnv

    out = tmp_path / "e.json"
    r = runner.invoke(app, ["eval", "--checkpoint", "tiny-micro", "--env", "household", "--split", "valid_seen",
                            "--panel-size", "130", "--num-tasks", "130", "--max-steps", "1", "--batch-size", "130",
                            "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "more than the" not in r.stderr and "over 130 episodes" in r.stdout
    res = json.loads(out.read_text())
    ev = res["panels"]["valid_seen"]
    assert ev["panel_size"] == 130
    played = [row["task_id"] for row in ev["tasks"]]
    default = HouseholdEnv.panel_task_ids("valid_seen", 128)
    assert HouseholdEnv.panel_task_ids("valid_seen", 130)[:128] == default
    assert len(set(played)) == 130 and set(default) < set(played)
    r = runner.invoke(app, ["eval", "--checkpoint", "tiny-micro", "--env", "household", "--panel-size", "0"])
    one_line_error(r, "--panel-size must be at least 1, got 0")
