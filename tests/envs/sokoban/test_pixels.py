"""Pixel Sokoban (``mode: rgb_array``): the image shows the text board, tile by tile, in the colours the task
description names, and the observation text gives nothing of the board away."""

from __future__ import annotations

import numpy as np
import pytest

from seedrl.envs import sokoban as sk
from seedrl.envs.panels import build_panel
from seedrl.envs.registry import make_env
from seedrl.envs.sokoban.env import TILE, decode_rgb, render_rgb, tiles
from seedrl.errors import SeedRLError

#: what each tile looks like, written down here, not read from the renderer: (pixel, RGB) probes
GREEN, ORANGE, RED, YELLOW, BLACK = (60, 200, 60), (255, 120, 0), (220, 20, 60), (255, 200, 0), (0, 0, 0)
BRICK, MORTAR, BROWN = (158, 70, 40), (110, 110, 110), (139, 90, 0)
PROBES = {  # symbol: {(row, col): colour}; (8, 8) the middle, (0, 0) the corner, (2, 7) between them
    "#": {(8, 8): BRICK, (0, 0): BRICK, (3, 0): MORTAR},
    "_": {(8, 8): BLACK, (0, 0): BLACK, (2, 7): BLACK},
    "O": {(8, 8): RED, (0, 0): RED, (2, 7): BLACK},
    "X": {(8, 8): ORANGE, (0, 0): BROWN, (2, 7): YELLOW},
    "√": {(8, 8): RED, (0, 0): RED, (2, 7): YELLOW},
    "P": {(8, 8): GREEN, (0, 0): BLACK, (3, 5): GREEN},
    "S": {(8, 8): GREEN, (0, 0): RED, (3, 5): GREEN},
}


def _text_board(task_id: str) -> list[str]:
    """The board of the text env's observation, cells unseparated."""
    obs = make_env("sokoban", cell_sep="").reset(task_id)
    return obs.splitlines()[1:]


def test_each_tile_has_the_colours_the_description_names() -> None:
    tile = tiles()
    assert set(tile) == set(PROBES)
    for symbol, probes in PROBES.items():
        assert tile[symbol].shape == (TILE, TILE, 3) and tile[symbol].dtype == np.uint8
        for (r, c), colour in probes.items():
            assert tuple(tile[symbol][r, c]) == colour, f"{symbol!r} at {(r, c)}"
    assert len({t.tobytes() for t in tile.values()}) == len(tile), "two symbols share a tile"


@pytest.mark.parametrize("kwargs", [{}, {"dim": [7, 5], "num_boxes": 2, "unseen_dim": 6}])
def test_the_image_decodes_to_the_text_board_along_expert_play(kwargs) -> None:
    """Every tile decodes back to the text env's symbol, in the first rooms of every split and after each
    expert move (boxes on targets, the player on a target), and the probes hold on the whole image."""
    env = make_env("sokoban", mode="rgb_array", **kwargs)
    seen: set[str] = set()
    for split in ("train", "valid_seen", "valid_unseen"):
        for tid in build_panel("sokoban", split, 3, **kwargs).task_ids:
            text = make_env("sokoban", cell_sep="", **kwargs)
            text_obs = text.reset(tid)
            env.reset(tid)
            for _ in range(60):
                board = text_obs.splitlines()[1:]
                (image,) = env.observation_images()
                assert image.shape == (TILE * len(board), TILE * len(board[0]), 3) and image.dtype == np.uint8
                assert decode_rgb(image).splitlines() == board
                for r, row in enumerate(board):
                    for c, symbol in enumerate(row):
                        seen.add(symbol)
                        for (pr, pc), colour in PROBES[symbol].items():
                            assert tuple(image[r * TILE + pr, c * TILE + pc]) == colour
                action = text.expert_action()
                if action is None:
                    break
                text_obs, _, done, _ = text.step(action)
                env.step(action)
    assert seen >= {"#", "_", "O", "X", "P", "√"}


def test_player_on_target_and_box_on_target_tiles() -> None:
    state = sk.parse_board("#####\n#S_X#\n#_√_#\n#####")
    env = make_env("sokoban", mode="rgb_array")
    env.reset_to_state(state)
    assert decode_rgb(env.observation_images()[0], " ") == sk.render(state, " ")
    with pytest.raises(SeedRLError, match="no Sokoban tile"):
        bad = render_rgb(state).copy()
        bad[TILE + 8, TILE + 8] = (1, 2, 3)
        decode_rgb(bad)


def test_pixel_observation_text_has_no_board() -> None:
    env = make_env("sokoban", mode="rgb_array")
    tid = build_panel("sokoban", "valid_seen", 1).task_ids[0]
    obs = env.reset(tid)
    assert obs == "Current board: shown in the image."
    board_lines = _text_board(tid)
    for text in (obs, env.task_description):
        assert not any(line in text for line in board_lines)
        assert not set(text) & set("#_√") and "Legend" not in text and "(" not in text
    assert "green alien" in env.task_description and "yellow crate" in env.task_description
    obs, reward, done, info = env.step("jump")
    assert not info["action_valid"] and obs.endswith("Current board: shown in the image.")
    with pytest.raises(SeedRLError, match="coords"):
        make_env("sokoban", mode="rgb_array", coords=True)
    with pytest.raises(SeedRLError, match="mode"):
        make_env("sokoban", mode="pixels")


def test_pixel_mode_plays_the_same_game_and_returns_fresh_images() -> None:
    tid = build_panel("sokoban", "train", 1).task_ids[0]
    env, text = make_env("sokoban", mode="rgb_array"), make_env("sokoban")
    env.reset(tid)
    text.reset(tid)
    assert env.returns_images and not text.returns_images
    first = env.observation_images()[0]
    first[:] = 0  # the caller's copy: the env's next image is unaffected
    assert env.observation_images()[0].any()
    while (action := text.expert_action()) is not None:
        assert env.expert_action() == action
        a = env.step(action)
        b = text.step(action)
        assert a[1:] == b[1:]
    assert env.privileged_state() == text.privileged_state()


def test_panel_hash_text_mode_unchanged_pixel_mode_its_own() -> None:
    # the hashes every sokoban panel had before pixel mode existed
    assert build_panel("sokoban", "valid_seen").hash == "c2862171028c3d28"
    assert build_panel("sokoban", "valid_seen", mode="text").hash == "c2862171028c3d28"
    assert build_panel("sokoban", "train", 8).hash == "96c07ab55b2fd0e3"
    pixel = build_panel("sokoban", "valid_seen", mode="rgb_array")
    assert pixel.hash != "c2862171028c3d28"
    assert pixel.task_ids == build_panel("sokoban", "valid_seen").task_ids
