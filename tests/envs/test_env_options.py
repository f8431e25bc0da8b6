"""Env options are typed and validated: a bad one is a one-line SeedRLError naming the option and what it
accepts (never a traceback of another type, never silently coerced); lossless spellings are accepted; the
options are honoured (alfworld-gen receptacles)."""

from __future__ import annotations

from typing import Any

import pytest

from seedrl.envs.panels import build_panel
from seedrl.envs.registry import make_env
from seedrl.errors import SeedRLError

pytestmark = pytest.mark.faults

BAD = [
    # (env, options, the option the message must name)
    ("sokoban", {"dim": "5x5"}, "dim"),                    # was a ValueError traceback
    ("sokoban", {"num_boxes": 1.5}, "num_boxes"),          # was "bad Sokoban task id"
    ("sokoban", {"dim": [5.7, 5]}, "dim"),                 # was truncated to 5
    ("sokoban", {"coords": "false"}, "coords"),            # was truthy: coordinates on
    ("sokoban", {"coords": 1}, "coords"),
    ("sokoban", {"dim": [5, 5, 5]}, "dim"),
    ("sokoban", {"num_boxes": True}, "num_boxes"),
    ("sokoban", {"dim": [3, 3]}, "dim"),                   # no room can be generated (was exit 0, success 0)
    ("sokoban", {"dim": [4, 4], "num_boxes": 3}, "dim"),
    ("sokoban", {"dims": 5}, "dim"),                       # unknown: the valid names are listed
    ("alfworld-gen", {"receptacles": [2, 2]}, "receptacles"),  # the default kinds need 3 (was: 3 given)
    ("alfworld-gen", {"receptacles": "2x2"}, "receptacles"),
    ("alfworld-gen", {"distractors": [1.5, 2]}, "distractors"),
    ("alfworld-gen", {"kinds": "pick"}, "kinds"),
    ("alfworld-gen", {"kinds": ["pik"]}, "kinds"),
    ("alfworld-gen", {"kinds": []}, "kinds"),
    ("textworld", {"train_games": "coin-l2"}, "train_games"),
    ("textworld", {"cache_dir": 3}, "cache_dir"),
    ("scienceworld", {"max_engines": 1.5}, "max_engines"),
    ("scienceworld", {"call_timeout_s": "fast"}, "call_timeout_s"),
    ("scienceworld", {"prefetch_gold": "no"}, "prefetch_gold"),
    ("scienceworld", {"unseen_tasks": "boil"}, "unseen_tasks"),
    ("webshop", {"timeout_s": True}, "timeout_s"),
    ("webshop", {"reward_mode": "best"}, "reward_mode"),
    ("search", {"topk": 2.5}, "topk"),
    ("search", {"world_seed": "a"}, "world_seed"),
    ("search", {"max_turns": 0}, "max_turns"),
    ("alfworld", {"allow_partial": "yes"}, "allow_partial"),
    ("alfworld", {"panel": 3}, "allow_partial"),
]


@pytest.mark.parametrize(("env", "options", "name"), BAD, ids=[f"{e}-{n}-{o}" for e, o, n in BAD])
def test_bad_option_is_a_one_line_error_naming_it(env: str, options: dict[str, Any], name: str) -> None:
    for build in (lambda: build_panel(env, "valid_seen", 4, **options), lambda: make_env(env, **options)):
        with pytest.raises(SeedRLError) as info:
            build()
        msg = str(info.value)
        assert name in msg and "\n" not in msg, msg
        assert env in msg or "unknown" in msg, msg


@pytest.mark.parametrize(("env", "options", "expected"), [
    ("sokoban", {"dim": 5, "coords": True, "num_boxes": "1"},
     {"dim": (5, 5), "coords": True, "num_boxes": 1}),
    ("sokoban", {"unseen_dim": [8.0, 7]}, {"unseen_dim": (8, 7)}),
    ("alfworld-gen", {"receptacles": 5, "distractors": [0, "2"]}, {"receptacles": (5, 5), "distractors": (0, 2)}),
    ("scienceworld", {"jvm_options": "-Xss1m -Xint", "call_timeout_s": 5}, {"jvm_options": ("-Xss1m", "-Xint"),
                                                                            "call_timeout_s": 5.0}),
])
def test_lossless_spellings_are_accepted_and_normalised(env: str, options: dict[str, Any],
                                                        expected: dict[str, Any]) -> None:
    from seedrl.envs.registry import env_class

    opts = env_class(env).parse_options(options)
    assert {k: getattr(opts, k) for k in expected} == expected


def test_sokoban_coords_are_honoured() -> None:
    tid = build_panel("sokoban", "valid_seen", 1).task_ids[0]
    assert "player (" not in make_env("sokoban", coords=False).reset(tid)
    assert "player (" in make_env("sokoban", coords=True).reset(tid)


# -- alfworld-gen: receptacles honoured ------------------------------------------------------------
def test_alfworld_gen_receptacles_are_honoured() -> None:
    pytest.importorskip("alfworld")
    from seedrl.envs.alfworld import gen

    ids = [gen.make_task_id(k, base + i) for base in (0, 100_000, 200_000) for i in range(6) for k in gen.KINDS]
    ids.append("pick_clean-s100005")  # drew 3 receptacles under [4, 4] before the fix
    env = make_env("alfworld-gen", receptacles=[4, 4], distractors=1)
    assert {len(gen.sample_household(t, env.opts).receptacles) for t in ids} == {4}

    small = make_env("alfworld-gen", receptacles=[2, 2], kinds=["pick", "look"])
    two = [t for t in ids if gen.parse_task_id(t)[0] in ("pick", "look")]
    assert {len(gen.sample_household(t, small.opts).receptacles) for t in two} == {2}

    with pytest.raises(SeedRLError, match=r"receptacles.*pick_clean.*at least 3"):
        make_env("alfworld-gen", receptacles=[2, 2])
    # a range is honoured at both ends
    ranged = gen.GenOptions((3, 5), (1, 3))
    assert all(3 <= len(gen.sample_household(t, ranged).receptacles) <= 5 for t in ids)
