"""Issue 45, item 5: a vision-language trace records each image step's frames (lossless PNG, counted in
the trace's byte budget) and ``seedrl view`` shows them beside that step's token shifts. Text steps are
unchanged. No model: the trace is built from hand-made steps with a real env's frames."""

from __future__ import annotations

import base64
import io
import json
import re

import numpy as np
import pytest
import torch

from seedrl.envs.registry import make_env
from seedrl.experiments.viewer import render
from seedrl.models.vision import ImageInputs
from seedrl.rollout.types import StepSample, Trajectory
from seedrl.train.traces import MAX_FRAME_SIDE, build_trace, write_trace


class _Tok:
    def batch_decode(self, ids):
        return [f"<{i[0]}>" for i in ids]


def _frames_of_a_real_env(n: int = 2) -> list[np.ndarray]:
    env = make_env("sokoban", dim=[5, 5], mode="rgb_array")
    env.reset(env.panel_task_ids("train", 1)[0])
    out = [env.observation_images()[0]]
    for a in ("up", "right", "down", "left"):
        if len(out) >= n:
            break
        env.step(a)
        out.append(env.observation_images()[0])
    return out


def _traj(frames: list[np.ndarray] | None, steps: int = 2) -> tuple[Trajectory, list[StepSample]]:
    samples = []
    for k in range(steps):
        images = None
        if frames is not None:
            images = ImageInputs(torch.zeros(4, 8), torch.tensor([[1, 2, 2]]), raw=[frames[k % len(frames)]])
        samples.append(StepSample([1, 2, 3], [10 + k, 20 + k], [-0.5, -1.0], traj_id=0, group_id=0, step=k,
                                  reward=0.0, action_valid=True, observation=f"obs {k}", action="up",
                                  images=images))
    return Trajectory(0, 0, "push the box", steps=samples, won=True), samples


def _trace(frames, max_bytes: int = 200_000, steps: int = 2) -> dict:
    t, samples = _traj(frames, steps)
    old = [torch.tensor(s.logprobs) for s in samples]
    teacher = [o + 0.25 for o in old]
    return build_trace(1, [t], samples, old, torch.ones(len(samples)), teacher, torch.ones(len(samples)), None,
                       k=1, max_bytes=max_bytes, seed=0, tokenizer=_Tok(), gate_beta=5.0, method="seed",
                       signal_name="opd")


def _png_pixels(b64: str) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(base64.b64decode(b64))).convert("RGB"))


def _size(obj) -> int:
    return len(json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode())


def test_an_image_steps_frame_decodes_to_the_envs_raw_frame_pixel_for_pixel():
    frames = _frames_of_a_real_env(2)
    assert not np.array_equal(frames[0], frames[1]) or len(frames) == 2
    steps = _trace(frames)["trajectories"][0]["steps"]
    assert len(steps) == 2
    for k, s in enumerate(steps):
        (png,) = s["frames"]
        got = _png_pixels(png)
        assert got.shape == frames[k].shape and got.dtype == np.uint8
        assert np.array_equal(got, frames[k])
        assert "frames_stride" not in s  # 80 x 80: under the cap, kept whole


def test_a_frame_over_the_cap_is_subsampled_and_says_so():
    big = np.random.default_rng(0).integers(0, 256, (MAX_FRAME_SIDE + 10, 40, 3), dtype=np.uint8)
    (s,) = _trace([big], steps=1)["trajectories"][0]["steps"]
    assert s["frames_stride"] == [2]
    assert np.array_equal(_png_pixels(s["frames"][0]), big[::2, ::2])


def test_a_text_step_records_no_frames():
    (t,) = _trace(None)["trajectories"]
    assert t["steps"] and all("frames" not in s and "frames_stride" not in s for s in t["steps"])


def test_the_byte_budget_counts_frame_bytes():
    """A budget that holds both steps as text but not with their frames drops the image steps."""
    frames = _frames_of_a_real_env(2)
    text = _trace(None)
    fits_text = _size(text) + 200
    assert len(text["trajectories"][0]["steps"]) == 2
    assert _size(_trace(frames)) > fits_text  # the frames need more room than that
    vl = _trace(frames, max_bytes=fits_text)
    assert _size(vl) <= fits_text
    (t,) = vl["trajectories"] or [{"steps": [], "steps_omitted": 2}]
    assert len(t["steps"]) < 2 and t["steps_omitted"] == 2 - len(t["steps"])


def test_the_page_shows_each_frame_in_its_steps_block(tmp_path):
    """The run page carries each step's frames as ``<img>`` in a block keyed to that step (iteration,
    trajectory, step), which the page's script places beside the step's tokens; the images are the frames."""
    frames = _frames_of_a_real_env(2)
    run = tmp_path / "run"
    write_trace(run, _trace(frames))
    text = render(run)
    blocks = dict(re.findall(r'<div class="frames" data-step="([^"]+)">(.*?)</div>', text, re.S))
    assert set(blocks) == {"1/0/0", "1/0/1"}
    for k in range(2):
        (src,) = re.findall(r'<img class="frame"[^>]* src="data:image/png;base64,([A-Za-z0-9+/=]+)"', blocks[f"1/0/{k}"])
        assert np.array_equal(_png_pixels(src), frames[k])
    # the page's script puts the block into the step, beside the response tokens
    assert "frameBlock(it, t.traj_id, s.step)" in text


def test_a_text_trace_page_has_no_frame_blocks(tmp_path):
    run = tmp_path / "run"
    write_trace(run, _trace(None))
    assert '<div class="frames"' not in render(run)


@pytest.mark.slow
def test_in_a_browser_the_frames_sit_in_their_steps_block_beside_the_tokens(tmp_path):
    """Headless Chromium (skipped without it; CI has it): the script moves each frame block into its step,
    in the same row as the step's response tokens."""
    from tests.experiments.test_viewer import dump_dom

    frames = _frames_of_a_real_env(2)
    run = tmp_path / "run"
    write_trace(run, _trace(frames))
    from seedrl.experiments.viewer import write_view

    dom = dump_dom(write_view(run), "#iter=all")
    steps = re.findall(r'<div class="step">(.*?)(?=<div class="step">|$)', dom, re.S)
    assert len(steps) == 2
    for k, st in enumerate(steps):
        assert f"step {k} " in st
        m = re.search(r'<div class="sbody"><div class="frames" data-step="1/0/' + str(k) + r'">(<img [^>]*>)</div>'
                      r'<div class="stext">.*?<div class="resp"><span class="tok shifted"', st, re.S)
        assert m, st[:500]
        src = re.search(r'src="data:image/png;base64,([^"]+)"', m.group(1)).group(1)
        assert np.array_equal(_png_pixels(src), frames[k])
    assert '<div id="frame-store" hidden=""></div>' in dom  # every block moved out of the store
