"""Text Sokoban: procedurally generated rooms, a BFS solver expert, and deadlock bookkeeping.

Pure Python (no gym-sokoban, whose gym/NumPy-2 pins break offline installs). The board format
follows verl-agent's text Sokoban so prompts and results are comparable::

    # wall   _ floor   O target   X box   √ box on target   P player   S player on target

Task ids encode everything needed to rebuild a room: ``"{width}x{height}-b{boxes}-s{seed}"``,
e.g. ``"6x6-b1-s00017"``. A room is a pure function of its id (string-seeded
``random.Random``; no global RNG, no worker count), so every process replays the same task.

Rooms are generated like gym-sokoban's: carve a random floor topology inside a wall border, put
the boxes on targets, then play *backwards* (player moves and box pulls). Here the backward play
is an exhaustive BFS, which yields every solvable state with its exact optimal solution length;
the room is drawn with a spread of lengths (at least 2, see :func:`generate_room`).

Pixel mode (env option ``mode: rgb_array``, verl-agent's Sokoban ``rgb_array`` mode): the board is an
image, :func:`render_rgb`, one 16x16-pixel tile per cell as gym-sokoban's ``room_to_rgb`` draws it (the
renderer verl-agent's ``SokobanEnv.render(mode='rgb_array')`` calls), and the observation text names
neither symbols nor coordinates; :func:`decode_rgb` reads an image back into the text board.

Rewards are outcome-only (verl-agent style): ``WIN_REWARD`` on the step that puts the last box
on a target, 0 otherwise. The rollout, not the env, enforces any step limit.
"""

from __future__ import annotations

import functools
import random
import re
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field

from seedrl.envs.base import WIN_REWARD, Bool, Env, EnvOptions, Int, IntPair, ObservationImage, Str
from seedrl.envs.pixels import canvas, fill, frame
from seedrl.envs.sokoban.state import SokobanPrivilegedState
from seedrl.errors import SeedRLError, unknown_name

Pos = tuple[int, int]  # (row, col)

WALL, FLOOR, TARGET, BOX, BOX_ON_TARGET, PLAYER, PLAYER_ON_TARGET = "#", "_", "O", "X", "√", "P", "S"

#: action -> (d_row, d_col)
MOVES: dict[str, Pos] = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
ACTIONS: list[str] = list(MOVES)

#: Seed ranges of the splits; disjoint so valid_seen rooms are never trained on.
SPLIT_SEED_BASE: dict[str, int] = {"train": 0, "valid_seen": 1_000_000, "valid_unseen": 2_000_000}
_SPLIT_RANGE = 1_000_000

#: Default BFS budget. A 7x7 two-box room has a few thousand states; this is far above that.
DEFAULT_MAX_STATES = 2_000_000

_TASK_RE = re.compile(r"^(\d+)x(\d+)-b(\d+)-s(\d+)$")


def render_legend() -> str:
    """The symbol legend, for humans (``seedrl play``) and for the task description."""
    return (f"{WALL} wall, {FLOOR} floor, {TARGET} target, {BOX} box, {BOX_ON_TARGET} box on target, "
            f"{PLAYER} you, {PLAYER_ON_TARGET} you on a target")


TASK_DESCRIPTION = (f"push every box ({BOX}) onto a target ({TARGET}). Legend: {render_legend()}. "
                    f"Actions: {', '.join(ACTIONS)}.")


#: the task description in pixel mode: what the tiles of :func:`render_rgb` look like (the wording of
#: verl-agent's ``SOKOBAN_VISUAL_TEMPLATE``, for this renderer's tiles), no text symbols
PIXEL_TASK_DESCRIPTION = ("push every box onto a target. The board is shown in the image: you are the green alien "
                          "with two antennae; a box is a yellow crate with an orange X; a target is a black tile "
                          "outlined in red with a red diamond in the middle; a box on a target is a yellow crate "
                          f"with a red frame and a red X; walls are red-brown bricks; the floor is black. "
                          f"Actions: {', '.join(ACTIONS)}.")


# -- state ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SokobanState:
    """A Sokoban position: the static layout (walls, targets) and the dynamic part (player, boxes).

    Frozen and hashable so states can key the solver's visited set and the env's plan memo.
    """

    width: int
    height: int
    walls: frozenset[Pos]
    targets: frozenset[Pos]
    boxes: frozenset[Pos]
    player: Pos

    @property
    def solved(self) -> bool:
        return self.boxes == self.targets

    def key(self) -> tuple[Pos, frozenset[Pos]]:
        """The dynamic part only: what differs between states of one room."""
        return self.player, self.boxes

    def with_dynamic(self, player: Pos, boxes: frozenset[Pos]) -> SokobanState:
        return SokobanState(self.width, self.height, self.walls, self.targets, boxes, player)


def render(state: SokobanState, sep: str = "") -> str:
    """The board, one row per line (row 0 first), cells joined by ``sep``."""
    rows = []
    for r in range(state.height):
        cells = []
        for c in range(state.width):
            p = (r, c)
            if p in state.walls:
                cells.append(WALL)
            elif p == state.player:
                cells.append(PLAYER_ON_TARGET if p in state.targets else PLAYER)
            elif p in state.boxes:
                cells.append(BOX_ON_TARGET if p in state.targets else BOX)
            elif p in state.targets:
                cells.append(TARGET)
            else:
                cells.append(FLOOR)
        rows.append(sep.join(cells))
    return "\n".join(rows)


# -- pixels ----------------------------------------------------------------------------------------
#: pixels per cell side, as gym-sokoban's surface images (so an image is 16*height x 16*width)
TILE = 16
#: the colours of the tiles, by part
PALETTE: dict[str, tuple[int, int, int]] = {
    "floor": (0, 0, 0),
    "brick": (158, 70, 40),
    "mortar": (110, 110, 110),
    "target": (220, 20, 60),
    "crate": (255, 200, 0),
    "crate_edge": (139, 90, 0),
    "cross": (255, 120, 0),
    "alien": (60, 200, 60),
    "eye": (0, 0, 0),
}


def _crate(edge: tuple[int, int, int], cross: tuple[int, int, int], edge_px: int) -> np.ndarray:
    """A yellow crate with a frame and a two-pixel X from corner to corner."""
    t = canvas(TILE, TILE, PALETTE["crate"])
    frame(t, 0, 0, TILE, TILE, edge_px, edge)
    r, c = np.indices((TILE, TILE))
    inner = (r >= 2) & (r < TILE - 2) & (c >= 2) & (c < TILE - 2)
    t[inner & ((np.abs(r - c) <= 1) | (np.abs(r + c - (TILE - 1)) <= 1))] = cross
    return t


def _alien(background: np.ndarray) -> np.ndarray:
    """The player: a green alien with two antennae and black eyes, drawn over a background tile."""
    t = background.copy()
    r, c = np.indices((TILE, TILE))
    head = ((r - 9.5) / 5.0) ** 2 + ((c - 7.5) / 4.6) ** 2 <= 1.0
    t[head] = PALETTE["alien"]
    for col in (5, 10):  # antennae
        fill(t, 2, col, 3, 1, PALETTE["alien"])
    for col in (5, 9):  # eyes
        fill(t, 8, col, 2, 2, PALETTE["eye"])
    return t


@functools.lru_cache(maxsize=1)
def tiles() -> dict[str, np.ndarray]:
    """Board symbol -> its ``TILE x TILE`` RGB tile (read-only arrays)."""
    floor = canvas(TILE, TILE, PALETTE["floor"])
    wall = canvas(TILE, TILE, PALETTE["brick"])
    for row in (3, 7, 11, 15):  # courses of bricks, offset by half a brick every other course
        fill(wall, row, 0, 1, TILE, PALETTE["mortar"])
    for top, cols in ((0, (7,)), (4, (3, 11)), (8, (7,)), (12, (3, 11))):
        for col in cols:
            fill(wall, top, col, 3, 1, PALETTE["mortar"])
    target = floor.copy()
    frame(target, 0, 0, TILE, TILE, 1, PALETTE["target"])
    r, c = np.indices((TILE, TILE))
    target[np.abs(r - 7.5) + np.abs(c - 7.5) <= 3] = PALETTE["target"]
    on_target_floor = floor.copy()
    frame(on_target_floor, 0, 0, TILE, TILE, 1, PALETTE["target"])
    out = {WALL: wall, FLOOR: floor, TARGET: target,
           BOX: _crate(PALETTE["crate_edge"], PALETTE["cross"], 1),
           BOX_ON_TARGET: _crate(PALETTE["target"], PALETTE["target"], 2),
           PLAYER: _alien(floor), PLAYER_ON_TARGET: _alien(on_target_floor)}
    for t in out.values():
        t.flags.writeable = False
    return out


def render_rgb(state: SokobanState) -> np.ndarray:
    """The board as a ``(TILE*height, TILE*width, 3)`` uint8 image, one :func:`tiles` tile per cell (the
    cell :func:`render` writes as a symbol), like gym-sokoban's ``room_to_rgb``."""
    tile = tiles()
    img = np.empty((state.height * TILE, state.width * TILE, 3), dtype=np.uint8)
    for r, line in enumerate(render(state).splitlines()):
        for c, symbol in enumerate(line):
            img[r * TILE:(r + 1) * TILE, c * TILE:(c + 1) * TILE] = tile[symbol]
    return img


def decode_rgb(image: np.ndarray, sep: str = "") -> str:
    """The text board (:func:`render`'s format) of an image drawn by :func:`render_rgb`: each tile matched
    exactly against :func:`tiles`; :class:`SeedRLError` for a tile that is none of them."""
    if image.ndim != 3 or image.shape[0] % TILE or image.shape[1] % TILE:
        raise SeedRLError(f"a Sokoban image is a multiple of {TILE} pixels on each side, got {image.shape}")
    rows = []
    for r in range(image.shape[0] // TILE):
        cells = []
        for c in range(image.shape[1] // TILE):
            block = image[r * TILE:(r + 1) * TILE, c * TILE:(c + 1) * TILE]
            symbol = next((s for s, t in tiles().items() if np.array_equal(block, t)), None)
            if symbol is None:
                raise SeedRLError(f"the tile at row {r}, column {c} is no Sokoban tile")
            cells.append(symbol)
        rows.append(sep.join(cells))
    return "\n".join(rows)


def parse_board(text: str) -> SokobanState:
    """Build a state from a board drawn with the legend symbols (for tests and hand-made rooms).

    Cells outside the drawn rows (ragged lines) count as walls. Spaces and tabs are ignored, so
    boards rendered with a cell separator parse too.
    """
    lines = [re.sub(r"[ \t]", "", ln) for ln in text.strip("\n").splitlines()]
    lines = [ln for ln in lines if ln]
    height, width = len(lines), max((len(ln) for ln in lines), default=0)
    walls: set[Pos] = set()
    targets: set[Pos] = set()
    boxes: set[Pos] = set()
    players: list[Pos] = []
    for r in range(height):
        for c in range(width):
            ch = lines[r][c] if c < len(lines[r]) else WALL
            p = (r, c)
            if ch == WALL:
                walls.add(p)
            elif ch in (TARGET, BOX_ON_TARGET, PLAYER_ON_TARGET):
                targets.add(p)
            elif ch not in (FLOOR, BOX, PLAYER):
                raise SeedRLError(f"unknown Sokoban board symbol {ch!r}; legend: {render_legend()}")
            if ch in (BOX, BOX_ON_TARGET):
                boxes.add(p)
            if ch in (PLAYER, PLAYER_ON_TARGET):
                players.append(p)
    if len(players) != 1:
        raise SeedRLError(f"a Sokoban board needs exactly one player, found {len(players)}")
    if len(boxes) != len(targets) or not boxes:
        raise SeedRLError(f"a Sokoban board needs as many boxes as targets (>0); got {len(boxes)} "
                          f"boxes and {len(targets)} targets")
    return SokobanState(width, height, frozenset(walls), frozenset(targets), frozenset(boxes), players[0])


def _in_room(state: SokobanState, p: Pos) -> bool:
    """Inside the grid and not a wall (cells outside a hand-drawn board count as walls)."""
    return 0 <= p[0] < state.height and 0 <= p[1] < state.width and p not in state.walls


def apply_action(state: SokobanState, action: str) -> tuple[SokobanState, bool]:
    """Apply a (normalised) action; return (new state, whether a box was pushed).

    A move into a wall, or a push against a wall or another box, leaves the state unchanged,
    as in gym-sokoban.
    """
    dr, dc = MOVES[action]
    r, c = state.player
    nxt = (r + dr, c + dc)
    if not _in_room(state, nxt):
        return state, False
    if nxt in state.boxes:
        beyond = (nxt[0] + dr, nxt[1] + dc)
        if not _in_room(state, beyond) or beyond in state.boxes:
            return state, False
        boxes = (state.boxes - {nxt}) | {beyond}
        return state.with_dynamic(nxt, frozenset(boxes)), True
    return state.with_dynamic(nxt, state.boxes), False


# -- analysis: dead squares, deadlocks, solver -------------------------------------------------
def live_squares(state: SokobanState) -> frozenset[Pos]:
    """Squares from which a lone box can still reach some target (all others are dead squares).

    Computed by pulling a box backwards from every target: a box at ``b`` can be pushed to
    ``b + d`` iff the player can stand at ``b - d``. Ignores other boxes, so a box on a dead
    square is a certain deadlock (the converse need not hold).
    """
    live = set(state.targets)
    frontier = deque(state.targets)
    while frontier:
        b = frontier.popleft()
        for dr, dc in MOVES.values():
            prev = (b[0] - dr, b[1] - dc)          # box came from here, pushed in direction d
            stand = (b[0] - 2 * dr, b[1] - 2 * dc)  # where the player stood to push it
            if prev not in live and _in_room(state, prev) and _in_room(state, stand):
                live.add(prev)
                frontier.append(prev)
    return frozenset(live)


def simple_deadlock(state: SokobanState) -> bool:
    """A box off-target in a corner (walls on two orthogonal sides): it can never move again."""
    for b in state.boxes - state.targets:
        r, c = b
        vertical = not _in_room(state, (r - 1, c)) or not _in_room(state, (r + 1, c))
        horizontal = not _in_room(state, (r, c - 1)) or not _in_room(state, (r, c + 1))
        if vertical and horizontal:
            return True
    return False


def solve(state: SokobanState, max_states: int = DEFAULT_MAX_STATES) -> list[str] | None:
    """Shortest action list (moves and pushes both cost 1) that solves ``state``; None if none.

    Breadth-first search over (player, boxes), pruning pushes onto dead squares (which never
    lie on an optimal path, since they are certain deadlocks). Returns ``[]`` for a solved
    state. Also returns None if ``max_states`` states were expanded without a solution; the
    default is far above the state count of the rooms this env generates.
    """
    if state.solved:
        return []
    live = live_squares(state)
    if any(b not in live for b in state.boxes):
        return None
    # Flatten positions to ints for speed, on a grid padded by one wall cell on every side so
    # a neighbour index never leaves the grid (hand-made boards may lack a wall border).
    w = state.width + 2

    def idx(p: Pos) -> int:
        return (p[0] + 1) * w + p[1] + 1

    free = [False] * (w * (state.height + 2))
    for r in range(state.height):
        for c in range(state.width):
            free[idx((r, c))] = (r, c) not in state.walls
    live_idx = {idx(p) for p in live}
    deltas = [(a, dr * w + dc) for a, (dr, dc) in MOVES.items()]
    targets = frozenset(idx(p) for p in state.targets)
    start = (idx(state.player), frozenset(idx(p) for p in state.boxes))

    parent: dict[tuple[int, frozenset[int]], tuple[tuple[int, frozenset[int]], str] | None] = {start: None}
    queue = deque([start])
    while queue:
        if len(parent) > max_states:
            return None
        cur = queue.popleft()
        player, boxes = cur
        for action, d in deltas:
            nxt = player + d
            if not free[nxt]:
                continue
            if nxt in boxes:
                beyond = nxt + d
                if not free[beyond] or beyond in boxes or beyond not in live_idx:
                    continue
                new = (nxt, (boxes - {nxt}) | {beyond})
            else:
                new = (nxt, boxes)
            if new in parent:
                continue
            parent[new] = (cur, action)
            if new[1] == targets:
                plan: list[str] = []
                node: tuple[int, frozenset[int]] = new
                while (link := parent[node]) is not None:
                    node, a = link
                    plan.append(a)
                return plan[::-1]
            queue.append(new)
    return None


# -- room generation --------------------------------------------------------------------------
_MASKS: list[list[Pos]] = [  # floor stamps carved along the random walk (as in gym-sokoban)
    [(0, -1), (0, 0), (0, 1)],
    [(-1, 0), (0, 0), (1, 0)],
    [(0, -1), (0, 0), (1, 0)],
    [(0, -1), (0, 0), (1, -1), (1, 0)],
    [(0, 0), (0, 1), (1, 0)],
]


def _carve_topology(width: int, height: int, rng: random.Random) -> set[Pos]:
    """Floor cells carved by a random walk inside a one-cell wall border."""
    floor: set[Pos] = set()
    dirs = list(MOVES.values())
    direction = rng.choice(dirs)
    r, c = rng.randint(1, height - 2), rng.randint(1, width - 2)
    for _ in range(int(1.7 * (width + height))):
        if rng.random() < 0.35:
            direction = rng.choice(dirs)
        r = min(max(r + direction[0], 1), height - 2)
        c = min(max(c + direction[1], 1), width - 2)
        for dr, dc in rng.choice(_MASKS):
            rr, cc = r + dr, c + dc
            if 1 <= rr <= height - 2 and 1 <= cc <= width - 2:
                floor.add((rr, cc))
    return floor


def reverse_distances(floor: frozenset[Pos], targets: frozenset[Pos], max_depth: int,
                      max_states: int = 300_000) -> dict[tuple[Pos, frozenset[Pos]], int]:
    """Optimal solution length of every solvable (player, boxes) state, up to ``max_depth``.

    Breadth-first search *backwards* from all solved states (boxes on the targets, player on any
    free cell) using reverse moves: a plain step, or a step that pulls the box behind the player.
    Reverse moves are exactly the inverses of forward moves and pushes, so a state's BFS depth is
    its optimal forward solution length, and every state reached is solvable. Stops early after
    ``max_states`` states (BFS order keeps the depths of the states found exact).
    """
    dist: dict[tuple[Pos, frozenset[Pos]], int] = {}
    queue: deque[tuple[Pos, frozenset[Pos]]] = deque()
    for p in sorted(floor - targets):
        dist[(p, targets)] = 0
        queue.append((p, targets))
    while queue and len(dist) < max_states:
        key = queue.popleft()
        depth = dist[key]
        if depth >= max_depth:
            continue
        player, boxes = key
        for dr, dc in MOVES.values():
            nxt = (player[0] + dr, player[1] + dc)
            if nxt not in floor or nxt in boxes:
                continue
            successors = [(nxt, boxes)]
            behind = (player[0] - dr, player[1] - dc)
            if behind in boxes:
                successors.append((nxt, (boxes - {behind}) | {player}))
            for succ in successors:
                if succ not in dist:
                    dist[succ] = depth + 1
                    queue.append(succ)
    return dist


def generate_room(width: int, height: int, num_boxes: int, seed: int,
                  min_solution_len: int = 2, max_solution_len: int = 30,
                  max_tries: int = 200) -> SokobanState:
    """A solvable room, a pure function of its arguments (string-seeded local RNG).

    Difficulty: the optimal solution length is drawn uniformly from the lengths this topology
    allows within [min_solution_len, max_solution_len], then a state of that length is drawn
    uniformly. This spreads difficulty across a panel (easy rooms give a tiny model some reward,
    hard rooms leave headroom) instead of always taking the hardest state as gym-sokoban tends
    to. Retries (continuing the same RNG stream, so still deterministic) when a topology admits
    no state of length >= ``min_solution_len``.
    """
    if width < 3 or height < 3 or num_boxes < 1:
        raise SeedRLError(f"Sokoban rooms need width, height >= 3 and >= 1 box; got {width}x{height} "
                          f"with {num_boxes} boxes")
    rng = random.Random(f"seedrl-sokoban/{width}x{height}/b{num_boxes}/s{seed}")
    grid = {(r, c) for r in range(height) for c in range(width)}
    for _ in range(max_tries):
        floor = frozenset(_carve_topology(width, height, rng))
        if len(floor) < num_boxes + 2:
            continue
        # sorted(): set iteration order must never leak into the RNG stream.
        targets = frozenset(rng.sample(sorted(floor), num_boxes))
        dist = reverse_distances(floor, targets, max_solution_len)
        lengths = sorted({d for d in dist.values() if d >= min_solution_len})
        if not lengths:
            continue
        length = rng.choice(lengths)
        candidates = sorted((p, tuple(sorted(b))) for (p, b), d in dist.items() if d == length)
        player, boxes = rng.choice(candidates)
        return SokobanState(width, height, frozenset(grid - floor), targets, frozenset(boxes), player)
    raise SeedRLError(f"could not generate a {width}x{height} Sokoban room with {num_boxes} boxes "
                      f"(seed {seed}) in {max_tries} tries; use a larger room or fewer boxes")


def _room_key(state: SokobanState) -> tuple:
    return state.walls, state.targets, state.boxes, state.player


@functools.lru_cache(maxsize=16)
def _distinct_room_ids(width: int, height: int, num_boxes: int, base: int, size: int,
                       train_size: int) -> tuple[str, ...]:
    """The first ``size`` seeds from ``base`` whose rooms repeat neither each other nor, for rooms of the
    train panel's size (``train_size`` > 0), one of the first ``train_size`` train rooms."""
    seen = {_room_key(generate_room(width, height, num_boxes, SPLIT_SEED_BASE["train"] + i))
            for i in range(train_size)}
    ids: list[str] = []
    for seed in range(base, base + _SPLIT_RANGE):
        if len(ids) == size:
            break
        if seed - base >= 20 * size:
            raise SeedRLError(f"only {len(ids)} distinct {width}x{height} rooms with {num_boxes} box(es) outside the "
                              f"train panel in {seed - base} seeds; ask for fewer than {size} or use larger rooms")
        key = _room_key(generate_room(width, height, num_boxes, seed))
        if key not in seen:
            seen.add(key)
            ids.append(task_id(width, height, num_boxes, seed))
    return tuple(ids)


# -- task ids and config ----------------------------------------------------------------------
def task_id(width: int, height: int, num_boxes: int, seed: int) -> str:
    return f"{width}x{height}-b{num_boxes}-s{seed:05d}"


def parse_task_id(tid: str) -> tuple[int, int, int, int]:
    """``"6x6-b1-s00017"`` -> (width, height, boxes, seed)."""
    m = _TASK_RE.match(tid.strip())
    if m is None:
        raise SeedRLError(f"bad Sokoban task id {tid!r}; expected WIDTHxHEIGHT-bBOXES-sSEED, e.g. 6x6-b1-s00017")
    w, h, b, s = (int(g) for g in m.groups())
    return w, h, b, s


class SokobanConfig(EnvOptions):
    """Env options, shared by the constructor and :meth:`SokobanEnv.panel_task_ids`.

    ``dim``/``unseen_dim`` are (width, height); one integer ``n`` means ``[n, n]``. ``valid_unseen``
    must differ from train in room size or box count, so it measures generalisation rather than
    memorisation. A room must have at least ``boxes + 2`` interior cells (a box, its target, the player).
    """

    env_name: ClassVar[str] = "sokoban"
    #: the step prompt's layout never changes which rooms a panel holds: not part of the panel hash
    local: ClassVar[frozenset[str]] = frozenset({"prompt_style"})

    dim: IntPair = Field((6, 6), description="[width, height] with integers 3..30, or one integer for a square room")
    num_boxes: Int = Field(1, ge=1, le=20, description="an integer 1..20")
    unseen_dim: IntPair = Field((7, 7), description="[width, height] with integers 3..30, or one integer "
                                                    "for a square room")
    unseen_num_boxes: Int = Field(1, ge=1, le=20, description="an integer 1..20")
    #: one space between cells keeps every cell its own token under BPE (``"#__"`` would otherwise
    #: merge and hide the columns), which small models need to read the board's geometry
    cell_sep: Str = Field(" ", description="a string (the separator between board cells)")
    #: also list the (row, col) of the player, boxes and targets under the board: an easier
    #: reading of the same room, for tiny models that cannot yet locate symbols in a grid
    coords: Bool = Field(False, description="true or false")
    #: ``rgb_array``: verl-agent's pixel Sokoban, the board as an image (:func:`render_rgb`) and no text
    #: board or coordinates in the observation
    mode: Literal["text", "rgb_array"] = Field("text", description="text or rgb_array")
    #: ``seedrl_observation_last``: the same step prompt with the board after the instructions, so every
    #: prompt of a batch shares all its instructions as one prefix (``make demo``'s CPU layout;
    #: :mod:`seedrl.agent.prompts`)
    prompt_style: Literal["seedrl", "seedrl_observation_last"] = Field(
        "seedrl", description="seedrl (this project's layout, the default) or seedrl_observation_last (the same "
                              "lines, the board last)")

    def identity(self) -> dict[str, Any]:
        """The text mode's identity leaves ``mode`` out, so every panel hash from before pixel mode stands."""
        ident = super().identity()
        if ident.get("mode") == "text":
            del ident["mode"]
        return ident

    @classmethod
    def from_kwargs(cls, kwargs: Mapping[str, Any]) -> SokobanConfig:
        cfg = cls.parse(kwargs)
        for name, (w, h), boxes in (("dim", cfg.dim, cfg.num_boxes), ("unseen_dim", cfg.unseen_dim,
                                                                     cfg.unseen_num_boxes)):
            if not (3 <= w <= 30 and 3 <= h <= 30):
                raise SeedRLError(f"sokoban env option {name}: width and height must be 3..30, got [{w}, {h}]")
            if (w - 2) * (h - 2) < boxes + 2:
                raise SeedRLError(f"sokoban env option {name}: a {w}x{h} room has {(w - 2) * (h - 2)} interior "
                                  f"cells, too few for {boxes} box(es) (needs boxes + 2); use a larger room "
                                  "or fewer boxes")
        if cfg.mode == "rgb_array" and cfg.coords:
            raise SeedRLError("sokoban env option coords: the rgb_array mode shows the board only as an image; "
                              "drop coords or use mode: text")
        if (cfg.dim, cfg.num_boxes) == (cfg.unseen_dim, cfg.unseen_num_boxes):
            raise SeedRLError("sokoban valid_unseen must differ from train in room size or box count; "
                              "set unseen_dim or unseen_num_boxes")
        return cfg

    def split_room(self, split: str) -> tuple[int, int, int]:
        """(width, height, boxes) of a split's rooms."""
        if split == "valid_unseen":
            return (*self.unseen_dim, self.unseen_num_boxes)
        return (*self.dim, self.num_boxes)


# -- the env ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Step:
    action: str
    valid: bool
    push: bool
    state: SokobanState  # state after the step


class SokobanEnv(Env):
    """Text Sokoban with a BFS expert and deadlock bookkeeping for oracle analysis."""

    name = "sokoban"
    splits = {"train": 1024, "valid_seen": 128, "valid_unseen": 128}
    options_model = SokobanConfig

    @classmethod
    def parse_options(cls, env_kwargs: Mapping[str, Any]) -> SokobanConfig:
        return SokobanConfig.from_kwargs(env_kwargs)

    def __init__(self, **env_kwargs: Any) -> None:
        super().__init__()
        self.config = SokobanConfig.from_kwargs(env_kwargs)
        self.returns_images = self.config.mode == "rgb_array"
        self.prompt_style = self.config.prompt_style
        self._state: SokobanState | None = None
        self._initial: SokobanState | None = None
        self._history: list[_Step] = []
        self._won = False
        # Per-episode memo: dynamic state -> optimal plan (or None). Filled along whole plans so
        # an expert that follows its own plan runs one BFS per episode.
        self._plans: dict[tuple[Pos, frozenset[Pos]], tuple[str, ...] | None] = {}

    @classmethod
    def panel_task_ids(cls, split: str, size: int, **env_kwargs: Any) -> list[str]:
        """Seeds from the split's own seed range, in order: a pure function of the arguments.

        Disjoint seeds are not disjoint rooms: small rooms repeat (the first 1024 5x5 train seeds give
        495 distinct rooms, and 95 of the first 128 valid_seen seeds are one of them). So an
        evaluation panel skips every seed whose room (walls, targets, boxes, player) is already in the
        panel or, when its rooms have the train panel's size, is a train-panel room."""
        if split not in cls.splits:
            raise unknown_name("split of sokoban", split, list(cls.splits))
        if not 0 <= size <= _SPLIT_RANGE:
            raise SeedRLError(f"sokoban panel size must be in [0, {_SPLIT_RANGE}], got {size}")
        cfg = SokobanConfig.from_kwargs(env_kwargs)
        w, h, b = cfg.split_room(split)
        base = SPLIT_SEED_BASE[split]
        if split == "train":
            return [task_id(w, h, b, base + i) for i in range(size)]
        same_size = (w, h, b) == cfg.split_room("train")
        return list(_distinct_room_ids(w, h, b, base, size, cls.splits["train"] if same_size else 0))

    # -- episode ---------------------------------------------------------------------------
    def reset(self, task_id: str) -> str:
        w, h, b, seed = parse_task_id(task_id)
        self.reset_to_state(generate_room(w, h, b, seed), task_id=task_id)
        return self._observation()

    def reset_to_state(self, state: SokobanState, task_id: str = "custom") -> str:
        """Start an episode from a given state (hand-made rooms in tests and demos)."""
        self.task_id = task_id
        self.task_description = PIXEL_TASK_DESCRIPTION if self.returns_images else TASK_DESCRIPTION
        self._state = self._initial = state
        self._history = []
        self._won = state.solved
        self._plans = {}
        return self._observation()

    def format_valid(self, text: str) -> bool:
        """verl-agent's ``sokoban_projection``: ``<think>…</think>`` and an ``<action>`` block naming a
        move word (up/down/left/right/still); no CJK check."""
        from seedrl.agent.parsing import has_think, parse_action

        action = parse_action(text)
        return (isinstance(text, str) and has_think(text) and action is not None
                and any(w in action.lower() for w in (*MOVES, "still")))

    def step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        state = self._require_state()
        norm = action.strip().lower()
        if norm not in MOVES:
            self._history.append(_Step(action, False, False, state))
            obs = f"Invalid action {action.strip()[:40]!r}; use {', '.join(ACTIONS)}.\n{self._observation()}"
            return obs, 0.0, self._won, self._info(valid=False, pushed=False)
        if self._won:  # already over: nothing moves, no second reward
            self._history.append(_Step(norm, True, False, state))
            return self._observation(), 0.0, True, self._info(valid=True, pushed=False)
        new, pushed = apply_action(state, norm)
        self._history.append(_Step(norm, True, pushed, new))
        self._state = new
        reward = 0.0
        if new.solved:
            self._won = True
            reward = WIN_REWARD
        return self._observation(), reward, self._won, self._info(valid=True, pushed=pushed)

    def admissible_actions(self) -> list[str] | None:
        return list(ACTIONS)

    def observation_images(self) -> list[ObservationImage]:
        """The board image in ``rgb_array`` mode (the current state: an invalid action shows it
        unchanged); ``[]`` in text mode."""
        return [render_rgb(self._require_state())] if self.returns_images else []

    def expert_action(self) -> str | None:
        """First action of an optimal plan from the *current* state (re-plans after mistakes)."""
        if self._won:
            return None
        plan = self._plan(self._require_state())
        return plan[0] if plan else None

    def privileged_state(self) -> dict[str, Any]:
        state = self._require_state()
        plan = self._plan(state)
        return SokobanPrivilegedState(
            task_id=self.task_id,
            player=list(state.player),
            boxes=sorted(list(b) for b in state.boxes),
            targets=sorted(list(t) for t in state.targets),
            solution=None if plan is None else list(plan),
            deadlock=plan is None or simple_deadlock(state),
            simple_deadlock=simple_deadlock(state),
            first_deadlock_step=self._first_deadlock_step(),
            history=[{"action": s.action, "valid": s.valid, "push": s.push} for s in self._history],
            won=self._won,
        ).to_dict()

    @classmethod
    def claims_privileged_state(cls, state: Mapping[str, Any]) -> bool:
        """Sokoban's privileged state has no ``"env"`` key: it is the one with a history and a
        deadlock step."""
        return "history" in state and "first_deadlock_step" in state

    @classmethod
    def claims_task_id(cls, task_id: str) -> bool:
        return _TASK_RE.match(str(task_id).strip()) is not None

    # -- helpers ---------------------------------------------------------------------------
    def _require_state(self) -> SokobanState:
        if self._state is None:
            raise SeedRLError("sokoban: call reset(task_id) before step()")
        return self._state

    def _observation(self) -> str:
        state = self._require_state()
        if self.returns_images:
            return "Current board: shown in the image."
        text = "Current board:\n" + render(state, self.config.cell_sep)
        if self.config.coords:
            fmt = lambda ps: " ".join(f"({r},{c})" for r, c in sorted(ps))  # noqa: E731
            text += (f"\nplayer {fmt([state.player])}; boxes {fmt(state.boxes)}; "
                     f"targets {fmt(state.targets)}")
        return text

    def _info(self, valid: bool, pushed: bool) -> dict[str, Any]:
        return {"won": self._won, "action_valid": valid, "pushed": pushed}

    def _plan(self, state: SokobanState) -> tuple[str, ...] | None:
        key = state.key()
        if key not in self._plans:
            plan = solve(state)
            if plan is None:
                self._plans[key] = None
            else:
                # Optimal substructure: every suffix of an optimal plan is optimal from its state.
                s = state
                for i in range(len(plan)):
                    self._plans.setdefault(s.key(), tuple(plan[i:]))
                    s, _ = apply_action(s, plan[i])
                self._plans.setdefault(s.key(), ())
        return self._plans[key]

    def _first_deadlock_step(self) -> int | None:
        """Index of the step after which the room first became unsolvable (None if never;
        -1 if it was unsolvable from the start).

        Solvability only changes on pushes (plain moves are reversible), and once lost it never
        comes back, so scanning the push steps finds the deadlock-creating push.
        """
        assert self._initial is not None
        if self._plan(self._initial) is None:
            return -1
        for i, s in enumerate(self._history):
            if s.push and (simple_deadlock(s.state) or self._plan(s.state) is None):
                return i
        return None
