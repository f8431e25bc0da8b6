"""EZPoints: verl-agent's rules on hand cases, the cards' generator, the image and its text, the expert,
and panels that are reproducible and share no content."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import numpy as np
import pytest

from seedrl.envs.base import WIN_REWARD
from seedrl.envs.ezpoints import env as ez
from seedrl.envs.ezpoints.cards import CARD_TOP, MARGIN, RANK_SCALE, card_left, read_cards
from seedrl.envs.panels import build_panel
from seedrl.envs.registry import make_env
from seedrl.errors import SeedRLError
from tests.envs.helpers import SPLITS, play_expert


def _play(cards: list[str], tokens: list[str], **kw) -> tuple[list[tuple[float, bool, bool]], ez.EZPointsEnv]:
    """(reward, done, action_valid) of each token on a hand-dealt table."""
    env = make_env("ezpoints", **kw)
    env.reset_to_cards(cards)
    out = []
    for t in tokens:
        _, reward, done, info = env.step(t)
        out.append((reward, done, info["action_valid"]))
    return out, env


# -- rules -------------------------------------------------------------------------------------
@pytest.mark.parametrize("cards, tokens", [
    (["H5", "C7"], ["5", "+", "7", "="]),
    (["H5", "C7"], ["7", "+", "5", "="]),
    (["S6", "D2"], ["6", "*", "2", "="]),
    (["S6", "D6"], ["6", "+", "6", "="]),     # two sixes: 6 may be written twice
    (["HK", "C2"], ["10", "+", "2", "="]),    # a king counts 10
    (["DT", "C2"], ["2", "+", "10", "="]),
    (["H5", "C7"], ["+", "5", "+", "7", "="]),  # Python reads "+5+7" as 12, as verl-agent's eval does
])
def test_a_formula_equal_to_12_wins(cards, tokens) -> None:
    steps, env = _play(cards, tokens)
    assert steps[:-1] == [(0.0, False, True)] * (len(tokens) - 1)
    assert steps[-1] == (WIN_REWARD, True, True)
    assert env.privileged_state()["won"] is True


@pytest.mark.parametrize("cards, tokens", [
    (["H5", "C7"], ["5", "*", "7", "="]),   # 35
    (["H5", "C7"], ["5", "7", "="]),        # 57
    (["H5", "C7"], ["5", "+", "="]),        # not a formula
    (["H5", "C7"], ["="]),                  # empty
    (["S6", "D2"], ["6", "+", "2", "="]),   # 8
    (["S6", "D6"], ["6", "+", "6", "*", "="]),  # not a formula
])
def test_a_formula_not_equal_to_12_loses(cards, tokens) -> None:
    steps, env = _play(cards, tokens)
    assert steps[-1] == (-1.0, True, True)
    assert env.privileged_state()["won"] is False


def test_numbers_written_side_by_side_are_one_number() -> None:
    """The tokens are joined before evaluation, so "1" then "2" is twelve (an ace and a two; gym_cards never
    deals an ace, a hand table can), and "5" then "7" fifty-seven."""
    env = make_env("ezpoints")
    env.reset_to_cards(["SA", "H2"])
    assert [env.step(t)[1] for t in ("1", "2", "=")] == [0.0, 0.0, WIN_REWARD]
    assert ez.solve([1, 2]) == ["1", "2", "="]


def test_tokens_outside_the_action_list_are_invalid_and_change_nothing() -> None:
    env = make_env("ezpoints")
    env.reset_to_cards(["H5", "C7"])
    env.step("5")
    before = env.privileged_state()
    for bad in ("11", "-", "plus", "", "5+", "/", "(", "12", "0"):
        obs, reward, done, info = env.step(bad)
        assert (reward, done, info["action_valid"], info["won"]) == (0.0, False, False, False), bad
        assert obs.startswith("Invalid action") and env.formula == ["5"] and env.used == [5]
    after = env.privileged_state()
    assert {k: v for k, v in after.items() if k != "history"} == {k: v for k, v in before.items() if k != "history"}
    assert [h["valid"] for h in after["history"]] == [True] + [False] * 9


def test_a_number_not_on_the_cards_costs_a_point_and_a_space() -> None:
    """``EZPointEnv._is_valid_action``: a number no card shows, or one written once too often, appends " "
    and gives -1; the episode goes on."""
    steps, env = _play(["H5", "C7"], ["5", "5", "9"])
    assert steps == [(0.0, False, True), (-1.0, False, True), (-1.0, False, True)]
    assert env.formula == ["5", " ", " "] and env.used == [5]
    assert env.step("=")[1] == -1.0  # "5  " is one card only


def test_the_time_limit_ends_a_formula_grown_past_five_tokens() -> None:
    steps, env = _play(["H5", "C7"], ["+", "+", "+", "5", "+", "7", "="])
    assert steps[:6] == [(0.0, False, True)] * 6  # six tokens written: "+++5+7" (= 12, but no '=' in time)
    assert steps[6] == (-1.0, True, True)         # the seventh step hits len(formula) > 5 first
    steps, _ = _play(["H5", "C7"], ["+", "+", "5", "+", "7", "="])
    assert steps[-1] == (WIN_REWARD, True, True)  # five tokens: '=' is still evaluated


def test_nothing_changes_after_the_end() -> None:
    steps, env = _play(["H5", "C7"], ["5", "+", "7", "=", "=", "5"])
    assert steps[3:] == [(WIN_REWARD, True, True), (0.0, True, True), (0.0, True, True)]
    assert env.expert_action() is None


def test_evaluate_reads_python_integer_formulas_only() -> None:
    assert [ez.evaluate(list(f)) for f in ("5+7", "57", "5*7", "5++7", " 5+7 ", "5**2")] == [12, 57, 35, 12, 12, 25]
    assert [ez.evaluate(list(f)) for f in ("5 7", "5+", "", "*5", "5=")] == [None] * 5
    assert ez.evaluate(["10", "+", "2"]) == 12


# -- cards ---------------------------------------------------------------------------------------
def test_generated_cards_follow_the_gym_cards_rule() -> None:
    seen = set()
    for seed in range(3000):
        a, b = ez.generate_cards(seed)
        seen.add((a, b))
        assert a[0] in "HSDC" and b[0] in "HSDC"
        x, y = ez.card_value(a), ez.card_value(b)
        assert x + y == 12 or x * y == 12
        assert {a[1:], b[1:]} <= set("23456789TJQK")
        assert ez.solve([x, y]) is not None
        assert ez.generate_cards(seed) == (a, b)
    ranks = {c[1:] for pair in seen for c in pair}
    assert ranks == set("23456789TJQK")  # face cards appear, aces never (the first rank is 2..K)
    assert ("H5", "C7") in seen and ("C7", "H5") in seen  # both orders
    with pytest.raises(SeedRLError, match="bad card"):
        ez.card_value("H11")


# -- observation: the image and its text ------------------------------------------------------
SEVEN = ("#####", "....#", "...#.", "..#..", ".#...", ".#...", ".#...")


def test_the_image_shows_the_cards_and_the_text_does_not() -> None:
    env = make_env("ezpoints")
    texts = set()
    for tid in build_panel("ezpoints", "valid_seen", 20).task_ids:
        obs = env.reset(tid)
        (image,) = env.observation_images()
        assert image.shape == (300, 300, 3) and image.dtype == np.uint8
        assert read_cards(image) == list(env.cards)
        assert obs == 'Current formula: ""'
        texts.add(env.task_description)
        assert not any(s in obs + env.task_description for s in ("hearts", "spades", "clubs", "diamonds"))
    assert len(texts) == 1  # the task description is the same for every table
    env.reset_to_cards(["H7", "S5"])
    (image,) = env.observation_images()
    top, left = CARD_TOP + MARGIN, card_left(0) + MARGIN
    ink = image[top + RANK_SCALE // 2:top + 7 * RANK_SCALE:RANK_SCALE, left + RANK_SCALE // 2:left + 5 * RANK_SCALE:RANK_SCALE]
    red = np.all(ink == (200, 0, 0), axis=-1)
    assert red.tolist() == [[ch == "#" for ch in row] for row in SEVEN]  # a red 7 in the corner
    assert tuple(image[150, card_left(1) + 67]) == (0, 0, 0)  # a black spade in the middle of the second card
    assert tuple(image[150, card_left(0) + 67]) == (200, 0, 0)
    assert tuple(image[5, 5]) == (0x35, 0x65, 0x4D)
    env.step("7")
    env.step("+")
    after = env.observation_images()[0]
    assert not np.array_equal(after, image) and np.array_equal(after[:250], image[:250])  # the formula line


def test_text_mode_names_the_cards_for_debugging() -> None:
    env = make_env("ezpoints", mode="text")
    obs = env.reset_to_cards(["H7", "ST"])
    assert obs == 'Cards: 7 of hearts and 10 of spades.\nCurrent formula: ""'
    assert env.observation_images() == [] and not env.returns_images
    assert env.step("7")[0].endswith('Current formula: "7"')
    with pytest.raises(SeedRLError, match="mode"):
        make_env("ezpoints", mode="pixels")


# -- expert and panels ---------------------------------------------------------------------------
@pytest.mark.parametrize("split", SPLITS)
def test_the_expert_wins_every_split_in_four_steps(split: str) -> None:
    env = make_env("ezpoints")
    for tid in build_panel("ezpoints", split, 24).task_ids:
        assert play_expert(env, tid) == (True, WIN_REWARD, 4)


def test_panels_are_reproducible_and_share_no_content() -> None:
    def contents(split: str) -> set[tuple[str, str]]:
        return {ez.generate_cards(ez.parse_task_id(t)) for t in build_panel("ezpoints", split).task_ids}

    train, seen, unseen = contents("train"), contents("valid_seen"), contents("valid_unseen")
    assert not train & seen and not train & unseen and not seen & unseen
    ranks = lambda pairs: {tuple(sorted(c[1:] for c in p)) for p in pairs}  # noqa: E731
    assert ranks(unseen) == set(ez.UNSEEN_RANK_PAIRS) and not ranks(unseen) & ranks(train)
    assert ranks(seen) <= ranks(train)
    for split in SPLITS:
        ids = build_panel("ezpoints", split).task_ids
        assert len(ids) == len(set(ids)) == make_env("ezpoints").splits[split]
        assert build_panel("ezpoints", split).hash == build_panel("ezpoints", split).hash
    code = ("from seedrl.envs.panels import build_panel; "
            "print(*(build_panel('ezpoints', s).hash for s in ('train', 'valid_seen', 'valid_unseen')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "7", "PATH": ""}).stdout.split()
    assert out == [build_panel("ezpoints", s).hash for s in SPLITS]
    assert build_panel("ezpoints", "valid_seen", mode="text").hash != build_panel("ezpoints", "valid_seen").hash
    with pytest.raises(SeedRLError, match="task id"):
        make_env("ezpoints").reset("6x6-b1-s00017")


#: the valid_seen tables; change the generator or the split rule and bump EZPointsEnv.version
EZPOINTS_VALID_SEEN_FINGERPRINT = "ec0cf0b64d8e2d15"


def test_ezpoints_task_content_is_pinned() -> None:
    tables = [",".join(ez.generate_cards(ez.parse_task_id(t))) for t in build_panel("ezpoints", "valid_seen").task_ids]
    digest = hashlib.sha256("\n".join(tables).encode()).hexdigest()[:16]
    assert digest == EZPOINTS_VALID_SEEN_FINGERPRINT, f"tables changed ({digest}); bump EZPointsEnv.version"


def test_the_task_type_is_the_pair_of_card_values() -> None:
    """Evaluations break success down by it and per-type demonstrations even over it, so it must name the
    values (J, Q, K count 10), low first, whatever the order and suits, and nothing else."""
    seeds = {ez.generate_cards(s): s for s in range(400)}
    by_cards = {tuple(sorted(ez.card_value(c) for c in cards)): s for cards, s in seeds.items()}
    for (lo, hi), seed in by_cards.items():
        assert ez.EZPointsEnv.task_type(ez.task_id(seed)) == f"cards-{lo}-{hi}"
    faces = [s for cards, s in seeds.items() if any(c[1] in "JQK" for c in cards)]
    assert faces and {ez.EZPointsEnv.task_type(ez.task_id(s)) for s in faces} == {"cards-2-10"}
    unseen = {ez.EZPointsEnv.task_type(t) for t in build_panel("ezpoints", "valid_unseen", 64).task_ids}
    assert unseen == {"cards-3-4", "cards-5-7"}
    assert ez.EZPointsEnv.skill_types(ez.task_id(1)) == ()  # general.md alone: no file per pair
