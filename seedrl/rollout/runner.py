"""Batched multi-turn rollout: every live episode advances one step per batched ``generate`` call.

``tasks × group_size`` episodes run in lockstep. Per turn: build each live episode's step prompt,
generate all responses in one call, then let the envs read the responses and step, each phase one
batch of calls with one deadline for the whole turn (``step_timeout_s``). The envs live in an
executor (:mod:`seedrl.rollout.executors`: a thread per episode by default, or a pool of worker
processes or Ray actors). An environment that raises, hangs past the turn's deadline or dies ends only its
own episode (truncated, error recorded, logged; on Ray, one that hangs or dies ends all the episodes of its
actor); the batch goes on, and a turn lasts at most about one ``step_timeout_s`` however many envs hang
(with worker processes: one per hung env of the same worker, each followed by its replacement's start and
replay of the worker's other episodes).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from seedrl.agent.prompts import HistoryItem, build_step_prompt, step_messages
from seedrl.envs.base import Env
from seedrl.errors import SeedRLError
from seedrl.rollout.backends import GenerationBackend, SamplingParams
from seedrl.rollout.executors import (
    EnvExecutor,
    Outcome,
    check_executor,
    env_privileged_state,
    env_read,
    env_reset,
    env_step,
    make_executor,
)
from seedrl.rollout.types import StepSample, Trajectory

log = logging.getLogger(__name__)


@dataclass
class RolloutSettings:
    env_title: str
    max_steps: int = 15
    history_length: int = 2
    max_prompt_tokens: int = 2048
    sampling: SamplingParams = field(default_factory=SamplingParams)
    step_timeout_s: float = 60.0
    env_workers: int = 8
    #: where env calls run (seedrl.rollout.executors.EXECUTORS): "thread", "process" or "ray"
    executor: str = "thread"
    #: the Ray cluster for executor="ray" ("auto": the one this machine belongs to; None: a local instance)
    ray_address: str | None = None

    def __post_init__(self) -> None:
        check_executor(self.executor)


@dataclass
class _Episode:
    traj: Trajectory
    obs: str = ""
    history: list[HistoryItem] = field(default_factory=list)
    done: bool = False
    instruction: str | None = None
    admissible: list[str] | None = None
    prompt_style: str = "seedrl"
    #: the current observation's images (``[]``: a text observation)
    images: list = field(default_factory=list)


def encode_messages(tokenizer, messages: list[dict[str, str]]) -> list[int]:
    """Render with the chat template (generation prompt appended) and encode, no extra specials."""
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def encode_step(tokenizer, messages: list[dict[str, str]], images: Sequence = ()) -> tuple[list[int], Any]:
    """A step prompt's ids and its image inputs: :func:`encode_messages` and ``None`` for a text
    observation; with images, the policy's processor and chat template
    (:func:`seedrl.models.vision.encode_chat`: placeholders expanded, pixel values computed once)."""
    if not images:
        return encode_messages(tokenizer, messages), None
    from seedrl.models.vision import encode_chat

    return encode_chat(tokenizer, messages, images)


def _fault(what: str, outcome: Outcome, timeout: float) -> str:
    """The error an episode ends with: the env's exception as it was, or what happened to its worker."""
    if outcome.kind == "raised":
        return outcome.error or "error"
    if outcome.kind == "timeout":
        return f"env {what} timed out after {timeout:g}s"
    return f"env {what} failed: {outcome.error}"


def _end_with_error(ep: _Episode, err: str) -> None:
    ep.done, ep.traj.truncated, ep.traj.error = True, True, err
    log.warning("episode %d (task %s) ended by env error: %s", ep.traj.traj_id, ep.traj.task_id, err)


def rollout(
    backend: GenerationBackend,
    tokenizer,
    make_env: Callable[[], Env],
    task_ids: Sequence[str],
    group_size: int,
    settings: RolloutSettings,
    seed: int,
    traj_offset: int = 0,
    timings: dict[str, float] | None = None,
    prompt_hook: Callable[[str, list[dict[str, str]]], list[dict[str, str]]] | None = None,
    executor: EnvExecutor | None = None,
) -> list[Trajectory]:
    """Play ``group_size`` episodes of each task; trajectories are ordered task-major.

    ``group_id`` is the task's index in ``task_ids``; ``traj_id`` counts from ``traj_offset``.
    ``seed`` fixes every sampling decision (turn t uses a seed derived from ``seed`` and t).
    ``make_env()`` makes one episode's env, in the executor's worker (``settings.executor``); the
    ``process`` executor needs it picklable (``seedrl.rollout.executors.EnvFactory(name, kwargs)``).
    ``prompt_hook(task_id, messages) -> messages`` rewrites every step prompt before it is encoded
    (diagnostics only, e.g. the skill-lift probe; training and evaluation never pass one).
    ``executor``: an executor its caller keeps across rollouts (e.g. a warm process or Ray pool from
    ``make_executor(..., keep_warm=True)``, made over ``make_env``), closed but not shut down here;
    by default one is made from ``settings`` and ended when the rollout returns.
    """
    timings = timings if timings is not None else {}
    timeout = settings.step_timeout_s
    episodes: list[_Episode] = []
    for g, task_id in enumerate(task_ids):
        for _ in range(group_size):
            tid = traj_offset + len(episodes)
            episodes.append(_Episode(traj=Trajectory(traj_id=tid, group_id=g, task_id=task_id)))
    if executor is None:
        executor = make_executor(settings.executor, make_env, workers=min(settings.env_workers, len(episodes)),
                                 ray_address=settings.ray_address)
    interrupted = False
    try:
        t0 = time.perf_counter()
        made = executor.open(len(episodes), time.monotonic() + timeout)
        if made and not any(m.ok for m in made):  # nothing to play: a config or setup error, say it
            raise SeedRLError(f"no environment could be made ({settings.executor} executor): "
                              f"{_fault('start', made[0], timeout)}")
        for ep, m in zip(episodes, made):
            if not m.ok:
                _end_with_error(ep, _fault("start", m, timeout))
        resets = executor.run({i: (env_reset, (ep.traj.task_id,)) for i, ep in enumerate(episodes) if not ep.done},
                              time.monotonic() + timeout)
        for i, out in resets.items():
            ep = episodes[i]
            if out.ok:
                (ep.obs, ep.traj.task_description, ep.instruction, ep.admissible, ep.prompt_style,
                 ep.images) = out.value
            else:
                _end_with_error(ep, _fault("reset", out, timeout))
        timings["env"] = timings.get("env", 0.0) + time.perf_counter() - t0

        for turn in range(settings.max_steps):
            live = [i for i, ep in enumerate(episodes) if not ep.done]
            if not live:
                break
            t0 = time.perf_counter()
            messages, prompts, images = [], [], []
            for i in live:
                msgs, ids, mm = _fit_prompt(tokenizer, episodes[i], turn, settings, prompt_hook)
                messages.append(msgs)
                prompts.append(ids)
                images.append(mm)
            timings["prompt"] = timings.get("prompt", 0.0) + time.perf_counter() - t0
            t0 = time.perf_counter()
            turn_seed = (seed * 1_000_003 + turn) % (2**62)
            gens = (backend.generate(prompts, settings.sampling, seed=turn_seed, images=images)
                    if any(x is not None for x in images) else
                    backend.generate(prompts, settings.sampling, seed=turn_seed))
            timings["generate"] = timings.get("generate", 0.0) + time.perf_counter() - t0

            t0 = time.perf_counter()
            deadline = time.monotonic() + timeout  # one for the turn: reading and stepping
            reads = executor.run({i: (env_read, (g.text,)) for i, g in zip(live, gens)}, deadline)
            acts = {i: r.value[0] for i, r in reads.items() if r.ok and r.value[0] is not None}
            steps = executor.run({i: (env_step, (a,)) for i, a in acts.items()}, deadline)
            for i, msgs, ids, mm, gen in zip(live, messages, prompts, images, gens):
                ep, read = episodes[i], reads[i]
                action, format_valid, format_error = read.value if read.ok else (None, False, None)
                if format_error:
                    log.warning("format_valid raised %s; counting the turn as malformed", format_error)
                sample = StepSample(prompt_ids=ids, response_ids=gen.token_ids, logprobs=gen.logprobs,
                                    traj_id=ep.traj.traj_id, group_id=ep.traj.group_id, step=turn, reward=0.0,
                                    action_valid=False, messages=msgs, response_text=gen.text,
                                    observation=ep.obs, action=action, format_valid=format_valid, images=mm)
                ep.traj.steps.append(sample)
                if not read.ok:
                    _end_with_error(ep, _fault("read", read, timeout))
                    continue
                if action is None:  # unparsable turn: the env receives nothing, the step is penalised
                    ep.history.append(HistoryItem(ep.obs, None))
                    continue
                step = steps[i]
                if not step.ok:
                    _end_with_error(ep, _fault("step", step, timeout))
                    continue
                obs, sample.reward, done, won, sample.action_valid, ep.admissible, ep.images = step.value
                ep.history.append(HistoryItem(ep.obs, action))
                ep.obs = obs
                if won:
                    ep.traj.won = True
                if done:
                    ep.done = True
            timings["env"] = timings.get("env", 0.0) + time.perf_counter() - t0
        for ep in episodes:
            if not ep.done:
                ep.traj.truncated = True
        states = executor.run({i: (env_privileged_state, ()) for i, ep in enumerate(episodes) if ep.traj.error is None},
                              time.monotonic() + timeout)
        for i, out in states.items():
            if out.ok:
                episodes[i].traj.privileged_state = out.value
            else:
                log.warning("privileged_state failed for task %s: %s", episodes[i].traj.task_id,
                            _fault("privileged_state", out, timeout))
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:  # also after a fault, so engines, slots and workers are released; after a Ctrl-C at once (a
        # hung env's worker is killed now, not after step_timeout_s: the user is waiting)
        executor.close(time.monotonic() + (0.0 if interrupted else timeout))
    return [ep.traj for ep in episodes]


def _fit_prompt(tokenizer, ep: _Episode, turn: int, s: RolloutSettings,
                hook=None) -> tuple[list[dict[str, str]], list[int], Any]:
    """The step prompt (messages, ids, image inputs or None), dropping the oldest history pairs if it
    exceeds ``max_prompt_tokens``. A prompt with images is never cut (a cut through its placeholders
    would not match its pixels): it stays over the limit, with a warning."""
    for h in range(s.history_length, -1, -1):
        text = build_step_prompt(s.env_title, ep.traj.task_description, ep.obs,
                                 ep.history, turn, h, ep.admissible, ep.instruction, ep.prompt_style)
        msgs = step_messages(text)
        if hook is not None:
            msgs = hook(ep.traj.task_id, msgs)
        ids, mm = encode_step(tokenizer, msgs, ep.images)
        if len(ids) <= s.max_prompt_tokens:
            return msgs, ids, mm
    if mm is not None:
        log.warning("prompt of %d tokens (with images) exceeds max_prompt_tokens=%d even without history; "
                    "kept whole", len(ids), s.max_prompt_tokens)
        return msgs, ids, mm
    log.warning("prompt of %d tokens exceeds max_prompt_tokens=%d even without history; left-truncating",
                len(ids), s.max_prompt_tokens)
    return msgs, ids[-s.max_prompt_tokens:], None
