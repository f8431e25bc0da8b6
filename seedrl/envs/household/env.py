"""Household search: find an object hidden in an ALFWorld-style room, in pure Python (README.md).

A task is ``find-s{seed:05d}``; the game is a pure function of the id and ``prior_seed`` (a string-seeded
``random.Random``). A room holds 5-7 numbered receptacles of ALFWorld's classes; the openable ones
(cabinet, drawer, fridge, microwave, safe) start closed, and no receptacle shows its contents before
the agent goes to it (and opens it). The target object lies in a receptacle drawn from a *placement
prior*: per object class a seeded ranking of the receptacle classes ALFWorld allows it in, with mass
0.6, 0.25 and the rest shared. valid_unseen draws from a shifted prior (the training ranking's first
and third classes swapped), so what a searcher learnt on train is wrong there, and an episode's
hindsight (where the object was) is what the observation never says.

Text and commands follow ALFWorld's grammar (``alfred.twl2``): "go to X", "open X", "close X",
"take O from X", "move O to X", "look", "inventory"; "You arrive at fridge 1. The fridge 1 is closed."
Reward: ``WIN_REWARD`` on the step that takes the target. The rollout enforces the step limit; the
env is designed for :data:`DESIGN_BUDGET` steps (README, "Budget").
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import Field

from seedrl.envs.base import WIN_REWARD, Env, EnvOptions, Int
from seedrl.envs.household.state import HouseholdPrivilegedState
from seedrl.errors import SeedRLError, unknown_name

VERSION = "1"
#: receptacle classes that start closed and hide their contents until opened (ALFWorld's OPENABLE_CLASS_LIST
#: without the movable box)
OPENABLE = ("cabinet", "drawer", "fridge", "microwave", "safe")
#: receptacle classes that may appear twice in a room ("cabinet 1", "cabinet 2")
MULTI = ("cabinet", "drawer", "shelf")
#: object class -> the receptacle classes it may lie in: ALFWorld's ``VAL_RECEPTACLE_OBJECTS``
#: (alfworld.gen.constants) restricted to its static receptacles (no bowl, plate, pan, pot, mug, box, ...)
PLACES: dict[str, tuple[str, ...]] = {
    "apple": ("coffeetable", "countertop", "diningtable", "fridge", "garbagecan", "microwave", "sidetable",
              "sinkbasin"),
    "cellphone": ("armchair", "bed", "coffeetable", "countertop", "desk", "diningtable", "drawer", "dresser",
                  "ottoman", "safe", "shelf", "sidetable", "sofa"),
    "creditcard": ("armchair", "coffeetable", "countertop", "desk", "diningtable", "drawer", "dresser", "ottoman",
                   "safe", "shelf", "sidetable", "sofa"),
    "egg": ("coffeetable", "countertop", "diningtable", "fridge", "garbagecan", "microwave", "sidetable",
            "sinkbasin"),
    "keychain": ("armchair", "coffeetable", "countertop", "desk", "diningtable", "drawer", "dresser", "ottoman",
                 "safe", "shelf", "sidetable", "sofa"),
    "mug": ("cabinet", "cart", "coffeetable", "countertop", "desk", "diningtable", "dresser", "fridge",
            "microwave", "shelf", "sidetable", "sinkbasin"),
    "pen": ("coffeetable", "countertop", "desk", "diningtable", "drawer", "dresser", "garbagecan", "shelf",
            "sidetable"),
    "soapbar": ("bathtubbasin", "cabinet", "cart", "coffeetable", "countertop", "diningtable", "drawer",
                "garbagecan", "shelf", "sidetable", "sinkbasin", "toilet"),
    "spatula": ("coffeetable", "countertop", "diningtable", "drawer", "sidetable", "sinkbasin"),
    "tomato": ("coffeetable", "countertop", "diningtable", "fridge", "garbagecan", "microwave", "sidetable",
               "sinkbasin"),
}
OBJECTS = tuple(sorted(PLACES))
RECEPTACLES = tuple(sorted({c for cs in PLACES.values() for c in cs} | set(OPENABLE)))
#: the prior's mass by rank: first, second; the rest share what is left equally
TOP_MASS = (0.6, 0.25)
#: the step budget the env is designed for (README, "Budget"): go, open, take at a closed receptacle
#: leaves one spare step, so the first closed receptacle tried must be the right one
DESIGN_BUDGET = 4
#: how many receptacles a room holds, drawn uniformly (the core classes alone may hold more than the
#: number drawn, never more than the maximum)
ROOM_SIZE = (5, 7)

SPLIT_SEED_BASE = {"train": 0, "valid_seen": 100_000, "valid_unseen": 200_000}
_SPLIT_RANGE = 100_000
_TASK_RE = re.compile(r"^find-s(\d{5,})$")
INVALID_ACTION_OBS = "Nothing happens."
GAME_OVER_OBS = "The game is over."


# -- priors -------------------------------------------------------------------------------------
def _masses(n: int) -> list[float]:
    top = list(TOP_MASS[:n])
    rest = n - len(top)
    return top + [(1.0 - sum(TOP_MASS)) / rest] * rest if rest else top


def training_prior(prior_seed: int = 0) -> dict[str, dict[str, float]]:
    """Object class -> {receptacle class: probability}, most likely first: a seeded shuffle of
    :data:`PLACES` weighted by rank (:data:`TOP_MASS`). train and valid_seen draw from it."""
    rng = random.Random(f"household/prior/{prior_seed}")
    out = {}
    for obj in OBJECTS:
        ranked = list(PLACES[obj])
        rng.shuffle(ranked)
        out[obj] = dict(zip(ranked, _masses(len(ranked))))
    return out


def unseen_prior(prior_seed: int = 0) -> dict[str, dict[str, float]]:
    """valid_unseen's prior: the training ranking with its first and third classes swapped (the third
    class takes 0.6, the training favourite drops to the third mass)."""
    out = {}
    for obj, probs in training_prior(prior_seed).items():
        ranked = list(probs)
        ranked[0], ranked[2] = ranked[2], ranked[0]
        out[obj] = dict(zip(ranked, _masses(len(ranked))))
    return out


def split_prior(split: str, prior_seed: int = 0) -> dict[str, dict[str, float]]:
    return unseen_prior(prior_seed) if split == "valid_unseen" else training_prior(prior_seed)


def rclass(receptacle: str) -> str:
    """``"cabinet 2"`` -> ``"cabinet"``."""
    return receptacle.rsplit(" ", 1)[0]


# -- task ids and games -------------------------------------------------------------------------
def task_id(seed: int) -> str:
    return f"find-s{seed:05d}"


def parse_task_id(tid: str) -> int:
    m = _TASK_RE.match(str(tid).strip())
    if m is None:
        raise SeedRLError(f"bad household task id {tid!r}; expected find-s<SEED>, e.g. find-s00017")
    return int(m.group(1))


def split_of(seed: int) -> str:
    """The split whose seed range holds ``seed`` (so whose prior places the object)."""
    for split, base in SPLIT_SEED_BASE.items():
        if base <= seed < base + _SPLIT_RANGE:
            return split
    raise SeedRLError(f"household seed {seed} is outside every split's range (0..{3 * _SPLIT_RANGE - 1})")


@dataclass(frozen=True)
class Game:
    task_id: str
    split: str
    object_class: str
    #: the target's name, "apple 1"
    target: str
    #: every receptacle, sorted ("cabinet 1", "countertop 1", ...)
    receptacles: tuple[str, ...]
    #: receptacle -> the objects in it at the start
    contents: dict[str, tuple[str, ...]]
    #: where the target lies
    location: str


def _weighted(rng: random.Random, items: Sequence[str], weights: Sequence[float]) -> str:
    return rng.choices(list(items), weights=list(weights))[0] if sum(weights) > 0 else rng.choice(list(items))


def generate_game(tid: str, prior_seed: int = 0) -> Game:
    """The game of a task id. The room always holds the object's three most likely classes under the
    *training* prior (the same rooms on every split), the class the object was drawn into (from the
    split's prior), and other classes up to 5-7 receptacles; cabinets, drawers and shelves may come twice."""
    seed = parse_task_id(tid)
    split = split_of(seed)
    rng = random.Random(f"household/{VERSION}/{task_id(seed)}/{prior_seed}")
    prior = split_prior(split, prior_seed)
    obj = rng.choice(OBJECTS)
    drawn = _weighted(rng, list(prior[obj]), list(prior[obj].values()))
    core = list(training_prior(prior_seed)[obj])[:3]
    core += [drawn] if drawn not in core else []
    fillers = [c for c in RECEPTACLES if c not in core]
    rng.shuffle(fillers)
    size = rng.randint(*ROOM_SIZE)
    recs: list[str] = []
    for i, cls in enumerate(core + fillers):
        k = 2 if cls in MULTI and rng.random() < 0.5 else 1
        if i >= len(core):
            k = min(k, size - len(recs))
            if k <= 0:
                break
        recs += [f"{cls} {j + 1}" for j in range(k)]
    recs.sort()
    contents: dict[str, list[str]] = {r: [] for r in recs}
    where = rng.choice([r for r in recs if rclass(r) == drawn])
    contents[where].append(f"{obj} 1")
    for other in rng.sample([o for o in OBJECTS if o != obj], rng.randint(1, 3)):
        r = _weighted(rng, recs, [prior[other].get(rclass(r), 0.0) for r in recs])
        contents[r].append(f"{other} 1")
    return Game(task_id(seed), split, obj, f"{obj} 1", tuple(recs), {r: tuple(sorted(v)) for r, v in contents.items()},
                where)


def game_key(game: Game) -> tuple:
    """What makes two games the same to a player (the id aside)."""
    return game.object_class, game.receptacles, tuple(sorted(game.contents.items()))


def listing(things: Sequence[str]) -> str:
    """ALFWorld's lists: "nothing", "a apple 1", "a apple 1, and a egg 2", "a x, a y, and a z"."""
    items = [f"a {t}" for t in things]
    if not items:
        return "nothing"
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + ", and " + items[-1]


# -- the env ------------------------------------------------------------------------------------
class HouseholdOptions(EnvOptions):
    """``prior_seed`` picks the placement prior (part of the tasks); ``expert`` picks which policy
    :meth:`HouseholdEnv.expert_action` plays: ``oracle`` (goes straight to the object) or ``prior`` (the
    skill-free prior-order searcher). The expert never changes a task, so it is ``local``: left out of
    the panel hash (as ALFWorld's ``prompt_style``)."""

    env_name: ClassVar[str] = "household"
    local: ClassVar[frozenset[str]] = frozenset({"expert"})

    prior_seed: Int = Field(0, ge=0, description="an integer >= 0 (the placement prior's seed)")
    expert: Literal["oracle", "prior"] = Field("oracle", description="oracle or prior")


class HouseholdEnv(Env):
    """Find the object and take it; the admissible commands are listed every step, as ALFWorld's."""

    name = "household"
    title = "Household Search"
    version = VERSION
    splits = {"train": 512, "valid_seen": 128, "valid_unseen": 128}
    options_model = HouseholdOptions

    def __init__(self, **env_kwargs: Any) -> None:
        super().__init__()
        self.options = HouseholdOptions.parse(env_kwargs)
        self.prior = training_prior(self.options.prior_seed)
        self.game: Game | None = None

    @classmethod
    def panel_task_ids(cls, split: str, size: int, **env_kwargs: Any) -> list[str]:
        """Seeds from the split's range in order, skipping a seed whose game (room, objects, places) is
        already in the panel or, for an evaluation split, in the default-size train panel."""
        if split not in cls.splits:
            raise unknown_name("split of household", split, list(cls.splits))
        if not 0 <= size <= _SPLIT_RANGE // 10:
            raise SeedRLError(f"household panel size must be in [0, {_SPLIT_RANGE // 10}], got {size}")
        prior_seed = HouseholdOptions.parse(env_kwargs).prior_seed
        base = SPLIT_SEED_BASE[split]
        seen = set()
        if split != "train":
            seen = {game_key(generate_game(task_id(s), prior_seed)) for s in range(cls.splits["train"])}
        ids: list[str] = []
        seed = base
        while len(ids) < size:
            key = game_key(generate_game(task_id(seed), prior_seed))
            if key not in seen:
                seen.add(key)
                ids.append(task_id(seed))
            seed += 1
        return ids

    # -- episode ------------------------------------------------------------------------------
    def reset(self, task_id: str) -> str:
        g = self.game = generate_game(task_id, self.options.prior_seed)
        self.task_id = g.task_id
        self.task_description = f"find a {g.object_class} and take it."
        self.contents = {r: list(v) for r, v in g.contents.items()}
        self.location: str | None = None
        self.open: set[str] = set()
        self.visited: list[str] = []
        self.opened: list[str] = []
        self.checked: list[str] = []
        self.holding: str | None = None
        self.won = False
        return self._look()

    def _require(self) -> Game:
        if self.game is None:
            raise SeedRLError("household: call reset(task_id) before step()")
        return self.game

    def openable(self, r: str) -> bool:
        return rclass(r) in OPENABLE

    def accessible(self, r: str) -> bool:
        return not self.openable(r) or r in self.open

    def _examine(self, r: str) -> str:
        if not self.openable(r):
            return f"On the {r}, you see {listing(self.contents[r])}."
        if r in self.open:
            return f"The {r} is open. In it, you see {listing(self.contents[r])}."
        return f"The {r} is closed."

    def _look(self) -> str:
        if self.location is None:
            return ("You are in the middle of a room. Looking quickly around you, you see "
                    f"{listing(self._require().receptacles)}.")
        return f"You are facing the {self.location}. Next to it, you see nothing."

    def _see(self, r: str) -> None:
        if self.accessible(r) and r not in self.checked:
            self.checked.append(r)

    def admissible_actions(self) -> list[str] | None:
        if self.game is None:
            return None
        g = self.game
        if self.won:
            return []
        here = self.location
        acts = [f"go to {r}" for r in g.receptacles if r != here] + ["inventory", "look"]
        if here is not None:
            if self.openable(here):
                acts.append(f"close {here}" if here in self.open else f"open {here}")
            if self.accessible(here):
                acts += ([f"move {self.holding} to {here}"] if self.holding else
                         [f"take {o} from {here}" for o in self.contents[here]])
        return sorted(acts)

    def step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        g = self._require()
        if self.won:
            return GAME_OVER_OBS, 0.0, True, self._info(False)
        command = " ".join(str(action).strip().lower().split())
        if command not in (self.admissible_actions() or []):
            return INVALID_ACTION_OBS, 0.0, False, self._info(False)
        reward = 0.0
        if command.startswith("go to "):
            r = self.location = command[6:]
            if r not in self.visited:
                self.visited.append(r)
            self._see(r)
            obs = f"You arrive at {r}. {self._examine(r)}"
        elif command.startswith("open "):
            r = command[5:]
            self.open.add(r)
            self.opened += [r] if r not in self.opened else []
            self._see(r)
            obs = f"You open the {r}. {self._examine(r)}"
        elif command.startswith("close "):
            self.open.discard(command[6:])
            obs = f"You close the {command[6:]}."
        elif command.startswith("take "):
            o, r = command[5:].split(" from ")
            self.contents[r].remove(o)
            self.holding = o
            obs = f"You pick up the {o} from the {r}."
            if o == g.target:
                self.won, reward = True, WIN_REWARD
        elif command.startswith("move "):
            o, r = command[5:].split(" to ")
            self.contents[r].append(o)
            self.holding = None
            obs = f"You move the {o} to the {r}."
        elif command == "inventory":
            obs = f"You are carrying: a {self.holding}." if self.holding else "You are not carrying anything."
        else:
            obs = self._look()
        return obs, reward, self.won, self._info(True)

    def _info(self, valid: bool) -> dict[str, Any]:
        return {"won": self.won, "action_valid": valid}

    def expert_action(self) -> str | None:
        """``expert: oracle``: straight to the object (go to, open, take); ``expert: prior``: the
        prior-order searcher (:func:`prior_search_action`)."""
        g = self._require()
        return prior_search_action(self) if self.options.expert == "prior" else search_action(self, [g.location])

    def privileged_state(self) -> dict[str, Any]:
        if self.game is None:
            return {}
        g = self.game
        return HouseholdPrivilegedState(
            env=self.name, task_id=g.task_id, split=g.split, object_class=g.object_class, object_name=g.target,
            object_receptacle=g.location, receptacles=list(g.receptacles),
            openable=[r for r in g.receptacles if self.openable(r)], visited=list(self.visited),
            opened=list(self.opened), checked=list(self.checked), prior_ranking=list(self.prior[g.object_class]),
            location=self.location, holding=self.holding, won=self.won,
        ).to_dict()

    @classmethod
    def claims_task_id(cls, task_id: str) -> bool:
        return _TASK_RE.match(str(task_id).strip()) is not None


# -- searchers (skill-free policies) and demonstrations -------------------------------------------
def search_action(env: HouseholdEnv, order: Sequence[str]) -> str | None:
    """The next command of a searcher that checks the receptacles in ``order`` (each once: go there,
    open it if closed) and takes the target as soon as it has seen it. It reads only what the agent
    has seen (which receptacles it checked and what they held). A wrongly held object is put back."""
    g = env._require()
    if env.won:
        return None
    here = env.location
    known = next((r for r in env.checked if g.target in env.contents[r]), None)
    goal = known or next((r for r in order if r not in env.checked), None)
    if env.holding is not None or known is not None and known == here:
        if here is not None and not env.accessible(here):
            return f"open {here}"
        if here is not None:
            return f"move {env.holding} to {here}" if env.holding else f"take {g.target} from {here}"
    if here is not None and here == goal and not env.accessible(here):
        return f"open {here}"
    return f"go to {goal}" if goal is not None and goal != here else None


def prior_order(env: HouseholdEnv) -> list[str]:
    """The room's receptacles by decreasing training-prior probability for the target's class (ties
    and implausible classes by name)."""
    probs = env.prior[env._require().object_class]
    return sorted(env._require().receptacles, key=lambda r: (-probs.get(rclass(r), 0.0), r))


def prior_search_action(env: HouseholdEnv) -> str | None:
    """The best skill-free policy: :func:`search_action` in :func:`prior_order`."""
    return search_action(env, prior_order(env))


SEARCHERS = ("oracle", "prior", "random")


def searcher_steps(tid: str, policy: str = "prior", max_steps: int = DESIGN_BUDGET, seed: int = 0,
                   **env_kwargs: Any) -> tuple[list[tuple[str, str]], bool]:
    """([(observation, the command answering it)], won) of one episode of ``policy``: ``prior`` (the
    prior-order searcher), ``random`` (a uniformly random order, from ``random.Random(f"{seed}/{task id}")``)
    or ``oracle`` (the privileged expert), for at most ``max_steps`` commands."""
    if policy not in SEARCHERS:
        raise unknown_name("household searcher", policy, list(SEARCHERS))
    env = HouseholdEnv(**env_kwargs)
    obs = env.reset(tid)
    order = list(env._require().receptacles)
    random.Random(f"{seed}/{tid}").shuffle(order)
    choose = {"prior": prior_search_action, "random": lambda e: search_action(e, order),
              "oracle": lambda e: search_action(e, [e._require().location])}[policy]
    steps: list[tuple[str, str]] = []
    while len(steps) < max_steps and not env.won:
        a = choose(env)
        if a is None:
            break
        steps.append((obs, a))
        obs = env.step(a)[0]
    return steps, env.won


def play_searcher(tid: str, policy: str = "prior", max_steps: int = DESIGN_BUDGET, seed: int = 0,
                  **env_kwargs: Any) -> tuple[list[str], bool]:
    """(the commands, won) of :func:`searcher_steps`."""
    steps, won = searcher_steps(tid, policy, max_steps, seed, **env_kwargs)
    return [a for _, a in steps], won


def prior_search_actions(tid: str, max_steps: int = 50, **env_kwargs: Any) -> list[str]:
    """The commands the prior-order searcher plays on ``tid`` from the start (skill-free demonstrations;
    :func:`searcher_steps` pairs them with their observations; for SFT rows through ``seedrl.train.sft``
    set the env option ``expert: prior`` instead)."""
    return play_searcher(tid, "prior", max_steps, **env_kwargs)[0]


def searcher_success(split: str, policy: str, max_steps: int = DESIGN_BUDGET, size: int | None = None,
                     seed: int = 0, **env_kwargs: Any) -> float:
    """The share of a panel's games ``policy`` (:func:`play_searcher`) wins within ``max_steps``."""
    ids = HouseholdEnv.panel_task_ids(split, HouseholdEnv.splits[split] if size is None else size, **env_kwargs)
    return sum(play_searcher(t, policy, max_steps, seed, **env_kwargs)[1] for t in ids) / len(ids)
