"""What a household game is: ALFWorld's receptacle and object classes, the seeded placement priors, task
ids and the game generator (a pure function of the task id and ``prior_seed``). No env protocol here:
:mod:`seedrl.envs.household.env` plays these games. README.md describes the design.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

from seedrl.errors import SeedRLError

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
#: how many receptacles a room holds, drawn uniformly (the core classes alone may hold more than the
#: number drawn, never more than the maximum)
ROOM_SIZE = (5, 7)

SPLIT_SEED_BASE = {"train": 0, "valid_seen": 100_000, "valid_unseen": 200_000}
SPLIT_RANGE = 100_000
TASK_RE = re.compile(r"^find-s(\d{5,})$")


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
    m = TASK_RE.match(str(tid).strip())
    if m is None:
        raise SeedRLError(f"bad household task id {tid!r}; expected find-s<SEED>, e.g. find-s00017")
    return int(m.group(1))


def split_of(seed: int) -> str:
    """The split whose seed range holds ``seed`` (so whose prior places the object)."""
    for split, base in SPLIT_SEED_BASE.items():
        if base <= seed < base + SPLIT_RANGE:
            return split
    raise SeedRLError(f"household seed {seed} is outside every split's range (0..{3 * SPLIT_RANGE - 1})")


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


PLACEMENTS = ("prior", "uniform")


def generate_game(tid: str, prior_seed: int = 0, placement: str = "prior") -> Game:
    """The game of a task id. The room always holds the object's three most likely classes under the
    *training* prior (the same rooms on every split), the class the object was drawn into (from the
    split's prior), and other classes up to 5-7 receptacles; cabinets, drawers and shelves may come twice.
    ``placement: uniform`` keeps that room and its distractors but puts the object in a uniformly drawn
    receptacle of it whose class may hold the object (an own RNG stream): games where the prior predicts
    nothing, for demonstrations in which only a skill tells where the object is."""
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
    if placement == "uniform":
        able = [r for r in recs if training_prior(prior_seed)[obj].get(rclass(r), 0.0) > 0]
        where = random.Random(f"household/{VERSION}/{task_id(seed)}/{prior_seed}/uniform").choice(able)
    contents[where].append(f"{obj} 1")
    for other in rng.sample([o for o in OBJECTS if o != obj], rng.randint(1, 3)):
        r = _weighted(rng, recs, [prior[other].get(rclass(r), 0.0) for r in recs])
        contents[r].append(f"{other} 1")
    return Game(task_id(seed), split, obj, f"{obj} 1", tuple(recs), {r: tuple(sorted(v)) for r, v in contents.items()},
                where)


def place_rank(tid: str, prior_seed: int = 0) -> int:
    """The rank of the object's receptacle class in game ``tid`` under the *training* prior (0 = the class a
    policy trained on train searches first): where a hindsight skill ("it was in X, not in the usual Y") has
    something to say, rank >= 1."""
    g = generate_game(tid, prior_seed)
    return list(training_prior(prior_seed)[g.object_class]).index(rclass(g.location))


def game_key(game: Game) -> tuple:
    """What makes two games the same to a player (the id aside)."""
    return game.object_class, game.receptacles, tuple(sorted(game.contents.items()))


def listing(things: Sequence[str]) -> str:
    """ALFWorld's lists: "nothing", "a apple 1", "a apple 1, and a egg 2", "a x, a y, and a z"."""
    items = [f"a {t}" for t in things]
    if not items:
        return "nothing"
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + ", and " + items[-1]
