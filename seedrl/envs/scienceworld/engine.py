"""ScienceWorld's JVM engines: a process-wide pool of JVMs, each hosting several episodes' sessions.

The runner makes one env object per episode and keeps all ``tasks x group`` episodes of a batch
alive at once (128 in the presets), so one JVM per episode (300-500 MB each) does not scale. A
process-wide pool (:class:`EnginePool`, :func:`get_pool`) keeps at most ``max_engines`` JVMs, each
hosting up to ``sessions_per_engine`` episodes as separate ScienceWorld ``PythonInterface`` objects;
an episode holds a :class:`Lease` on a session. JVMs start on demand (the least-loaded one with a free
slot is used; a new one starts only when all are full) and live until the process exits
(:func:`shutdown_engines`). Calls into one JVM are serialised. ScienceWorld keeps two JVM-global
values that every ``load`` resets, the object-id counter and the seed of Scala's global Random; an
engine saves and restores them per session whenever it switches sessions (:class:`SessionGlobals`),
so each episode runs as if it had the JVM to itself.

A JVM is started with py4j's ``launch_gateway`` command, the env's ``-Xmx``, :data:`DEFAULT_JVM_OPTIONS`
and the user's options; a JVM not up within :data:`START_TIMEOUT_S` is killed. Gold paths are generated
in the background on one more JVM per pool (the *gold engine*, one at a time, cached per task and
variation). A call that fails while it runs (the
JVM dies, a py4j/socket error, or no answer within the timeout, after which the JVM is killed)
raises :class:`EngineDied`; a Java exception in a live engine raises :class:`EngineCallError`.
The env module's docstring describes how episodes use them.
"""

from __future__ import annotations

import atexit
import collections
import logging
import os
import queue
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

from seedrl.envs.scienceworld.tasks import make_task_id
from seedrl.errors import SeedRLError

log = logging.getLogger(__name__)

SCIENCEWORLD_VERSION = "1.2.3"
INSTALL_HINT = (f'pip install "scienceworld=={SCIENCEWORLD_VERSION}" (or: pip install "seedrl[envs]"), with a '
                "Java 17 runtime on PATH or in JAVA_HOME (java -version)")

#: JVM options after -Xmx: a small-footprint collector, exit (-> a clean engine fault) instead of
#: limping on after running out of heap, and reflective access to java.util.Random's seed
DEFAULT_JVM_OPTIONS = ("-XX:+UseSerialGC", "-XX:+ExitOnOutOfMemoryError", "--add-opens=java.base/java.util=ALL-UNNAMED")


class EngineDied(SeedRLError):
    """The JVM of an engine is gone. ``in_flight``: it died during this call (else before it)."""

    def __init__(self, message: str, in_flight: bool) -> None:
        super().__init__(message)
        self.in_flight = in_flight


class EngineCallError(SeedRLError):
    """A call raised inside a live engine (a Java exception): the session is unusable."""


def _java_path() -> str:
    """The java to run: ``$JAVA_HOME/bin/java`` if set (py4j's rule), else ``java`` on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "java"), os.X_OK):
        return os.path.join(home, "bin", "java")
    if shutil.which("java"):
        return "java"
    raise SeedRLError(f"ScienceWorld needs Java 17 but no java is on PATH and JAVA_HOME is unset; install it: {INSTALL_HINT}")


_RANDOM_MULTIPLIER = 0x5DEECE66D

#: seconds a JVM gets from its launch to a loaded ScienceWorld jar (a cold start takes ~2 s)
START_TIMEOUT_S = 120.0


class SessionGlobals:
    """A session's copy of ScienceWorld's JVM-global state (see :meth:`Engine._switch`)."""

    __slots__ = ("count", "seed", "released")

    def __init__(self) -> None:
        self.count: int | None = None
        self.seed: int | None = None
        self.released = False


class Engine:
    """One JVM running ScienceWorld behind a py4j gateway; calls are serialised by :attr:`lock`."""

    def __init__(self, javaopts: Sequence[str], label: str) -> None:
        self.javaopts = list(javaopts)
        self.label = label
        self.lock = threading.Lock()
        self.sessions = 0  # episodes holding a session here (pool bookkeeping)
        self.dead: str | None = None
        self.ready = threading.Event()
        self.stderr: collections.deque[str] = collections.deque(maxlen=30)  # py4j appends left
        self.proc: Any = None
        self.gateway: Any = None
        self._watchdog_reason: str | None = None
        self._stderr_reader: threading.Thread | None = None
        self.owner: SessionGlobals | None = None  # the session whose globals the JVM holds now
        self._globals: tuple[Any, Any, Any] | None = None  # (UniqueIdentifier, java.util.Random, its seed field)
        self.switches = 0

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self) -> None:
        try:
            from py4j.java_gateway import (
                GatewayParameters,
                JavaGateway,
                OutputConsumer,
                ProcessConsumer,
                find_jar_path,
            )
            from scienceworld.constants import BASEPATH, JAR_PATH
        except ImportError as e:
            self._fail_start(f"the scienceworld env needs the scienceworld package ({e}); install it: {INSTALL_HINT}")
            raise SeedRLError(self.dead) from None
        # py4j logs every refused connection with a traceback at ERROR; the failures it reports are
        # handled here and reported once, as one line
        logging.getLogger("py4j").setLevel(logging.CRITICAL)
        timer = None
        try:
            # py4j's launch_gateway command (its jar, then ScienceWorld's; --die-on-broken-pipe: the
            # JVM exits with this process), started here rather than by launch_gateway, whose
            # readline of the port waits forever for a JVM that never prints it: a start gets
            # START_TIMEOUT_S, then the JVM is killed (its stdout ends, the start fails in one line)
            cmd = [_java_path(), "-classpath", os.pathsep.join((find_jar_path(), JAR_PATH)), *self.javaopts,
                   "py4j.GatewayServer", "--die-on-broken-pipe", "0"]
            self.proc = proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                                stderr=subprocess.PIPE, cwd=BASEPATH)
            self._stderr_reader = OutputConsumer(self.stderr, proc.stderr, daemon=True)
            self._stderr_reader.start()
            timer = threading.Timer(START_TIMEOUT_S, self._start_watchdog)
            timer.daemon = True
            timer.start()
            line = proc.stdout.readline()
            if not line.strip().isdigit():
                proc.kill()
                proc.wait(10)
                raise SeedRLError(self._start_failure(f"the JVM printed no gateway port ({self._exit_reason()})"))
            OutputConsumer(collections.deque(maxlen=0), proc.stdout, daemon=True).start()  # read and dropped
            ProcessConsumer(proc, [], daemon=True).start()  # closes the pipes when the JVM exits
            self.gateway = JavaGateway(gateway_parameters=GatewayParameters(port=int(line), auto_field=True,
                                                                            auto_close=True), java_process=proc)
            self.gateway.jvm.scienceworld.runtime.pythonapi.PythonInterface  # noqa: B018 - the jar loads
        except SeedRLError as e:
            self._fail_start(str(e))
            raise
        except Exception as e:
            self._fail_start(self._start_failure(f"{type(e).__name__}: {str(e).strip()[:200]}"))
            raise SeedRLError(self.dead) from None
        finally:
            if timer is not None:
                timer.cancel()
        log.info("ScienceWorld engine %s started (pid %s, %s)", self.label, self.pid, " ".join(self.javaopts))
        self.ready.set()

    def _start_watchdog(self) -> None:
        self._watchdog_reason = f"it did not start within {START_TIMEOUT_S:g}s and was killed"
        log.warning("ScienceWorld engine %s: %s", self.label, self._watchdog_reason)
        self.proc.kill()

    def _start_failure(self, what: str) -> str:
        if self.proc is not None and self.proc.poll() is not None and self._stderr_reader is not None:
            self._stderr_reader.join(2.0)  # what a JVM that exited said is read to its end
        tail = self.stderr_tail()
        return (f"could not start ScienceWorld's JVM ({self._watchdog_reason or what}"
                f"{'; java said: ' + tail if tail else ''}); it needs {INSTALL_HINT}")

    def _fail_start(self, reason: str) -> None:
        self.dead = reason
        self.kill()
        self.ready.set()

    def stderr_tail(self) -> str:
        lines = [ln.strip() for ln in reversed(self.stderr) if ln.strip() and "Picked up JAVA_TOOL_OPTIONS" not in ln]
        return " | ".join(lines[-3:])[:300]

    def alive(self) -> bool:
        return self.dead is None and self.proc is not None and self.proc.poll() is None

    def max_heap_mb(self) -> float:
        return self.call(lambda: self.gateway.jvm.java.lang.Runtime.getRuntime().maxMemory(), 30, "heap query") / 2**20

    def new_session(self, timeout: float) -> Any:
        return self.call(lambda: self.gateway.jvm.scienceworld.runtime.pythonapi.PythonInterface(), timeout,
                         "new session")

    def call(self, fn: Callable[[], Any], timeout: float, what: str, owner: SessionGlobals | None = None) -> Any:
        """``fn()`` with this engine's lock held, killed after ``timeout`` seconds; with ``owner``,
        the JVM's global simulator state is that session's during the call (:class:`SessionGlobals`).

        Raises :class:`EngineDied` (``in_flight`` tells whether it died during this call) or
        :class:`EngineCallError` (a Java exception; the engine is fine)."""
        from py4j.protocol import Py4JError, Py4JJavaError

        if not self.lock.acquire(timeout=timeout + 5.0):
            raise SeedRLError(f"ScienceWorld engine {self.label} stayed busy for over {timeout + 5:.0f}s "
                              f"({what} could not start)")
        try:
            if not self.alive():
                self._mark_dead(self._exit_reason())
                raise EngineDied(f"ScienceWorld engine {self.label} is dead ({self.dead})", in_flight=False)
            timer = threading.Timer(timeout, self._watchdog, args=(what, timeout))
            timer.daemon = True
            timer.start()
            try:
                self._switch(owner)
                return fn()
            except Py4JJavaError as e:
                if not self.alive():
                    self._mark_dead(self._watchdog_reason or self._exit_reason())
                    raise EngineDied(f"ScienceWorld engine {self.label} died during {what} ({self.dead})",
                                     in_flight=True) from None
                first = str(e.java_exception).strip().splitlines()[0][:200] if e.java_exception else str(e)[:200]
                raise EngineCallError(f"ScienceWorld raised during {what}: {first}") from None
            except (Py4JError, OSError) as e:
                try:  # a JVM being killed can first garble an answer; let its exit show
                    self.proc.wait(timeout=2.0)
                except Exception:
                    pass
                reason = self._watchdog_reason or (self._exit_reason() if self.proc.poll() is not None else
                                                   f"{type(e).__name__}: {str(e).strip()[:160]}")
                self._mark_dead(reason)
                raise EngineDied(f"ScienceWorld engine {self.label} died during {what} ({self.dead})",
                                 in_flight=True) from None
            except SeedRLError:
                raise
            except Exception as e:  # anything else raised by the call: the session is suspect
                raise EngineCallError(f"ScienceWorld {what} raised {type(e).__name__}: {str(e).strip()[:200]}") from None
            finally:
                timer.cancel()
        finally:
            self.lock.release()

    def _switch(self, owner: SessionGlobals | None) -> None:
        """Make the JVM's global state ``owner``'s: save the previous owner's, restore this one's.

        ScienceWorld keeps two globals that a ``load`` resets: the object id counter (object
        equality is by id, so ids must not repeat within one world) and the seed of scala's global
        Random (bees, wandering animals, genetics). Sessions sharing a JVM would otherwise hand out
        each other's ids and draw each other's random numbers."""
        if owner is None or owner is self.owner:
            return
        if self._globals is None:
            jvm = self.gateway.jvm
            uid = jvm.util.UniqueIdentifier
            rnd = jvm.java.lang.Class.forName("scala.util.Random$").getField("MODULE$").get(None).self()
            field = jvm.java.lang.Class.forName("java.util.Random").getDeclaredField("seed")
            field.setAccessible(True)  # needs --add-opens java.base/java.util (a default JVM option)
            self._globals = (uid, rnd, field)
        uid, rnd, field = self._globals
        prev = self.owner
        if prev is not None and not prev.released:
            prev.count, prev.seed = int(uid.count()), int(field.get(rnd))
        if owner.count is not None:
            getattr(uid, "count_$eq")(owner.count)
            rnd.setSeed(owner.seed ^ _RANDOM_MULTIPLIER)  # setSeed scrambles with this constant
        self.owner = owner
        self.switches += 1

    def _watchdog(self, what: str, timeout: float) -> None:
        self._watchdog_reason = f"{what} did not answer within {timeout:g}s; the JVM was killed"
        log.warning("ScienceWorld engine %s: %s", self.label, self._watchdog_reason)
        self._mark_dead(self._watchdog_reason)

    def _exit_reason(self) -> str:
        if self.dead:
            return self.dead
        code = self.proc.poll() if self.proc is not None else None
        if code is None:
            return "the JVM stopped answering"
        how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
        tail = self.stderr_tail()
        return f"the JVM exited ({how}){'; java said: ' + tail if tail else ''}"

    def _mark_dead(self, reason: str) -> None:
        if self.dead is None:
            self.dead = reason
            log.warning("ScienceWorld engine %s (pid %s) is dead: %s", self.label, self.pid, reason)
        self.kill()

    def kill(self) -> None:
        """Stop the JVM now (no graceful shutdown: an engine holds nothing worth saving)."""
        proc, gw = self.proc, self.gateway
        if gw is not None:
            try:
                gw._gateway_client.is_connected = False  # py4j's finalizers then skip the dead JVM
                gw.close(keep_callback_server=False, close_callback_server_connections=False)
            except Exception:
                pass
        if proc is not None and proc.poll() is None:
            try:
                proc.kill()
                proc.wait(timeout=10)
            except Exception:
                pass

    def shutdown(self) -> None:
        if self.dead is None:
            self.dead = "shut down"
        self.kill()


class EnginePool:
    """At most ``max_engines`` JVMs with up to ``sessions_per_engine`` sessions each, plus one gold
    engine that generates gold paths in the background. Thread-safe."""

    def __init__(self, javaopts: Sequence[str], max_engines: int, sessions_per_engine: int) -> None:
        self.javaopts = tuple(javaopts)
        self.max_engines = max_engines
        self.sessions_per_engine = sessions_per_engine
        self.cond = threading.Condition()
        self.engines: list[Engine] = []
        self.started = 0  # engines ever created (including failed starts)
        self.checked: set[str] = set()  # task names whose splits matched TASK_SPLITS
        self._gold_engine: Engine | None = None
        self._gold_session: Any = None
        self._gold_cache: dict[tuple[str, int, str], Future] = {}
        self._gold_lock = threading.Lock()
        # a daemon thread, not a ThreadPoolExecutor: the interpreter would wait at exit for every
        # queued gold path (minutes for a batch of mendelian-genetics tasks)
        self._gold_queue: queue.Queue[tuple[Future, tuple[Any, ...]] | None] = queue.Queue()
        self._gold_thread: threading.Thread | None = None
        self.pid = os.getpid()

    # -- episode sessions -----------------------------------------------------------------------
    def acquire(self, timeout: float) -> Engine:
        """An engine with a free session slot (its ``sessions`` already counts the caller)."""
        deadline = time.monotonic() + timeout
        starter = False
        with self.cond:
            while True:
                for e in self.engines:  # JVMs that died while idle (nobody has called them since)
                    if e.dead is None and e.ready.is_set() and not e.alive():
                        e._mark_dead(e._exit_reason())
                self.engines = [e for e in self.engines if e.dead is None]
                free = [e for e in self.engines if e.sessions < self.sessions_per_engine]
                if free:
                    engine = min(free, key=lambda e: e.sessions)
                    break
                if len(self.engines) < self.max_engines:
                    self.started += 1
                    engine = Engine(self.javaopts, label=f"#{self.started}")
                    self.engines.append(engine)
                    starter = True
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    raise SeedRLError(
                        f"all {self.max_engines} ScienceWorld engines hold {self.sessions_per_engine} episodes each; "
                        f"raise max_engines or sessions_per_engine (env kwargs) or play fewer episodes at once")
                self.cond.wait(left)
            engine.sessions += 1
        if starter:
            try:
                engine.start()
            except Exception:
                self.release(engine)
                raise
        elif not engine.ready.wait(max(1.0, deadline - time.monotonic())):
            self.release(engine)
            raise SeedRLError(f"ScienceWorld engine {engine.label} did not start within {timeout:.0f}s")
        if engine.dead is not None:
            self.release(engine)
            raise SeedRLError(f"ScienceWorld engine {engine.label} could not start: {engine.dead}")
        return engine

    def release(self, engine: Engine) -> None:
        with self.cond:
            engine.sessions = max(0, engine.sessions - 1)
            self.cond.notify_all()

    # -- gold paths -----------------------------------------------------------------------------
    def gold(self, task: str, variation: int, simplifications: str, timeout: float) -> Future:
        """A future of the gold action sequence (cached; generated one at a time on the gold engine)."""
        key = (task, variation, simplifications)
        with self._gold_lock:
            fut = self._gold_cache.get(key)
            if fut is None or fut.cancelled() or (fut.done() and fut.exception() is not None):
                if len(self._gold_cache) >= 20_000:
                    self._gold_cache.clear()
                fut = Future()
                self._gold_queue.put((fut, (task, variation, simplifications, timeout)))
                self._gold_cache[key] = fut
                if self._gold_thread is None or not self._gold_thread.is_alive():
                    self._gold_thread = threading.Thread(target=self._gold_worker, name="scienceworld-gold",
                                                         daemon=True)
                    self._gold_thread.start()
            return fut

    def _gold_worker(self) -> None:
        while True:
            item = self._gold_queue.get()
            if item is None:
                return
            fut, args = item
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(self._make_gold(*args))
            except BaseException as e:  # noqa: BLE001 - handed to whoever waits for the future
                fut.set_exception(e)

    def _make_gold(self, task: str, variation: int, simplifications: str, timeout: float) -> list[str]:
        for attempt in range(2):
            engine = self._gold_engine
            if engine is None or not engine.alive():
                if engine is not None:
                    engine.kill()
                engine = self._gold_engine = Engine(self.javaopts, label="gold")
                self._gold_session = None
                engine.start()
            try:
                if self._gold_session is None:
                    self._gold_session = engine.new_session(timeout)
                session = self._gold_session

                def run(session: Any = session) -> list[str]:
                    session.load(task, variation, simplifications, True)
                    return [str(a) for a in session.getGoldActionSequence()]

                gold = engine.call(run, timeout, f"gold path of {make_task_id(task, variation)}")
            except EngineDied:
                if attempt == 0:
                    continue
                raise
            except EngineCallError:
                self._gold_session = None
                raise
            if not gold or gold[0].startswith("ERROR"):
                raise SeedRLError(f"ScienceWorld generated no gold path for {make_task_id(task, variation)}")
            return gold
        raise AssertionError("unreachable")

    def shutdown(self) -> None:
        with self.cond:
            engines, self.engines = list(self.engines), []
        for e in engines:
            e.shutdown()
        while True:  # cancel queued gold paths, then stop the worker
            try:
                item = self._gold_queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                item[0].cancel()
        self._gold_queue.put(None)
        if self._gold_engine is not None:
            self._gold_engine.shutdown()
            self._gold_engine = None


_POOLS: dict[tuple[Any, ...], EnginePool] = {}
_POOLS_LOCK = threading.Lock()


def get_pool(javaopts: Sequence[str], max_engines: int, sessions_per_engine: int) -> EnginePool:
    """The process-wide pool for these JVM options and limits (a forked child gets its own)."""
    key = (tuple(javaopts), max_engines, sessions_per_engine)
    with _POOLS_LOCK:
        pool = _POOLS.get(key)
        if pool is None or pool.pid != os.getpid():
            pool = _POOLS[key] = EnginePool(javaopts, max_engines, sessions_per_engine)
        return pool


def pools() -> list[EnginePool]:
    with _POOLS_LOCK:
        return [p for p in _POOLS.values() if p.pid == os.getpid()]


def shutdown_engines() -> None:
    """Stop every ScienceWorld JVM of this process (also run at exit)."""
    with _POOLS_LOCK:
        items = list(_POOLS.values())
        _POOLS.clear()
    for p in items:
        if p.pid == os.getpid():
            p.shutdown()


atexit.register(shutdown_engines)


def engine_pids() -> list[int]:
    """PIDs of this process's live ScienceWorld JVMs (episode engines and gold engines)."""
    out = []
    for p in pools():
        for e in [*p.engines, p._gold_engine]:
            if e is not None and e.alive():
                out.append(e.pid)
    return out


class Lease:
    """An episode's session on an engine."""

    __slots__ = ("pool", "engine", "session", "released", "globals")

    def __init__(self, pool: EnginePool, engine: Engine, session: Any) -> None:
        self.pool, self.engine, self.session, self.released = pool, engine, session, False
        self.globals = SessionGlobals()

    def call(self, fn: Callable[[Any], Any], timeout: float, what: str) -> Any:
        return self.engine.call(lambda: fn(self.session), timeout, what, owner=self.globals)

    def release(self) -> None:
        if not self.released:
            self.released = self.globals.released = True
            self.session = None  # py4j frees the Java object
            self.pool.release(self.engine)


class Holder:
    """Holds the current lease; released by ``close`` or, failing that, when the env is collected."""

    __slots__ = ("lease",)

    def __init__(self) -> None:
        self.lease: Lease | None = None

    def release(self) -> None:
        lease, self.lease = self.lease, None
        if lease is not None:
            lease.release()
