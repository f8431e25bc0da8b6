"""Images beside the observation text: the protocol's default leaves text envs as they were, and
``rgb_image`` accepts only what a vision policy can take (uint8 HxWx3, or a PIL image)."""

from __future__ import annotations

import numpy as np
import pytest

from seedrl.envs.base import Env, rgb_image
from seedrl.envs.panels import build_panel
from seedrl.envs.registry import env_class, env_names, make_env
from seedrl.errors import SeedRLError

#: the envs whose observations can carry images (every other registered env is a text env)
IMAGE_ENVS = {"sokoban", "ezpoints"}  # sokoban only with mode: rgb_array


def test_text_envs_neither_override_nor_announce_images() -> None:
    for name in env_names():
        cls = env_class(name)
        if name in IMAGE_ENVS or cls.observation_images is not Env.observation_images:
            continue
        assert cls.returns_images is False, name


@pytest.mark.parametrize("name", ["sokoban", "household"])
def test_text_episodes_return_no_images(name: str) -> None:
    env = make_env(name)
    assert env.returns_images is False
    for tid in build_panel(name, "valid_seen", 2).task_ids:
        obs = env.reset(tid)
        assert isinstance(obs, str) and env.observation_images() == []
        for _ in range(3):
            action = env.expert_action()
            if action is None:
                break
            obs, _, done, info = env.step(action)
            assert isinstance(obs, str) and "images" not in info and env.observation_images() == []
            if done:
                break


def test_rgb_image_accepts_uint8_rgb_and_pil_only() -> None:
    arr = np.zeros((4, 5, 3), dtype=np.uint8)
    out = rgb_image(arr)
    assert out.shape == (4, 5, 3) and out.dtype == np.uint8 and out is not arr
    pil = pytest.importorskip("PIL.Image")
    rgba = pil.new("RGBA", (5, 4), (10, 20, 30, 255))
    assert rgb_image(rgba).shape == (4, 5, 3) and tuple(rgb_image(rgba)[0, 0]) == (10, 20, 30)
    for bad in (np.zeros((4, 5, 3)), np.zeros((4, 5), dtype=np.uint8), np.zeros((4, 5, 4), dtype=np.uint8),
                np.zeros((0, 5, 3), dtype=np.uint8), [[0, 0, 0]], "image.png"):
        with pytest.raises(SeedRLError, match="uint8 HxWx3"):
            rgb_image(bad)
