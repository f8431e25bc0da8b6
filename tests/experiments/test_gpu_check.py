"""benchmarks/gpu_check.py's CPU smoke test of the vision-language path (``--arch tiny-vl --device cpu``):
the model folder it builds loads by path, the preset's image env is played, every SEED stage runs with the
images (the teacher re-scoring included) and the update moves the weights, the vision tower's too."""

import json
import math
import sys

import pytest

from seedrl.models.vision import ImageInputs
from seedrl.train.scoring import Scorer
from tests.helpers import load_script

gc = load_script("benchmarks/gpu_check.py")


def test_the_3b_vl_arch_is_qwen2_5_vl_3b_instructs_published_shape():
    text, vision = gc.VL_ARCHS["qwen2.5-vl-3b"]
    assert (text["hidden_size"], text["intermediate_size"], text["num_hidden_layers"], text["num_attention_heads"],
            text["num_key_value_heads"], text["vocab_size"], text["mrope_section"]) == \
        (2048, 11008, 36, 16, 2, 151936, [16, 24, 24])
    assert sum(text["mrope_section"]) == text["hidden_size"] // text["num_attention_heads"] // 2
    assert (vision["depth"], vision["hidden_size"], vision["intermediate_size"], vision["num_heads"],
            vision["out_hidden_size"], vision["fullatt_block_indexes"]) == (32, 1280, 3420, 16, 2048, [7, 15, 23, 31])
    assert vision["out_hidden_size"] == text["hidden_size"]


@pytest.mark.slow
@pytest.mark.parametrize("preset,env", [("configs/sokoban_visual_seed_qwen2.5vl_3b.yaml", "sokoban"),
                                        ("configs/ezpoints_seed_qwen2.5vl_3b.yaml", "ezpoints")])
def test_tiny_vl_runs_a_seed_iteration_of_the_3b_preset_with_its_images(tmp_path, monkeypatch, capsys, preset, env):
    seen = []
    score = Scorer.score

    def spy(self, model, prompts, responses, images=None):
        seen.append(images)
        return score(self, model, prompts, responses, images)

    monkeypatch.setattr(Scorer, "score", spy)
    out = tmp_path / "vl.json"
    monkeypatch.setattr(sys, "argv", [
        "gpu_check.py", "--arch", "tiny-vl", "--device", "cpu", "--preset", preset, "--iterations", "1",
        "--tasks", "1", "--group", "2", "--max-steps", "2", "--max-new-tokens", "8", "--no-checkpoint",
        "--set", "torch_threads=1", "--set", "log.progress=false", "--out", str(out)])
    gc.main()
    result = json.loads(out.read_text())
    assert json.loads(capsys.readouterr().out) == result
    assert result["env"] == env and result["env_kwargs"]["mode"] == "rgb_array"
    assert result["arch"] == "tiny-vl" and result["algo"] == "seed" and result["analyzer"] == "oracle"
    (stages,) = result["stage_s_per_iteration"]
    for stage in ("rollout", "rollout_generate", "analysis", "old_logp", "ref_logp", "rescore", "update"):
        assert isinstance(stages[stage], float) and stages[stage] >= 0, stage
    assert stages["rollout"] > 0 and stages["update"] > 0 and stages["rescore"] > 0
    (row,) = result["per_iteration"]
    assert row["rollout/samples"] > 0 and row["skills/signal_frac"] > 0  # oracle skills: a teacher for samples
    assert math.isfinite(row["loss/opd"]) and row["opd/gate_mean"] is not None and row["grad_norm"] > 0
    # old, reference and teacher scoring (the teacher's prompt re-encoded around the student's images)
    assert len(seen) == 3 and all(imgs and all(isinstance(x, ImageInputs) for x in imgs) for imgs in seen)
    assert result["parameters"] == result["trainable_params"] > 0 and result["params_changed_frac"] > 0.5
    # the vision tower moves only if the update's forward saw the images
    assert result["vision_trainable_params"] > 0 and result["vision_params_changed_frac"] > 0.5
    assert result["peak_gpu_mem_gib"] is None and result["build_model_s"] >= 0 and result["load_s"] >= 0


def test_a_vl_arch_refuses_a_text_preset_before_building_a_model(tmp_path, monkeypatch):
    built = []
    monkeypatch.setattr(gc, "build_model_folder", lambda *a: built.append(a))
    monkeypatch.setattr(sys, "argv", ["gpu_check.py", "--arch", "tiny-vl", "--device", "cpu",
                                      "--preset", "configs/alfworld_seed.yaml", "--out", str(tmp_path / "x.json")])
    with pytest.raises(SystemExit):
        gc.main()
    assert not built and not (tmp_path / "x.json").exists()


@pytest.mark.slow
def test_a_text_arch_still_plays_text_sokoban(tmp_path, monkeypatch):
    out = tmp_path / "text.json"
    monkeypatch.setattr(sys, "argv", [
        "gpu_check.py", "--arch", "tiny", "--device", "cpu", "--preset", "configs/alfworld_seed.yaml",
        "--iterations", "1", "--tasks", "1", "--group", "2", "--max-steps", "2", "--max-new-tokens", "8",
        "--no-checkpoint", "--set", "torch_threads=1", "--set", "log.progress=false", "--out", str(out)])
    gc.main()
    result = json.loads(out.read_text())
    assert result["env"] == "sokoban" and result["env_kwargs"] == {} and "vision_params_changed_frac" not in result
    assert result["params_changed_frac"] > 0.5 and result["stage_s_per_iteration"][0]["rescore"] > 0
