"""What a rollout produces: trajectories made of step samples with exact token ids."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class StepSample:
    """One environment step = one training sample.

    ``prompt_ids`` and ``response_ids`` are the exact tokens the generator saw and produced; they
    are never re-tokenised on the way to the loss. ``logprobs[i]`` is the generator's log-prob
    (temperature 1, before top-p) of ``response_ids[i]``.

    Two validity flags, one per invalid-action rule (``env.invalid_action``): ``action_valid`` =
    the env accepted the action (it parsed and was admissible), ``format_valid`` = the turn has the
    env's output format (verl-agent's rule, ``Env.format_valid``). :func:`penalized` picks one.

    A vision-language policy's step on an env with images: ``images`` are the processor's tensors of
    the observation's images (:class:`~seedrl.models.vision.ImageInputs`), the ones generation saw;
    ``prompt_ids`` hold their placeholder tokens, ``messages`` the text alone. ``None``: a text step.
    """

    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float]
    traj_id: int
    group_id: int
    step: int
    reward: float
    action_valid: bool
    messages: list[dict[str, str]] = field(default_factory=list)
    response_text: str = ""
    observation: str = ""
    action: str | None = None
    format_valid: bool = True
    images: Any = None

    @property
    def image_digest(self) -> str:
        """What tells apart two prompts with the same token ids (same-sized images): "" without images."""
        return self.images.digest if self.images is not None else ""


def penalized(sample: StepSample, rule: str) -> bool:
    """Whether the invalid-action penalty hits this step under ``rule`` (``format``: the turn broke
    the output format; ``admissible``: the env did not accept the action)."""
    if rule == "format":
        return not sample.format_valid
    if rule == "admissible":
        return not sample.action_valid
    raise ValueError(f"unknown invalid-action rule {rule!r}; valid: format, admissible")


@dataclass
class Trajectory:
    """One episode. ``group_id`` is shared by the ``group_size`` episodes of the same task."""

    traj_id: int
    group_id: int
    task_id: str
    task_description: str = ""
    steps: list[StepSample] = field(default_factory=list)
    won: bool = False
    truncated: bool = False
    error: str | None = None
    privileged_state: dict[str, Any] = field(default_factory=dict)

    @property
    def episode_reward(self) -> float:
        return float(sum(s.reward for s in self.steps))

    @property
    def num_invalid(self) -> int:
        """Steps whose action the env did not accept (unparsable or inadmissible)."""
        return sum(not s.action_valid for s in self.steps)

    @property
    def num_format_invalid(self) -> int:
        """Steps whose turn broke the env's output format (verl-agent's invalid-action rule)."""
        return sum(not s.format_valid for s in self.steps)
