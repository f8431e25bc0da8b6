"""seedrl.train.collect by hand: the task stream is a function of (seed, position) alone, so a resumed run
draws the same tasks, and every epoch plays the whole panel. Through a real run: test_stabilisers.py
(dynamic sampling) and test_distributed.py (blocks of several processes)."""

from __future__ import annotations

from seedrl.envs.panels import build_panel
from seedrl.train.collect import next_tasks


def test_the_task_stream_depends_only_on_seed_and_position():
    panel = build_panel("sokoban", "train", 5)
    stream = next_tasks(panel, 3, 0, 12)
    assert next_tasks(panel, 3, 4, 8) == stream[4:]  # resumed at position 4
    assert sorted(stream[:5]) == sorted(panel.task_ids) == sorted(stream[5:10])  # each epoch: the whole panel
    assert stream[:5] != stream[5:10] or stream[:5] != next_tasks(panel, 4, 0, 5)  # reshuffled per epoch/seed
