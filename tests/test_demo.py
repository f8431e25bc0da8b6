"""`make demo`'s results table names the RL stage by the recipe its config runs."""

from pathlib import Path

from seedrl.config import TrainConfig, load_config
from seedrl.demo import rl_stage

DEMO = Path(__file__).parents[1] / "configs" / "demo_sokoban.yaml"


def test_the_rl_stage_is_named_by_its_recipe_with_the_replay_it_runs():
    """Seen red on the old label, ``f"after {iterations} GRPO iterations"``, which hid that most of the
    demo's gain is the replay of expert demonstrations."""
    cfg = load_config(TrainConfig, DEMO)
    assert cfg.algo.replay_coef == 1.0 and cfg.iterations == 10  # what the demo runs
    assert rl_stage(cfg) == "after 10 iterations of GRPO + expert replay (replay_coef 1.0)"
    assert rl_stage(load_config(TrainConfig, DEMO, ["algo.replay_coef=0"])) == "after 10 iterations of GRPO"
    off = load_config(TrainConfig, DEMO, ["algo.pos_adv_coef=0", "algo.neg_adv_coef=0", "algo.replay_coef=0.5"])
    assert rl_stage(off) == "after 10 iterations of expert replay (replay_coef 0.5) alone, GRPO's policy gradient off"
