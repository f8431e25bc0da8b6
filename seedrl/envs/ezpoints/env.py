"""EZPoints: verl-agent's ``gym_cards/EZPoints-v0``, two playing cards in an image and a formula equal to 12.

The rules are gym_cards' ``EZPointEnv`` (``gym_cards/envs/ezpoints.py``, which verl-agent's
``agent_system/environments/env_package/gym_cards/envs.py`` runs in its ``GymCardsWorker``):

- **cards** (``EZPointEnv._generate_cards``): the first card's rank is uniform in 2..K (J, Q, K count as
  10), its suit uniform; the second card's value is ``12 // first`` with probability 1/2 when the first
  value divides 12 (1, 2, 3, 4, 6), else ``12 - first``; the two are swapped with probability 1/2. So
  every task has a formula: a sum or a product.
- **actions** (verl-agent's ``gym_projection`` action list for EZPoints): one token per step, ``1``..``10``,
  ``+``, ``*`` or ``=``, appended to the formula.
- **a step** (``EZPointEnv.step``): once the formula is longer than 5 tokens any step ends the episode
  with reward -1 (``_terminate_step(-1, 'time_limit_reached')``); a number that is not on a card, or
  used more often than the cards show it (``_is_valid_action``), adds a space to the formula and gives
  -1, the episode going on; ``=`` evaluates the formula (``_evaluate_formula``: the tokens joined and
  read as a Python expression) and ends the episode: 10 when it equals 12 and both cards were used,
  else -1; any other token is appended with reward 0.

Where this env differs: a reply that is none of the 13 tokens is an invalid action that changes
nothing (``action_valid`` false, reward 0); verl-agent's projection turns it into index -1, which
``EZPointEnv.step`` reads as the token ``10``. The time-limit step ends the episode (verl-agent's worker
keeps only gymnasium's ``terminated``, so its episode runs on to ``env.max_steps`` with -1 a step). The
formula is evaluated by :func:`evaluate`, which reads exactly Python's grammar for ``+``, ``*`` and
``**`` on integers (``5++7`` is 12, ``57`` is fifty-seven, ``5 7`` an error) without ``eval``. Episodes
need 4 steps (a value, an operator, a value, ``=``); SEED's EZPoints launchers set ``env.max_steps=4``.

Observation (``mode: rgb_array``, the default): one image (:func:`seedrl.envs.ezpoints.cards.render_table`)
and the text ``Current formula: "5+"``; the cards are only in the image. ``mode: text`` also names the
cards in the text, for debugging without a vision model.

Task ids are ``ezpoints-s{seed}``: a task is a pure function of its seed (string-seeded ``random.Random``).
Panels: ``valid_unseen`` holds the rank pairs {5, 7} and {3, 4} (in either order, any suits), which no
other split shows; the other ordered card pairs (suit and rank of both cards) are split by a content hash,
a quarter to ``valid_seen`` and the rest to ``train``, so the three panels share no task content. There are
only a few hundred distinct card pairs, so a panel repeats contents (under distinct seeds), as verl-agent's
random test seeds do.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import random
import re
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

from pydantic import Field

from seedrl.envs.base import WIN_REWARD, Env, EnvOptions, ObservationImage
from seedrl.envs.ezpoints.cards import describe, render_table
from seedrl.envs.ezpoints.state import EZPointsPrivilegedState
from seedrl.errors import SeedRLError, unknown_name

TARGET = 12
NUMBER_TOKENS: tuple[str, ...] = tuple(str(n) for n in range(1, 11))
ACTIONS: tuple[str, ...] = (*NUMBER_TOKENS, "+", "*", "=")
#: a step taken while the formula is longer than this ends the episode (``len(self.formula) > 5``)
MAX_FORMULA = 5
#: the reward of a wrong formula, a card misuse and the time limit
PENALTY = -1.0
SUITS = ("H", "S", "D", "C")
#: rank number -> verl-agent's rank letter (``_card_num_to_str``)
RANK_LETTERS = {1: "A", 10: "T", 11: "J", 12: "Q", 13: "K"}
#: rank pairs (sorted rank strings) only valid_unseen shows
UNSEEN_RANK_PAIRS: frozenset[tuple[str, str]] = frozenset({("5", "7"), ("3", "4")})
SPLIT_SEED_BASE: dict[str, int] = {"train": 0, "valid_seen": 1_000_000, "valid_unseen": 2_000_000}
_SPLIT_RANGE = 1_000_000
_TASK_RE = re.compile(r"^ezpoints-s(\d+)$")

TASK_DESCRIPTION = ("build a formula that equals 12 from the numbers on the two playing cards {where}: number "
                    "cards count their face value, J, Q and K count 10, A counts 1. Each step adds one token to "
                    "the end of the formula: a card's number, '+', '*', or '=' to evaluate it and end the game. "
                    "Use each card exactly once. Actions: " + ", ".join(ACTIONS) + ".")


# -- cards and formulas ---------------------------------------------------------------------------
def rank_str(n: int) -> str:
    """verl-agent's rank string of a rank number (``_card_num_to_str``): ``10`` -> ``"T"``, ``12`` -> ``"Q"``."""
    return RANK_LETTERS.get(n, str(n))


def card_value(card: str) -> int:
    """The number a card counts for: ``"H5"`` -> 5, ``"CT"``/``"DJ"``/``"SQ"``/``"HK"`` -> 10, ``"SA"`` -> 1."""
    rank = card[1:]
    if rank == "A":
        return 1
    if rank in ("T", "J", "Q", "K"):
        return 10
    if rank.isdigit() and 2 <= int(rank) <= 9:
        return int(rank)
    raise SeedRLError(f"bad card {card!r}; a card is a suit of {''.join(SUITS)} and a rank 2-9, T, J, Q, K or A")


def generate_cards(seed: int) -> tuple[str, str]:
    """The two cards of a seed, drawn as ``EZPointEnv._generate_cards`` draws them (string-seeded RNG)."""
    rng = random.Random(f"ezpoints/{seed}")
    first = rng.randint(2, 13)
    cards = [rng.choice(SUITS) + rank_str(first)]
    value = min(first, 10)
    second = TARGET // value if value in (1, 2, 3, 4, 6) and rng.random() <= 0.5 else TARGET - value
    cards.append(rng.choice(SUITS) + rank_str(second))
    if rng.random() <= 0.5:
        cards.reverse()
    return cards[0], cards[1]


def _value(node: ast.AST) -> int:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.UAdd):
        return _value(node.operand)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult, ast.Pow)):
        left, right = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Add):
            return left + right
        if isinstance(node.op, ast.Mult):
            return left * right
        if right > 64 or left > 10**6:
            raise ValueError("power too large")
        return left**right
    raise ValueError(f"not a formula of '+', '*' and integers: {ast.dump(node)[:40]}")


def evaluate(formula: Sequence[str]) -> int | None:
    """The value of the formula's tokens joined, read as Python reads them (verl-agent's
    ``eval(''.join(map(str, self.formula)))``) but only for integers, ``+`` (also unary), ``*`` and ``**``;
    ``None`` where Python's ``eval`` would raise (``"5+"``, ``"5 7"``, ``""``)."""
    text = "".join(formula).strip(" \t")  # eval() strips leading and trailing spaces and tabs
    try:
        return _value(ast.parse(text, mode="eval").body)
    except (SyntaxError, ValueError, RecursionError):
        return None


def available(numbers: Sequence[int], used: Sequence[int], n: int) -> bool:
    """Whether card number ``n`` may be written now: the cards show it more often than ``used`` holds it
    (``EZPointEnv._is_valid_action``)."""
    return used.count(n) < list(numbers).count(n)


def wins(numbers: Sequence[int], formula: Sequence[str], used: Sequence[int]) -> bool:
    """Whether ``=`` now wins: the formula equals 12 and two card numbers were written
    (``EZPointEnv._evaluate_formula``: ``len(self.used_cards) != 2`` loses; ``numbers`` is kept for the
    signature's sake: on gym_cards' two-card tables "two" and "both" are the same)."""
    del numbers
    return len(used) == 2 and evaluate(formula) == TARGET


def solve(numbers: Sequence[int], formula: Sequence[str] = (), used: Sequence[int] = ()) -> list[str] | None:
    """The shortest tokens that finish a winning formula from ``formula`` (``used`` the card numbers
    written so far), ending with ``"="``; ``None`` when no formula of at most :data:`MAX_FORMULA` tokens
    wins. Breadth-first over the card numbers still available, ``+`` and ``*``, in that order, so the
    answer is deterministic: ``[5, 7]`` -> ``["5", "+", "7", "="]``, ``[6, 2]`` -> ``["6", "*", "2", "="]``,
    ``[5, 5]`` -> ``None``."""
    start = (tuple(formula), tuple(used))
    queue: deque[tuple[tuple[str, ...], tuple[int, ...], tuple[str, ...]]] = deque([(*start, ())])
    while queue:
        f, u, path = queue.popleft()
        if wins(numbers, f, u):
            return [*path, "="]
        if len(f) >= MAX_FORMULA:
            continue
        for n in dict.fromkeys(numbers):
            if available(numbers, u, n):
                queue.append(((*f, str(n)), (*u, n), (*path, str(n))))
        for op in ("+", "*"):
            queue.append(((*f, op), u, (*path, op)))
    return None


# -- task ids and panels --------------------------------------------------------------------------
def task_id(seed: int) -> str:
    return f"ezpoints-s{seed:07d}"


def parse_task_id(tid: str) -> int:
    """``"ezpoints-s0000017"`` -> 17."""
    m = _TASK_RE.match(str(tid).strip())
    if m is None:
        raise SeedRLError(f"bad EZPoints task id {tid!r}; expected ezpoints-sSEED, e.g. ezpoints-s0000017")
    return int(m.group(1))


def split_of(cards: Sequence[str]) -> str:
    """The one split whose panels may hold this ordered card pair: ``valid_unseen`` for the rank pairs
    of :data:`UNSEEN_RANK_PAIRS`, else ``valid_seen`` for a quarter of the pairs by a content hash,
    ``train`` for the rest."""
    if tuple(sorted(c[1:] for c in cards)) in UNSEEN_RANK_PAIRS:
        return "valid_unseen"
    digest = hashlib.sha256("|".join(cards).encode()).digest()
    return "valid_seen" if digest[0] % 4 == 0 else "train"


@functools.lru_cache(maxsize=32)
def _panel(split: str, size: int) -> tuple[str, ...]:
    base = SPLIT_SEED_BASE[split]
    ids: list[str] = []
    for seed in range(base, base + _SPLIT_RANGE):
        if len(ids) == size:
            break
        if split_of(generate_cards(seed)) == split:
            ids.append(task_id(seed))
    return tuple(ids)


class EZPointsOptions(EnvOptions):
    """``mode``: ``rgb_array`` (the cards only in the image, verl-agent's observation) or ``text`` (also
    named in the text, for debugging)."""

    env_name: ClassVar[str] = "ezpoints"

    mode: Literal["rgb_array", "text"] = Field("rgb_array", description="rgb_array or text")


# -- the env --------------------------------------------------------------------------------------
class EZPointsEnv(Env):
    """verl-agent's EZPoints (gym_cards ``EZPointEnv``) with a breadth-first solver as the expert."""

    name = "ezpoints"
    title = "EZPoints"
    splits = {"train": 1024, "valid_seen": 128, "valid_unseen": 128}
    options_model = EZPointsOptions

    def __init__(self, **env_kwargs: Any) -> None:
        super().__init__()
        self.config = EZPointsOptions.parse(env_kwargs)
        self.returns_images = self.config.mode == "rgb_array"
        self.cards: tuple[str, ...] = ()
        self.numbers: tuple[int, ...] = ()
        self.formula: list[str] = []
        self.used: list[int] = []
        self._history: list[dict[str, Any]] = []
        self._done = self._won = False

    @classmethod
    def panel_task_ids(cls, split: str, size: int, **env_kwargs: Any) -> list[str]:
        """The first ``size`` seeds of the split's seed range whose cards belong to the split
        (:func:`split_of`), in order: a pure function of the arguments."""
        if split not in cls.splits:
            raise unknown_name("split of ezpoints", split, list(cls.splits))
        if not 0 <= size <= 100_000:
            raise SeedRLError(f"ezpoints panel size must be in [0, 100000], got {size}")
        EZPointsOptions.parse(env_kwargs)
        return list(_panel(split, size))

    @classmethod
    def claims_task_id(cls, task_id: str) -> bool:
        return _TASK_RE.match(str(task_id).strip()) is not None

    @classmethod
    def task_type(cls, task_id: str) -> str:
        """The pair of card values, low first: ``"cards-2-10"`` for a 2 and a queen in either order. A task's
        answer depends on nothing else, and the draw makes one pair common (a third of draws are {2, 10}),
        so evaluations break success down by it (a policy that writes one formula blind wins one pair and no
        other) and SFT's ``demo_sampling: per_type`` can even demonstrations over it."""
        lo, hi = sorted(card_value(c) for c in generate_cards(parse_task_id(task_id)))
        return f"cards-{lo}-{hi}"

    @classmethod
    def skill_types(cls, task_id: str, task_text: str = "") -> tuple[str, ...]:
        """The general skill alone (``skills/general.md``): no skill file per pair of cards."""
        return ()

    # -- episode ----------------------------------------------------------------------------
    def reset(self, task_id: str) -> str:
        return self.reset_to_cards(generate_cards(parse_task_id(task_id)), task_id=task_id)

    def reset_to_cards(self, cards: Sequence[str], task_id: str = "custom") -> str:
        """Start an episode on given cards (hand cases in tests): ``["H5", "C7"]``."""
        numbers = tuple(card_value(c) for c in cards)
        self.task_id, self.cards, self.numbers = task_id, tuple(cards), numbers
        where = "shown in the image" if self.returns_images else "named in the observation"
        self.task_description = TASK_DESCRIPTION.format(where=where)
        self.formula, self.used, self._history = [], [], []
        self._done = self._won = False
        return self._observation()

    def step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        if not self.cards:
            raise SeedRLError("ezpoints: call reset(task_id) before step()")
        token = action.strip()
        if token not in ACTIONS:
            self._record(action, False, 0.0)
            obs = f"Invalid action {token[:40]!r}; use one of {', '.join(ACTIONS)}.\n{self._observation()}"
            return obs, 0.0, self._done, self._info(valid=False)
        if self._done:  # already over: nothing changes, no second reward
            self._record(token, True, 0.0)
            return self._observation(), 0.0, True, self._info(valid=True)
        reward = 0.0
        if len(self.formula) > MAX_FORMULA:  # EZPointEnv.step: the time limit, checked first
            self._done, reward = True, PENALTY
        elif token in NUMBER_TOKENS and not available(self.numbers, self.used, int(token)):
            self.formula.append(" ")  # as EZPointEnv.step does, so the formula still grows
            reward = PENALTY
        elif token == "=":
            self._done = True
            self._won = wins(self.numbers, self.formula, self.used)
            reward = WIN_REWARD if self._won else PENALTY
        else:
            if token in NUMBER_TOKENS:
                self.used.append(int(token))
            self.formula.append(token)
        self._record(token, True, reward)
        return self._observation(), reward, self._done, self._info(valid=True)

    def admissible_actions(self) -> list[str] | None:
        return list(ACTIONS)

    def observation_images(self) -> list[ObservationImage]:
        """The table (both cards and the formula) in ``rgb_array`` mode; ``[]`` in text mode."""
        if not self.cards:
            raise SeedRLError("ezpoints: call reset(task_id) before observation_images()")
        return [render_table(self.cards, self.formula)] if self.returns_images else []

    def expert_action(self) -> str | None:
        """The next token of the shortest winning finish from here (:func:`solve`); ``None`` once the
        episode is over or no finish wins."""
        if self._done:
            return None
        plan = solve(self.numbers, self.formula, self.used)
        return plan[0] if plan else None

    def privileged_state(self) -> dict[str, Any]:
        if not self.cards:
            return {}
        return EZPointsPrivilegedState(
            env=self.name, task_id=str(self.task_id), cards=list(self.cards), numbers=list(self.numbers),
            formula=list(self.formula), used=list(self.used),
            solution=None if self._done else solve(self.numbers, self.formula, self.used),
            history=[dict(h) for h in self._history], won=self._won, done=self._done,
        ).to_dict()

    # -- helpers ----------------------------------------------------------------------------
    def _observation(self) -> str:
        text = f'Current formula: "{"".join(self.formula)}"'
        if not self.returns_images:
            text = f"Cards: {describe(self.cards)}.\n" + text
        return text

    def _info(self, valid: bool) -> dict[str, Any]:
        return {"won": self._won, "action_valid": valid, "formula": "".join(self.formula)}

    def _record(self, action: str, valid: bool, reward: float) -> None:
        solvable = not self._done and solve(self.numbers, self.formula, self.used) is not None
        self._history.append({"action": action, "valid": valid, "reward": reward,
                              "solvable": self._won or solvable})

    @classmethod
    def parse_options(cls, env_kwargs: Mapping[str, Any]) -> EZPointsOptions:
        return EZPointsOptions.parse(env_kwargs)
