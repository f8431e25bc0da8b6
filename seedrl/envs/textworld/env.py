"""TextWorld games, generated offline per task id and cached on disk.

Task ids name a game spec and a seed: ``"{game}-s{seed:04d}"`` where ``game`` is one of

- ``coin-l{L}``: tw-coin_collector level L (a chain of L rooms; walkthrough = L commands),
- ``th-l{L}``: tw-treasure_hunter level L (1-10 easy: 5 rooms, no doors; 11-20 medium: closed
  doors and containers; 21-30 hard: locked ones),
- ``simple``: tw-simple with dense rewards and a detailed goal (8-12 commands).

e.g. ``"coin-l3-s0005"``, ``"th-l5-s0012"``, ``"simple-s0003"``. Train and valid_seen cycle over
``train_games`` (default: short coin/treasure-hunter games, 2-4 commands) with disjoint seed
ranges; valid_unseen cycles over ``unseen_games`` (default: a longer coin chain and a
medium-mode treasure hunter, whose doors and containers never occur in train).

Generation uses TextWorld's challenge makers in-process with an integer seed. With an int seed
TextWorld derives every sub-seed from ``numpy.random.RandomState(seed)``, never from its global
RNG, and the compiled ``.z8`` is byte-identical across processes, hash seeds and generation
order (checked on textworld 1.7.0). Games are compiled into a temp folder inside the cache and
renamed into place, so concurrent processes or a kill never leave a half-written game.

Cache: ``cache_dir`` kwarg, else ``$SEEDRL_CACHE/textworld``, else ``~/.cache/seedrl/textworld``;
games live in ``<cache>/tw-<textworld version>/<task id>/tw-game.z8`` (a new generator version
gets fresh games instead of silently mixing two).

Rewards: ``WIN_REWARD`` on the winning step, 0 otherwise (TextWorld's score is in ``info``).
Actions outside the admissible commands are *not* sent to the game: the state is unchanged and
the observation says so, which keeps the expert's policy and the score bookkeeping exact.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field, model_validator

from seedrl.envs.base import WIN_REWARD, Env, EnvOptions, PathStr, StrList
from seedrl.envs.cache import publish_dir
from seedrl.envs.textworld.state import TextWorldPrivilegedState
from seedrl.errors import SeedRLError, unknown_name

INSTALL_HINT = 'pip install "seedrl[envs]" (or: pip install textworld)'

DEFAULT_TRAIN_GAMES: tuple[str, ...] = ("coin-l2", "coin-l3", "coin-l4", "th-l3", "th-l5", "th-l7")
DEFAULT_UNSEEN_GAMES: tuple[str, ...] = ("coin-l6", "th-l13")

#: Seed ranges of the splits; disjoint so valid_seen games are never trained on.
SPLIT_SEED_BASE: dict[str, int] = {"train": 0, "valid_seen": 10_000, "valid_unseen": 20_000}
_SPLIT_RANGE = 10_000

INVALID_ACTION_OBS = "That is not a valid action here."
GAME_OVER_OBS = "The game is over."

_GAME_RE = re.compile(r"^(?:(coin|th)-l(\d+)|simple)$")
_TASK_RE = re.compile(r"^(.+)-s(\d+)$")
#: the ids of the default game kinds, as :meth:`TextWorldEnv.claims_task_id` recognises them
_CLAIMED_TASK_RE = re.compile(r"^(?:coin-l\d+|th-l\d+|simple)-s\d+$")
#: Jericho (TextWorld's Z-machine backend) treats a story file as a TextWorld game only if its
#: name starts with "tw-"; otherwise it marks it "not fully supported" and leaks the Z-machine
#: status line ("-= Room =-0/1") into every observation.
GAME_FILE = "tw-game.z8"


# -- task ids ---------------------------------------------------------------------------------
def parse_game(game: str) -> tuple[str, dict[str, Any]]:
    """``"coin-l3"`` -> (TextWorld challenge name, its settings)."""
    m = _GAME_RE.match(game)
    if m is None:
        raise SeedRLError(f"bad TextWorld game spec {game!r}; expected coin-l<LEVEL>, th-l<LEVEL> or simple")
    kind, level = m.groups()
    if kind is None:
        return "tw-simple", {"rewards": "dense", "goal": "detailed", "test": False}
    lvl = int(level)
    hi = 100 if kind == "coin" else 30  # coin levels > 100 add distractor rooms; th stops at 30
    if not 1 <= lvl <= hi:
        raise SeedRLError(f"TextWorld game {game!r}: level must be in [1, {hi}]")
    return ("tw-coin_collector" if kind == "coin" else "tw-treasure_hunter"), {"level": lvl}


def parse_task_id(task_id: str) -> tuple[str, int]:
    """``"coin-l3-s0005"`` -> ("coin-l3", 5), validating the game spec."""
    m = _TASK_RE.match(task_id.strip())
    if m is None:
        raise SeedRLError(f"bad TextWorld task id {task_id!r}; expected <game>-s<SEED>, e.g. coin-l3-s0005")
    game, seed = m.group(1), int(m.group(2))
    parse_game(game)
    return game, seed


def make_task_id(game: str, seed: int) -> str:
    return f"{game}-s{seed:04d}"


# -- dependencies -----------------------------------------------------------------------------
def _import_textworld() -> Any:
    try:
        import textworld
    except ImportError as e:
        raise SeedRLError(f"the textworld env needs the textworld package ({e}); install it: {INSTALL_HINT}") from None
    return textworld


def inform7_home() -> Path:
    """Where TextWorld looks for its Inform7 compilers: ``$INFORM_HOME`` or the copy bundled in
    the textworld wheel (mirrors ``textworld.generator.inform7.world2inform7``)."""
    if os.environ.get("INFORM_HOME"):
        return Path(os.environ["INFORM_HOME"])
    return Path(_import_textworld().__file__).parent / "thirdparty" / "inform7-6M62"


def check_inform7() -> None:
    """Raise a one-line SeedRLError if the Inform7 compilers (ni, inform6) are not runnable.

    Checked before generating, so a broken install fails with a fix instead of a subprocess
    traceback. Playing cached games does not need the compilers.
    """
    home = inform7_home()
    for tool in ("ni", "inform6"):
        path = home / "share" / "inform7" / "Compilers" / tool
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise SeedRLError(f"TextWorld's Inform7 compiler is missing (no executable {path}); "
                              f"install it: {INSTALL_HINT}")


# -- generation and cache ---------------------------------------------------------------------
def default_cache_dir() -> Path:
    root = os.environ.get("SEEDRL_CACHE")
    return (Path(root) if root else Path.home() / ".cache" / "seedrl") / "textworld"


def generate_game(task_id: str, out_dir: str | Path) -> Path:
    """Generate and compile the game of ``task_id`` into ``out_dir`` (not atomic; see
    :func:`ensure_game`). Returns the ``.z8`` path."""
    game_spec, seed = parse_task_id(task_id)
    challenge, settings = parse_game(game_spec)
    _import_textworld()  # a one-line error if it is missing
    check_inform7()
    import textworld
    import textworld.challenges
    from textworld.generator import compile_game

    options = textworld.GameOptions()
    options.seeds = seed  # int seed: all sub-seeds come from RandomState(seed), not global RNG
    options.path = str(Path(out_dir) / GAME_FILE)
    options.file_ext = ".z8"
    try:
        _, make, _ = textworld.challenges.CHALLENGES[challenge]
        with _quiet_jericho():
            game = make(settings=settings, options=options)
            return Path(compile_game(game, options))
    except Exception as e:  # textworld raises many types; report them as one line
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise SeedRLError(f"TextWorld could not generate {task_id} ({challenge} {settings}): "
                          f"{type(e).__name__}: {first}") from e


def ensure_game(task_id: str, cache_dir: str | Path | None = None) -> Path:
    """The cached ``.z8`` of ``task_id``, generating it on first use.

    Generates into a temp folder next to the final one, then renames it into place: a folder
    rename is atomic, so readers see a complete game or none. If another process won the race,
    its copy is used and ours discarded (both are identical: generation is deterministic).
    """
    parse_task_id(task_id)  # a bad id fails before touching the disk (and cannot name a path)
    textworld = _import_textworld()
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    version_dir = root / f"tw-{textworld.__version__}"
    final = version_dir / task_id
    game_file = final / GAME_FILE
    if game_file.is_file():
        return game_file
    version_dir.mkdir(parents=True, exist_ok=True)
    with _TW_LOCK:
        if game_file.is_file():  # another thread generated it while we waited
            return game_file
        return _generate_into_cache(task_id, version_dir, final, game_file)


def _generate_into_cache(task_id: str, version_dir: Path, final: Path, game_file: Path) -> Path:
    return publish_dir(version_dir, final.name, lambda tmp: generate_game(task_id, tmp), game_file.name)


# -- observations -----------------------------------------------------------------------------
def compact(text: str) -> str:
    """Strip TextWorld's padding: blank lines, indentation, the RESTART/UNDO prompt at the end."""
    text = text.split("Would you like to RESTART", 1)[0]
    return "\n".join(ln.strip() for ln in text.splitlines() if ln.strip())


def first_observation(feedback: str, objective: str) -> str:
    """Drop the ASCII-art banner and the objective (it is the task description) from the intro."""
    if objective and objective in feedback:
        feedback = feedback.split(objective, 1)[1]
    else:  # fall back to the first room header, "-= Room =-"
        m = re.search(r"^\s*-= .* =-\s*$", feedback, flags=re.M)
        if m is not None:
            feedback = feedback[m.start():]
    return compact(feedback)


#: TextWorld is not thread-safe (its logic parser, tatsu, keeps one global rule stack: concurrent
#: generation fails with "IndexError: pop from empty list"), and neither is warnings.catch_warnings.
#: The rollout steps envs from a thread pool, so every call into TextWorld holds this lock. Steps
#: take milliseconds; generation seconds, once per game.
_TW_LOCK = threading.RLock()


@contextlib.contextmanager
def _quiet_jericho() -> Iterator[None]:
    """Silence jericho's UnsupportedGameWarnings: TextWorld asks jericho for walkthroughs and valid
    actions it cannot know, then fills them in from the game's own metadata, so they are noise.
    Also takes the process-wide TextWorld lock."""
    with _TW_LOCK, warnings.catch_warnings():
        warnings.filterwarnings("ignore", module=r"jericho(\..*)?$")
        yield


def _norm(command: str) -> str:
    return " ".join(command.strip().lower().split())


# -- the env ----------------------------------------------------------------------------------
class TextWorldOptions(EnvOptions):
    """Env options of ``textworld``, shared by the constructor and :meth:`TextWorldEnv.panel_task_ids`."""

    env_name: ClassVar[str] = "textworld"
    local: ClassVar[frozenset[str]] = frozenset({"cache_dir"})

    cache_dir: PathStr | None = Field(None, description="a folder (default $SEEDRL_CACHE/textworld)")
    train_games: StrList = Field(DEFAULT_TRAIN_GAMES, description="a non-empty list of game specs (coin-lN, th-lN, "
                                                                  "simple)")
    unseen_games: StrList = Field(DEFAULT_UNSEEN_GAMES, description="a non-empty list of game specs (coin-lN, "
                                                                    "th-lN, simple) not in train_games")

    @model_validator(mode="after")
    def _check(self) -> TextWorldOptions:
        _check_games(self.train_games, self.unseen_games)
        return self


class TextWorldEnv(Env):
    """One TextWorld game per episode; the expert follows TextWorld's policy commands."""

    name = "textworld"
    packages = ("textworld",)
    splits = {"train": 64, "valid_seen": 16, "valid_unseen": 16}
    options_model = TextWorldOptions

    def __init__(self, **env_kwargs: Any) -> None:
        super().__init__()
        o = self.options = TextWorldOptions.parse(env_kwargs)
        self.cache_dir = Path(o.cache_dir) if o.cache_dir is not None else default_cache_dir()
        self.train_games = o.train_games
        self.unseen_games = o.unseen_games
        self._tw: Any = None
        self._game_file: Path | None = None
        self._state: Any = None  # textworld.core.GameState (a dict)
        self._done = False

    @classmethod
    def panel_task_ids(cls, split: str, size: int, **env_kwargs: Any) -> list[str]:
        """Task i plays game ``games[i % len(games)]`` with seed ``split base + i``: a pure function
        of the arguments. ``cache_dir`` is accepted (env kwargs are shared) and ignored."""
        if split not in cls.splits:
            raise unknown_name("split of textworld", split, list(cls.splits))
        if not 0 <= size <= _SPLIT_RANGE:
            raise SeedRLError(f"textworld panel size must be in [0, {_SPLIT_RANGE}], got {size}")
        o = TextWorldOptions.parse(env_kwargs)
        games = o.unseen_games if split == "valid_unseen" else o.train_games
        base = SPLIT_SEED_BASE[split]
        return [make_task_id(games[i % len(games)], base + i) for i in range(size)]

    # -- episode ---------------------------------------------------------------------------
    def reset(self, task_id: str) -> str:
        textworld = _import_textworld()
        game_file = ensure_game(task_id, self.cache_dir)
        if self._tw is None or self._game_file != game_file:
            self.close()
            infos = textworld.EnvInfos(admissible_commands=True, policy_commands=True, won=True, lost=True,
                                       score=True, max_score=True, objective=True, extras=["walkthrough"])
            with _quiet_jericho():
                self._tw = textworld.start(str(game_file), request_infos=infos)
            self._game_file = game_file
        with _quiet_jericho():
            self._state = self._tw.reset()
        self.task_id = task_id
        self.task_description = compact(self._state["objective"] or "")
        self._done = False
        return first_observation(self._state["feedback"] or "", self._state["objective"] or "")

    def step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        if self._state is None:
            raise SeedRLError("textworld: call reset(task_id) before step()")
        if self._done:
            return GAME_OVER_OBS, 0.0, True, self._info(valid=False)
        by_norm = {_norm(c): c for c in self._state["admissible_commands"] or []}
        command = by_norm.get(_norm(action))
        if command is None:
            return INVALID_ACTION_OBS, 0.0, False, self._info(valid=False)
        with _quiet_jericho():
            self._state, _, done = self._tw.step(command)
        won, lost = bool(self._state["won"]), bool(self._state["lost"])
        self._done = bool(done) or won or lost
        return compact(self._state["feedback"] or ""), WIN_REWARD if won else 0.0, self._done, self._info(valid=True)

    def admissible_actions(self) -> list[str] | None:
        if self._state is None:
            return None
        return [] if self._done else list(self._state["admissible_commands"] or [])

    def expert_action(self) -> str | None:
        """Next command of TextWorld's policy from the current state (valid mid-episode)."""
        if self._state is None or self._done:
            return None
        policy = self._state["policy_commands"] or []
        return policy[0] if policy else None

    def privileged_state(self) -> dict[str, Any]:
        if self._state is None:
            return {}
        s = self._state
        return TextWorldPrivilegedState(
            task_id=self.task_id,
            walkthrough=list(s.get("extra.walkthrough") or []),
            policy_commands=list(s["policy_commands"] or []),
            score=int(s["score"] or 0),
            max_score=int(s["max_score"] or 0),
            won=bool(s["won"]),
            lost=bool(s["lost"]),
        ).to_dict()

    @classmethod
    def claims_privileged_state(cls, state: Mapping[str, Any]) -> bool:
        """TextWorld's privileged state has no ``"env"`` key: it is the one with a walkthrough."""
        return "walkthrough" in state

    @classmethod
    def claims_task_id(cls, task_id: str) -> bool:
        return _CLAIMED_TASK_RE.match(str(task_id).strip()) is not None

    def close(self) -> None:
        if self._tw is not None:
            self._tw.close()
        self._tw = None
        self._game_file = None

    def _info(self, valid: bool) -> dict[str, Any]:
        s = self._state
        return {"won": bool(s["won"]), "lost": bool(s["lost"]), "score": int(s["score"] or 0),
                "max_score": int(s["max_score"] or 0), "action_valid": valid}


def _check_games(train_games: Any, unseen_games: Any) -> None:
    """Both lists parse, are non-empty, and share no game (valid_unseen must be unseen)."""
    for name, games in (("train_games", train_games), ("unseen_games", unseen_games)):
        if isinstance(games, str) or not games:
            raise SeedRLError(f"textworld {name} must be a non-empty list of game specs, got {games!r}")
        for g in games:
            parse_game(g)
    shared = sorted(set(train_games) & set(unseen_games))
    if shared:
        raise SeedRLError(f"textworld unseen_games must not appear in train_games; shared: {', '.join(shared)}")
