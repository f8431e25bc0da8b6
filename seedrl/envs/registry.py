"""Name -> environment class: the only place that maps environment names to code.

Every environment lives in a package of its own, ``seedrl/envs/<name>/``: ``env.py`` (the
:class:`~seedrl.envs.base.Env` subclass), ``oracle.py`` (its hindsight oracle, optional),
``skills/*.md`` (its static skills, optional) and ``README.md``. Code that needs any of them asks
the registry for the env's package (:func:`env_package`) or folder (:func:`env_folder`) instead of
naming the env. Environments register lazily so heavy packages load on use.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

from seedrl.envs.base import Env
from seedrl.errors import unknown_name

#: the environment a config or command uses when it names none
DEFAULT_ENV = "sokoban"
#: the environments (and the titles their prompts used) whose expert play the built-in tokenizer was
#: trained on (seedrl.models.tokenizer)
TOKENIZER_CORPUS = {"sokoban": "Sokoban", "textworld": "TextWorld"}

# name -> "module:Class"; imported on first use so `import seedrl` stays light.
_REGISTRY: dict[str, str] = {
    "sokoban": "seedrl.envs.sokoban.env:SokobanEnv",
    "textworld": "seedrl.envs.textworld.env:TextWorldEnv",
    "alfworld": "seedrl.envs.alfworld.env:AlfWorldEnv",
    "alfworld-gen": "seedrl.envs.alfworld.env:AlfWorldGenEnv",
    "search": "seedrl.envs.search.env:SearchEnv",
    "scienceworld": "seedrl.envs.scienceworld.env:ScienceWorldEnv",
    "webshop": "seedrl.envs.webshop.env:WebShopEnv",
    "household": "seedrl.envs.household.env:HouseholdEnv",
    "ezpoints": "seedrl.envs.ezpoints.env:EZPointsEnv",
}


def register(name: str, target: str) -> None:
    """Register an environment class by import path ``"package.module:Class"``. Its package (the
    module's own package, or the module itself if it is a package) holds the env's ``oracle`` module
    and ``skills/`` folder, if it has them."""
    _REGISTRY[name] = target


def env_names() -> list[str]:
    return sorted(_REGISTRY)


def env_class(name: str) -> type[Env]:
    if name not in _REGISTRY:
        raise unknown_name("environment", name, env_names())
    module, cls = _REGISTRY[name].split(":")
    return getattr(importlib.import_module(module), cls)


def make_env(name: str, **kwargs: Any) -> Env:
    """Instantiate environment ``name`` with env-specific keyword arguments."""
    return env_class(name)(**kwargs)


def env_package(name: str) -> str:
    """The import name of the package environment ``name`` lives in, e.g. ``seedrl.envs.sokoban``."""
    module = sys.modules[env_class(name).__module__]
    return module.__package__ or module.__name__


def env_folder(name: str) -> Path:
    """The folder of environment ``name``'s package (its ``skills/``, ``README.md``)."""
    return Path(sys.modules[env_package(name)].__file__).parent
