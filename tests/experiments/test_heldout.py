"""Held-out sub-panels: a fit check's evaluations read on the tasks the runs never trained on."""

import json

import pytest

from seedrl.envs.panels import build_panel
from seedrl.errors import SeedRLError
from seedrl.experiments.heldout import (
    demonstration_start_tasks,
    eval_task_ids,
    train_task_ids,
    with_heldout_panels,
)
from seedrl.experiments.report import write_report

KW = {"dim": [5, 5], "unseen_dim": [6, 5], "coords": True}
PANEL = build_panel("sokoban", "valid_seen", None, **KW)  # 128 rooms; the first 3 are the train panel's
IDS = list(PANEL.task_ids)
TRAINED = set(build_panel("sokoban", "valid_seen", 3, **KW).task_ids)


def _won(trained: str, others: str) -> str:
    """A panel's outcome string from the outcomes of its 3 trained rooms and of the first others (the
    rest lost), each in panel order."""
    t, o = iter(trained), iter(others)
    return "".join(next(t) if i in TRAINED else next(o, "0") for i in IDS)


def _config(train_split="valid_seen", train_size=3):
    return {"env": {"name": "sokoban", "kwargs": KW, "train_split": train_split, "train_size": train_size},
            "eval": {"num_tasks": None}}


def _cell(algo, seed, wons, config=None, best_iteration=None):
    """A finished cell evaluated on valid_seen (128 rooms) at iterations 0, 1, 2 with the given outcomes."""
    config = config or _config()
    curve = [{"iteration": i, "episodes": 8 * i,
              "panels": {"valid_seen": {"success": w.count("1") / len(w), "won": w,
                                        "panel_hash": PANEL.hash}}}
             for i, w in enumerate(wons)]
    best = best_iteration if best_iteration is not None else len(wons) - 1
    return {"algo": algo, "method": algo, "seed": seed, "splits": ["valid_seen"], "selected_on": "valid_seen",
            "config": config, "curve": curve, "final": {"valid_seen": curve[-1]["panels"]["valid_seen"]["success"]},
            "best": {"iteration": best, "episodes": 8 * best,
                     "success": {"valid_seen": curve[best]["panels"]["valid_seen"]["success"]}},
            "panel_hashes": {"train": build_panel("sokoban", "valid_seen", 3, **KW).hash,
                             "valid_seen": curve[0]["panels"]["valid_seen"]["panel_hash"]},
            # what the report's header and cost table read
            "env": "sokoban", "model": "tiny", "iterations": len(wons) - 1, "episodes_per_iteration": 8,
            "budget_episodes": 8 * (len(wons) - 1), "eval_every": 1, "config_hash": f"{algo}{seed}",
            "shared_config_hash": "shared", "wall_s": 1.0, "stage_s": {}, "tokens": {}}


def test_the_heldout_panel_keeps_only_the_untrained_tasks_outcomes_in_panel_order():
    cfg = _config()
    ids, trained = eval_task_ids(cfg, "valid_seen"), train_task_ids(cfg)
    assert ids == IDS and trained == TRAINED and sum(t in trained for t in ids) == 3
    wons = [_won("111", ""), _won("000", "11"), _won("111", "1" * 125)]
    cells, derived = with_heldout_panels([_cell("grpo", 0, wons, best_iteration=1)])
    (c,) = cells
    held = [i for i, t in enumerate(ids) if t not in trained]
    for p, w in zip(c["curve"], wons):
        assert p["panels"]["valid_seen_heldout"]["won"] == "".join(w[i] for i in held)
        assert p["panels"]["valid_seen"]["won"] == w  # the whole panel is untouched
    assert [p["panels"]["valid_seen_heldout"]["success"] for p in c["curve"]] == [0.0, 2 / 125, 1.0]
    assert c["splits"] == ["valid_seen", "valid_seen_heldout"]
    assert c["final"]["valid_seen_heldout"] == 1.0
    assert c["best"]["success"]["valid_seen_heldout"] == 2 / 125  # at the best iteration, chosen on valid_seen
    assert "125 tasks of valid_seen outside the train panel" in derived["valid_seen_heldout"]


def test_no_heldout_panel_where_the_runs_trained_on_another_split_and_the_input_is_not_changed():
    cell = _cell("grpo", 0, ["1" * 128], config=_config("train", 32))
    before = json.dumps(cell)
    cells, derived = with_heldout_panels([cell])
    assert derived == {} and cells[0]["splits"] == ["valid_seen"]
    cells, derived = with_heldout_panels([_cell("grpo", 0, ["1" * 128, "0" * 128])])
    assert derived and json.dumps(cell) == before


def test_a_changed_env_fails_instead_of_pairing_outcomes_with_other_tasks():
    cell = _cell("grpo", 0, ["1" * 128])
    cell["config"]["env"]["kwargs"] = {**KW, "coords": False}  # the panel rebuilt now is another one
    cell["panel_hashes"]["train"] = "0123456789abcdef"
    with pytest.raises(SeedRLError, match="train panel rebuilt .* recorded 0123456789abcdef"):
        with_heldout_panels([cell])


def test_the_report_pairs_methods_and_measures_efficiency_on_the_heldout_panel(tmp_path):
    # grpo gains 2 held-out rooms by iteration 2; "other" gains them already at iteration 1
    grpo = [_cell("grpo", s, [_won("111", ""), _won("111", ""), _won("111", "11")]) for s in (0, 1)]
    other = [_cell("other", s, [_won("111", ""), _won("111", "11"), _won("111", "11")]) for s in (0, 1)]
    s = write_report(grpo + other, tmp_path, efficiency_split="valid_seen_heldout")
    assert s["splits"] == ["valid_seen", "valid_seen_heldout"]
    assert s["learning"]["grpo"]["valid_seen_heldout"]["mean"] == pytest.approx(2 / 125)
    assert s["paired"]["final"]["other"]["valid_seen_heldout"]["mean"] == pytest.approx(0.0)
    eff = s["efficiency"]
    assert eff["split"] == "valid_seen_heldout" and eff["threshold"] == pytest.approx(2 / 125)
    assert eff["methods"]["grpo"]["episodes"] == 16 and eff["methods"]["other"]["episodes"] == 8
    report = (tmp_path / "report.md").read_text()
    assert "- panel valid_seen_heldout: the 125 tasks of valid_seen outside the train panel" in report


# --------------------------------------------------------------------------- demonstration states
DEMO_ENV = {"max_steps": 10, "history_length": 0}  # the sample-efficiency setting's step prompts


def _replay_config(seed, **algo):
    cfg = _config()
    cfg["env"] |= DEMO_ENV
    return cfg | {"seed": seed, "model": {"name": "runs/demo/sft/model"},
                  "algo": {"replay_coef": 1.0, "replay_demo_tasks": 256, "replay_demo_noise": 0.2} | algo}


def test_a_task_that_starts_at_a_replayed_demonstrations_state_leaves_the_heldout_panel(tmp_path, monkeypatch):
    """Hand case: seed 1's replay pool holds the expert's demonstration of one held-out room (as if the
    train split repeated it); that room leaves the held-out panel of *every* cell (one panel for all), and
    the report's line says 1 more was left out and against what. Seen red on: the demonstration check
    left out of ``with_heldout_panels`` (125 tasks); only ``cells[0]``'s replay pool checked (seed 0's:
    nothing dropped); the replay seed not taken from the cell's config (``replay_source`` with seed 0)."""
    import seedrl.train.update as update_mod
    from seedrl.train.sft import expert_demonstrations

    held = [t for t in IDS if t not in TRAINED]
    x = held[5]
    calls = []

    def replayed(env_name, env_kwargs, *, tasks, max_steps, history_length, noise, seed):
        calls.append((tasks, noise, seed, max_steps, history_length))
        if seed != 1:
            return []
        return expert_demonstrations(env_name, env_kwargs, [x], max_steps=1, history_length=history_length,
                                     noise=0.0, seed=0)

    monkeypatch.setattr(update_mod, "replay_demonstrations", replayed)
    wons = [_won("000", "1" * 125), _won("111", "1" * 125)]  # every held-out room won at the end
    cells = [_cell("grpo", s, wons, config=_replay_config(s)) for s in (0, 1)]
    out, derived = with_heldout_panels(cells)
    assert sorted(calls) == [(256, 0.2, 0, 10, 0), (256, 0.2, 1, 10, 0)]
    kept = [t for t in held if t != x]
    for c in out:
        p = c["curve"][-1]["panels"]["valid_seen_heldout"]
        assert p["num_tasks"] == 124 and p["won"] == "1" * 124
    # which room left: a loss on x alone changes nothing on the panel, a loss on any other room does
    lose_x = "".join("0" if t == x else "1" for t in IDS)
    lose_other = "".join("0" if t == kept[0] else "1" for t in IDS)
    for won, success in ((lose_x, 1.0), (lose_other, 123 / 124)):
        (c,), _ = with_heldout_panels([_cell("grpo", 1, [won], config=_replay_config(1))])
        assert c["curve"][0]["panels"]["valid_seen_heldout"]["success"] == success
    text = derived["valid_seen_heldout"]
    assert text.startswith("the 124 tasks of valid_seen outside the train panel and outside the expert "
                           "demonstrations the runs learnt from")
    assert "the runs train on 3 others" in text and "1 more start at a demonstration's state" in text
    assert "prompt of the replay pool (the expert on the first 256 train tasks, noise 0.2, 10 steps, seeds 0, 1)" in text
    assert "not recorded in 2 of 2 cells" in text  # the SFT start: these cells predate the start record
    write_report(cells, tmp_path, efficiency_split="valid_seen_heldout")
    assert f"- panel valid_seen_heldout: {text}" in (tmp_path / "report.md").read_text()


def test_the_real_replay_pool_of_the_sample_efficiency_setting_drops_rooms_met_mid_demonstration():
    """The audit's case: seed 0's replay pool (the expert on the first 256 5x5 train rooms, noise 0.2) passes
    through the start state of 21 of the 96 held-out rooms of ``benchmarks/results/sample_efficiency``'s
    setting (there 32 train rooms), none of them at its own step 0. Seen red on: only the demonstrations'
    step-0 prompts compared (start rooms only: nothing dropped)."""
    from seedrl.agent.prompts import build_step_prompt
    from seedrl.envs.registry import env_class, make_env
    from seedrl.train.update import replay_demonstrations

    cfg = _replay_config(0)
    cfg["env"]["train_size"] = 32
    tasks, checked, _ = demonstration_start_tasks([{"config": cfg}], "valid_seen")
    trained = train_task_ids(cfg)
    assert len(tasks - trained) == 21 and checked
    rows = replay_demonstrations("sokoban", KW, tasks=256, max_steps=10, history_length=0, noise=0.2, seed=0)
    at = {r["messages"][-1]["content"]: r["step"] for r in rows}
    env = make_env("sokoban", **KW)
    for t in IDS:  # every dropped room's first prompt is a demonstration's, at a later step; no kept room's is
        obs = env.reset(t)
        text = build_step_prompt(env_class("sokoban").title or "sokoban", env.task_description, obs, [], 0, 0, env.admissible_actions(),
                                 env.instruction, env.prompt_style)
        assert (text in at) == (t in tasks), t
        assert t not in tasks or at[text] > 0
    env.close()


def _sft(**over):
    return {"seed": 0, "data": None, "demo_tasks": 256, "mix_demo_tasks": 0, "demo_noise": 0.2,
            "env": {"name": "sokoban", "kwargs": KW, "train_split": "train", "train_size": None} | DEMO_ENV} | over


def test_the_sft_warm_starts_demonstrations_are_checked_where_the_cell_recorded_them():
    """A cell without replay whose start is a ``seedrl sft`` run's model (``start.sft``): that run's
    demonstrations are checked. The demo's warm start (256 train rooms, noise 0.2, seed 0) is seed 0's replay
    pool, so the same 21 held-out rooms leave. Seen red on: ``start.sft`` ignored (nothing dropped); only the
    demonstrations' step-0 prompts compared (nothing dropped)."""
    cfg = _config()
    cfg["env"] |= DEMO_ENV | {"train_size": 32}
    cfg |= {"seed": 3, "model": {"name": "runs/demo/sft/model"}, "algo": {"replay_coef": 0.0}}
    cell = {"config": cfg, "start": {"fingerprint": "ab" * 32, "sft": _sft()}}
    tasks, checked, unchecked = demonstration_start_tasks([cell], "valid_seen")
    replay = _replay_config(0)
    replay["env"]["train_size"] = 32
    assert tasks and tasks == demonstration_start_tasks([{"config": replay}], "valid_seen")[0]
    assert len(tasks - train_task_ids(cfg)) == 21
    assert checked == ["the SFT warm start's demonstrations (the expert on the first 256 train tasks, noise 0.2, "
                       "10 steps, seed 0)"] and unchecked == []
    # a data file is named as not checked; a start of unknown origin too; a built-in start learnt nothing
    _, _, unchecked = demonstration_start_tasks([{"config": cfg, "start": {"sft": _sft(data="d.jsonl")}}],
                                                "valid_seen")
    assert unchecked == ["the SFT data file d.jsonl of the start (not recorded in the cell)"]
    _, _, unchecked = demonstration_start_tasks([{"config": cfg, "start": {"sft": None}}], "valid_seen")
    assert unchecked and "runs/demo/sft/model" in unchecked[0]
    tiny = cfg | {"model": {"name": "tiny-micro"}}
    assert demonstration_start_tasks([{"config": tiny, "start": {"sft": None}}], "valid_seen") == (set(), [], [])


def test_sft_demonstrations_rebuild_what_run_sft_trains_on(tmp_path, monkeypatch):
    """The held-out check rebuilds a warm start's demonstrations from its config as ``run_sft`` plays
    them (same split, size, first tasks, noise and seed): the rows ``run_sft`` tokenizes are captured. Seen
    red on: ``sft_demonstrations`` playing with seed 0 instead of the SFT run's seed."""
    import seedrl.train.sft as sft_mod
    from seedrl.config import SFTConfig, load_config
    from seedrl.experiments.heldout import sft_demonstrations, sft_source

    cfg = load_config(SFTConfig, None, [f"run_dir={tmp_path}", "model.name=tiny-micro", "env.name=sokoban",
                                        "env.max_steps=4", "env.history_length=1", "env.train_size=20",
                                        "demo_tasks=5", "demo_noise=0.3", "seed=7", "eval.num_tasks=0"])
    seen = []

    class Captured(Exception):
        pass

    def capture(tokenizer, rows, max_tokens):
        seen.append(rows)
        raise Captured

    monkeypatch.setattr(sft_mod, "encode_rows", capture)
    with pytest.raises(Captured):
        sft_mod.run_sft(cfg)
    rows = sft_demonstrations(sft_source(cfg.model_dump(mode="json")))
    assert rows and [(r["messages"], r["response"]) for r in rows] == [(r["messages"], r["response"]) for r in seen[0]]
