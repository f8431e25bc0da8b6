"""Fixed, versioned task panels: the list of task ids of a split, with a content hash.

A panel is a pure function of (env, split, size, env kwargs). It never depends on the run seed
or on how many workers play it, so every run and every method evaluates the same tasks.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from seedrl.envs.registry import env_class
from seedrl.errors import SeedRLError, unknown_name

PANEL_FORMAT = 1


@dataclass(frozen=True)
class Panel:
    env: str
    split: str
    task_ids: tuple[str, ...]
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    env_version: str = "1"
    version: int = PANEL_FORMAT

    @property
    def hash(self) -> str:
        """sha256 over the env and its version, split, env kwargs and ordered task ids (16 hex digits)."""
        body = json.dumps({"env": self.env, "env_version": self.env_version, "split": self.split,
                           "task_ids": list(self.task_ids), "env_kwargs": self.env_kwargs,
                           "version": self.version}, sort_keys=True, default=str)
        return hashlib.sha256(body.encode()).hexdigest()[:16]

    def __len__(self) -> int:
        return len(self.task_ids)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["task_ids"] = list(self.task_ids)
        d["hash"] = self.hash
        return d

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=1))

    @classmethod
    def load(cls, path: str | Path) -> Panel:
        d = json.loads(Path(path).read_text())
        expected = d.pop("hash", None)
        panel = cls(env=d["env"], split=d["split"], task_ids=tuple(d["task_ids"]),
                    env_kwargs=d.get("env_kwargs", {}), env_version=d.get("env_version", "1"),
                    version=d.get("version", PANEL_FORMAT))
        if expected is not None and expected != panel.hash:
            raise SeedRLError(f"panel manifest {path} is corrupt: hash {expected} != content {panel.hash}")
        return panel


def build_panel(env: str, split: str, size: int | None = None, **env_kwargs: Any) -> Panel:
    """Build the panel of ``split`` for ``env``; ``size`` defaults to the env's split size."""
    cls = env_class(env)
    if split not in cls.splits:
        raise unknown_name(f"split of {env}", split, list(cls.splits))
    n = cls.splits[split] if size is None else size
    ids = cls.panel_task_ids(split, n, **env_kwargs)
    return Panel(env=env, split=split, task_ids=tuple(ids), env_kwargs=dict(env_kwargs), env_version=cls.version)
