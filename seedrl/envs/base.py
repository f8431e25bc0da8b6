"""The environment protocol every seedrl environment implements.

An environment instance plays one episode at a time on a task named by a panel task id:

- ``reset(task_id) -> observation`` starts the episode. ``task_description`` is then the
  text after "Your task is to:" in prompts.
- ``step(action_text) -> (observation, reward, done, info)``; ``info`` holds at least
  ``won`` (bool) and ``action_valid`` (bool: the env understood the action).
- ``admissible_actions()`` lists the valid actions now, or ``None`` where the env has no list.
- ``expert_action()`` is the next action of an expert (solver, walkthrough, planner), used for
  demonstrations; ``None`` when none exists.
- ``privileged_state()`` is a JSON-able dict of state the agent never sees (for oracle analysis),
  described by a typed :class:`PrivilegedState` subclass next to the env: the env builds that object
  and returns its :meth:`~PrivilegedState.to_dict`; the env's oracle reads the dict back with
  :meth:`~PrivilegedState.parse`, which raises :class:`PrivilegedStateError` naming a missing or
  wrongly typed key.
- ``observation_images()`` is the list of images that go with the observation the latest ``reset`` or
  ``step`` returned (uint8 ``H x W x 3`` RGB arrays, in the order the prompt shows them); ``[]`` for a
  text env, which is every env that does not override it. An env that can return images sets
  ``returns_images`` (on the class, or per instance where an option such as ``mode: rgb_array``
  decides). The observation *text* is then what the prompt says beside the images: it never spells
  out what the images show.

Rewards follow verl-agent: the episode reward is ``10 * won`` unless an env documents otherwise.
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, TypeVar, Union

import numpy as np
from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError

from seedrl.errors import SeedRLError, unknown_name

WIN_REWARD = 10.0


@dataclass(frozen=True)
class SplitSpec:
    """How a panel split is generated: a name, a size, and env-specific parameters."""

    name: str
    size: int


# -- typed privileged state ----------------------------------------------------------------------
class PrivilegedStateError(SeedRLError):
    """A privileged-state dict does not match its typed description: a key is missing or has the
    wrong type. ``key`` names it (``'history'[3]['valid']`` for a nested one)."""

    def __init__(self, state: str, key: str, problem: str) -> None:
        super().__init__(f"{state}: key {key} {problem}")
        self.key = key


_S = TypeVar("_S", bound="PrivilegedState")


def optional_key() -> Any:
    """A :class:`PrivilegedState` field whose key the env writes only sometimes (absent -> ``None``;
    :meth:`PrivilegedState.to_dict` leaves it out while it is ``None``). Declare these last."""
    return dataclasses.field(default=None, metadata={"optional": True})


@dataclass
class PrivilegedState:
    """Base of the typed privileged states: a dataclass whose fields are the keys of the dict an
    env's ``privileged_state()`` returns, in order, typed with JSON types (``str``, ``int``,
    ``float``, ``bool``, ``None``, ``list[...]``, ``dict[str, ...]``, unions, ``Any``) and
    ``TypedDict`` classes for nested records. Every field is a required key unless declared with
    :func:`optional_key`; keys the type does not describe are ignored by :meth:`parse`."""

    @classmethod
    def parse(cls: type[_S], state: Mapping[str, Any]) -> _S:
        """The typed state of a privileged-state dict; :class:`PrivilegedStateError` names the first
        missing or wrongly typed key."""
        name = cls.__name__
        if not isinstance(state, Mapping):
            raise PrivilegedStateError(name, "(all)", f"must be a dict, got {type(state).__name__}")
        hints = typing.get_type_hints(cls)
        values = {}
        for f in dataclasses.fields(cls):
            if f.name not in state:
                if f.metadata.get("optional"):
                    continue
                raise PrivilegedStateError(name, repr(f.name), "is missing")
            _check_type(state[f.name], hints[f.name], repr(f.name), name)
            values[f.name] = state[f.name]
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """The JSON-able dict trajectories store (keys in field order)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if not (f.metadata.get("optional") and getattr(self, f.name) is None)}


def _type_name(tp: Any) -> str:
    """``list[SokobanMove]``, ``int | None``: a type as the state classes write it."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is type(None):
        return "None"
    if origin in (Union, types.UnionType):
        return " | ".join(_type_name(a) for a in args)
    if origin is not None:
        return f"{origin.__name__}[{', '.join(_type_name(a) for a in args)}]"
    return getattr(tp, "__name__", str(tp))


def _check_type(value: Any, tp: Any, key: str, state: str) -> None:
    """Raise :class:`PrivilegedStateError` unless ``value`` is a JSON value of type ``tp``."""

    def wrong() -> PrivilegedStateError:
        return PrivilegedStateError(state, key, f"must be {_type_name(tp)}, got {type(value).__name__} "
                                                f"{str(value)[:40]!r}")

    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return
        options = [a for a in args if a is not type(None)]
        if len(options) == 1:
            try:
                _check_type(value, options[0], key, state)
            except PrivilegedStateError as exc:
                if exc.key == key:  # wrong at this level: name the whole declared type
                    raise wrong() from None
                raise
            return
        for option in options:
            try:
                _check_type(value, option, key, state)
                return
            except PrivilegedStateError:
                pass
        raise wrong()
    if origin is list:
        if not isinstance(value, list):
            raise wrong()
        for i, item in enumerate(value):
            _check_type(item, args[0] if args else Any, f"{key}[{i}]", state)
    elif origin is dict:
        if not isinstance(value, dict):
            raise wrong()
        for k, v in value.items():
            _check_type(k, args[0] if args else Any, f"{key} (a key)", state)
            _check_type(v, args[1] if args else Any, f"{key}[{k!r}]", state)
    elif typing.is_typeddict(tp):
        if not isinstance(value, dict):
            raise wrong()
        hints = typing.get_type_hints(tp)
        missing = sorted(tp.__required_keys__ - set(value))
        if missing:
            raise PrivilegedStateError(state, f"{key}[{missing[0]!r}]", "is missing")
        for k, v in value.items():
            if k in hints:
                _check_type(v, hints[k], f"{key}[{k!r}]", state)
    elif tp is type(None):
        if value is not None:
            raise wrong()
    elif tp in (int, float):  # JSON numbers; a bool is not one
        if isinstance(value, bool) or not isinstance(value, int if tp is int else (int, float)):
            raise wrong()
    elif not isinstance(value, tp):
        raise wrong()


# -- typed env options ---------------------------------------------------------------------------
def _int(v: Any) -> int:
    """An integer option: ``2``, ``2.0`` and ``"2"`` are the same; ``2.5``, ``True``, ``"5x5"`` are errors
    (never truncated, never a bool)."""
    if isinstance(v, bool):
        raise ValueError("a boolean is not an integer")
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        if v.is_integer():
            return int(v)
        raise ValueError("not a whole number (options are never rounded)")
    if isinstance(v, str):
        try:
            return int(v.strip())
        except ValueError:
            raise ValueError("not an integer") from None
    raise ValueError(f"expected an integer, not {type(v).__name__}")


def _float(v: Any) -> float:
    if isinstance(v, bool):
        raise ValueError("a boolean is not a number")
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v.strip())
        except ValueError:
            raise ValueError("not a number") from None
    raise ValueError(f"expected a number, not {type(v).__name__}")


def _bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    raise ValueError(f"expected true or false (a YAML boolean), not {type(v).__name__}")


def _str(v: Any) -> str:
    if isinstance(v, str):
        return v
    raise ValueError(f"expected a string, not {type(v).__name__}")


def _path(v: Any) -> str:
    if isinstance(v, os.PathLike):
        return os.fspath(v)
    return _str(v)


def _pair(v: Any) -> tuple[int, int]:
    if isinstance(v, (list, tuple)):
        if len(v) != 2:
            raise ValueError(f"needs exactly 2 values, not {len(v)}")
        return _int(v[0]), _int(v[1])
    n = _int(v)
    return n, n


#: ``[a, b]`` of integers from a pair or one integer (``n`` -> ``(n, n)``); ``ValueError`` otherwise
int_pair = _pair


def _str_list(v: Any) -> tuple[str, ...]:
    if isinstance(v, str) or not isinstance(v, (list, tuple)):
        raise ValueError(f"expected a list of strings, not {type(v).__name__}")
    return tuple(_str(x) for x in v)


def _str_list_or_words(v: Any) -> tuple[str, ...]:
    return tuple(v.split()) if isinstance(v, str) else _str_list(v)


#: option types: lossless spellings are equal (``2``/``2.0``/``"2"``; ``4``/``[4, 4]``), lossy ones are errors
Int = Annotated[int, BeforeValidator(_int)]
Float = Annotated[float, BeforeValidator(_float)]
Bool = Annotated[bool, BeforeValidator(_bool)]
Str = Annotated[str, BeforeValidator(_str)]
#: a file or folder: a string or a ``pathlib.Path``, kept as the string given
PathStr = Annotated[str, BeforeValidator(_path)]
#: ``[a, b]`` of integers; one integer ``n`` means ``[n, n]``
IntPair = Annotated[tuple[int, int], BeforeValidator(_pair)]
StrList = Annotated[tuple[str, ...], BeforeValidator(_str_list)]
#: a list of strings, or one string of space-separated words
Words = Annotated[tuple[str, ...], BeforeValidator(_str_list_or_words)]

_E = TypeVar("_E", bound="EnvOptions")


class EnvOptions(BaseModel):
    """The typed options (env kwargs) of one environment: a pydantic model per env, shared by its
    constructor and its ``panel_task_ids``. Unknown names are errors listing the valid ones; a value of
    the wrong type is a :class:`SeedRLError` naming the option and what it accepts (the field's
    ``description``); lossless spellings normalise to one value (:data:`Int`, :data:`IntPair`).

    ``local`` names the options that only say where or how this machine runs the env (cache and data
    folders, servers, JVM sizes, timeouts): they never change which tasks a panel holds, so they are
    left out of :meth:`identity` and of the panel hash."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    env_name: ClassVar[str] = "env"
    local: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def parse(cls: type[_E], kwargs: Mapping[str, Any] | None = None) -> _E:
        """The validated options of ``kwargs``, or a one-line :class:`SeedRLError`."""
        if isinstance(kwargs, cls):
            return kwargs
        kwargs = dict(kwargs or {})
        for k in kwargs:
            if k not in cls.model_fields:
                raise unknown_name(f"{cls.env_name} env option", str(k), sorted(cls.model_fields))
        try:
            return cls.model_validate(kwargs)
        except ValidationError as exc:
            raise option_error(cls, exc) from None

    def identity(self) -> dict[str, Any]:
        """The normalised options that define tasks (JSON values, local options left out): what a
        panel hash covers. Envs whose options name files override this to hash the files' content."""
        return {k: v for k, v in self.model_dump(mode="json").items() if k not in self.local}


def option_error(cls: type[EnvOptions], exc: ValidationError) -> SeedRLError:
    """One line naming the first bad option, what it got and what it accepts."""
    err = exc.errors()[0]
    loc = [str(x) for x in err.get("loc", ())]
    name = loc[0] if loc else "(options)"
    msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
    field = cls.model_fields.get(name)
    accepts = f"; accepted: {field.description}" if field is not None and field.description else ""
    where = name + "".join(f"[{x}]" for x in loc[1:])
    got = err.get("input")
    return SeedRLError(f"{cls.env_name} env option {where}: {msg}, got {got!r}{accepts}")


# -- images beside the observation text -----------------------------------------------------------
#: one image of an observation: an RGB array, ``uint8``, shape ``(height, width, 3)``
ObservationImage = np.ndarray


def rgb_image(image: Any) -> ObservationImage:
    """``image`` as an observation image: a ``uint8`` ``(H, W, 3)`` array (a PIL image is converted to RGB;
    a float array or another shape is an error, never rescaled or guessed). The array is a copy, so the
    env may keep drawing on its own buffer."""
    if not isinstance(image, np.ndarray) and hasattr(image, "convert") and hasattr(image, "size"):
        image = np.asarray(image.convert("RGB"))  # a PIL image, without importing PIL here
    if not isinstance(image, np.ndarray):
        raise SeedRLError(f"an observation image must be a uint8 HxWx3 array or a PIL image, not {type(image).__name__}")
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3 or 0 in image.shape[:2]:
        raise SeedRLError(f"an observation image must be a uint8 HxWx3 array, got {image.dtype} {image.shape}")
    return np.array(image, dtype=np.uint8, copy=True)


# -- the protocol ---------------------------------------------------------------------------------
def sdar_keyword_types(text: str, task_keywords: Mapping[str, Sequence[str]]) -> tuple[str, ...]:
    """SDAR's keyword route (``SkillProvider.get_privileged_info_from_prompt``): every task type, in the
    mapping's order, with at least one of its keywords a substring of the lower-cased ``text`` (a type
    with no keywords never matches)."""
    low = text.lower()
    return tuple(kind for kind, words in task_keywords.items() if words and any(w in low for w in words))


class Env(ABC):
    """Base class of environments. Subclasses set ``name`` and implement the abstract methods."""

    name: str = ""
    #: how prompts name the environment ("You are an expert agent playing {title}.")
    title: str = ""
    #: bump when the task behind an id changes (generator, rules, rewards): it is part of the panel
    #: hash, so results measured on different task content are never compared as equal
    version: str = "1"
    #: splits -> default panel size; panels are built by :meth:`panel_task_ids`.
    splits: dict[str, int] = {}
    #: the closing instruction of every step prompt; ``None`` = the ``<think>``/``<action>`` one of
    #: ``seedrl.agent.prompts``. An env with another action syntax (search: ``<search>``/``<answer>``)
    #: sets its own, which must start with ``TURN_PREFIX`` ("Now it's your turn to"; step skills are placed
    #: before it), and overrides :meth:`parse_action` to match; an env may set it per instance (its layout's
    #: own closing sentence).
    instruction: str | None = None
    #: the step-prompt layout (``seedrl.agent.prompts.PROMPT_STYLES``): ``seedrl`` (this project's) or one
    #: of verl-agent's template structures (``verl_agent``: ALFWorld's, the ``alfworld`` env's default;
    #: ``verl_agent_search``, ``verl_agent_webshop``)
    prompt_style: str = "seedrl"
    #: env kwargs a run saved before ``skills.analysis_prompt`` existed used implicitly, where a default
    #: changed since (``seedrl.config.load_run_config`` restores them, so a resume never switches silently)
    legacy_kwargs: ClassVar[dict[str, Any]] = {}
    #: env kwargs a run saved under a ``config_version`` below the key used implicitly, where a default
    #: changed with that version (``seedrl.config.load_run_config`` restores them), e.g.
    #: ``{2: {"prompt_style": "seedrl"}}``: runs saved before version 2 played this project's layout
    kwargs_before: ClassVar[dict[int, dict[str, Any]]] = {}
    #: the typed options (env kwargs) of the env; ``None`` (toy envs): the raw kwargs identify the tasks
    options_model: ClassVar[type[EnvOptions] | None] = None
    #: the third-party packages the env runs on (``seedrl env`` reports their versions)
    packages: tuple[str, ...] = ()
    #: generation stops once one of these strings is produced (the closing tag of an action)
    stop: tuple[str, ...] = ("</action>",)
    #: whether :meth:`observation_images` can return images (an env with a pixel mode sets it per instance)
    returns_images: bool = False

    def __init__(self) -> None:
        self.task_id: str | None = None
        self.task_description: str = ""

    # -- panels -------------------------------------------------------------------------------
    @classmethod
    @abstractmethod
    def panel_task_ids(cls, split: str, size: int, **env_kwargs: Any) -> list[str]:
        """The task ids of a split, a pure function of (split, size, env kwargs): no RNG state,
        no worker count, no run seed."""

    @classmethod
    def parse_options(cls, env_kwargs: Mapping[str, Any]) -> EnvOptions | None:
        """The validated options of ``env_kwargs`` (:class:`SeedRLError` on a bad one); ``None`` for an
        env without an options model."""
        return cls.options_model.parse(env_kwargs) if cls.options_model is not None else None

    @classmethod
    def option_identity(cls, env_kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """What of ``env_kwargs`` defines the tasks: the normalised, validated options without the
        machine-local ones (the raw kwargs for an env without an options model)."""
        opts = cls.parse_options(env_kwargs)
        return opts.identity() if opts is not None else dict(env_kwargs)

    @classmethod
    def task_type(cls, task_id: str) -> str:
        """The task type of a task id, for per-type evaluation breakdowns and static (SDAR) skills:
        by default the part before the first "-"."""
        return task_id.split("-", 1)[0]

    @classmethod
    def skill_types(cls, task_id: str, task_text: str = "") -> tuple[str, ...]:
        """The static (SDAR) skills of a task besides the general one, in order: the stems of their files
        in the env's ``skills/`` folder (none: the general skill alone). By default its
        :meth:`task_type`; an env whose SDAR route maps tasks to skill types another way (Search: by
        data source and question; WebShop: by keywords of the instruction) overrides this.
        ``task_text``: the episode's task description, for routes that read it."""
        return (cls.task_type(task_id),)

    @classmethod
    def sdar_skills(cls, task_id: str, task_to_skill: Mapping[str, str], task_text: str = "",
                    task_keywords: Mapping[str, Sequence[str]] | None = None) -> tuple[str, ...]:
        """The skills an SDAR skill folder maps a task to (its ``skill_mapping.json``: ``task_to_skill``,
        and ``task_keywords`` where it has them; none: the general skills alone): by default its
        :meth:`skill_types`, each looked up exactly. An env whose SDAR route differs (ALFWorld: a key
        found in the game's path; WebShop: the folder's keywords) overrides this."""
        return tuple(task_to_skill[k] for k in cls.skill_types(task_id, task_text) if k in task_to_skill)

    # -- episode ------------------------------------------------------------------------------
    def parse_action(self, text: str) -> str | None:
        """The action a model turn sends to the env, or ``None`` for an invalid (unparsable) turn.
        Never raises."""
        from seedrl.agent.parsing import parse_action

        return parse_action(text)

    def format_valid(self, text: str) -> bool:
        """verl-agent's format rule for this env's turns (the ``format`` invalid-action rule): by
        default ``<think>…</think>``, a complete ``<action>…</action>`` and no CJK character. Never
        raises."""
        from seedrl.agent.parsing import format_ok

        return format_ok(text)

    def format_response(self, action: str, thought: str = "") -> str:
        """The canonical model turn for ``action`` in this env's syntax (expert demonstrations);
        ``parse_action(format_response(a)) == a``."""
        from seedrl.agent.prompts import format_response

        return format_response(action, thought)

    @abstractmethod
    def reset(self, task_id: str) -> str:
        """Start an episode on ``task_id``; return the first observation."""

    @abstractmethod
    def step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        """Apply an action; return (observation, reward, done, info with won/action_valid)."""

    def observation_images(self) -> list[ObservationImage]:
        """The images of the observation the latest :meth:`reset` or :meth:`step` returned, each an
        ``rgb_image`` (uint8 ``H x W x 3``), in prompt order; ``[]`` for a text observation (the default:
        text envs never override this)."""
        return []

    def admissible_actions(self) -> list[str] | None:
        return None

    def expert_action(self) -> str | None:
        return None

    def privileged_state(self) -> dict[str, Any]:
        """``{}`` where the env has none (or before ``reset``): the oracle then gives the generic skill."""
        return {}

    # -- oracle analysis of trajectories whose env is not named ----------------------------------
    @classmethod
    def claims_privileged_state(cls, state: Mapping[str, Any]) -> bool:
        """Whether ``state``, a privileged state without an ``"env"`` key, is this env's. An env whose
        privileged state names it (``"env": name``) needs no override."""
        return False

    @classmethod
    def claims_task_id(cls, task_id: str) -> bool:
        """Whether ``task_id`` is one of this env's: the last resort of the oracle analyzer when neither
        the run nor the privileged state names the env."""
        return False

    def close(self) -> None:
        """Release resources (processes, files)."""
