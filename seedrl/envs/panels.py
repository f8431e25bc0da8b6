"""Fixed, versioned task panels: the list of task ids of a split, with a content hash.

A panel is a pure function of (env, split, size, env options). It never depends on the run seed
or on how many workers play it, so every run and every method evaluates the same tasks.

The panel hash identifies the task list and nothing else: sha256 over the env, its version, the
split, the ordered task ids and the env's *normalised* options (after its typed option model parsed
them, so ``4`` and ``[4, 4]``, ``5`` and ``5.0``, ``2`` and ``"2"`` are one spelling) without its
machine-local options (cache and data folders, servers, JVM sizes, timeouts). A subset of a panel
(``--num-tasks N``, :meth:`Panel.subset`) is a panel of its own: its hash is over the task ids
actually evaluated, and it records the hash and size of the panel it was drawn from.

Format 1 manifests (hash over the raw env kwargs) still load; their ``legacy_hash`` is the hash
they were stored with.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from seedrl.envs.registry import env_class
from seedrl.errors import SeedRLError, unknown_name

PANEL_FORMAT = 2


@dataclass(frozen=True)
class Panel:
    env: str
    split: str
    task_ids: tuple[str, ...]
    #: the kwargs envs are made with (as given, machine-local options included)
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    env_version: str = "1"
    version: int = PANEL_FORMAT
    #: the normalised options that define the tasks (``Env.option_identity``); ``None``: ``env_kwargs``
    options: dict[str, Any] | None = None
    #: for a subset: the hash and size of the panel it was drawn from
    parent_hash: str | None = None
    parent_size: int | None = None

    @property
    def hash(self) -> str:
        """sha256 over the env and its version, split, normalised options and ordered task ids (16 hex
        digits); format 1 panels keep their format 1 hash (:attr:`legacy_hash`)."""
        if self.version < 2:
            return self.legacy_hash
        body = json.dumps({"env": self.env, "env_version": self.env_version, "split": self.split,
                           "task_ids": list(self.task_ids), "options": self._identity(),
                           "version": self.version}, sort_keys=True, default=str)
        return hashlib.sha256(body.encode()).hexdigest()[:16]

    @property
    def legacy_hash(self) -> str:
        """The format 1 hash (raw env kwargs, machine-local ones included), which runs and checkpoints
        written before format 2 carry: compare with :meth:`matches`."""
        body = json.dumps({"env": self.env, "env_version": self.env_version, "split": self.split,
                           "task_ids": list(self.task_ids), "env_kwargs": self.env_kwargs,
                           "version": 1}, sort_keys=True, default=str)
        return hashlib.sha256(body.encode()).hexdigest()[:16]

    def matches(self, stored_hash: str | None) -> bool:
        """Whether a stored hash names this panel (the current hash, or the format 1 one)."""
        return stored_hash is not None and stored_hash in (self.hash, self.legacy_hash)

    def _identity(self) -> dict[str, Any]:
        return self.options if self.options is not None else self.env_kwargs

    def __len__(self) -> int:
        return len(self.task_ids)

    @property
    def is_subset(self) -> bool:
        return self.parent_hash is not None

    def subset(self, n: int | None) -> Panel:
        """``n`` tasks of this panel, seeded and stratified by task type (``Env.task_type``), in panel
        order: a pure function of (this panel, ``n``). ``None``, 0 or ``n >= len(self)``: the panel.

        Each type gets a share of ``n`` proportional to its size (largest remainders), and every type
        gets at least one task when ``n`` is at least the number of types; the tasks of a type are a
        sample seeded by the panel hash and ``n``."""
        if not n or n >= len(self):
            return self
        if n < 0:
            raise SeedRLError(f"a panel subset needs a positive number of tasks, got {n}")
        task_type = env_class(self.env).task_type
        groups: dict[str, list[int]] = {}
        for i, t in enumerate(self.task_ids):
            groups.setdefault(task_type(t), []).append(i)
        quotas = _allocate(n, {k: len(v) for k, v in sorted(groups.items())})
        rng = random.Random(f"seedrl-panel-subset/{self.hash}/{n}")
        chosen: list[int] = []
        for k in sorted(groups):
            chosen += rng.sample(groups[k], quotas[k])
        return Panel(env=self.env, split=self.split, task_ids=tuple(self.task_ids[i] for i in sorted(chosen)),
                     env_kwargs=self.env_kwargs, env_version=self.env_version, version=max(self.version, 2),
                     options=self._identity(), parent_hash=self.hash, parent_size=len(self))

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["task_ids"] = list(self.task_ids)
        d["hash"] = self.hash
        return d

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=1))

    @classmethod
    def load(cls, path: str | Path) -> Panel:
        try:
            d = json.loads(Path(path).read_text())
            expected = d.pop("hash", None)
            version = int(d.get("version", 1))
            panel = cls(env=d["env"], split=d["split"], task_ids=tuple(d["task_ids"]),
                        env_kwargs=d.get("env_kwargs", {}), env_version=d.get("env_version", "1"),
                        version=version, options=d.get("options") if version >= 2 else None,
                        parent_hash=d.get("parent_hash"), parent_size=d.get("parent_size"))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise SeedRLError(f"panel manifest {path} cannot be read ({type(exc).__name__}: {exc})") from None
        if version > PANEL_FORMAT:
            raise SeedRLError(f"panel manifest {path} has format {version}; this seedrl reads formats 1-{PANEL_FORMAT}")
        if expected is not None and expected != panel.hash:
            raise SeedRLError(f"panel manifest {path} is corrupt: hash {expected} != content {panel.hash}")
        return panel


def _allocate(n: int, sizes: dict[str, int]) -> dict[str, int]:
    """Split ``n`` (< total) over groups in proportion to their sizes (largest remainders, ties by
    name); every group gets at least one when ``n`` >= the number of groups."""
    total = sum(sizes.values())
    exact = {k: n * s / total for k, s in sizes.items()}
    quotas = {k: int(e) for k, e in exact.items()}
    for k in sorted(sizes, key=lambda k: (-(exact[k] - quotas[k]), k))[: n - sum(quotas.values())]:
        quotas[k] += 1
    if n >= len(sizes):
        for k in sorted(k for k, q in quotas.items() if q == 0):
            donor = max(sorted(quotas), key=lambda d: quotas[d])  # the largest share gives one up
            quotas[donor] -= 1
            quotas[k] += 1
    return quotas


def build_panel(env: str, split: str, size: int | None = None, **env_kwargs: Any) -> Panel:
    """Build the panel of ``split`` for ``env``; ``size`` defaults to the env's split size.

    Bad env options raise :class:`SeedRLError` naming the option before any task is listed."""
    cls = env_class(env)
    if split not in cls.splits:
        raise unknown_name(f"split of {env}", split, list(cls.splits))
    identity = cls.option_identity(env_kwargs)
    n = cls.splits[split] if size is None else size
    ids = cls.panel_task_ids(split, n, **env_kwargs)
    return Panel(env=env, split=split, task_ids=tuple(ids), env_kwargs=dict(env_kwargs), env_version=cls.version,
                 options=identity)
