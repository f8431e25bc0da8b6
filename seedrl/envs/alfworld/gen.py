"""Generated ALFWorld households: ALFWorld game files written by seedrl, played on ALFWorld's engine.

ALFWorld's official games cannot be downloaded offline, and ``alfworld-generate`` needs AI2-THOR. This
module writes games in ALFWorld's own format from what the ``alfworld`` package ships: the PDDL
domain (``alfred.pddl``), the grammar (``alfred.twl2``, with the task sentence added by ALFWorld's
``add_task_to_grammar``), the goal formulas and task sentences of ``alfworld.gen.goal_library``, the
object/receptacle affordances of ``alfworld.gen.constants`` and the 120 AI2-THOR floor plans of
``alfworld/gen/layouts`` (real receptacle ids and poses, the object classes each scene holds).

A game is a folder with ALFWorld's three files:

- ``initial_state.pddl``: the PDDL problem (receptacles, objects, where each object lies, the goal),
- ``traj_data.json``: ``task_type``, ``pddl_params``, ``scene``, ``turk_annotations`` (the task
  sentence) as in ALFRED, plus a ``seedrl`` block (task id, split, layout, where every object starts,
  the expert plan found when the game was verified),
- ``game.tw-pddl``: ``{"pddl_domain", "grammar", "pddl_problem", "solvable"}`` as ALFWorld's loader
  (``AlfredTWEnv``) expects.

Task ids: ``"{kind}-s{seed:05d}"`` with ``kind`` one of :data:`KINDS` (``pick``, ``pick_two``,
``pick_clean``, ``pick_heat``, ``pick_cool``, ``look`` -> the six ALFWorld task types), e.g.
``"pick_heat-s00012"``. The seed range names the split: ``[0, 100000)`` train, ``[100000, 200000)``
valid_seen, ``[200000, 300000)`` valid_unseen.

Households are small by default so a tiny model can learn: ``receptacles=(3, 6)`` receptacles
sampled from one floor plan (always including those the task needs), the task's object(s) plus
``distractors=(1, 3)`` other objects, every openable receptacle closed. Expert plans are 3-12
commands and admissible lists about 6-14 commands. Both ranges are env kwargs (e.g.
``receptacles: [10, 25]`` comes close to ALFWorld's real rooms).

**Seen / unseen rule** (exact; checked by the tests). A game has three keys: its floor plan, its
*layout* = the set of receptacle classes in it (e.g. ``{Cabinet, CounterTop, Fridge, Microwave}``),
and its *combination* = (object class, target class), the target being the receptacle class the
object must end in or, for ``look``, the lamp class. A layout or combination is *held out* iff
``int(sha256(key)[:8], 16) % 4 == 0`` with keys ``"layout:" + ",".join(sorted(classes))`` and
``"combo:" + object + "|" + target``. Train and valid_seen games use only ALFWorld's train floor
plans (``constants.TRAIN_SCENE_NUMBERS``), layouts that are not held out and combinations that are
not held out; valid_unseen games use only ALFWorld's test floor plans (``TEST_SCENE_NUMBERS``),
held-out layouts and held-out combinations. So no valid_unseen game shares its floor plan, its
receptacle set or its object/target pair with any train game, for any seed; valid_seen differs from
train only in its seeds.

Determinism: every choice comes from ``random.Random("alfworld-gen/<version>/<task id>/<attempt>")``
(string seeds are hashed with SHA-512, independent of ``PYTHONHASHSEED``), ids are written in
sorted order and JSON with fixed key order, so the same task id (and generator options) gives
byte-identical files in any process. Each game is verified before it is cached: ALFWorld's engine
loads it and ALFWorld's planner expert (``expert_type: planner``, Fast Downward through
TextWorld-PDDL) must reach the goal; a sample that fails is redrawn with the next attempt number.

Cache: ``cache_dir`` kwarg, else ``$SEEDRL_CACHE/alfworld-gen``, else ``~/.cache/seedrl/alfworld-gen``;
a game lives in ``<cache>/alfworld-<version>-g<GENERATOR_VERSION>[-<options>]/<task id>/``. Games are
written into a temp folder and renamed into place (atomic), under a process-wide lock.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import random
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from seedrl.envs.alfworld.engine import ENGINE_LOCK, import_alfworld, verify_game
from seedrl.envs.base import int_pair
from seedrl.envs.cache import publish_dir
from seedrl.errors import SeedRLError, unknown_name

#: bump when the households behind a task id change (it is part of the cache path and env version)
GENERATOR_VERSION = "1"

#: short task kind (task id prefix) -> ALFWorld task type
KINDS: dict[str, str] = {
    "pick": "pick_and_place_simple",
    "pick_two": "pick_two_obj_and_place",
    "pick_clean": "pick_clean_then_place_in_recep",
    "pick_heat": "pick_heat_then_place_in_recep",
    "pick_cool": "pick_cool_then_place_in_recep",
    "look": "look_at_obj_in_light",
}
TASK_TYPES: tuple[str, ...] = tuple(KINDS.values())
KIND_OF_TYPE: dict[str, str] = {v: k for k, v in KINDS.items()}

#: the fewest receptacles a household of each kind needs: the target and the source, plus the
#: appliance for the state-changing kinds and a second source for pick_two (the two objects may share
#: one, but too rarely to sample a household reliably)
MIN_RECEPTACLES: dict[str, int] = {"pick": 2, "pick_two": 3, "pick_clean": 3, "pick_heat": 3, "pick_cool": 3,
                                   "look": 2}

#: appliance receptacle and affordance of the state-changing kinds
APPLIANCE = {"pick_clean": "SinkBasin", "pick_heat": "Microwave", "pick_cool": "Fridge"}
AFFORDANCE = {"pick_clean": "Cleanable", "pick_heat": "Heatable", "pick_cool": "Coolable"}
#: receptacle classes a lamp may stand on (the toggle action needs the lamp in a receptacle)
LAMP_HOSTS = {"DeskLamp": ("Desk", "Dresser", "Shelf", "SideTable"),
              "FloorLamp": ("CoffeeTable", "Desk", "DiningTable", "Dresser", "SideTable", "TVStand")}

SPLITS = ("train", "valid_seen", "valid_unseen")
SPLIT_RANGE = 100_000
SPLIT_SEED_BASE = {s: i * SPLIT_RANGE for i, s in enumerate(SPLITS)}
MAX_ATTEMPTS = 40
_TASK_RE = re.compile(r"^([a-z_]+)-s(\d+)$")


# -- task ids ---------------------------------------------------------------------------------
def parse_task_id(task_id: str) -> tuple[str, int]:
    """``"pick_heat-s00012"`` -> ("pick_heat", 12)."""
    m = _TASK_RE.match(str(task_id).strip())
    if m is None or m.group(1) not in KINDS:
        raise SeedRLError(f"bad alfworld-gen task id {task_id!r}; expected <kind>-s<SEED> with kind in "
                          f"{', '.join(KINDS)}, e.g. pick_heat-s00012")
    seed = int(m.group(2))
    if seed >= len(SPLITS) * SPLIT_RANGE:
        raise SeedRLError(f"alfworld-gen task id {task_id!r}: seed must be below {len(SPLITS) * SPLIT_RANGE}")
    return m.group(1), seed


def make_task_id(kind: str, seed: int) -> str:
    return f"{kind}-s{seed:05d}"


def split_of_seed(seed: int) -> str:
    return SPLITS[seed // SPLIT_RANGE]


def held_out(key: str) -> bool:
    """The seen/unseen partition of layouts and combinations (see the module docstring)."""
    return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % 4 == 0


def layout_key(receptacle_classes: Any) -> str:
    return "layout:" + ",".join(sorted(set(receptacle_classes)))


def combo_key(obj: str, target: str) -> str:
    return f"combo:{obj}|{target}"


# -- options ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class GenOptions:
    """Household size ranges (inclusive)."""

    receptacles: tuple[int, int] = (3, 6)
    distractors: tuple[int, int] = (1, 3)

    @classmethod
    def make(cls, receptacles: Any = (3, 6), distractors: Any = (1, 3)) -> GenOptions:
        """Checked ranges (``[min, max]`` of integers, or one integer ``n`` for ``[n, n]``); a one-line
        :class:`SeedRLError` names a bad one."""
        def pair(name: str, v: Any, lo: int) -> tuple[int, int]:
            try:
                a, b = int_pair(v)
            except ValueError as exc:
                raise SeedRLError(f"alfworld-gen env option {name}: {exc}, got {v!r}; accepted: [min, max] of "
                                  f"integers with {lo} <= min <= max <= 60, or one integer") from None
            if not lo <= a <= b <= 60:
                raise SeedRLError(f"alfworld-gen env option {name}: must satisfy {lo} <= min <= max <= 60, got {v!r}")
            return a, b

        return cls(pair("receptacles", receptacles, 2), pair("distractors", distractors, 0))

    @property
    def tag(self) -> str:
        """Part of the cache folder name and of the sampling seed; empty for the defaults."""
        if self == GenOptions():
            return ""
        tag = f"-r{self.receptacles[0]}_{self.receptacles[1]}-d{self.distractors[0]}_{self.distractors[1]}"
        # Below 3 receptacles the required ones used to exceed the maximum (a [2, 2] household had 3):
        # households drawn since the fix live in their own cache folder.
        return tag + ("-strict" if self.receptacles[1] < max(MIN_RECEPTACLES.values()) else "")


# -- ALFWorld data ----------------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def _data() -> dict[str, Any]:
    """Affordance tables and floor plans from the alfworld package (read once)."""
    c = import_alfworld()
    layouts = Path(c.__file__).parent / "layouts"
    movable = set(c.MOVABLE_RECEPTACLES)
    static_receptacles = set(c.RECEPTACLES) - movable
    val = {r: set(objs) for r, objs in c.VAL_RECEPTACLE_OBJECTS.items()}
    placeable = set().union(*val.values())
    pickupable = {o for o in placeable if "Sliced" not in o and o not in static_receptacles}
    plans: dict[int, dict[str, Any]] = {}
    for n in sorted(set(c.TRAIN_SCENE_NUMBERS) | set(c.TEST_SCENE_NUMBERS)):
        poses = json.loads((layouts / f"FloorPlan{n}-openable.json").read_text())
        objects = set(json.loads((layouts / f"FloorPlan{n}-objects.json").read_text()))
        recs = {rid: pose for rid, pose in sorted(poses.items()) if receptacle_class(rid) in val}
        plans[n] = {"receptacles": recs, "objects": sorted(objects)}
    kind_of_scene = {n: kind for kind, r in c.SCENE_TYPE.items() for n in r}
    return {
        "constants": c,
        "val": val,
        "pickupable": pickupable,
        "static_receptacles": sorted(static_receptacles),
        "object_types": sorted(set(c.OBJECTS_SET) - static_receptacles),
        "movable": movable,
        "actions": {k: set(v) for k, v in c.VAL_ACTION_OBJECTS.items()},
        "openable": set(c.OPENABLE_CLASS_LIST),
        "plans": plans,
        "train_scenes": sorted(c.TRAIN_SCENE_NUMBERS),
        "test_scenes": sorted(c.TEST_SCENE_NUMBERS),
        "scene_kind": kind_of_scene,
        "goals_valid": {k: set(v) for k, v in c.GOALS_VALID.items()},
    }


def receptacle_class(rid: str) -> str:
    """``"Sink|+00.1|...|SinkBasin"`` -> ``SinkBasin``; ``"Cabinet|..."`` -> ``Cabinet``."""
    parts = rid.split("|")
    return parts[-1] if parts[-1].endswith("Basin") else parts[0]


def mangle(name: str) -> str:
    """ALFRED's PDDL name mangling (``PlannedGameState.fix_pddl_str_chars`` without ``#``)."""
    out = []
    table = {"-": "_minus_", "|": "_bar_", "+": "_plus_", ".": "_dot_", ",": "_comma_"}
    for ch in name:
        out.append(table.get(ch, ch))
    return "".join(out)


# -- sampling ---------------------------------------------------------------------------------
@dataclass
class Household:
    """One sampled game: everything the files are written from."""

    task_id: str
    kind: str
    split: str
    floor_plan: int
    obj: str
    target: str  # parent receptacle class, or the lamp class for look
    receptacles: dict[str, str]  # receptacle id -> location id
    objects: dict[str, str]  # object id -> receptacle id
    agent_location: str
    desc_template: int
    attempt: int
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def task_type(self) -> str:
        return KINDS[self.kind]

    @property
    def layout(self) -> list[str]:
        return sorted({receptacle_class(r) for r in self.receptacles})


def _candidate_scenes(kind: str, unseen: bool) -> list[int]:
    d = _data()
    scenes = d["test_scenes"] if unseen else d["train_scenes"]
    kinds = d["goals_valid"][KINDS[kind]]
    return [n for n in scenes if d["scene_kind"][n] in kinds]


def _sample(task_id: str, opts: GenOptions, attempt: int) -> Household | None:
    """One sampling attempt; None when this draw cannot satisfy the split's rules."""
    d = _data()
    kind, seed = parse_task_id(task_id)
    split = split_of_seed(seed)
    unseen = split == "valid_unseen"
    rng = random.Random(f"alfworld-gen/{GENERATOR_VERSION}/{opts.tag}/{task_id}/{attempt}")
    n_plan = rng.choice(_candidate_scenes(kind, unseen))
    plan = d["plans"][n_plan]
    recs: dict[str, list] = plan["receptacles"]
    rec_ids = sorted(recs)
    classes_present = sorted({receptacle_class(r) for r in rec_ids})
    objs_present = sorted(set(plan["objects"]) & d["pickupable"])
    val = d["val"]
    appliance = APPLIANCE.get(kind)
    by_class: dict[str, list[str]] = {}
    for r in rec_ids:
        by_class.setdefault(receptacle_class(r), []).append(r)

    required: list[str] = []
    sources: list[str] = []
    if kind == "look":
        lamps = [lamp for lamp in sorted(LAMP_HOSTS) if lamp in plan["objects"]]
        combos = []
        for lamp in lamps:
            hosts = [r for r in rec_ids if receptacle_class(r) in LAMP_HOSTS[lamp]]
            for o in objs_present:
                if held_out(combo_key(o, lamp)) != unseen:
                    continue
                if any(any(o in val[receptacle_class(s)] and s != h for s in rec_ids) for h in hosts):
                    combos.append((o, lamp))
        if not combos:
            return None
        obj, target = rng.choice(combos)
        host = rng.choice([h for h in rec_ids if receptacle_class(h) in LAMP_HOSTS[target]
                           and any(obj in val[receptacle_class(s)] and s != h for s in rec_ids)])
        src = rng.choice([s for s in rec_ids if s != host and obj in val[receptacle_class(s)]])
        required = [host, src]
        sources = [src]
    else:
        if appliance is not None and appliance not in classes_present:
            return None
        allowed = [o for o in objs_present if kind not in AFFORDANCE or o in d["actions"][AFFORDANCE[kind]]]
        combos = []
        for o in allowed:
            src_classes = [c for c in classes_present if o in val[c] and c != appliance]
            for p in classes_present:
                if p == appliance or o not in val[p] or held_out(combo_key(o, p)) != unseen:
                    continue
                if any(c != p for c in src_classes):
                    combos.append((o, p))
        if not combos:
            return None
        obj, target = rng.choice(combos)
        parent = rng.choice(by_class[target])
        src_pool = [s for s in rec_ids if receptacle_class(s) not in (target, appliance) and obj in val[receptacle_class(s)]]
        n_src = 2 if kind == "pick_two" else 1
        sources = [rng.choice(src_pool) for _ in range(n_src)]
        required = [parent] + sources + ([rng.choice(by_class[appliance])] if appliance else [])
        host = None
    required = sorted(set(required))
    if len(required) > opts.receptacles[1]:  # the household would exceed the receptacles range: redraw
        return None

    # receptacles: the required ones plus distractors, until the layout falls on the split's side
    n_rec = rng.randint(*opts.receptacles)
    others = [r for r in rec_ids if r not in required]
    chosen = None
    for _ in range(20):
        extra = rng.sample(others, min(len(others), max(0, n_rec - len(required))))
        cand = sorted(set(required) | set(extra))
        if held_out(layout_key(receptacle_class(r) for r in cand)) == unseen:
            chosen = cand
            break
    if chosen is None or not opts.receptacles[0] <= len(chosen) <= opts.receptacles[1]:
        return None

    # objects: the task's object(s) in their sources, distractors of other classes anywhere they fit
    objects: dict[str, str] = {}
    used_ids: set[str] = set()

    def new_id(cls: str) -> str:
        while True:
            x, y, z = (rng.randint(-350, 350) / 100 for _ in range(3))
            oid = f"{cls}|{x:+06.2f}|{abs(y):+06.2f}|{z:+06.2f}"
            if oid not in used_ids:
                used_ids.add(oid)
                return oid

    for s in sources:
        objects[new_id(obj)] = s
    if kind == "look":
        objects[new_id(target)] = host
    n_dis = rng.randint(*opts.distractors)
    pool = [o for o in objs_present if o != obj]
    for _ in range(n_dis):
        if not pool:
            break
        cls = rng.choice(pool)
        fits = [r for r in chosen if cls in val[receptacle_class(r)]]
        if fits:
            objects[new_id(cls)] = rng.choice(fits)

    # locations: one per receptacle (ALFRED's loc|x|z|rotation|horizon from the floor plan pose)
    locations: dict[str, str] = {}
    taken: set[str] = set()
    for r in chosen:
        x, z, rot, hor = recs[r]
        gx, gz = int(round(x / 0.25)), int(round(z / 0.25))
        loc = f"loc|{gx}|{gz}|{int(rot) // 90 % 4}|{int(hor)}"
        while loc in taken:
            gx += 1
            loc = f"loc|{gx}|{gz}|{int(rot) // 90 % 4}|{int(hor)}"
        taken.add(loc)
        locations[r] = loc
    while True:
        agent = f"loc|{rng.randint(-12, 12)}|{rng.randint(-12, 12)}|{rng.randint(0, 3)}|30"
        if agent not in taken:
            break
    templates = _goal_templates(KINDS[kind])
    return Household(task_id=task_id, kind=kind, split=split, floor_plan=n_plan, obj=obj, target=target,
                     receptacles=locations, objects=dict(sorted(objects.items())), agent_location=agent,
                     desc_template=rng.randrange(len(templates)), attempt=attempt)


@functools.lru_cache(maxsize=8)
def _goal_templates(task_type: str) -> tuple[str, ...]:
    import alfworld.gen.goal_library as glib

    return tuple(glib.gdict[task_type]["templates"])


def sample_household(task_id: str, opts: GenOptions | None = None, start_attempt: int = 0) -> Household:
    """The first attempt from ``start_attempt`` whose draw satisfies the split's rules."""
    opts = opts or GenOptions()
    for attempt in range(start_attempt, start_attempt + MAX_ATTEMPTS):
        h = _sample(task_id, opts, attempt)
        if h is not None:
            return h
    hint = "" if opts == GenOptions() else (f" with receptacles {list(opts.receptacles)}; widen the env option "
                                            "receptacles")
    raise SeedRLError(f"alfworld-gen could not sample a household for {task_id} in {MAX_ATTEMPTS} attempts{hint}")


# -- files ------------------------------------------------------------------------------------
def task_description(h: Household) -> str:
    """The task sentence as ALFWorld's ``get_templated_task_desc`` writes it (template picked by the
    household's own RNG instead of the global one)."""
    t = _goal_templates(h.task_type)[h.desc_template]
    recep = "" if h.kind == "look" else h.target.lower()
    toggle = h.target.lower() if h.kind == "look" else ""
    return t.format(obj=h.obj.lower(), recep=recep, toggle=toggle, mrecep="")


def pddl_params(h: Household) -> dict[str, Any]:
    return {"object_target": h.obj, "parent_target": "" if h.kind == "look" else h.target,
            "toggle_target": h.target if h.kind == "look" else "", "mrecep_target": "",
            "object_sliced": False}


def pddl_problem(h: Household) -> str:
    """The PDDL problem in ALFWorld's layout (mangled ids, every type declared, goal from
    ``alfworld.gen.goal_library``)."""
    import alfworld.gen.goal_library as glib

    d = _data()
    val, actions = d["val"], d["actions"]
    obj_ids = sorted(h.objects)
    rec_ids = sorted(h.receptacles)
    locs = sorted(set(h.receptacles.values()) | {h.agent_location})
    out = [f"(define (problem plan_{h.task_id.replace('-', '_')})", "(:domain alfred)", "(:objects", "        agent1 - agent"]
    out += [f"        {t}Type - otype" for t in d["object_types"]]
    out += [f"        {t}Type - rtype" for t in d["static_receptacles"]]
    out += [f"        {mangle(o)} - object" for o in obj_ids]
    out += [f"        {mangle(r)} - receptacle" for r in rec_ids]
    out += [f"        {mangle(loc)} - location" for loc in locs]
    out += ["        )", "", "", "    (:init"]
    for r in rec_ids:
        rc = receptacle_class(r)
        out.append(f"        (receptacleType {mangle(r)} {rc}Type)")
    for o in obj_ids:
        out.append(f"        (objectType {mangle(o)} {o.split('|')[0]}Type)")
    rclasses = sorted({receptacle_class(r) for r in rec_ids})
    oclasses = sorted({o.split("|")[0] for o in obj_ids})
    for rc in rclasses:
        for oc in oclasses:
            if oc in val.get(rc, ()):
                out.append(f"        (canContain {rc}Type {oc}Type)")
    for o in obj_ids:
        oc = o.split("|")[0]
        if oc in d["pickupable"]:
            out.append(f"        (pickupable {mangle(o)})")
        if oc in d["movable"]:
            out.append(f"        (isReceptacleObject {mangle(o)})")
    for r in rec_ids:
        if receptacle_class(r) in d["openable"]:
            out.append(f"        (openable {mangle(r)})")
    out.append(f"        (atLocation agent1 {mangle(h.agent_location)})")
    for prop, pred in (("Cleanable", "cleanable"), ("Heatable", "heatable"), ("Coolable", "coolable"),
                       ("Toggleable", "toggleable"), ("Sliceable", "sliceable")):
        for o in obj_ids:
            if o.split("|")[0] in actions[prop]:
                out.append(f"        ({pred} {mangle(o)})")
    for o in obj_ids:
        out.append(f"        (inReceptacle {mangle(o)} {mangle(h.objects[o])})")
    for r in rec_ids:
        out.append(f"        (receptacleAtLocation {mangle(r)} {mangle(h.receptacles[r])})")
    for o in obj_ids:
        out.append(f"        (objectAtLocation {mangle(o)} {mangle(h.receptacles[h.objects[o]])})")
    out.append("        )")
    recep = "" if h.kind == "look" else h.target
    toggle = h.target if h.kind == "look" else ""
    goal = glib.gdict[h.task_type]["pddl"].format(obj=h.obj, recep=recep, toggle=toggle, mrecep="")
    goal = goal.replace("#", "-")  # the goal library writes types as "?x # type"
    return "\n".join(out) + "\n" + goal.rstrip() + "\n"


def traj_data(h: Household, names: dict[str, str] | None = None, expert_plan: list[str] | None = None) -> dict[str, Any]:
    """ALFRED-style ``traj_data.json`` content; ``names`` maps ids to the names the game shows."""
    names = names or {}
    desc = task_description(h)
    return {
        "task_id": f"trial_seedrl_{h.task_id}",
        "task_type": h.task_type,
        "pddl_params": pddl_params(h),
        "scene": {"floor_plan": f"FloorPlan{h.floor_plan}", "scene_num": h.floor_plan},
        "turk_annotations": {"anns": [{"task_desc": desc, "high_descs": [], "votes": []}]},
        "seedrl": {
            "generator": f"alfworld-gen/{GENERATOR_VERSION}",
            "task_id": h.task_id,
            "split": h.split,
            "attempt": h.attempt,
            "layout": h.layout,
            "combo": [h.obj, h.target],
            "receptacles": [names.get(r, r) for r in sorted(h.receptacles)],
            "object_locations": {names.get(o, o): names.get(r, r) for o, r in h.objects.items()},
            "expert_plan": list(expert_plan or []),
        },
    }


def game_data(h: Household) -> dict[str, Any]:
    """``game.tw-pddl`` content (``solvable`` is set once the expert has won it)."""
    from alfworld.agents.utils.misc import add_task_to_grammar
    from alfworld.info import ALFRED_PDDL_PATH, ALFRED_TWL2_PATH

    domain = Path(ALFRED_PDDL_PATH).read_text()
    grammar = Path(ALFRED_TWL2_PATH).read_text()
    # the task sentence goes in through ALFWorld's own helper; probability 1 makes it read the
    # annotation we wrote (its templated path would draw from the global RNG)
    grammar = add_task_to_grammar(grammar, traj_data(h), goal_desc_human_anns_prob=1.0, rng=random.Random(0))
    return {"pddl_domain": domain, "grammar": grammar, "pddl_problem": pddl_problem(h), "solvable": False}


def official_folder_name(h_or_traj: Household | dict[str, Any]) -> str:
    """ALFWorld's task folder name, e.g. ``pick_heat_then_place_in_recep-Apple-None-CounterTop-12``."""
    if isinstance(h_or_traj, Household):
        p, scene = pddl_params(h_or_traj), h_or_traj.floor_plan
        tt = h_or_traj.task_type
    else:
        p, scene, tt = h_or_traj["pddl_params"], h_or_traj["scene"]["scene_num"], h_or_traj["task_type"]
    second = p["toggle_target"] or p["parent_target"]
    return f"{tt}-{p['object_target']}-{p['mrecep_target'] or 'None'}-{second}-{scene}"


def _dump(obj: Any) -> str:
    return json.dumps(obj, indent=1)


def write_game(task_id: str, out_dir: str | Path, opts: GenOptions | None = None) -> Path:
    """Sample, verify with ALFWorld's engine and planner, and write the three files of ``task_id``
    into ``out_dir`` (not atomic; see :func:`ensure_game`). Returns the ``game.tw-pddl`` path."""
    opts = opts or GenOptions()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    attempt = 0
    last_error = ""
    for _ in range(MAX_ATTEMPTS):
        h = sample_household(task_id, opts, start_attempt=attempt)
        data = game_data(h)
        ok, plan, names, last_error = verify_game(data, traj_data(h))
        if ok:
            data["solvable"] = True
            (out / "initial_state.pddl").write_text(data["pddl_problem"])
            (out / "traj_data.json").write_text(_dump(traj_data(h, names, plan)))
            (out / "game.tw-pddl").write_text(json.dumps(data))
            return out / "game.tw-pddl"
        attempt = h.attempt + 1
    raise SeedRLError(f"alfworld-gen: no solvable household for {task_id} ({last_error})")


def default_cache_dir() -> Path:
    root = os.environ.get("SEEDRL_CACHE")
    return (Path(root) if root else Path.home() / ".cache" / "seedrl") / "alfworld-gen"


def cache_version_dir(root: Path, opts: GenOptions) -> Path:
    import importlib.metadata as md

    try:
        version = md.version("alfworld")
    except md.PackageNotFoundError:
        version = "unknown"
    return root / f"alfworld-{version}-g{GENERATOR_VERSION}{opts.tag}"


def ensure_game(task_id: str, cache_dir: str | Path | None = None, opts: GenOptions | None = None) -> Path:
    """The cached ``game.tw-pddl`` of ``task_id``, generated (and verified) on first use.

    Written into a temp folder next to the final one and renamed into place: readers see a complete
    game or none; if another process won the race its identical copy is kept.
    """
    parse_task_id(task_id)  # a bad id fails before touching the disk
    import_alfworld()
    opts = opts or GenOptions()
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    version_dir = cache_version_dir(root, opts)
    final = version_dir / task_id
    game_file = final / "game.tw-pddl"
    if game_file.is_file():
        return game_file
    version_dir.mkdir(parents=True, exist_ok=True)
    with ENGINE_LOCK:
        if game_file.is_file():
            return game_file
        return publish_dir(version_dir, task_id, lambda tmp: write_game(task_id, tmp, opts), game_file.name)


def export_official_layout(task_ids: list[str], data_dir: str | Path, split: str,
                           cache_dir: str | Path | None = None, opts: GenOptions | None = None) -> list[Path]:
    """Copy generated games into ALFWorld's official layout,
    ``<data_dir>/json_2.1.1/<split>/<task folder>/trial_<task id>/{game.tw-pddl, traj_data.json,
    initial_state.pddl}``, so ALFWorld's own tools (``AlfredTWEnv``) and the ``alfworld`` env read
    them. Returns the game paths."""
    if split not in SPLITS:
        raise unknown_name("alfworld split", split, list(SPLITS))
    out = []
    for tid in task_ids:
        src = ensure_game(tid, cache_dir, opts).parent
        traj = json.loads((src / "traj_data.json").read_text())
        dst = Path(data_dir) / "json_2.1.1" / split / official_folder_name(traj) / f"trial_{tid}"
        dst.mkdir(parents=True, exist_ok=True)
        for name in ("initial_state.pddl", "traj_data.json", "game.tw-pddl"):
            shutil.copyfile(src / name, dst / name)
        out.append(dst / "game.tw-pddl")
    return out
