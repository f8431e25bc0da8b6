"""Pure tensor functions for GRPO / SEED: advantages and token-level losses."""

from __future__ import annotations

from seedrl.algos.advantages import (
    broadcast_to_tokens,
    group_reward_std,
    grpo_advantages,
    invalid_action_penalty,
    length_discount,
    scale_by_sign,
    select_groups,
)
from seedrl.algos.losses import (
    OPD_AGGS,
    entropy_from_logits,
    kl_k3,
    masked_mean,
    masked_sum,
    opd_loss,
    opid_advantage,
    ppo_clip_loss,
    rlsd_advantage,
    rlsd_lambda,
    signal_weights,
    skill_sd_loss,
    smoothed_nll,
    token_logprobs,
    token_mean,
)

__all__ = [
    "broadcast_to_tokens",
    "entropy_from_logits",
    "group_reward_std",
    "grpo_advantages",
    "invalid_action_penalty",
    "kl_k3",
    "length_discount",
    "masked_mean",
    "masked_sum",
    "OPD_AGGS",
    "opd_loss",
    "opid_advantage",
    "ppo_clip_loss",
    "rlsd_advantage",
    "rlsd_lambda",
    "scale_by_sign",
    "select_groups",
    "signal_weights",
    "skill_sd_loss",
    "smoothed_nll",
    "token_logprobs",
    "token_mean",
]
