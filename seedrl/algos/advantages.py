"""Episode-level GRPO advantages for multi-turn agents (verl-agent semantics).

Every environment step is one *step sample*; ``N`` below is the number of step
samples in the batch. Each sample carries the index of its group (same task,
``uid`` in verl-agent) and of its trajectory (``traj_uid``). All functions are
pure functions: no I/O, no models, and tensor code without Python loops over samples, except
GiGPO's (the end of this module): its anchor-state groups compare observation texts, and its
step returns run backwards over one trajectory's steps.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor

__all__ = ["invalid_action_penalty", "grpo_advantages", "broadcast_to_tokens", "scale_by_sign", "group_reward_std",
           "select_groups", "length_discount", "step_returns", "anchor_state_groups", "step_group_advantages",
           "gigpo_advantages"]


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


def length_discount(episode_reward: Tensor, episode_steps: Tensor, gamma: float) -> Tensor:
    """``R * gamma ** (steps - 1)``: an episode's return discounted by its length, so of two episodes
    that both win, the one with fewer steps scores higher.

    ``[N]`` rewards and ``[N]`` step counts (>= 1) -> ``[N]``. ``gamma = 1`` is the identity (GRPO's
    outcome reward); e.g. ``gamma = 0.8``: a win in 3 steps scores ``0.64 R``, in 5 steps ``0.41 R``.
    """
    if not 0 < gamma <= 1:
        raise ValueError(f"gamma must be in (0, 1], got {gamma}")
    r = episode_reward if episode_reward.is_floating_point() else episode_reward.float()
    return r * gamma ** (episode_steps.to(r.dtype) - 1).clamp(min=0)


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


def scale_by_sign(adv: Tensor, pos_coef: float = 1.0, neg_coef: float = 1.0) -> Tensor:
    """``pos_coef * A`` where ``A > 0``, ``neg_coef * A`` where ``A < 0`` (0 stays 0).

    ``[N]`` -> ``[N]``. ``(1, 0)`` keeps only better-than-group samples: rejection-sampling
    fine-tuning weighted by the advantage; ``(1, 1)`` is the identity (GRPO).
    """
    return torch.where(adv > 0, adv * pos_coef, torch.where(adv < 0, adv * neg_coef, adv))


def group_reward_std(rewards: Tensor, group_index: Tensor) -> tuple[Tensor, Tensor]:
    """Per-group population std of episode rewards, one reward per trajectory.

    Args:
        rewards: ``[M]`` episode rewards, one per trajectory.
        group_index: ``[M]`` int group id of each trajectory (any integers).

    Returns:
        ``(groups, std)``: ``[G]`` the sorted distinct group ids and ``[G]`` the std of each
        group's rewards (0 for a group whose rewards are all equal, and for a group of one).
    """
    groups, gid = torch.unique(group_index, return_inverse=True)
    r = rewards.to(torch.float64)
    g = len(groups)
    count = torch.zeros(g, dtype=r.dtype).index_add_(0, gid, torch.ones_like(r))
    mean = torch.zeros(g, dtype=r.dtype).index_add_(0, gid, r) / count
    var = torch.zeros(g, dtype=r.dtype).index_add_(0, gid, (r - mean[gid]) ** 2) / count
    return groups, var.sqrt()


def select_groups(rewards: Tensor, group_index: Tensor, *, drop_uniform: bool = False,
                  keep_frac: float = 1.0, max_groups: int | None = None, tol: float = 1e-9) -> Tensor:
    """The group ids an update keeps, in their order of first appearance.

    ``drop_uniform`` (DAPO dynamic sampling's filter): drop every group whose episode rewards are all
    equal (std <= ``tol``); it carries no outcome advantage. ``keep_frac`` < 1 (RAGEN StarPO-S
    variance filtering): keep the ``ceil(keep_frac * G)`` groups of largest reward std (ties: the
    earlier group first). ``max_groups``: then keep at most that many, earliest first (DAPO trims the
    refilled batch to the train batch size).

    Args: ``rewards`` ``[M]`` and ``group_index`` ``[M]``, one entry per trajectory.
    Returns: ``[K]`` int64 group ids, in the order they first appear in ``group_index``.
    """
    if not 0 < keep_frac <= 1:
        raise ValueError(f"keep_frac must be in (0, 1], got {keep_frac}")
    groups, std = group_reward_std(rewards, group_index)
    first = {int(g): i for i, g in reversed(list(enumerate(group_index.tolist())))}
    order = sorted(range(len(groups)), key=lambda k: first[int(groups[k])])  # appearance order
    keep = [k for k in order if not (drop_uniform and float(std[k]) <= tol)]
    if keep_frac < 1:
        n = math.ceil(keep_frac * len(order))
        rank = {k: i for i, k in enumerate(order)}
        ranked = set(sorted(keep, key=lambda k: (-float(std[k]), rank[k]))[:n])
        keep = [k for k in keep if k in ranked]
    if max_groups is not None:
        keep = keep[:max_groups]
    return torch.tensor([int(groups[k]) for k in keep], dtype=torch.int64)


# -- GiGPO (verl-agent ``gigpo/core_gigpo.py``, arXiv 2505.10978) --------------------------------------
def step_returns(rewards: Tensor, gamma: float) -> Tensor:
    """GiGPO's discounted return of each step of ONE trajectory (``compute_step_discounted_returns``,
    Eq. 5): ``G_t = r_t + gamma * G_{t+1}``, ``G_T = r_T``.

    Args: ``rewards`` ``[T]`` the env's reward of each step, in step order. Returns ``[T]``.
    """
    r = rewards if rewards.is_floating_point() else rewards.float()
    out = torch.zeros_like(r)
    running = torch.zeros((), dtype=r.dtype)
    for t in range(len(r) - 1, -1, -1):  # one trajectory's steps: a short loop
        running = r[t] + gamma * running
        out[t] = running
    return out


def anchor_state_groups(group_index: list[int], anchors: list[str], similarity: float | None = None) -> Tensor:
    """GiGPO's step groups (``build_step_group``, Eq. 6): within each episode group, the step samples
    whose anchor state (the observation the step acted on) is the same share a step group.

    ``similarity`` None: identical text. A threshold in (0, 1) (verl-agent's ``enable_similarity``):
    a sample joins the first earlier cluster of its group whose first member's text has a
    ``difflib.SequenceMatcher`` ratio >= ``similarity`` with its own, else starts a new cluster.

    Args: ``group_index`` ``[N]`` episode group ids, ``anchors`` ``[N]`` texts (lists, one per sample).
    Returns: ``[N]`` int64 step-group ids, numbered in order of first appearance.
    """
    if similarity is not None and not 0 < similarity < 1:
        raise ValueError(f"similarity must be in (0, 1), got {similarity}")
    from difflib import SequenceMatcher

    ids: list[int] = []
    exact: dict[tuple[int, str], int] = {}
    clusters: dict[int, list[tuple[str, int]]] = {}  # group -> [(first member's text, step-group id)]
    count = 0
    for g, text in zip(group_index, anchors):
        if similarity is None:
            key = (int(g), text)
            if key not in exact:
                exact[key] = count
                count += 1
            ids.append(exact[key])
            continue
        found = next((sid for rep, sid in clusters.setdefault(int(g), [])
                      if SequenceMatcher(None, text, rep).ratio() >= similarity), None)
        if found is None:
            found = count
            clusters[int(g)].append((text, found))
            count += 1
        ids.append(found)
    return torch.tensor(ids, dtype=torch.int64)


def step_group_advantages(step_scores: Tensor, step_group: Tensor, norm: Literal["mean_std", "mean"] = "mean_std",
                          eps: float = 1e-6) -> Tensor:
    """GiGPO's step-relative advantage (``step_norm_reward``, Eq. 7): ``G_j - mu_k`` (``norm="mean"``,
    verl-agent's ``mean_norm``) or ``(G_j - mu_k) / (sigma_k + eps)`` (``"mean_std"``, ``mean_std_norm``)
    over the samples of step group ``k`` (``sigma`` = unbiased std). Unlike the episode groups, a step
    group of one sample has ``mu`` = its own score (and ``sigma = 1``): its advantage is 0.

    Args: ``step_scores`` ``[N]`` (discounted step returns, invalid-action penalty applied), ``step_group``
    ``[N]`` int ids (:func:`anchor_state_groups`). Returns ``[N]``, no gradient.
    """
    if norm not in ("mean_std", "mean"):
        raise ValueError(f"unknown norm {norm!r}")
    with torch.no_grad():
        s = (step_scores if step_scores.is_floating_point() else step_scores.float()).detach()
        if s.numel() == 0:
            return s.clone()
        _, gid = torch.unique(step_group, return_inverse=True)
        k = int(gid.max()) + 1
        count = torch.zeros(k, dtype=s.dtype).index_add_(0, gid, torch.ones_like(s))
        mean = torch.zeros(k, dtype=s.dtype).index_add_(0, gid, s) / count
        sq = torch.zeros(k, dtype=s.dtype).index_add_(0, gid, (s - mean[gid]) ** 2)
        std = torch.where(count == 1, torch.ones_like(count), (sq / (count - 1).clamp(min=1)).sqrt())
        centered = s - mean[gid]
        return centered if norm == "mean" else centered / (std[gid] + eps)


def gigpo_advantages(scores: Tensor, step_scores: Tensor, group_index: Tensor, step_group: Tensor,
                     norm: Literal["mean_std", "mean"] = "mean_std", step_advantage_w: float = 1.0,
                     eps: float = 1e-6) -> Tensor:
    """GiGPO's joint advantage (``compute_gigpo_outcome_advantage``, Eq. 8): the episode-relative
    advantage (:func:`grpo_advantages` over each episode group's step samples, verl-agent's
    ``episode_norm_reward`` with ``compute_mean_std_cross_steps``) plus ``step_advantage_w`` times the
    step-relative one (:func:`step_group_advantages`), both normalised as ``norm`` says.

    Args: ``scores`` ``[N]`` episode scores (:func:`invalid_action_penalty`), ``step_scores`` ``[N]``,
    ``group_index`` ``[N]`` episode groups, ``step_group`` ``[N]`` anchor-state groups. Returns ``[N]``.
    """
    episode = grpo_advantages(scores, group_index, None, norm=norm, stats="steps", eps=eps)
    return episode + step_advantage_w * step_group_advantages(step_scores, step_group, norm, eps).to(episode.dtype)
