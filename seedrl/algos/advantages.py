"""Episode-level GRPO advantages for multi-turn agents (verl-agent semantics).

Every environment step is one *step sample*; ``N`` below is the number of step
samples in the batch. Each sample carries the index of its group (same task,
``uid`` in verl-agent) and of its trajectory (``traj_uid``). All functions are
pure tensor functions: no I/O, no models, no Python loops over samples.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

__all__ = ["invalid_action_penalty", "grpo_advantages", "broadcast_to_tokens"]


def invalid_action_penalty(episode_reward: Tensor, action_valid: Tensor, coef: float) -> Tensor:
    """Per-step score ``s_j = R(tau_j) - coef * 1[action of step j invalid]``.

    Args:
        episode_reward: ``[N]`` float; ``episode_reward[j]`` is the return of the
            trajectory that step sample ``j`` belongs to (e.g. ``10 * won``).
        action_valid: ``[N]`` bool (or 0/1 ints); True where the step's action parsed
            to a valid environment action.
        coef: penalty per invalid step (0.1 for ALFWorld/WebShop, 0.01 for Search).

    Returns:
        ``[N]`` scores in the dtype of ``episode_reward`` (promoted to float).
    """
    reward = episode_reward if episode_reward.is_floating_point() else episode_reward.float()
    invalid = (~action_valid.bool()).to(reward.dtype)
    return reward - coef * invalid


def _group_stats(values: Tensor, group: Tensor, num_groups: int) -> tuple[Tensor, Tensor]:
    """Per-group mean and unbiased std of ``values[k]`` grouped by ``group[k]``.

    Groups with exactly one element get ``mean=0, std=1`` (verl convention).
    Returns two ``[num_groups]`` tensors.
    """
    count = torch.zeros(num_groups, dtype=values.dtype, device=values.device)
    count.index_add_(0, group, torch.ones_like(values))
    total = torch.zeros_like(count).index_add_(0, group, values)
    mean = total / count.clamp(min=1)
    sq = torch.zeros_like(count).index_add_(0, group, (values - mean[group]) ** 2)
    std = (sq / (count - 1).clamp(min=1)).sqrt()
    single = count == 1
    mean = torch.where(single, torch.zeros_like(mean), mean)
    std = torch.where(single, torch.ones_like(std), std)
    return mean, std


def grpo_advantages(
    scores: Tensor,
    group_index: Tensor,
    traj_index: Tensor | None,
    norm: Literal["mean_std", "mean"] = "mean_std",
    stats: Literal["steps", "trajectories"] = "steps",
    eps: float = 1e-6,
) -> Tensor:
    """Episode-level GRPO advantage, one value per step sample.

    verl-agent ``episode_norm_reward`` / ``compute_grpo_outcome_advantage``:
    ``A_j = (s_j - mu_g) / (sigma_g + eps)`` (``norm="mean_std"``) or
    ``A_j = s_j - mu_g`` (``norm="mean"``), where ``g`` is the group of sample ``j``
    and ``s_j`` is the sample's own score (numerator always uses the step score).

    Group statistics ``mu_g``, ``sigma_g`` (``sigma`` = UNBIASED std):

    * ``stats="steps"`` (verl-agent ``compute_mean_std_cross_steps=True``, the
      SEED/GRPO default): over all step samples of the group, so longer
      trajectories weigh more.
    * ``stats="trajectories"``: over one value per trajectory, where a
      trajectory's value is the MEAN of its step scores. (verl-agent's
      ``compute_mean_std_cross_steps=False`` instead takes the score of the first
      step of the trajectory it encounters in batch order; the two coincide when
      every step of a trajectory has the same score, e.g. without an invalid-action
      penalty. The mean is order-independent, hence our choice.)

    A group with a single element -- one step sample under ``"steps"``, one
    trajectory under ``"trajectories"`` -- gets ``mu=0, sigma=1`` as in verl, so its
    advantage is ``s_j / (1 + eps)`` (``"mean_std"``) or ``s_j`` (``"mean"``).
    A group of several elements with identical values has ``sigma=0`` and all
    advantages 0.

    Args:
        scores: ``[N]`` float step scores (see :func:`invalid_action_penalty`).
        group_index: ``[N]`` int group id (any integers; need not be contiguous).
        traj_index: ``[N]`` int trajectory id. A trajectory is identified by the
            pair ``(group_index, traj_index)`` (as verl's ``(uid, traj_uid)``), so
            per-group local ids are fine. Unused (may be None) for ``stats="steps"``.
        norm: ``"mean_std"`` or ``"mean"``.
        stats: ``"steps"`` or ``"trajectories"``.
        eps: added to ``sigma`` in ``"mean_std"`` mode.

    Returns:
        ``[N]`` advantages (no gradient). Broadcast to tokens with
        :func:`broadcast_to_tokens`.
    """
    if norm not in ("mean_std", "mean"):
        raise ValueError(f"unknown norm {norm!r}")
    if stats not in ("steps", "trajectories"):
        raise ValueError(f"unknown stats {stats!r}")
    with torch.no_grad():
        s = scores if scores.is_floating_point() else scores.float()
        s = s.detach()
        if s.numel() == 0:
            return s.clone()
        _, gid = torch.unique(group_index, return_inverse=True)
        num_groups = int(gid.max()) + 1
        if stats == "steps":
            mean, std = _group_stats(s, gid, num_groups)
        else:
            if traj_index is None:
                raise ValueError('stats="trajectories" needs traj_index')
            _, tloc = torch.unique(traj_index, return_inverse=True)
            key = gid * (int(tloc.max()) + 1) + tloc  # unique per (group, traj) pair
            _, tid = torch.unique(key, return_inverse=True)
            num_traj = int(tid.max()) + 1
            t_count = torch.zeros(num_traj, dtype=s.dtype, device=s.device).index_add_(
                0, tid, torch.ones_like(s)
            )
            t_score = torch.zeros_like(t_count).index_add_(0, tid, s) / t_count
            t_group = torch.zeros(num_traj, dtype=gid.dtype, device=gid.device).scatter_(0, tid, gid)
            mean, std = _group_stats(t_score, t_group, num_groups)
        centered = s - mean[gid]
        if norm == "mean":
            return centered
        return centered / (std[gid] + eps)


def broadcast_to_tokens(adv: Tensor, response_mask: Tensor) -> Tensor:
    """Broadcast per-sample advantages to response tokens.

    Args:
        adv: ``[N]`` advantages.
        response_mask: ``[N, T]`` 1 on response tokens, 0 elsewhere (bool/int/float).

    Returns:
        ``[N, T]`` tensor ``adv[:, None] * response_mask`` in ``adv``'s dtype.
    """
    return adv.unsqueeze(-1) * response_mask.to(adv.dtype)
