from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from seedrl.config import SFTConfig, TrainConfig, load_config, save_config
from seedrl.envs.registry import env_class
from seedrl.errors import SeedRLError

PRESETS = sorted((Path(__file__).parents[1] / "configs").glob("*.yaml"))
assert PRESETS, "no presets found"


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.name)
def test_every_preset_validates(path):
    cls = SFTConfig if path.stem.endswith("_sft") else TrainConfig
    cfg = load_config(cls, path)
    env_class(cfg.env.name)  # names a registered environment


def test_overrides_parse_yaml_values_and_nest(tmp_path):
    cfg = load_config(TrainConfig, None, ["optim.lr=3e-4", "env.kwargs={dim: [7, 7]}", "model.lora={r: 4}"])
    assert cfg.optim.lr == 3e-4 and cfg.env.kwargs == {"dim": [7, 7]} and cfg.model.lora == {"r": 4}


def test_saved_config_round_trips(tmp_path):
    cfg = load_config(TrainConfig, None, ["seed=5", "algo.adv_norm=mean"])
    save_config(cfg, tmp_path / "c.yaml")
    assert load_config(TrainConfig, tmp_path / "c.yaml") == cfg
    assert yaml.safe_load((tmp_path / "c.yaml").read_text())["algo"]["adv_norm"] == "mean"


@pytest.mark.parametrize("override,needle", [
    ("algo.nme=grpo", "unknown config key 'algo.nme'; valid keys here: name,"),
    ("algo.name=ppo2", "algo.name"),
    ("rollout", "--set expects key=value"),
])
def test_bad_overrides_fail_with_one_line(override, needle):
    with pytest.raises(SeedRLError) as e:
        load_config(TrainConfig, None, [override])
    assert needle in str(e.value) and "\n" not in str(e.value)


_CONFIGS = Path(__file__).parents[1] / "configs"
#: every SEED preset and its GRPO twin: configs/<a>_seed<b>.yaml + configs/<a>_grpo<b>.yaml
_SEED_PRESETS = sorted(p.name for p in _CONFIGS.glob("*_seed*.yaml") if not p.stem.endswith("_sft"))
_TWINS = [(p, p.replace("_seed", "_grpo", 1)) for p in _SEED_PRESETS if (_CONFIGS / p.replace("_seed", "_grpo", 1)).exists()]


def test_every_seed_preset_has_a_grpo_twin():
    assert {"sokoban_seed.yaml", "alfworld_seed.yaml", "alfworld_seed_nosft.yaml"} <= {s for s, _ in _TWINS}
    orphans = sorted(set(_SEED_PRESETS) - {s for s, _ in _TWINS})
    assert not orphans, f"SEED presets without a GRPO twin: {orphans}"


@pytest.mark.parametrize("seed_name,grpo_name", _TWINS)
def test_seed_and_grpo_twins_share_every_budget(seed_name, grpo_name):
    seed = load_config(TrainConfig, _CONFIGS / seed_name).model_dump()
    grpo = load_config(TrainConfig, _CONFIGS / grpo_name).model_dump()
    assert seed["algo"].pop("name") == "seed" and grpo["algo"].pop("name") == "grpo"
    seed.pop("run_dir"), grpo.pop("run_dir")
    assert seed == grpo  # same model, tasks, seeds, rollout/update budget: only the method differs


def test_alfworld_presets_are_the_papers_recipe():
    """SEED: history 5, 30 steps, 150 iterations, from the Stage-1 model; w/o SFT: from the base model."""
    seed = load_config(TrainConfig, _CONFIGS / "alfworld_seed.yaml")
    nosft = load_config(TrainConfig, _CONFIGS / "alfworld_seed_nosft.yaml")
    sft = load_config(SFTConfig, _CONFIGS / "alfworld_stage1_sft.yaml")
    for c in (seed, nosft):
        assert (c.env.history_length, c.env.max_steps, c.iterations) == (5, 30, 150)
        assert (c.rollout.tasks_per_batch, c.rollout.group_size, c.optim.lr, c.algo.kl_coef) == (16, 8, 1e-6, 0.01)
        assert (c.algo.opd_coef, c.algo.opd_beta, c.env.invalid_action) == (0.01, 5.0, "format")
        assert (c.skills.max_new_tokens, c.skills.max_prompt_tokens) == (4096, 16384)
    assert seed.model.name == f"{sft.run_dir}/model" and nosft.model.name == sft.model.name == "Qwen/Qwen2.5-3B-Instruct"
    assert (sft.lr, sft.epochs, sft.batch_size, sft.max_seq_tokens) == (5e-6, 3, 8, 8192)
    assert sft.weight_decay == 0.01  # verl's sft_trainer.yaml optim.weight_decay, which SEED's trainer.sh keeps
    assert "w/o SFT" in (_CONFIGS / "alfworld_seed_nosft.yaml").read_text()


def test_gpu_seed_presets_keep_any_non_empty_skill_as_seeds_self_analysis():
    """Issue 33, item 8: SEED's self-analysis (policy_vllm) keeps any non-empty episode skill (the
    5-word rule is its API path's), so the GPU presets that follow SEED drop no short skill."""
    import json

    from seedrl.skills.parsing import parse_skill

    gpu = [n for n in _SEED_PRESETS if load_config(TrainConfig, _CONFIGS / n).model.device == "cuda"]
    assert {"alfworld_seed.yaml", "alfworld_seed_nosft.yaml", "webshop_seed.yaml"} <= set(gpu)
    for name in gpu:
        s = load_config(TrainConfig, _CONFIGS / name).skills
        assert s.analyzer == "self", name
        for skill, kept in (("Open it.", "Open it."), ("Go", "Go"), ("  ", None)):
            answer = json.dumps({"episode_summary": "s", "episode_skill": skill})
            assert parse_skill(answer, min_words=s.min_words).skill == kept, (name, skill)


def test_opid_preset_is_opids_alfworld_launcher():
    c = load_config(TrainConfig, _CONFIGS / "alfworld_opid.yaml")
    assert c.algo.name == "opid" and c.algo.opid_coef == 1e-3 and c.model.name == "Qwen/Qwen2.5-3B-Instruct"
    assert (c.env.history_length, c.env.max_steps, c.iterations) == (5, 30, 160)
    assert (c.rollout.tasks_per_batch, c.rollout.group_size, c.optim.lr, c.algo.kl_coef) == (16, 8, 1e-6, 0.01)
    assert c.skills.analyzer == "api" and c.skills.step_skills and c.skills.max_step_skills == 5
    assert c.skills.max_new_tokens == 4096 and c.algo.adv_norm == "mean_std"  # the 3B launcher's OPID_MODE


def test_a_methods_own_defaults_fill_only_unset_fields():
    opid = load_config(TrainConfig, None, ["algo.name=opid"])
    assert (opid.algo.adv_norm, opid.skills.analyzer, opid.skills.step_skills) == ("mean", "api", True)
    explicit = load_config(TrainConfig, None, ["algo.name=opid", "algo.adv_norm=mean_std", "skills.analyzer=self"])
    assert (explicit.algo.adv_norm, explicit.skills.analyzer) == ("mean_std", "self")
    seed = load_config(TrainConfig, None, ["algo.name=seed"])
    assert (seed.algo.adv_norm, seed.skills.analyzer, seed.skills.step_skills) == ("mean_std", "self", False)


def test_unknown_method_lists_the_valid_ones():
    with pytest.raises(SeedRLError) as e:
        load_config(TrainConfig, None, ["algo.name=grpo_opd"])
    assert "grpo_opsd" in str(e.value) and "seed_nogate" in str(e.value)


def test_run_folders_from_before_precision_still_load(tmp_path):
    (tmp_path / "c.yaml").write_text("model: {name: tiny-micro, autocast_bf16: true}\n")
    assert load_config(TrainConfig, tmp_path / "c.yaml").model.precision == "bf16"
    (tmp_path / "c.yaml").write_text("model: {name: tiny-micro, autocast_bf16: false}\n")
    assert load_config(TrainConfig, tmp_path / "c.yaml").model.precision == "fp32"
    assert load_config(TrainConfig, None).model.precision == "auto"


def test_a_run_saved_before_analysis_prompt_existed_loads_as_legacy(tmp_path):
    """Every saved config.yaml lists all keys of its time: one without skills.analysis_prompt was run with
    the legacy analyzer prompt, and must not silently switch to SEED's structure on resume or eval."""
    from seedrl.config import load_run_config

    saved = tmp_path / "config.yaml"
    save_config(TrainConfig(), saved)
    data = yaml.safe_load(saved.read_text())
    assert data["skills"]["analysis_prompt"] == "seed"  # a run saved today says which it used
    assert load_run_config(saved).skills.analysis_prompt == "seed"
    del data["skills"]["analysis_prompt"]
    saved.write_text(yaml.safe_dump(data))
    assert load_run_config(saved).skills.analysis_prompt == "seed"  # versioned: a missing key is today's default
    del data["config_version"]  # saved before versions were written: the keys of its time say its era
    saved.write_text(yaml.safe_dump(data))
    assert load_run_config(saved).skills.analysis_prompt == "legacy"
    assert "prompt_style" not in load_run_config(saved).env.kwargs  # not an alfworld run: untouched
    data["env"]["name"] = "alfworld"
    saved.write_text(yaml.safe_dump(data))
    assert load_run_config(saved).env.kwargs["prompt_style"] == "seedrl"  # its step prompt, not verl-agent's


def test_a_saved_run_config_carries_its_version_and_loads_by_it(tmp_path):
    """save_config writes config_version into a run's config.yaml (not into an SFT run's); load_run_config
    keys the legacy defaults on it (absent: the legacy version), refuses a newer one, and a run's
    config.yaml given as a preset (``seedrl train -c run/config.yaml --resume``) still loads."""
    from seedrl.config import LEGACY_CONFIG_VERSION, RUN_CONFIG_VERSION, load_run_config

    saved = tmp_path / "config.yaml"
    cfg = TrainConfig(algo={"name": "seed"})
    save_config(cfg, saved)
    assert saved.read_text().startswith(f"config_version: {RUN_CONFIG_VERSION}\n")
    assert load_run_config(saved) == cfg and load_config(TrainConfig, saved) == cfg
    save_config(SFTConfig(), tmp_path / "sft.yaml")
    assert "config_version" not in (tmp_path / "sft.yaml").read_text()
    # today's version: a key left out takes today's default, never an era guessed from its absence
    data = yaml.safe_load(saved.read_text())
    del data["algo"]["opd_agg"]
    saved.write_text(yaml.safe_dump(data))
    assert load_run_config(saved).algo.opd_agg == "micro_batch_mean"
    # the legacy version, absent or written: SEED's OPD term averaged over the signal tokens then
    for version in (None, LEGACY_CONFIG_VERSION):
        data.pop("config_version", None)
        saved.write_text(yaml.safe_dump(data | ({} if version is None else {"config_version": version})))
        assert load_run_config(saved).algo.opd_agg == "signal_token_mean"
    for bad in (RUN_CONFIG_VERSION + 1, "1", -1):
        saved.write_text(yaml.safe_dump(data | {"config_version": bad}))
        with pytest.raises(SeedRLError, match="config_version") as exc:
            load_run_config(saved)
        assert "\n" not in str(exc.value)


def test_the_legacy_autocast_key_is_honoured_or_refused_never_ignored():
    """model.autocast_bf16 (before model.precision existed) overrides precision auto, agrees with an equal
    precision, and is refused where the preset sets the other one (it was silently dropped there)."""
    def precision(preset, value):
        return load_config(TrainConfig, preset, [f"model.autocast_bf16={value}"]).model.precision

    assert precision("configs/demo_sokoban.yaml", "false") == "fp32"  # preset: auto
    assert precision("configs/demo_sokoban.yaml", "true") == "bf16"
    assert precision("configs/alfworld_grpo.yaml", "true") == "bf16"  # preset: bf16
    with pytest.raises(SeedRLError) as e:
        precision("configs/alfworld_grpo.yaml", "false")
    assert "contradicts precision='bf16'" in str(e.value) and "\n" not in str(e.value)


# -- strict YAML: a key given twice is refused, never silently replaced -------------------------------
def test_a_duplicated_section_in_a_config_file_is_refused_with_both_lines(tmp_path):
    p = tmp_path / "dup.yaml"
    p.write_text("run_dir: x\nrollout:\n  group_size: 4\nalgo: {name: grpo}\nrollout:\n  tasks_per_batch: 2\n")
    with pytest.raises(SeedRLError) as e:
        load_config(TrainConfig, p)
    msg = str(e.value)
    assert "key 'rollout' appears twice (lines 2 and 5); keep one" in msg and "dup.yaml" in msg and "\n" not in msg


def test_a_duplicated_nested_key_and_a_saved_run_config_are_refused(tmp_path):
    p = tmp_path / "config.yaml"
    p.write_text("optim:\n  lr: 1.0e-5\n  ppo_epochs: 2\n  lr: 1.0e-3\n")
    with pytest.raises(SeedRLError, match=r"key 'lr' appears twice \(lines 2 and 4\)"):
        load_config(TrainConfig, p)
    from seedrl.config import load_run_config

    with pytest.raises(SeedRLError, match=r"key 'lr' appears twice"):
        load_run_config(p)


def test_a_duplicated_key_in_a_set_value_is_refused():
    with pytest.raises(SeedRLError, match=r"--set optim: .*key 'lr' appears twice \(line 1, columns 2 and 12\)"):
        load_config(TrainConfig, None, ["optim={lr: 1e-5, lr: 1e-3}"])


def test_merge_keys_may_still_override_and_plain_yaml_still_loads(tmp_path):
    from seedrl.config import strict_yaml_load

    assert strict_yaml_load("a: &b {x: 1, y: 2}\nc:\n  <<: *b\n  x: 3\n") == {"a": {"x": 1, "y": 2},
                                                                              "c": {"x": 3, "y": 2}}
    assert strict_yaml_load("a: [1, 1]\nb: {c: 1, d: 1}\n") == {"a": [1, 1], "b": {"c": 1, "d": 1}}


def test_gigpo_presets_follow_the_launchers_and_differ_from_their_grpo_preset_in_the_advantage_only():
    """alfworld: SEED's examples/gigpo_trainer/run_alfworld.sh (step weight 0.5, mean_std_norm, gamma 0.95,
    160 steps) over configs/alfworld_grpo_nosft.yaml's setting; webshop: verl-agent's run_webshop.sh
    (weight 1.0, mean_norm) over configs/webshop_grpo.yaml's."""
    for name, grpo_name, w, norm, iters in (("alfworld_gigpo.yaml", "alfworld_grpo_nosft.yaml", 0.5, "mean_std", 160),
                                            ("webshop_gigpo.yaml", "webshop_grpo.yaml", 1.0, "mean", 160)):
        g = load_config(TrainConfig, _CONFIGS / name)
        assert (g.algo.name, g.algo.step_advantage_w, g.algo.adv_norm, g.algo.step_gamma) == ("gigpo", w, norm, 0.95)
        assert g.iterations == iters
        a, b = g.model_dump(), load_config(TrainConfig, _CONFIGS / grpo_name).model_dump()
        for c in (a, b):
            c.pop("run_dir"), c.pop("iterations"), c.pop("skills")
            for k in ("name", "step_advantage_w", "opd_coef", "opd_beta"):
                c["algo"].pop(k)
        assert a == b, name


#: the presets whose header says they follow SEED's launchers (examples/seed_trainer/_common/*.sh), the
#: GiGPO launchers of SEED's examples/gigpo_trainer/ or OPID's ALFWorld launcher, which run the same verl actor
_SEED_LAUNCHER_PRESETS = ["alfworld_seed.yaml", "alfworld_seed_nosft.yaml", "webshop_seed.yaml", "search_qwen_seed.yaml",
                          "alfworld_gigpo.yaml", "webshop_gigpo.yaml", "alfworld_opid.yaml"]


@pytest.mark.parametrize("name", _SEED_LAUNCHER_PRESETS)
def test_presets_after_seeds_launchers_take_mini_batches_in_sample_order(name):
    """Issue 43, item 5: SEED's actor does not shuffle (``actor.shuffle: False`` in its ppo_trainer.yaml,
    which no launcher overrides; ``update_policy`` cuts the batch with ``batch.split``), so these presets
    (and, by the twin rule, their GRPO twins) set ``optim.shuffle: false``."""
    assert load_config(TrainConfig, _CONFIGS / name).optim.shuffle is False


def test_alfworld_presets_use_seeds_micro_batch_of_32():
    """SEED's ALFWorld launchers (_common/alfworld.sh, gigpo_trainer/run_alfworld.sh): ppo_mini_batch_size
    256 over 8 GPUs (32 rows each) and ppo_micro_batch_size_per_gpu 32, so the OPD term under
    ``micro_batch_mean`` is a mean over 8 micro-batches of 32 step samples, not 32 of 8."""
    for name in ("alfworld_seed.yaml", "alfworld_seed_nosft.yaml", "alfworld_grpo.yaml", "alfworld_grpo_nosft.yaml",
                 "alfworld_gigpo.yaml", "alfworld_opid.yaml"):
        o = load_config(TrainConfig, _CONFIGS / name).optim
        assert (o.mini_batch_size, o.micro_batch_size) == (256, 32), name


def test_search_and_webshop_presets_take_verl_agents_step_prompt_and_the_tiny_search_ones_keep_theirs():
    """Issue 43, item 3: the presets after SEED's launchers play verl-agent's Search / WebShop step prompt
    (the envs' default); the tiny CPU Search presets keep this project's layout, which their warm-start
    and Stage-1 models learnt."""
    from seedrl.envs.registry import env_class

    def layout(name, cls=TrainConfig):
        e = load_config(cls, _CONFIGS / name).env
        return env_class(e.name).parse_options(e.kwargs).prompt_style

    for name in ("search_qwen_seed.yaml", "search_qwen_grpo.yaml", "webshop_seed.yaml", "webshop_grpo.yaml",
                 "webshop_gigpo.yaml"):
        assert layout(name) == "verl_agent", name
    for name in ("search_seed.yaml", "search_grpo.yaml"):
        assert layout(name) == "seedrl", name
    assert layout("search_sft.yaml", SFTConfig) == "seedrl"


def test_the_alfworld_stage1_recipe_is_seeds_stage1():
    """Issue 43, item 6: SEED's Stage 1 (scripts/sft/alfworld/prepare_data.sh -> _common/pipeline.py) plays
    30 tasks of each of the 6 types x 8 rollouts at POLICY_TEMPERATURE 0.4 and keeps every trajectory whose
    one analyzer call parses to a non-empty skill (``parse_ok``): no word minimum, no repair retry (its
    retries only re-send after an API error). The recorded `seedrl analyze` command must say so."""
    import json
    import re
    import shlex

    from seedrl.skills.parsing import parse_skill

    text = (_CONFIGS / "alfworld_seed.yaml").read_text()
    lines = [ln.lstrip("#").strip().rstrip("\\").strip() for ln in text.splitlines() if ln.startswith("#")]
    start = next(i for i, ln in enumerate(lines) if ln.startswith("seedrl analyze"))
    command, i = [], start
    while True:
        command.append(lines[i])
        if "--out" in lines[i]:
            break
        i += 1
    args = shlex.split(" ".join(command))
    opts = dict(zip(args[2::2], args[3::2]))
    assert (opts["--tasks"], opts["--rollouts"], opts["--temperature"], opts["--analyzer"]) == ("180", "8", "0.4", "api")
    sets = [args[j + 1] for j, a in enumerate(args) if a == "--set" and "<" not in args[j + 1]]
    cfg = load_config(TrainConfig, _CONFIGS / opts["--config"].split("/")[-1], sets)
    assert cfg.skills.api.parse_retries == 0 and cfg.skills.api.max_tokens == 1024
    answer = json.dumps({"episode_summary": "s", "episode_skill": "Open it."})
    assert parse_skill(answer, min_words=cfg.skills.min_words).skill == "Open it."  # kept, as SEED keeps it
    assert re.search(r"--task-sampling first", " ".join(command)) is None  # 30 of each type, seeded
