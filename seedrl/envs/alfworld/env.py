"""ALFWorld on its own text engine: official data (``alfworld``) and generated households
(``alfworld-gen``).

Engine: ALFWorld's own (:mod:`seedrl.envs.alfworld.engine`): TextWorld-PDDL over Fast Downward with
ALFWorld's wrappers, pooled engines, and ALFWorld's planner expert (``expert_type: planner``).

Format (verl-agent's ALFWorld env):

- title "the ALFRED Embodied Environment"; :attr:`task_description` is the text after
  "Your task is to: " in the game's intro, e.g. "put a hot apple in countertop.";
- the first observation is the intro without the "-= Welcome to TextWorld, ALFRED! =-" banner and
  without the task sentence (the prompt's task line carries it): "You are in the middle of a room.
  Looking quickly around you, you see a cabinet 1, a countertop 1, ...";
- later observations are the engine's feedback ("You arrive at cabinet 1. The cabinet 1 is closed.");
- :meth:`admissible_actions` is the engine's admissible command list (sorted) without "help", as
  verl-agent shows it. A command outside that list is not sent: the state is unchanged, the
  observation is ALFWorld's "Nothing happens." and ``info["action_valid"]`` is False.
- the step prompt: ``alfworld`` takes verl-agent's ALFWorld template structure (env option
  ``prompt_style: verl_agent``, the default; the task sentence closes the step-0 observation),
  ``alfworld-gen`` this project's layout (``seedrl``), as its trained tiny models were trained on it;
  see :mod:`seedrl.agent.prompts` and docs/deviations.md;
- reward ``WIN_REWARD`` (10) on the winning step, 0 otherwise; ``info`` has ``won`` and ``action_valid``.

Official data (``alfworld``): ``data_dir`` kwarg, else ``$ALFWORLD_DATA``, else ``~/.cache/alfworld``
(ALFWorld's own default), holding ``json_2.1.1/{train,valid_seen,valid_unseen}/<task folder>/
trial_*/{traj_data.json, game.tw-pddl}`` as ``alfworld-download`` writes it. Games are filtered as
``AlfredTWEnv.collect_game_files`` does (the six task types, no "movable"/"Sliced" folders,
``"solvable": true``). Task ids are paths relative to ``json_2.1.1`` without the file name, e.g.
``"valid_seen/pick_and_place_simple-AlarmClock-None-Desk-307/trial_T20190907_072317_014092"``; a
panel of the full split lists every game in sorted order (valid_seen 140, valid_unseen 134 games,
train 3553); a smaller panel takes evenly spaced games from that order. ALFWorld's valid_unseen uses
floor plans absent from train. A game with a missing or unreadable file is skipped and named with the
reason (a warning, and in the error when the split then has fewer games than the panel size); the env
option ``allow_partial: true`` (part of the panel hash) accepts such a tree, its panel being every
playable game. ``data_dir`` is machine-local: not part of the panel hash.

Generated households (``alfworld-gen``): see :mod:`seedrl.envs.alfworld.gen` (task ids, the exact
seen/unseen rule, determinism, cache).

Faults: a broken game file or an engine exception in ``reset``/``step`` raises
:class:`AlfWorldEngineError` (one line naming the game); that engine is discarded and the next
``reset`` starts a fresh one, so the rollout ends only that episode.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from seedrl.envs.alfworld import gen
from seedrl.envs.alfworld.engine import (
    AlfWorldEngineError,
    Engine,
    acquire_engine,
    engine_call,
    release_engine,
)
from seedrl.envs.alfworld.state import AlfWorldPrivilegedState
from seedrl.envs.base import WIN_REWARD, Bool, Env, EnvOptions, IntPair, PathStr, StrList
from seedrl.errors import SeedRLError, unknown_name

log = logging.getLogger(__name__)

TITLE = "the ALFRED Embodied Environment"
TASK_PREFIX = "Your task is to: "
BANNER = "-= Welcome to TextWorld, ALFRED! =-"
INVALID_ACTION_OBS = "Nothing happens."
GAME_OVER_OBS = "The game is over."
#: commands that never change the state (skipped when comparing with the expert plan)
NOOP_COMMAND = re.compile(r"^(?:look|inventory|help|examine\b.*)$")


# -- observations -----------------------------------------------------------------------------
def split_intro(feedback: str) -> tuple[str, str]:
    """(first observation, task description) from the game's intro text."""
    text = feedback.replace(BANNER, "")
    task = ""
    if TASK_PREFIX in text:
        text, task = text.split(TASK_PREFIX, 1)
    return _compact(text), " ".join(task.split())


def _compact(text: str) -> str:
    return "\n".join(ln.strip() for ln in text.strip().splitlines() if ln.strip())


def _norm(command: str) -> str:
    return " ".join(str(command).strip().lower().split())


# -- the envs ---------------------------------------------------------------------------------
class _AlfWorldBase(Env):
    """An episode on one ALFWorld game file; subclasses map task ids to game files."""

    title = TITLE
    packages = ("alfworld", "textworld", "fast-downward-textworld")

    @classmethod
    def sdar_skills(cls, task_id: str, task_to_skill: Mapping[str, str], task_text: str = "",
                    task_keywords: Mapping[str, Sequence[str]] | None = None) -> tuple[str, ...]:
        """SDAR's route for ALFWorld games: the task type looked up exactly, else the first
        ``task_to_skill`` key (in file order) found in the game's path or type
        (``pick_and_place_simple`` -> ``pick_and_place``); none: the general skills alone, as SDAR."""
        kind = cls.task_type(task_id)
        if kind in task_to_skill:
            return (task_to_skill[kind],)
        return tuple(next(((v,) for k, v in task_to_skill.items() if k in kind or k in str(task_id)), ()))

    def __init__(self) -> None:
        super().__init__()
        self._engine: Engine | None = None
        self._game_file: Path | None = None
        self._traj: dict[str, Any] = {}
        self._state: Any = None
        self._done = False
        self._won = False
        self._expert_plan: list[str] = []
        self._initial_locations: dict[str, str] = {}
        self._history: list[dict[str, Any]] = []
        self._plan_cursor = 0
        self._first_deviation: dict[str, Any] | None = None

    # subclasses
    def game_file(self, task_id: str) -> Path:
        raise NotImplementedError

    # -- episode ---------------------------------------------------------------------------
    def reset(self, task_id: str) -> str:
        game_file = self.game_file(task_id)
        self._release_engine()
        key = (str(game_file), game_file.stat().st_mtime_ns)
        try:
            traj = json.loads((game_file.parent / "traj_data.json").read_text())
        except (OSError, ValueError) as e:
            raise AlfWorldEngineError(f"ALFWorld game {game_file.parent}: unreadable traj_data.json ({e})") from None
        with engine_call(f"game {game_file}"):
            engine = acquire_engine(key)
            self._engine = engine
            try:
                engine.load(str(game_file), key)
                state = engine.reset()
                stored = (traj.get("seedrl") or {}).get("expert_plan")
                plan = list(stored) if stored else engine.plan()
                locations = {o: r for o, r in engine.facts("inreceptacle")}
            except BaseException:
                self._discard_engine()
                raise
        self.task_id = task_id
        self._game_file = game_file
        self._traj = traj
        self._state = state
        self._done = self._won = False
        self._expert_plan = plan
        self._initial_locations = locations
        self._history = []
        self._plan_cursor = 0
        self._first_deviation = None
        obs, self.task_description = split_intro(state["feedback"] or "")
        return obs

    def step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        if self._state is None or self._engine is None:
            raise SeedRLError("alfworld: call reset(task_id) before step()")
        if self._done:
            return GAME_OVER_OBS, 0.0, True, self._info(valid=False)
        by_norm = {_norm(c): c for c in self.admissible_actions() or []}
        command = by_norm.get(_norm(action))
        if command is None:
            self._history.append({"action": str(action), "valid": False})
            return INVALID_ACTION_OBS, 0.0, False, self._info(valid=False)
        with engine_call(f"game {self._game_file}, command {command!r}"):
            try:
                self._state = self._engine.step(command)
            except BaseException:
                self._discard_engine()
                raise
        self._track(command)
        self._won = bool(self._state["won"])
        self._done = self._won
        return _compact(self._state["feedback"] or ""), WIN_REWARD if self._won else 0.0, self._done, self._info(valid=True)

    def _track(self, command: str) -> None:
        """Follow the agent along the expert plan to find the first command that left it."""
        self._history.append({"action": command, "valid": True})
        if self._first_deviation is not None or NOOP_COMMAND.match(command):
            return
        if self._plan_cursor < len(self._expert_plan) and command == self._expert_plan[self._plan_cursor]:
            self._plan_cursor += 1
        elif self._plan_cursor < len(self._expert_plan):
            self._first_deviation = {"env_step": len(self._history) - 1, "action": command,
                                     "expected": self._expert_plan[self._plan_cursor],
                                     "plan_index": self._plan_cursor}

    def admissible_actions(self) -> list[str] | None:
        if self._state is None:
            return None
        if self._done:
            return []
        return [c for c in self._state["admissible_commands"] or [] if c != "help"]

    def expert_action(self) -> str | None:
        """The next command of ALFWorld's planner expert from the current state."""
        if self._state is None or self._done or self._engine is None:
            return None
        with engine_call(f"game {self._game_file} (planner)"):
            plan = self._engine.plan()
        return plan[0] if plan else None

    def privileged_state(self) -> dict[str, Any]:
        if self._state is None:
            return {}
        p = self._traj.get("pddl_params") or {}
        task_type = self._traj.get("task_type") or self.task_type(self.task_id or "")
        obj = str(p.get("object_target") or "").lower()
        target = str(p.get("toggle_target") or p.get("parent_target") or "").lower()
        extra: dict[str, Any] = {}
        if self._engine is not None:
            with contextlib.suppress(Exception), engine_call("privileged state"):
                extra["holding"] = [f[1] for f in self._engine.facts("holds")]
                here = {loc for _, loc in self._engine.facts("atlocation")}
                extra["agent_at"] = sorted(r for r, loc in self._engine.facts("receptacleatlocation") if loc in here)
        return AlfWorldPrivilegedState(
            env=self.name,
            task_id=self.task_id,
            task_type=task_type,
            task_description=self.task_description,
            object_target=obj,
            parent_target=str(p.get("parent_target") or "").lower(),
            toggle_target=str(p.get("toggle_target") or "").lower(),
            target=target,
            initial_locations=dict(self._initial_locations),
            target_objects={o: r for o, r in self._initial_locations.items() if o.split(" ")[0] == obj},
            expert_plan=list(self._expert_plan),
            first_deviation=self._first_deviation,
            history=list(self._history),
            won=self._won,
            **extra,
        ).to_dict()

    def close(self) -> None:
        self._release_engine()
        self._state = None

    def _info(self, valid: bool) -> dict[str, Any]:
        return {"won": self._won, "action_valid": valid}

    def _release_engine(self) -> None:
        if self._engine is not None:
            release_engine(self._engine)
            self._engine = None

    def _discard_engine(self) -> None:
        if self._engine is not None:
            self._engine.close()
            self._engine = None
        self._state = None


# -- official data ----------------------------------------------------------------------------
OFFICIAL_SPLITS = {"train": 3553, "valid_seen": 140, "valid_unseen": 134}


def default_data_dir() -> Path:
    """``$ALFWORLD_DATA`` or ALFWorld's default ``~/.cache/alfworld`` (read before alfworld is
    imported: importing it sets the variable)."""
    env = os.environ.get("ALFWORLD_DATA")
    return Path(os.path.expandvars(env)).expanduser() if env else Path.home() / ".cache" / "alfworld"


def _split_dir(data_dir: Path, split: str) -> Path:
    d = data_dir / "json_2.1.1" / split
    if not d.is_dir():
        raise SeedRLError(f"ALFWorld data not found: no {d}. Run `alfworld-download` (needs internet) and set "
                          f"ALFWORLD_DATA to its folder (or pass the env kwarg data_dir); offline, use env alfworld-gen")
    return d


@functools.lru_cache(maxsize=16)
def _list_games(split_dir: str, mtime_ns: int) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """(relative ids of the playable games under a split folder, filtered as AlfredTWEnv does;
    (id, reason) of every game skipped because it is broken: a missing or unreadable file). Games
    ALFWorld's own filter leaves out (``movable``/``Sliced`` folders, other task types,
    ``"solvable": false``) are not playable and not broken. Logs the broken games once per tree."""
    root = Path(split_dir)
    out: list[str] = []
    broken: list[tuple[str, str]] = []
    for folder in sorted({p.parent for pattern in ("traj_data.json", "game.tw-pddl") for p in root.rglob(pattern)}):
        rel = folder.relative_to(root.parent).as_posix()
        if "movable" in rel or "Sliced" in rel:
            continue
        traj_file, game = folder / "traj_data.json", folder / "game.tw-pddl"
        if not traj_file.is_file():
            broken.append((rel, "no traj_data.json"))
            continue
        if not game.is_file():
            broken.append((rel, "no game.tw-pddl"))
            continue
        try:
            traj = json.loads(traj_file.read_text())
        except (OSError, ValueError) as e:
            broken.append((rel, f"unreadable traj_data.json ({type(e).__name__}: {str(e)[:80]})"))
            continue
        if not isinstance(traj, dict) or traj.get("task_type") not in gen.TASK_TYPES:
            continue
        try:
            with open(game) as f:
                data = json.loads(f.read())
        except (OSError, ValueError) as e:
            broken.append((rel, f"unreadable game.tw-pddl ({type(e).__name__}: {str(e)[:80]})"))
            continue
        if not isinstance(data, dict) or not data.get("solvable", False):
            continue
        out.append(rel)
    if broken:
        log.warning("ALFWorld %s: skipped %d broken game(s): %s", root, len(broken), _describe(broken, limit=None))
    return tuple(out), tuple(broken)


def _describe(broken: Any, limit: int | None = 10) -> str:
    items = [f"{rel} ({why})" for rel, why in broken]
    if limit is not None and len(items) > limit:
        items = items[:limit] + [f"... and {len(items) - limit} more (see the log)"]
    return "; ".join(items)


def official_games(data_dir: str | Path | None, split: str) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """(playable game ids, (id, reason) of the broken games skipped) of an official-layout split."""
    root = Path(data_dir).expanduser() if data_dir is not None else default_data_dir()
    d = _split_dir(root, split)
    return _list_games(str(d), _tree_mtime(d))


def official_task_ids(data_dir: str | Path | None, split: str) -> tuple[str, ...]:
    return official_games(data_dir, split)[0]


def _tree_mtime(d: Path) -> int:
    """Changes when a game folder is added or removed (folder mtimes, two levels deep)."""
    m = d.stat().st_mtime_ns
    for sub in d.iterdir():
        if sub.is_dir():
            m = max(m, sub.stat().st_mtime_ns)
    return m


class AlfWorldOptions(EnvOptions):
    """Env options of ``alfworld`` (official data)."""

    env_name: ClassVar[str] = "alfworld"
    #: prompt_style changes the prompt, never which tasks a panel holds: not part of the panel hash
    local: ClassVar[frozenset[str]] = frozenset({"data_dir", "prompt_style"})

    data_dir: PathStr | None = Field(None, description="the folder holding json_2.1.1/ (default $ALFWORLD_DATA, "
                                                       "else ~/.cache/alfworld)")
    allow_partial: Bool = Field(False, description="true or false; true accepts a split with fewer playable games "
                                                   "than the full download (its panel is then every playable game)")
    prompt_style: Literal["verl_agent", "seedrl"] = Field(
        "verl_agent", description="verl_agent (verl-agent's ALFWorld step-prompt structure, the default) or seedrl "
                                  "(this project's layout, as alfworld-gen uses)")


class AlfWorldEnv(_AlfWorldBase):
    """ALFWorld's official games (``alfworld-download``), one game per task id."""

    name = "alfworld"
    splits = dict(OFFICIAL_SPLITS)
    options_model = AlfWorldOptions
    #: runs saved before verl-agent's layout became the default were played with this project's
    legacy_kwargs: ClassVar[dict[str, Any]] = {"prompt_style": "seedrl"}

    def __init__(self, **env_kwargs: Any) -> None:
        super().__init__()
        self.options = AlfWorldOptions.parse(env_kwargs)
        self.prompt_style = self.options.prompt_style
        data_dir = self.options.data_dir
        self.data_dir = Path(data_dir).expanduser() if data_dir is not None else default_data_dir()

    @classmethod
    def panel_task_ids(cls, split: str, size: int, **env_kwargs: Any) -> list[str]:
        """All playable games of the split in sorted order, or ``size`` evenly spaced ones. A split with
        fewer playable games than ``size`` is an error naming every broken game and why, unless the
        option ``allow_partial`` is true: then the panel is every playable game."""
        if split not in cls.splits:
            raise unknown_name("split of alfworld", split, list(cls.splits))
        opts = AlfWorldOptions.parse(env_kwargs)
        ids, broken = official_games(opts.data_dir, split)
        skipped = f"; skipped {len(broken)} broken game(s): {_describe(broken)}" if broken else ""
        if size > len(ids):
            if not opts.allow_partial or not ids:
                raise SeedRLError(f"alfworld {split} has {len(ids)} playable games, fewer than the panel size {size} "
                                  f"(the full download has {OFFICIAL_SPLITS[split]}){skipped}; repair the data, pass "
                                  f"a smaller size, or set the env option allow_partial: true to play the "
                                  f"{len(ids)} playable games")
            log.warning("alfworld %s: allow_partial: the panel holds the %d playable games, not %d%s",
                        split, len(ids), size, skipped)
            return list(ids)
        if size == len(ids):
            return list(ids)
        return [ids[i * len(ids) // size] for i in range(size)]

    @classmethod
    def task_type(cls, task_id: str) -> str:
        parts = str(task_id).strip("/").split("/")
        folder = parts[1] if len(parts) >= 3 else parts[0]
        return folder.split("-", 1)[0]

    def game_file(self, task_id: str) -> Path:
        rel = str(task_id).strip().strip("/")
        if not rel or ".." in rel.split("/") or rel.split("/")[0] not in OFFICIAL_SPLITS:
            raise SeedRLError(f"bad alfworld task id {task_id!r}; expected <split>/<task folder>/<trial>, "
                              "e.g. valid_seen/pick_and_place_simple-AlarmClock-None-Desk-307/trial_T20190907_072317_014092")
        _split_dir(self.data_dir, rel.split("/")[0])
        game = self.data_dir / "json_2.1.1" / rel / "game.tw-pddl"
        if not game.is_file():
            raise SeedRLError(f"alfworld task {task_id!r}: no game file {game}")
        return game


# -- generated households ---------------------------------------------------------------------
class AlfWorldGenOptions(EnvOptions):
    """Env options of ``alfworld-gen`` (generated households; :mod:`seedrl.envs.alfworld.gen`)."""

    env_name: ClassVar[str] = "alfworld-gen"
    local: ClassVar[frozenset[str]] = frozenset({"cache_dir"})

    cache_dir: PathStr | None = Field(None, description="a folder (default $SEEDRL_CACHE/alfworld-gen)")
    receptacles: IntPair = Field((3, 6), description="[min, max] of integers with 2 <= min <= max <= 60 (3 for the "
                                                     "pick_clean/heat/cool kinds), or one integer")
    distractors: IntPair = Field((1, 3), description="[min, max] of integers with 0 <= min <= max <= 60, or one "
                                                     "integer")
    kinds: StrList = Field(tuple(gen.KINDS), description=f"a non-empty list of {', '.join(gen.KINDS)}")

    @model_validator(mode="after")
    def _check(self) -> AlfWorldGenOptions:
        gen.GenOptions.make(self.receptacles, self.distractors)  # the ranges
        if not self.kinds:
            raise SeedRLError(f"alfworld-gen env option kinds: must be a non-empty list of {', '.join(gen.KINDS)}")
        for k in self.kinds:
            if k not in gen.KINDS:
                raise unknown_name("alfworld-gen kind (env option kinds)", k, list(gen.KINDS))
        too_big = [k for k in self.kinds if gen.MIN_RECEPTACLES[k] > self.receptacles[1]]
        if too_big:
            need = max(gen.MIN_RECEPTACLES[k] for k in too_big)
            raise SeedRLError(f"alfworld-gen env option receptacles: {list(self.receptacles)} allows at most "
                              f"{self.receptacles[1]}, but kind(s) {', '.join(too_big)} need at least {need} (the "
                              f"target, the source and the appliance); raise max to {need} or drop those kinds")
        return self



class AlfWorldGenEnv(_AlfWorldBase):
    """Households generated by :mod:`seedrl.envs.alfworld.gen`, played on ALFWorld's engine."""

    name = "alfworld-gen"
    version = gen.GENERATOR_VERSION
    splits = {"train": 600, "valid_seen": 60, "valid_unseen": 60}

    options_model = AlfWorldGenOptions

    def __init__(self, **env_kwargs: Any) -> None:
        super().__init__()
        o = AlfWorldGenOptions.parse(env_kwargs)
        self.options = o
        self.opts = gen.GenOptions(o.receptacles, o.distractors)
        self.kinds = o.kinds
        self.cache_dir = Path(o.cache_dir) if o.cache_dir is not None else gen.default_cache_dir()

    @classmethod
    def panel_task_ids(cls, split: str, size: int, **env_kwargs: Any) -> list[str]:
        """Task i has kind ``kinds[i % len(kinds)]`` and seed ``split base + i``: a pure function of the
        arguments (``cache_dir`` and the size options do not change the ids; the size options are in
        the panel's options, so its hash)."""
        if split not in cls.splits:
            raise unknown_name("split of alfworld-gen", split, list(cls.splits))
        ks = AlfWorldGenOptions.parse(env_kwargs).kinds
        if not 0 <= size <= gen.SPLIT_RANGE:
            raise SeedRLError(f"alfworld-gen panel size must be in [0, {gen.SPLIT_RANGE}], got {size}")
        base = gen.SPLIT_SEED_BASE[split]
        return [gen.make_task_id(ks[i % len(ks)], base + i) for i in range(size)]

    @classmethod
    def task_type(cls, task_id: str) -> str:
        kind = str(task_id).strip().rsplit("-s", 1)[0]
        return gen.KINDS.get(kind, kind)

    def game_file(self, task_id: str) -> Path:
        return gen.ensure_game(task_id, self.cache_dir, self.opts)
