"""The update of one iteration: PPO epochs over mini-batches of the batch's step samples."""

from __future__ import annotations


def warmup_schedule(warmup_steps: int, warmup_ratio: float, iterations: int) -> tuple[bool, int]:
    """``(per_iteration, warm)``: the learning-rate scheduler steps once per iteration over a warm-up
    of ``int(warmup_ratio * iterations)`` iterations (``optim.warmup_ratio``, verl's
    ``lr_warmup_steps_ratio`` over its training steps), or once per optimizer step over
    ``warmup_steps`` steps."""
    if warmup_ratio > 0:
        return True, int(warmup_ratio * iterations)
    return False, max(0, warmup_steps)


def warmup_factor(warm: int):
    """The LambdaLR multiplier after ``s`` scheduler steps: ``min(1, (s + 1) / warm)``, a linear rise
    whose first step already runs at ``lr / warm`` and which stays at 1 from step ``warm - 1`` on;
    1 throughout when ``warm`` is 0. (verl's ``get_constant_schedule_with_warmup`` gives
    ``min(1, s / warm)``: its first update runs at rate 0; docs/deviations.md.)"""
    def factor(s: int) -> float:
        return min(1.0, (s + 1) / warm) if warm else 1.0
    return factor
