"""benchmarks/visual_probe.py pairs: EZPoints wins counted per pair of card values, whichever card came first,
over every panel of a ``seedrl eval`` result (the split behind visual_tiny/notes.md item 7); and its
``--vision-init width`` (item 6) really re-initialises the vision tower."""

import json

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
    assert out[tuple(sorted(_values(a)))] == (1, 2)  # both orders in one row, both panels read
    assert out[tuple(sorted(_values(c)))] == (0, 1)
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
