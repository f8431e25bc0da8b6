"""benchmarks/visual_probe.py pairs: EZPoints wins counted per pair of card values, whichever card came first,
over every panel of a ``seedrl eval`` result (the split behind visual_tiny/notes.md item 7); and its
``--vision-init width`` (item 6) really re-initialises the vision tower; ``teacher`` reads the shift at the
operator token of traced SEED episodes, by pair and by the operator the skill names."""

import json

import pytest

from seedrl.envs.ezpoints.env import card_value, generate_cards
from tests.helpers import load_script

vp = load_script("benchmarks/visual_probe.py")


def _values(seed: int) -> tuple[int, int]:
    return tuple(card_value(c) for c in generate_cards(seed))


def test_wins_are_counted_per_unordered_pair_across_panels(tmp_path):
    seeds = range(200)
    # two seeds whose cards show the same pair in opposite orders
    first = {}
    a = b = None
    for s in seeds:
        v = _values(s)
        if v[0] != v[1] and v[::-1] in first:
            a, b = first[v[::-1]], s
            break
        first.setdefault(v, s)
    assert a is not None
    c = next(s for s in seeds if sorted(_values(s)) != sorted(_values(a)))
    result = {"panels": {"valid_seen": {"tasks": [{"task_id": f"ezpoints-s{a}", "won": True},
                                                  {"task_id": f"ezpoints-s{c}", "won": False}]},
                         "valid_unseen": {"tasks": [{"task_id": f"ezpoints-s{b}", "won": False}]}}}
    f = tmp_path / "eval.json"
    f.write_text(json.dumps(result))
    out = vp.pairs(str(f))
    lo, hi = sorted(_values(a))
    assert out[f"cards-{lo}-{hi}"] == (1, 2)  # both orders in one row, both panels read
    lo, hi = sorted(_values(c))
    assert out[f"cards-{lo}-{hi}"] == (0, 1)
    assert len(out) == 2


def test_width_init_puts_the_vision_tower_at_its_width_rule(monkeypatch):
    import seedrl.models.vision as vision
    from seedrl.models.loading import load_model

    def tower_std(model) -> float:
        return float(model.model.visual.blocks[0].attn.qkv.weight.std())

    default = tower_std(load_model("tiny-qwen2.5-vl"))
    monkeypatch.setattr(vision, "tiny_vl_config", vp.width_init(vision.tiny_vl_config))
    model = load_model("tiny-qwen2.5-vl")
    width = model.config.vision_config.hidden_size
    assert abs(default - 0.02) < 0.005  # the built-in keeps transformers' init there
    assert abs(tower_std(model) - width ** -0.5) < 0.03


def test_teacher_reads_the_shift_at_the_operator_token_under_the_skill_that_names_it(tmp_path):
    def step(action: str, teacher: float, old: float) -> dict:
        tokens = ["<action>", action, "</action>"]
        return {"action": action, "tokens": tokens, "old_logp": [-0.1, old, -0.1], "teacher_logp": [-0.2, teacher, -0.3]}

    multiply = "When the two card values multiply to 12, so write one value, '*', the other value, then '='."
    trajs = [{"task_type": "cards-2-6", "skill": multiply, "steps": [step("6", -0.5, -0.1), step("*", -2.0, -0.5)]},
             {"task_type": "cards-2-6", "skill": multiply, "steps": [step("*", -1.0, -0.5)]},
             {"task_type": "cards-6-6", "skill": "Only write the numbers shown.", "steps": [step("+", -0.2, -0.4)]}]
    (tmp_path / "seed+oracle-seed0" / "traces").mkdir(parents=True)
    (tmp_path / "seed+oracle-seed0" / "traces" / "iter_000001.json").write_text(json.dumps({"trajectories": trajs}))
    (tmp_path / "grpo-seed0" / "traces").mkdir(parents=True)  # not a SEED cell: never read
    (tmp_path / "grpo-seed0" / "traces" / "iter_000001.json").write_text(json.dumps({"trajectories": trajs[:1]}))
    out = vp.teacher(str(tmp_path))
    assert set(out) == {("cards-2-6", "*", "*"), ("cards-6-6", "+", "-")}  # the number step is not an operator
    assert out[("cards-2-6", "*", "*")] == pytest.approx([-1.5, -0.5])  # teacher - student at the operator only
    assert out[("cards-6-6", "+", "-")] == pytest.approx([0.2])


def test_read_trains_on_train_games_evened_over_pairs_and_tests_on_unseen_ones():
    """The read probe's answer is the left card's value, shown only in the image; its train games come from
    the train split evened over the pairs of card values, its test games are valid_seen's, none of them a train
    game."""
    from collections import Counter

    from seedrl.envs.ezpoints.env import EZPointsEnv, parse_task_id
    from seedrl.envs.panels import build_panel
    from seedrl.models.loading import load_tokenizer

    train, test = vp.first_step_games("train", 25), vp.first_step_games("valid_seen", 128)
    assert set(train) <= set(build_panel("ezpoints", "train", 4096).task_ids)
    assert test == list(build_panel("ezpoints", "valid_seen", 128).task_ids)
    assert sorted(Counter(EZPointsEnv.task_type(t) for t in train).values()) == [5] * 5
    tok = load_tokenizer("tiny-qwen2.5-vl")
    pairs, images = vp.first_steps(tok, "train", 25)
    assert len(pairs) == 25 and all(im is not None for im in images)
    answers = [tok.decode(r).split("<action>")[1].split("</action>")[0] for _, r in pairs]
    assert answers == [str(card_value(generate_cards(parse_task_id(t))[0])) for t in train]
    assert not any("Cards:" in tok.decode(p) for p, _ in pairs)  # the cards are in the image only
