"""ScienceWorld (``scienceworld`` 1.2.3, a Scala simulator run in a JVM) as a seedrl environment.

Task ids (``"<task name>-v<variation>"``, e.g. ``"boil-v3"``; ``task_type`` is the task name),
ScienceWorld's variation splits and the panels are in :mod:`seedrl.envs.scienceworld.tasks`. Env
kwargs ``train_tasks`` / ``unseen_tasks`` change the two task sets (they must be disjoint); the
pinned splits are checked against the engine on the first load of each task.

Episodes. ``reset`` loads the task with the ``simplifications`` kwarg (default ``"easy"``:
teleport action, open doors and containers, self-watering flower pots, no electrical actions except
in the electrical tasks) and returns the "look around" text; :attr:`task_description` is
ScienceWorld's task text without its leading "Your task is to". Every action is sent to the engine
as typed (whitespace collapsed) except ``reset task``, which ScienceWorld offers to wipe the goal
progress and which is refused here. ScienceWorld asks "Ambiguous request: Please enter the number
..." when an action names several objects; the next action must be the option number, as in
ScienceWorld's own interface and its gold paths.

Admissible actions: none are listed (``admissible_actions()`` is None). ScienceWorld's valid
action-object combinations are 150-1000 strings per state (959 in the first room of boil), far more
than a prompt can carry, and neither ScienceWorld's own baselines nor later LLM-agent setups list
them. Instead the step instruction (:data:`INSTRUCTION`) lists the 25 action templates, and an
action is *invalid* (``info["action_valid"] = False``, verl-agent's invalid-action penalty applies)
when the engine could not parse it: its answer starts with "No known action matches that input." or
"Unknown action." (e.g. a non-number answer to an ambiguity question), or it was empty or
``reset task`` (those two are not sent). Parsed actions that do nothing ("The door is already
open.") are valid.

Reward: ``10 * won`` on the step that completes the task (verl-agent's ALFWorld/WebShop
convention), 0 otherwise; ``won`` = ScienceWorld reports the task completed with score 100.
``info`` carries ``score`` (ScienceWorld's 0..100 progress; -100 after a failing action, such as
focusing on the wrong object, which also ends the episode with ``lost``), ``won``, ``lost`` and
``action_valid``. The trainer's ``max_steps`` is the step limit.

Expert: ScienceWorld's gold action sequence (``generateGoldPath``) for the task and variation,
followed from the start. :meth:`expert_action` tracks the agent's position along it from the
actions actually sent: an action equal to the next gold action advances it; rejected actions and
pure observations (look, look at/in, examine, read, inventory, task, help, objects) are skipped; a
cancelled ambiguity question is re-asked; after any other action (a *deviation*) the expert returns
None, because ScienceWorld's gold agent only plans from the start state (no re-planning mid-episode).
When the gold path is used up and the task is still not complete (ScienceWorld's physics is not
exactly repeatable, see Determinism), the expert waits (``wait1``, at most :data:`EXTRA_WAITS`).
The deviation is recorded in :meth:`privileged_state` for the oracle analyzer.

Engines and memory. The runner makes one env object per episode and keeps all ``tasks x group``
episodes of a batch alive at once (128 in the presets), so one JVM per episode (300-500 MB each)
does not scale. A process-wide pool keeps at most ``max_engines`` JVMs (default 8), each hosting up
to ``sessions_per_engine`` episodes (default 16; a loaded task takes about 11 MB of heap) as
separate ScienceWorld ``PythonInterface`` objects; an episode acquires a session on ``reset`` and
releases it on ``close``, on an engine fault, or when the env object is garbage-collected. JVMs
start on demand (the least-loaded one with a free slot is used; a new one starts only when all are
full) and live until the process exits (:func:`shutdown_engines`). Calls into one JVM are
serialised, so engines are also the unit of parallelism. ScienceWorld keeps two JVM-global values
that every ``load`` resets, the object-id counter (object equality is by id) and the seed of
Scala's global Random (bees, wandering animals, genetics); the engine saves and restores them per
session whenever it switches sessions, so each episode runs as if it had the JVM to itself.

The JVM is started by this module with py4j's ``launch_gateway`` command (ScienceWorld's own wrapper
passes no JVM options; a start gets 120 s, then the JVM is killed) with ``-Xmx<jvm_heap>`` (default ``512m``), :data:`DEFAULT_JVM_OPTIONS`
(serial GC, exit on OutOfMemoryError, ``--add-opens java.base/java.util`` for the Random seed) and
``jvm_options``; they come after ``JAVA_TOOL_OPTIONS`` on the command line, so they win over it.
Gold paths are generated in the background on one more JVM (the *gold engine*, one at a time,
cached per task and variation; reset does not wait for them and steps never queue behind them;
mendelian-genetics takes ~10 s). When not given as kwargs, ``jvm_heap``, ``max_engines`` and
``sessions_per_engine`` come from ``SEEDRL_SCIENCEWORLD_HEAP``, ``SEEDRL_SCIENCEWORLD_MAX_ENGINES``
and ``SEEDRL_SCIENCEWORLD_SESSIONS_PER_ENGINE`` (env kwargs are part of a panel's hash; environment
variables are not). Calls time out after ``call_timeout_s`` (default 30 s; loads and new sessions
after ``max(call_timeout_s, 60)``: a cold JVM needs seconds for its first classes).

Determinism. A task id always names the same initial world, but ScienceWorld is not exactly
repeatable after that (observed on 1.2.3; likely its iteration over object sets in identity-hash
order): the same action sequence on boil-v20 scored 100 in some runs and 78 in others, even within
one JVM, and gold paths can differ between generations (boil-v20: 142, 148 or 160 steps;
find-non-living-thing-v61 focused a bowl, a painting or a drawer). Within one process a gold path is
generated once per task and cached, so expert, privileged state and oracle agree. In checks of 60
tasks covering all 30 task types, the expert won every one (with the extra waits above).

Faults. A call that fails while it runs (the JVM dies, a py4j/socket error, a Java or other
exception, or no answer within the timeout, after which the JVM is killed) ends that episode:
``step`` raises a one-line :class:`SeedRLError` naming the cause, every later ``step`` raises
again, and the rollout records the episode as truncated with that reason. A dead JVM is dropped
from the pool; the next ``reset`` starts a new one. Other episodes hosted on the dead JVM are not
ended: at their next call they move to a live engine and replay their actions, which must
reproduce the score and the last observation (else that episode ends too: see Determinism);
``privileged_state()["engine_faults"]`` counts such moves.
"""

from __future__ import annotations

import logging
import os
import re
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, ClassVar

from pydantic import Field, model_validator

from seedrl.agent.prompts import TURN_LINE
from seedrl.envs.base import WIN_REWARD, Bool, Env, EnvOptions, Float, Int, Str, StrList, Words
from seedrl.envs.scienceworld.engine import (
    DEFAULT_JVM_OPTIONS,
    INSTALL_HINT,
    SCIENCEWORLD_VERSION,
    Engine,
    EngineDied,
    EnginePool,
    Holder,
    Lease,
    get_pool,
)
from seedrl.envs.scienceworld.state import ScienceWorldPrivilegedState
from seedrl.envs.scienceworld.tasks import (
    DEFAULT_UNSEEN_TASKS,
    TASK_SPLITS,
    make_task_id,
    panel_ids,
    parse_task_id,
    task_sets,
    variation_split,
)
from seedrl.envs.scienceworld.tasks import task_type as _task_type
from seedrl.errors import SeedRLError, unknown_name

log = logging.getLogger(__name__)

SIMPLIFICATIONS = ("easy", "teleportAction", "selfWateringFlowerPots", "openContainers", "openDoors",
                   "noElectricalAction")
_ELECTRICAL = ("power-component", "conductivity")

INVALID_PREFIXES = ("No known action matches that input.", "Unknown action.")
EMPTY_ACTION_OBS = "No known action matches that input."
BLOCKED_OBS = "'reset task' is disabled in this environment; the task goes on."
GAME_OVER_OBS = "The task is over."
_AMBIGUOUS = "Ambiguous request"
_BLOCKED = {"reset task"}
#: actions that only observe: skipped when aligning an episode with the gold path
_OBSERVE = re.compile(r"^(?:look around|look at .+|look in .+|examine .+|read .+|inventory|task|help|objects)$")
_WAIT = re.compile(r"^wait\d*$")
#: "wait1" actions the expert adds after a used-up gold path when the task is not complete yet
EXTRA_WAITS = 20
_TASK_RE = re.compile(r"^(.+)-v(\d+)$")
_OPTION_RE = re.compile(r"^\s*(\d+):\s*(.*?)\s*$")

INSTRUCTION = (
    TURN_LINE + "\n"
    "You should first reason step-by-step about the current situation. "
    "This reasoning process MUST be enclosed within <think> </think> tags.\n"
    "Once you've finished your reasoning, you should choose one action for the current step and present it "
    "within <action> </action> tags. Actions: look around, look at OBJ, look in OBJ, go to LOC, teleport to LOC, "
    "open OBJ, close OBJ, pick up OBJ, put down OBJ, move OBJ to OBJ, pour OBJ in OBJ, dunk OBJ in OBJ, mix OBJ, "
    "activate OBJ, deactivate OBJ, use OBJ on OBJ, connect OBJ to OBJ, disconnect OBJ, eat OBJ, flush OBJ, "
    "read OBJ, focus on OBJ, inventory, wait, wait1. Name objects and places as the observation does. "
    "Focus on an object only when the task asks for it: focusing on the wrong one fails the task. "
    "When asked to choose among numbered options, answer with the number alone."
)

_OPERATIONAL = ("jvm_heap", "jvm_options", "max_engines", "sessions_per_engine", "call_timeout_s",
                "gold_timeout_s", "acquire_timeout_s", "prefetch_gold")



def check_simplifications(simplifications: str) -> str:
    s = ",".join(p.strip() for p in str(simplifications).split(",") if p.strip())
    for part in s.split(","):
        if part and part not in SIMPLIFICATIONS:
            raise unknown_name("ScienceWorld simplification", part, SIMPLIFICATIONS)
    return s


def strip_task_prefix(description: str) -> str:
    """"Your task is to boil water. ..." -> "boil water. ..." (the prompt adds its own prefix)."""
    text = " ".join(str(description).split())
    m = re.match(r"^your task is to:?\s*", text, flags=re.IGNORECASE)
    return text[m.end():] if m else text


def is_ambiguous(observation: str | None) -> bool:
    return bool(observation) and observation.lstrip().startswith(_AMBIGUOUS)


def ambiguity_options(observation: str) -> dict[str, str]:
    """The numbered options of an "Ambiguous request" question: {"0": "move apple seed (...) to ..."}."""
    out = {}
    for line in str(observation).splitlines()[1:]:
        m = _OPTION_RE.match(line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def is_rejected(observation: str) -> bool:
    return str(observation).lstrip().startswith(INVALID_PREFIXES)


def norm_action(action: str) -> str:
    return " ".join(str(action).strip().lower().split())


def gold_progress(gold: Sequence[str], history: Sequence[dict[str, Any]], first_obs: str) -> dict[str, Any]:
    """Align the actions an episode sent with the gold path.

    ``history`` items have ``action``, ``sent`` (it reached the engine), ``valid`` and ``obs`` (the
    engine's answer). Returns ``pos`` (gold actions done), ``deviation`` (None or {"index": history
    index, "action", "expected"}) and ``ambiguous_open`` (the last answer is an ambiguity question).
    Rules: an action equal to the next gold action advances; rejected and observing actions are
    skipped, and so are waits once the gold path is used up (``after_end`` counts the actions sent
    since then); the option number answering an ambiguity question that a gold action raised must name
    the same object as the gold answer; a cancelled question (the engine rejected the answer) means
    the gold action has to be sent again; a gold answer to a question this world did not ask is
    skipped; another action that raised a question deviates only once the question is answered;
    anything else is a deviation.
    """
    gold = [norm_action(g) for g in gold]
    pos, prev_obs, deviation = 0, first_obs, None
    amb_from_gold = False  # the open ambiguity question was raised by a gold action
    pending: dict[str, Any] | None = None  # a non-gold action waiting for its ambiguity answer
    exhausted_at: int | None = None  # history index where the gold path was used up

    def skip_unneeded_answer(p: int, obs: str | None) -> int:
        while p < len(gold) and gold[p].isdigit() and not is_ambiguous(obs):
            p += 1
        return p

    for i, h in enumerate(history):
        if not h.get("sent"):
            continue
        a = norm_action(h.get("action", ""))
        obs = h.get("obs") or ""
        if is_ambiguous(prev_obs) and amb_from_gold:
            expected = gold[pos] if pos < len(gold) else None
            if not h.get("valid"):  # the question was cancelled: the gold action must be sent again
                pos = max(0, pos - 1)
            elif a.isdigit() and expected is not None and expected.isdigit():
                opts = ambiguity_options(prev_obs)
                if opts.get(a) is not None and opts.get(a) == opts.get(expected):
                    pos += 1
                else:
                    deviation = {"index": i, "action": h.get("action"), "expected": gold[pos]}
                    break
            elif not a.isdigit():
                deviation = {"index": i, "action": h.get("action"), "expected": expected if expected and
                             expected.isdigit() else "0"}
                break
            # else: a number answering a question the gold agent never saw (the expert says "0")
            amb_from_gold = False
        elif is_ambiguous(prev_obs):
            # a question raised by another action: answering it performs that action (a deviation
            # unless it only observes); a rejected answer cancels it
            if pending is not None and h.get("valid"):
                deviation = pending
                break
        else:
            pos = skip_unneeded_answer(pos, prev_obs)
            if pos < len(gold) and a == gold[pos]:
                pos += 1
                amb_from_gold = is_ambiguous(obs)
            elif not h.get("valid") or _OBSERVE.match(a) or (pos >= len(gold) and _WAIT.match(a)):
                amb_from_gold = False
            elif is_ambiguous(obs):  # nothing happened yet: it depends on the answer
                pending = {"index": i, "action": h.get("action"), "expected": gold[pos] if pos < len(gold) else None}
                amb_from_gold = False
                prev_obs = obs
                continue
            else:
                deviation = {"index": i, "action": h.get("action"), "expected": gold[pos] if pos < len(gold) else None}
                break
        pending = None
        prev_obs = obs
        if pos >= len(gold) and exhausted_at is None:
            exhausted_at = i
    if deviation is None:
        pos = skip_unneeded_answer(pos, prev_obs)
    after = sum(1 for h in history[exhausted_at + 1:] if h.get("sent")) if exhausted_at is not None else 0
    return {"pos": pos, "deviation": deviation, "ambiguous_open": is_ambiguous(prev_obs),
            "amb_from_gold": amb_from_gold, "after_end": after}


def parse_goal_progress(text: str) -> list[dict[str, Any]]:
    """ScienceWorld's goal progress table -> the sequential subgoals [{"done", "goal"}] in order."""
    out, section = [], None
    for line in str(text).splitlines():
        if line.startswith("Sequential Subgoals"):
            section = "seq"
            continue
        if line.startswith("Unordered"):
            section = None
            continue
        if section == "seq":
            parts = line.split("\t")
            if len(parts) >= 4 and parts[0].strip().isdigit():
                out.append({"done": parts[1].strip() == "true", "goal": parts[3].strip()})
    return out


def _env_default(value: Any, var: str, cast: Callable[[str], Any], default: Any) -> Any:
    if value is not None:
        return value
    raw = os.environ.get(var)
    if raw:
        try:
            return cast(raw)
        except ValueError:
            raise SeedRLError(f"${var}={raw!r} is not valid") from None
    return default



# -- the env ----------------------------------------------------------------------------------
class ScienceWorldOptions(EnvOptions):
    """Env options of ``scienceworld``; the operational ones (JVM, engines, timeouts) are machine-local."""

    env_name: ClassVar[str] = "scienceworld"
    local: ClassVar[frozenset[str]] = frozenset(_OPERATIONAL)

    simplifications: Str = Field("easy", description=f"comma-separated ScienceWorld simplifications "
                                                     f"({', '.join(SIMPLIFICATIONS)})")
    train_tasks: StrList | None = Field(None, description="a list of ScienceWorld task names (default: all but "
                                                          "unseen_tasks)")
    unseen_tasks: StrList = Field(DEFAULT_UNSEEN_TASKS, description="a list of ScienceWorld task names")
    jvm_heap: Str | None = Field(None, description="a JVM heap size like 512m or 2g")
    jvm_options: Words = Field((), description="a list of JVM options (or one space-separated string)")
    max_engines: Int | None = Field(None, ge=1, description="an integer >= 1")
    sessions_per_engine: Int | None = Field(None, ge=1, description="an integer >= 1")
    call_timeout_s: Float = Field(30.0, gt=0, description="seconds, a number > 0")
    gold_timeout_s: Float = Field(300.0, gt=0, description="seconds, a number > 0")
    acquire_timeout_s: Float = Field(120.0, gt=0, description="seconds, a number > 0")
    prefetch_gold: Bool = Field(True, description="true or false")

    @model_validator(mode="after")
    def _check(self) -> ScienceWorldOptions:
        check_simplifications(self.simplifications)
        task_sets(self.train_tasks, self.unseen_tasks)
        return self

    def identity(self) -> dict[str, Any]:
        """The simplifications and the two task sets, normalised (sorted; the default train set spelled out)."""
        train, unseen = task_sets(self.train_tasks, self.unseen_tasks)
        return {"simplifications": check_simplifications(self.simplifications), "train_tasks": list(train),
                "unseen_tasks": list(unseen)}


class ScienceWorldEnv(Env):
    """ScienceWorld tasks on pooled JVM engines; the expert follows the gold path."""

    name = "scienceworld"
    title = "ScienceWorld"
    packages = ("scienceworld",)
    version = "1"
    splits = {"train": 512, "valid_seen": 60, "valid_unseen": 60, "test_seen": 60, "test_unseen": 60}
    instruction = INSTRUCTION
    options_model = ScienceWorldOptions

    def __init__(self, **env_kwargs: Any) -> None:
        super().__init__()
        o = self.options = ScienceWorldOptions.parse(env_kwargs)
        self.simplifications = check_simplifications(o.simplifications)
        self.train_tasks, self.unseen_tasks = task_sets(o.train_tasks, o.unseen_tasks)
        heap = str(_env_default(o.jvm_heap, "SEEDRL_SCIENCEWORLD_HEAP", str, "512m"))
        if not re.fullmatch(r"\d+[kKmMgG]?", heap):
            raise SeedRLError(f"scienceworld jvm_heap must look like 512m or 2g, got {heap!r}")
        self.javaopts = (f"-Xmx{heap}", *DEFAULT_JVM_OPTIONS, *o.jvm_options)
        self.max_engines = int(_env_default(o.max_engines, "SEEDRL_SCIENCEWORLD_MAX_ENGINES", int, 8))
        self.sessions_per_engine = int(_env_default(o.sessions_per_engine, "SEEDRL_SCIENCEWORLD_SESSIONS_PER_ENGINE",
                                                    int, 16))
        if self.max_engines < 1 or self.sessions_per_engine < 1:
            raise SeedRLError("scienceworld max_engines and sessions_per_engine must be >= 1")
        self.call_timeout_s = o.call_timeout_s
        #: loads and new sessions: a cold JVM takes seconds to load its first classes and task
        self.load_timeout_s = max(self.call_timeout_s, 60.0)
        self.gold_timeout_s = o.gold_timeout_s
        self.acquire_timeout_s = o.acquire_timeout_s
        self.prefetch_gold = o.prefetch_gold
        self._holder = Holder()
        weakref.finalize(self, self._holder.release)
        self._clear()

    def _clear(self) -> None:
        self._task: tuple[str, int] | None = None
        self._first_obs = ""
        self._last_obs = ""
        self._sent: list[str] = []  # actions that reached the engine, for replay
        self._history: list[dict[str, Any]] = []
        self._score = 0
        self._won = self._lost = self._done = False
        self._fault: str | None = None
        self._engine_faults = 0
        self._gold: list[str] | None = None
        self._gold_error: str | None = None
        self._gold_future: Future | None = None
        self._subgoals: list[dict[str, Any]] | None = None

    # -- panels ---------------------------------------------------------------------------------
    @classmethod
    def panel_task_ids(cls, split: str, size: int, **env_kwargs: Any) -> list[str]:
        """Round-robin over the split's task types, each type's variations in hash order; the
        operational options (JVM, engines, timeouts) are checked and do not change the ids."""
        o = ScienceWorldOptions.parse(env_kwargs)
        return panel_ids(split, size, o.train_tasks, o.unseen_tasks)

    @classmethod
    def task_type(cls, task_id: str) -> str:
        return _task_type(task_id)

    # -- engine plumbing ------------------------------------------------------------------------
    @property
    def pool(self) -> EnginePool:
        return get_pool(self.javaopts, self.max_engines, self.sessions_per_engine)

    @property
    def engine(self) -> Engine | None:
        """The engine hosting the current episode (None before reset / after close)."""
        lease = self._holder.lease
        return lease.engine if lease is not None else None

    def _acquire(self) -> Lease:
        pool = self.pool
        for attempt in range(2):
            engine = pool.acquire(self.acquire_timeout_s)
            try:
                return Lease(pool, engine, engine.new_session(self.load_timeout_s))
            except EngineDied:
                pool.release(engine)
                if attempt == 1:
                    raise
            except Exception:
                pool.release(engine)
                raise
        raise AssertionError("unreachable")

    def _load(self, lease: Lease) -> tuple[str, str]:
        """Load the task into the lease's session; return (first observation, task description)."""
        task, variation = self._task
        pool, simp = lease.pool, self.simplifications
        check = task not in pool.checked

        def run(session: Any) -> tuple[str, str, Any]:
            session.load(task, variation, simp, False)
            splits = None
            if check:
                splits = tuple(len(list(f())) for f in (session.getVariationsTrain, session.getVariationsDev,
                                                          session.getVariationsTest))
            return str(session.step("look around")), str(session.getTaskDescription()), splits

        obs, desc, splits = lease.call(run, self.load_timeout_s, f"load of {self.task_id}")
        if check:
            if splits != TASK_SPLITS[task]:
                raise SeedRLError(f"the installed scienceworld splits {task} into {splits} train/dev/test variations, "
                                  f"not {TASK_SPLITS[task]} as scienceworld {SCIENCEWORLD_VERSION} does; "
                                  f"install it: {INSTALL_HINT}")
            pool.checked.add(task)
        return obs, desc

    def _fail(self, reason: str) -> SeedRLError:
        """End the episode because of an engine fault; the session is dropped."""
        self._fault = reason
        self._done = True
        self._holder.release()
        log.warning("scienceworld episode %s ended by an engine fault: %s", self.task_id, reason)
        return SeedRLError(f"scienceworld episode {self.task_id} ended: {reason}")

    def _call(self, fn: Callable[[Any], Any], what: str) -> Any:
        """``fn(session)`` on the episode's engine; moves a bystander episode off a dead engine."""
        for attempt in range(2):
            lease = self._holder.lease
            try:
                if lease is None or not lease.engine.alive():
                    self._migrate()
                    lease = self._holder.lease
                return lease.call(fn, self.call_timeout_s, what)
            except EngineDied as e:
                if e.in_flight or attempt == 1:
                    raise self._fail(str(e)) from None
            except SeedRLError as e:
                raise self._fail(str(e)) from None
        raise AssertionError("unreachable")

    def _migrate(self) -> None:
        """Move the episode to a live engine: load the task again and replay the sent actions."""
        old = self._holder.lease
        why = old.engine.dead or "the JVM is gone" if old is not None else "no engine"
        self._holder.release()
        log.warning("scienceworld episode %s: its engine died (%s); replaying %d actions on another engine",
                    self.task_id, why, len(self._sent))
        self._engine_faults += 1
        lease = self._acquire()
        self._holder.lease = lease
        obs, _ = self._load(lease)
        score = 0
        for a in self._sent:
            obs, score = lease.call(lambda s, a=a: (str(s.step(a)), s.getScore()), self.call_timeout_s, "replay")
        score = int(round(100 * score)) if self._sent else 0
        if obs != self._last_obs or score != self._score:
            raise SeedRLError(f"replaying the episode after an engine fault ({why}) did not reproduce its state")

    # -- episode --------------------------------------------------------------------------------
    def reset(self, task_id: str) -> str:
        task, variation = parse_task_id(task_id)
        if "noElectricalAction" in self.simplifications.split(",") and any(k in task for k in _ELECTRICAL):
            raise SeedRLError(f"ScienceWorld task {task} needs electrical actions; drop noElectricalAction "
                              f"from simplifications")
        self._holder.release()
        self._clear()
        self.task_id = make_task_id(task, variation)
        self._task = (task, variation)
        try:
            lease = self._acquire()
            self._holder.lease = lease
            obs, desc = self._load(lease)
        except SeedRLError as e:
            self._holder.release()
            self._fault = str(e)
            raise SeedRLError(f"scienceworld reset of {self.task_id} failed: {e}") from None
        self.task_description = strip_task_prefix(desc)
        self._first_obs = self._last_obs = obs
        if self.prefetch_gold:
            self._gold_future = self.pool.gold(task, variation, self.simplifications, self.gold_timeout_s)
        return obs

    def step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        if self._task is None:
            raise SeedRLError("scienceworld: call reset(task_id) before step()")
        if self._fault is not None:
            raise SeedRLError(f"scienceworld episode {self.task_id} ended: {self._fault}")
        if self._done:
            return GAME_OVER_OBS, 0.0, True, self._info(valid=False)
        if self._holder.lease is None:
            raise SeedRLError(f"scienceworld episode {self.task_id} was closed; call reset(task_id) first")
        a = " ".join(str(action).split())
        if not a or norm_action(a) in _BLOCKED:
            obs = EMPTY_ACTION_OBS if not a else BLOCKED_OBS
            self._history.append({"action": a, "sent": False, "valid": False, "obs": obs, "score": self._score})
            return obs, 0.0, False, self._info(valid=False)

        def run(session: Any) -> tuple[str, float, bool]:
            return str(session.step(a)), float(session.getScore()), bool(session.getCompleted())

        obs, score01, completed = self._call(run, "step")
        self._sent.append(a)
        valid = not is_rejected(obs)
        self._score = int(round(100 * score01))
        was_won = self._won
        self._won = bool(completed) and self._score >= 100
        self._lost = self._score < 0
        self._done = bool(completed) or self._lost
        self._last_obs = obs
        self._history.append({"action": a, "sent": True, "valid": valid, "obs": obs, "score": self._score})
        reward = WIN_REWARD if self._won and not was_won else 0.0
        return obs, reward, self._done, self._info(valid=valid)

    def _info(self, valid: bool) -> dict[str, Any]:
        return {"won": self._won, "lost": self._lost, "score": self._score, "action_valid": valid}

    def admissible_actions(self) -> list[str] | None:
        return None  # see the module docstring: the action templates are in the instruction

    # -- expert and privileged state --------------------------------------------------------------
    def gold_path(self, wait: bool = True) -> list[str] | None:
        """The task's gold action sequence (None if it could not be generated)."""
        if self._gold is not None or self._task is None:
            return self._gold
        if self._gold_future is None:
            task, variation = self._task
            self._gold_future = self.pool.gold(task, variation, self.simplifications, self.gold_timeout_s)
        if not wait and not self._gold_future.done():
            return None
        try:
            self._gold = list(self._gold_future.result(timeout=self.gold_timeout_s + 30))
        except FutureTimeout:
            self._gold_error = f"no gold path within {self.gold_timeout_s:.0f}s"
        except Exception as e:
            self._gold_error = f"{type(e).__name__}: {e}"[:300]
        if self._gold_error:
            log.warning("scienceworld %s: %s", self.task_id, self._gold_error)
            self._gold_future = None
        return self._gold

    def expert_action(self) -> str | None:
        """The next gold action from the current state; None after a deviation or at the end."""
        if self._task is None or self._done or self._fault is not None:
            return None
        gold = self.gold_path()
        if not gold:
            return None
        prog = gold_progress(gold, self._history, self._first_obs)
        if prog["deviation"] is not None:
            return None
        pos = prog["pos"]
        if prog["ambiguous_open"] and (pos >= len(gold) or not gold[pos].strip().isdigit()):
            return "0"  # ScienceWorld's gold agent answers ambiguity questions with the first option
        if pos < len(gold):
            return gold[pos]
        # the gold path is used up but the task is not complete: in some runs ScienceWorld's physics
        # is slower than in the gold agent's (e.g. boil-v20 ends at 78); waiting finishes it
        return "wait1" if prog["after_end"] < EXTRA_WAITS else None

    def privileged_state(self) -> dict[str, Any]:
        if self._task is None:
            return {}
        task, variation = self._task
        gold = self.gold_path()
        prog = gold_progress(gold, self._history, self._first_obs) if gold else None
        if self._subgoals is None and self._fault is None and self._holder.lease is not None:
            try:
                text = self._holder.lease.call(lambda s: str(s.getGoalProgressStr()), self.call_timeout_s,
                                               "goal progress")
                self._subgoals = parse_goal_progress(text)
            except Exception as e:  # the episode is over; never fail the rollout for this
                log.warning("scienceworld %s: goal progress unavailable: %s", self.task_id, e)
        return ScienceWorldPrivilegedState(
            env="scienceworld",
            task_id=self.task_id,
            task_name=task,
            variation=variation,
            variation_split=variation_split(task, variation),
            simplifications=self.simplifications,
            task_description=self.task_description,
            gold_path=list(gold) if gold else None,
            gold_error=self._gold_error,
            gold_progress=prog["pos"] if prog else None,
            first_deviation=prog["deviation"] if prog else None,
            history=[{"action": h["action"], "sent": h["sent"], "valid": h["valid"], "score": h["score"],
                      **({"obs": h["obs"][:300]} if not h["valid"] or is_ambiguous(h["obs"]) else {})}
                     for h in self._history],
            subgoals=self._subgoals,
            score=self._score,
            won=self._won,
            lost=self._lost,
            done=self._done,
            fault=self._fault,
            engine_faults=self._engine_faults,
        ).to_dict()

    def close(self) -> None:
        self._holder.release()
