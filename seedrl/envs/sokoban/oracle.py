"""Oracle hindsight for Sokoban, from :class:`~seedrl.envs.sokoban.state.SokobanPrivilegedState`.

Skills are at most ~40 words and summaries one sentence without coordinates: the self-analyzer has
to generate every token of them for every trajectory, so their length is SEED's analysis cost.

- success -> the push workflow of the winning episode, specialised with where the target lies
  relative to the box and the order of the pushes (``(None, None)``, the generic skill, for a win
  without a push);
- failure -> the push that created the deadlock (``first_deadlock_step``), replayed on the rebuilt
  room to say in which direction the box went, what it hit (corner, wall, box) and which push the
  solver would have made instead; without a deadlock: invalid / unparsable actions, back-and-forth
  oscillation, walking into walls, or running out of steps, whichever the trajectory shows.

:func:`step_skills` (OPID): the push that created the deadlock, as a trajectory step (the history
index mapped to the trajectory step, unparsable turns included).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from seedrl.envs.oracle import invalid_skill, mostly_invalid, outcome
from seedrl.envs.sokoban.env import (
    MOVES,
    SokobanEnv,
    apply_action,
    generate_room,
    live_squares,
    parse_board,
    parse_task_id,
    simple_deadlock,
    solve,
)
from seedrl.envs.sokoban.state import SokobanMove, SokobanPrivilegedState
from seedrl.rollout.types import Trajectory

_OPPOSITE = {"up": "down", "down": "up", "left": "right", "right": "left"}
#: where the player stands to push a box in a direction
_STAND = {"up": "below the box", "down": "above the box", "left": "to the right of the box",
          "right": "to the left of the box"}
_SIDE_WALL = {"up": "the wall above it", "down": "the wall below it", "left": "the wall to its left",
              "right": "the wall to its right"}


def hindsight(traj: Trajectory, ps: dict[str, Any]) -> tuple[str, str] | tuple[None, None]:
    if not ps:
        return None, None
    state = SokobanPrivilegedState.parse(ps)
    history = state.history
    states = _sokoban_states(traj, state)
    if state.won:
        return _sokoban_success(traj, state, history, states)
    fds = state.first_deadlock_step
    if fds is not None and 0 <= fds < len(history) and history[fds]["push"]:
        return _sokoban_deadlock(traj, history, states, fds)
    return _sokoban_no_deadlock(traj, state, history, states)


def step_skills(traj: Trajectory, ps: dict[str, Any]) -> dict[int, str]:
    """{trajectory step: skill} for the push that created the deadlock (empty without one)."""
    push = _deadlock_push(traj, SokobanPrivilegedState.parse(ps)) if ps else None
    if push is None or push["dir"] not in _STAND:
        return {}
    d = push["dir"]
    if push["pre"] is not None:
        instead = _instead(push["better"], d, push["target"], push["box_from"], push["pre"])
    else:
        instead = "Instead, push it along a line that leads to a target."
    return {push["step"]: f"Do not push the box {d} now: it would be stuck for good. {instead}"}


# -- wording ------------------------------------------------------------------------------------
def _times(n: int) -> str:
    return {1: "once", 2: "twice"}.get(n, f"{n} times")


def _runs(actions: Sequence[str]) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    for a in actions:
        if out and out[-1][0] == a:
            out[-1] = (a, out[-1][1] + 1)
        else:
            out.append((a, 1))
    return out


def _runs_text(runs: list[tuple[str, int]], limit: int = 4) -> str:
    parts = [f"{d} {_times(n)}" for d, n in runs[:limit]]
    text = ", then ".join(parts)
    return text + (", and so on" if len(runs) > limit else "")


def _relative(dr: int, dc: int) -> str:
    """Where a point at offset (dr, dc) lies from the origin: "above and to the right of"."""
    parts = []
    if dr:
        parts.append("above" if dr < 0 else "below")
    if dc:
        parts.append("to the left of" if dc < 0 else "to the right of")
    return " and ".join(parts) if parts else "at the position of"


def _toward(dr: int, dc: int) -> list[str]:
    """The push directions that move a box by (dr, dc), vertical first."""
    out = []
    if dr:
        out.append("up" if dr < 0 else "down")
    if dc:
        out.append("left" if dc < 0 else "right")
    return out


# -- replay ------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=256)
def _room_from_task_id(task_id: str) -> Any:
    return generate_room(*parse_task_id(task_id))


def _board_from_observation(text: str) -> Any:
    """The room drawn in a Sokoban observation ("Current board:" then one line per row)."""
    if "Current board:" not in text:
        return None
    rows = []
    for line in text.split("Current board:", 1)[1].splitlines():
        cells = line.replace(" ", "").replace("\t", "")
        if not cells:
            if rows:
                break
            continue
        if not set(cells) <= set("#_OX√PS"):
            break
        rows.append(line)
    return parse_board("\n".join(rows)) if rows else None


def _replay(initial: Any, history: list[SokobanMove]) -> list[Any] | None:
    """The state before each history step plus the final one; None if the replay disagrees with the
    recorded pushes (then the rebuilt room is not the room that was played)."""
    states = [initial]
    s = initial
    for h in history:
        action = h.get("action")
        if h.get("valid") and not s.solved and action in MOVES:
            s, pushed = apply_action(s, action)
            if pushed != bool(h.get("push")):
                return None
        elif h.get("push"):
            return None
        states.append(s)
    return states


def _sokoban_states(traj: Trajectory, state: SokobanPrivilegedState) -> list[Any] | None:
    """States along the recorded history, from the room rebuilt from the task id (or drawn in the
    first observation), checked against the final player and box positions."""
    history = state.history
    candidates = []
    tid = str(state.task_id or traj.task_id or "")
    if SokobanEnv.claims_task_id(tid):
        candidates.append(lambda: _room_from_task_id(tid))
    if traj.steps and traj.steps[0].observation:
        candidates.append(lambda: _board_from_observation(traj.steps[0].observation))
    for make in candidates:
        try:
            initial = make()
        except Exception:
            continue
        if initial is None:
            continue
        states = _replay(initial, history)
        if states is None:
            continue
        final = states[-1]
        if tuple(state.player) != final.player or {tuple(b) for b in state.boxes} != set(final.boxes):
            continue
        return states
    return None


def _nearest_target(state: Any, box: tuple[int, int], exclude: set[tuple[int, int]] = frozenset()) -> Any:
    targets = sorted(set(state.targets) - set(exclude)) or sorted(state.targets)
    return min(targets, key=lambda t: (abs(t[0] - box[0]) + abs(t[1] - box[1]), t)) if targets else None


def _first_push(state: Any, plan: Sequence[str] | None) -> str | None:
    """The direction of the first push of ``plan`` from ``state``."""
    s = state
    for a in plan or []:
        s, pushed = apply_action(s, a)
        if pushed:
            return a
    return None


def _sokoban_success(traj: Trajectory, state: SokobanPrivilegedState, history: list[SokobanMove],
                     states: list[Any] | None) -> tuple[str, str] | tuple[None, None]:
    pushes = [h["action"] for h in history if h.get("valid") and h.get("push") and h.get("action") in MOVES]
    if not pushes:
        return None, None
    runs = _runs(pushes)
    n_boxes = len(states[0].boxes) if states else len(state.boxes) or 1
    rel = None
    if n_boxes == 1:
        if states:
            box = next(iter(states[0].boxes))
            t = _nearest_target(states[0], box)
            rel = _relative(t[0] - box[0], t[1] - box[1])
        else:  # one box: the pushes' net displacement is target - box
            dr = sum(MOVES[a][0] for a in pushes)
            dc = sum(MOVES[a][1] for a in pushes)
            rel = _relative(dr, dc) if (dr or dc) else None
    first = runs[0][0]
    summary = f"{outcome(traj)}; the winning pushes were {_runs_text(runs, limit=3)}."
    if rel is not None:
        skill = (f"When the target is {rel} the box, push it {_runs_text(runs, limit=3)}, standing {_STAND[first]}, "
                 f"switching sides between directions. Never push it against a wall without a target.")
    else:
        skill = (f"Push one box at a time onto its nearest target: {_runs_text(runs, limit=3)}, standing opposite "
                 f"the push direction. Never push a box into a corner or against a wall without a target.")
    return summary, skill


def _sokoban_deadlock(traj: Trajectory, history: list[SokobanMove], states: list[Any] | None,
                      fds: int) -> tuple[str, str]:
    d = history[fds]["action"]
    # env history has one entry per action sent; unparsable turns sent nothing
    sent = [i for i, s in enumerate(traj.steps) if s.action is not None]
    step_no = sent[fds] + 1 if len(sent) == len(history) else fds + 1
    summary_head = f"{outcome(traj)}; the push {d} at step {step_no} made the room unsolvable"
    if states is None or d not in MOVES:
        skill = (f"Before each push, check where the box will land: never push a box {d} into a corner or "
                 f"against a wall without a target, since it can never leave.")
        return summary_head + ".", skill
    pre, post = states[fds], states[fds + 1]
    dr, dc = MOVES[d]
    box_from = (pre.player[0] + dr, pre.player[1] + dc)
    box_to = (box_from[0] + dr, box_from[1] + dc)
    others = set(post.boxes) - {box_to}
    beyond = (box_to[0] + dr, box_to[1] + dc)

    def wall(p: tuple[int, int]) -> bool:  # outside the grid counts as wall, as in the env
        return not (0 <= p[0] < post.height and 0 <= p[1] < post.width) or p in post.walls

    if simple_deadlock(post) and box_to not in post.targets and (
            (wall((box_to[0] - 1, box_to[1])) or wall((box_to[0] + 1, box_to[1])))
            and (wall((box_to[0], box_to[1] - 1)) or wall((box_to[0], box_to[1] + 1)))):
        where = "into a corner"
    elif wall(beyond):
        where = f"against {_SIDE_WALL[d]}"
    elif beyond in others:
        where = "against another box"
    elif box_to not in live_squares(post):
        side = next((s for s, (r, c) in MOVES.items() if wall((box_to[0] + r, box_to[1] + c))), None)
        where = f"next to {_SIDE_WALL[side]}" if side else "onto a square from which it can no longer reach a target"
    else:
        where = "into a position where the boxes block each other"
    target = _nearest_target(pre, box_from, exclude=others)
    if box_from in pre.targets:
        cond = "When a box already sits on a target"
    elif target is not None:
        cond = f"When the target is {_relative(target[0] - box_from[0], target[1] - box_from[1])} the box"
    else:
        cond = "When you are about to push a box"
    try:
        better = _first_push(pre, solve(pre))
    except Exception:
        better = None
    skill = (f"{cond}, never push it {d} {where}; it could never reach a target again. "
             + _instead(better, d, target, box_from, pre))
    summary = f"{summary_head}: it pushed the box {where}."
    return summary, skill


def _instead(better: str | None, d: str, target: Any, box_from: tuple[int, int], pre: Any) -> str:
    """What to do instead of the deadlocking push ``d``."""
    if better is not None and better != d:
        return f"Instead, stand {_STAND[better]} and push it {better}."
    if target is not None and box_from not in pre.targets:
        dirs = _toward(target[0] - box_from[0], target[1] - box_from[1])
        return f"Instead, push it {' and '.join(dirs)} toward the target."
    return "Instead, leave that box and move the others around it."


def _deadlock_push(traj: Trajectory, state: SokobanPrivilegedState) -> dict[str, Any] | None:
    """The deadlocking push of a failed sokoban trajectory: its trajectory step index, direction,
    the box, its target and the solver's better push; None when there is none."""
    history = state.history
    fds = state.first_deadlock_step
    if state.won or not (fds is not None and 0 <= fds < len(history) and history[fds]["push"]):
        return None
    d = history[fds].get("action")
    sent = [i for i, s in enumerate(traj.steps) if s.action is not None]
    step = sent[fds] if len(sent) == len(history) else fds  # as in the summary: unparsable turns sent nothing
    info: dict[str, Any] = {"step": step, "dir": d, "pre": None}
    states = _sokoban_states(traj, state)
    if states is not None and d in MOVES:
        pre = states[fds]
        dr, dc = MOVES[d]
        box_from = (pre.player[0] + dr, pre.player[1] + dc)
        others = set(states[fds + 1].boxes) - {(box_from[0] + dr, box_from[1] + dc)}
        try:
            better = _first_push(pre, solve(pre))
        except Exception:
            better = None
        info |= {"pre": pre, "box_from": box_from, "better": better,
                 "target": _nearest_target(pre, box_from, exclude=others)}
    return info


def _sokoban_no_deadlock(traj: Trajectory, state: SokobanPrivilegedState, history: list[SokobanMove],
                         states: list[Any] | None) -> tuple[str, str]:
    moves = "one of the moves up, down, left or right"
    summary = f"{outcome(traj)}; no deadlock."
    if mostly_invalid(traj):
        return summary, invalid_skill(traj, moves)
    # oscillation: a plain move immediately undone by the opposite plain move
    valid = [h for h in history if h.get("valid") and h.get("action") in MOVES]
    reversals = sum(1 for a, b in zip(valid, valid[1:]) if not a.get("push") and not b.get("push")
                    and b["action"] == _OPPOSITE[a["action"]])
    bumps = 0
    if states is not None:
        bumps = sum(1 for i, h in enumerate(history) if h.get("valid") and h.get("action") in MOVES
                    and not states[i].solved and states[i + 1] == states[i])
    # what to do instead: the remaining optimal plan from the final state
    final_rel, next_push = None, None
    if states is not None:
        final = states[-1]
        loose = [b for b in sorted(final.boxes) if b not in final.targets]
        if loose:
            box = loose[0]
            t = _nearest_target(final, box, exclude=set(final.boxes) - {box})
            if t is not None:
                final_rel = _relative(t[0] - box[0], t[1] - box[1])
        next_push = _first_push(final, state.solution)
    plan = (f"stand {_STAND[next_push]} and push it {next_push}" if next_push
            else "stand opposite the target and push the box toward it")
    cond = f"When the target is {final_rel} the box" if final_rel else "When the box is not yet on its target"
    if reversals >= 3 or (reversals >= 2 and 4 * reversals >= len(valid)):
        example = next(f"{a['action']} then {b['action']}" for a, b in zip(valid, valid[1:])
                       if not a.get("push") and not b.get("push") and b["action"] == _OPPOSITE[a["action"]])
        summary += f" It undid its own move {reversals} times ({example})."
        skill = f"Never undo your last move (such as {example}); oscillating wastes steps. {cond}, {plan}."
        return summary, skill
    if bumps >= 3:
        summary += f" {bumps} moves were blocked."
        skill = f"Check that the square ahead is free or holds a pushable box; blocked moves waste steps. {cond}, {plan}."
        return summary, skill
    summary += " It ran out of steps."
    skill = (f"{cond}, do not wander: {plan}, and keep pushing straight until it is on the target; other moves "
             f"waste steps.")
    return summary, skill


def counterfactual(env: SokobanEnv, default_action: str, rng: Any) -> tuple[str, str] | None:
    """Another valid solution from the live ``env``'s state: a move other than ``default_action`` that
    moves the player, creates no simple deadlock and after which the room is still solvable, with the
    shortest such solution (ties in ``rng``'s order). ``(skill, move)``, or ``None`` when no other move
    keeps the room solvable. The env is not changed."""
    state = env._require_state()
    best: tuple[int, str, list[str]] | None = None
    moves = [m for m in MOVES if m != str(default_action).strip().lower()]
    rng.shuffle(moves)
    for m in moves:
        new, _ = apply_action(state, m)
        if new.key() == state.key() or simple_deadlock(new):
            continue
        plan = solve(new)
        if plan is not None and (best is None or len(plan) < best[0]):
            best = (len(plan), m, list(plan))
    if best is None:
        return None
    _, move, plan = best
    return f"From here, move {move} first: a solution goes {_runs_text(_runs([move, *plan]))}.", move
