"""A picklable toy environment with injectable faults, and a fake generation backend (no model).

The fault is chosen by the task id's prefix, so one factory (the class itself) serves every episode
and a worker process can rebuild it: ``ok-3``, ``raise-1`` (step 2 raises), ``hang-0`` (step 2
blocks for ``HANG_S``, ignoring everything), ``hangreset-0``, ``exit-0`` (step 2 kills its process
with ``os._exit``), ``exitread-0`` (so does reading the answer to step 2), ``hangclose-0`` (``close``
blocks), ``pid-0`` (healthy, but its observations name its process: replayed in another process, its
episode does not come out the same). If ``SEEDRL_TOY_PIDS`` (or the ``pids`` argument: a Ray worker does
not see the test's environment) names a folder, every env writes its process id there (to check that
worker processes are gone afterwards). ``make_s``: making an env takes that long.
"""

from __future__ import annotations

import os
import random
import time
import zlib
from pathlib import Path

from seedrl.envs.base import Env

HANG_S = 30.0
FAULT_STEP = 2


class ToyEnv(Env):
    name = title = "toy"
    splits = {"train": 8}

    def __init__(self, pids: str | None = None, make_s: float = 0.0) -> None:
        super().__init__()
        time.sleep(make_s)
        self.mode, self.t, self.pos, self.goal = "ok", 0, 0, 0
        folder = pids or os.environ.get("SEEDRL_TOY_PIDS")
        if folder:
            Path(folder, str(os.getpid())).touch()

    @classmethod
    def panel_task_ids(cls, split, size, **kw):
        return [f"ok-{i}" for i in range(size)]

    def reset(self, task_id: str) -> str:
        self.task_id, self.t, self.pos = task_id, 0, 0
        self.mode = task_id.split("-", 1)[0]
        # a faulty env never finishes before its fault
        self.goal = random.Random(task_id).randint(-2, 2) if self.mode == "ok" else 100
        self.task_description = f"reach {self.goal}"
        if self.mode == "hangreset":
            time.sleep(HANG_S)
        return self._where()

    def _where(self) -> str:
        return f"at {self.pos}" + (f" (process {os.getpid()})" if self.mode == "pid" else "")

    def parse_action(self, text: str):
        if self.mode == "exitread" and self.t + 1 == FAULT_STEP:
            os._exit(3)
        return super().parse_action(text)

    def step(self, action: str):
        self.t += 1
        if self.t == FAULT_STEP:
            if self.mode == "raise":
                raise RuntimeError("simulator crashed")
            if self.mode == "hang":
                time.sleep(HANG_S)
            if self.mode == "exit":
                os._exit(3)
        valid = action in ("left", "right")
        self.pos += {"left": -1, "right": 1}.get(action, 0)
        won = self.pos == self.goal
        return self._where(), 10.0 if won else 0.0, won, {"won": won, "action_valid": valid}

    def admissible_actions(self):
        return ["left", "right"]

    def privileged_state(self):
        return {"pos": self.pos, "goal": self.goal}

    def close(self) -> None:
        if self.mode == "hangclose":
            time.sleep(HANG_S)


class DiesMakingOnce:
    """A picklable env factory whose second env made in a process kills that process (``os._exit``), once:
    the first time, as ``marker`` (a path it then creates) tells."""

    made = 0  # envs made in this process

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __call__(self) -> ToyEnv:
        DiesMakingOnce.made += 1
        if DiesMakingOnce.made == 2 and not os.path.exists(self.marker):
            Path(self.marker).touch()
            os._exit(3)
        return ToyEnv()


class FakeBackend:
    """Seeded random moves, as a policy would sample them: the answer depends on the seed and the prompt
    only (not on the prompt's place in the batch, so an episode plays the same whatever its neighbours),
    never on time or threads."""

    def __init__(self, tokenizer) -> None:
        self.tok, self.calls = tokenizer, []

    def sync_weights(self, model) -> None:
        pass

    def generate(self, prompts, params, seed):
        from seedrl.rollout.backends import Generation  # here: a worker process that makes ToyEnv skips torch

        self.calls.append(len(prompts))
        out = []
        for ids in prompts:
            rng = random.Random(f"{seed}/{zlib.crc32(repr(ids).encode())}")
            move = rng.choice(["left", "right", "left", "right", "jump"])
            text = f"<think>go {move}</think><action>{move}</action>" if rng.random() > 0.1 else "<think>hm</think>"
            tok = self.tok(text, add_special_tokens=False)["input_ids"]
            out.append(Generation(tok, [0.0] * len(tok), text, "stop"))
        return out
