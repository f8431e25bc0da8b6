"""Household search: find an object hidden in an ALFWorld-style room, in pure Python (README.md): the env
and the skill-free searchers; the games and priors are :mod:`seedrl.envs.household.world`'s.

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
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from pydantic import Field

from seedrl.envs.base import WIN_REWARD, Env, EnvOptions, Int
from seedrl.envs.household.state import HouseholdPrivilegedState
from seedrl.envs.household.world import (
    OPENABLE,
    SPLIT_RANGE,
    SPLIT_SEED_BASE,
    TASK_RE,
    VERSION,
    Game,
    game_key,
    generate_game,
    listing,
    rclass,
    task_id,
    training_prior,
)
from seedrl.errors import SeedRLError, unknown_name

#: the step budget the env is designed for (README, "Budget"): go, open, take at a closed receptacle
#: leaves one spare step, so the first closed receptacle tried must be the right one
DESIGN_BUDGET = 4
INVALID_ACTION_OBS = "Nothing happens."
GAME_OVER_OBS = "The game is over."


# -- the env ------------------------------------------------------------------------------------
class HouseholdOptions(EnvOptions):
    """``prior_seed`` picks the placement prior (part of the tasks); ``expert`` picks which policy
    :meth:`HouseholdEnv.expert_action` plays: ``oracle`` (goes straight to the object), ``prior`` (the
    skill-free prior-order searcher) or ``random`` (a searcher in a random order fixed per task id: skill-free
    demonstrations that teach no prior). The expert never changes a task, so it is ``local``: left out of
    the panel hash (as ALFWorld's ``prompt_style``)."""

    env_name: ClassVar[str] = "household"
    local: ClassVar[frozenset[str]] = frozenset({"expert"})

    prior_seed: Int = Field(0, ge=0, description="an integer >= 0 (the placement prior's seed)")
    expert: Literal["oracle", "prior", "random"] = Field("oracle", description="oracle, prior or random")
    placement: Literal["prior", "uniform"] = Field("prior", description="prior or uniform (where the object "
                                                   "lies: the split's prior, or any plausible receptacle alike)")


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
        if not 0 <= size <= SPLIT_RANGE // 10:
            raise SeedRLError(f"household panel size must be in [0, {SPLIT_RANGE // 10}], got {size}")
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
        g = self.game = generate_game(task_id, self.options.prior_seed, self.options.placement)
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
        prior-order searcher (:func:`prior_search_action`); ``expert: random``: the searcher in
        :func:`random_order` (the ``random`` searcher of :func:`searcher_steps` with seed 0)."""
        g = self._require()
        if self.options.expert == "prior":
            return prior_search_action(self)
        if self.options.expert == "random":
            return search_action(self, random_order(g.task_id, g.receptacles))
        return search_action(self, [g.location])

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
        return TASK_RE.match(str(task_id).strip()) is not None


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


def random_order(tid: str, receptacles: Sequence[str], seed: int = 0) -> list[str]:
    """The random searcher's order: ``receptacles`` shuffled by ``random.Random(f"{seed}/{tid}")``."""
    order = list(receptacles)
    random.Random(f"{seed}/{tid}").shuffle(order)
    return order


def searcher_steps(tid: str, policy: str = "prior", max_steps: int = DESIGN_BUDGET, seed: int = 0,
                   **env_kwargs: Any) -> tuple[list[tuple[str, str]], bool]:
    """([(observation, the command answering it)], won) of one episode of ``policy``: ``prior`` (the
    prior-order searcher), ``random`` (a uniformly random order, from ``random.Random(f"{seed}/{task id}")``)
    or ``oracle`` (the privileged expert), for at most ``max_steps`` commands."""
    if policy not in SEARCHERS:
        raise unknown_name("household searcher", policy, list(SEARCHERS))
    env = HouseholdEnv(**env_kwargs)
    obs = env.reset(tid)
    order = random_order(tid, env._require().receptacles, seed)
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
