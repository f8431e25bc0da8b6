"""Skill following: does the policy do what a skill says when the skill disagrees with it?

Part of ``seedrl eval --with-skills`` (:mod:`seedrl.eval.skill_lift`) for environments whose oracle
defines ``counterfactual(env, default_action, rng) -> (skill, named_action) | None``. A lift (success
with the correct skill) can come from format tokens or from a skill that says what the policy would do
anyway; following a skill that names *another* sensible action is the proof that the policy reads.

For each of the first ``max_decisions`` steps of each plain (skill-free) attempt:

1. the env is rebuilt at that step's state (reset, then the attempt's earlier actions replayed);
2. the policy's skill-free choice there is the action it took in the plain attempt (``default``);
3. the oracle writes a *counterfactual* skill, worded as its hindsight skills are, that names a legal
   action other than ``default`` (another solution, another plausible place);
4. the policy answers that step's prompt again with the skill where SEED's teacher prompt puts it.

A decision is *followed* when the new action is the named one, *kept* when it is still ``default``.
The follow rate is followed / decisions: the share of decisions where the policy switches to what the
skill names when that differs from its skill-free choice.
"""

from __future__ import annotations

import random
from typing import Any

from seedrl.envs.oracle import norm
from seedrl.envs.registry import make_env
from seedrl.rollout.backends import GenerationBackend, SamplingParams
from seedrl.rollout.runner import encode_messages
from seedrl.rollout.types import Trajectory
from seedrl.skills.analyzers.oracle import oracle_module
from seedrl.skills.injection import inject_into_messages


def has_counterfactual(env_name: str) -> bool:
    """Whether the env's oracle can write counterfactual skills."""
    mod = oracle_module(env_name)
    return mod is not None and callable(getattr(mod, "counterfactual", None))


def counterfactual_decisions(env_name: str, env_kwargs: dict[str, Any], trajs: list[Trajectory], *,
                             max_decisions: int = 1, seed: int = 0) -> list[dict[str, Any]]:
    """The decisions to probe: one per step (the first ``max_decisions`` of each playable attempt) where
    the policy chose an action and the oracle names another. Each: ``task_id``, ``step``, ``default``,
    ``named``, ``skill`` and ``messages`` (the plain step prompt, to carry the skill)."""
    mod = oracle_module(env_name)
    if mod is None or not callable(getattr(mod, "counterfactual", None)):
        return []
    out: list[dict[str, Any]] = []
    for t in trajs:
        if t.error is not None or not t.steps:
            continue
        rng = random.Random(f"counterfactual/{seed}/{t.task_id}")
        env = make_env(env_name, **env_kwargs)
        try:
            env.reset(t.task_id)
            for i, s in enumerate(t.steps[:max_decisions]):
                if s.action is not None:
                    made = mod.counterfactual(env, s.action, rng)
                    if made is not None:
                        skill, named = made
                        if norm(named) == norm(s.action):
                            raise ValueError(f"{env_name}'s counterfactual named the default action {named!r}")
                        out.append({"task_id": t.task_id, "step": i, "default": s.action, "named": named,
                                    "skill": skill, "messages": s.messages})
                    _, _, done, _ = env.step(s.action)  # the plain attempt's own next state
                    if done:
                        break
        finally:
            env.close()
    return out


def follow_probe(backend: GenerationBackend, tokenizer, env_name: str, env_kwargs: dict[str, Any],
                 decisions: list[dict[str, Any]], *, sampling: SamplingParams, max_prompt_tokens: int,
                 seed: int = 0, batch_size: int = 32) -> list[dict[str, Any]]:
    """Answer every decision's step prompt with its counterfactual skill injected; return one row per
    decision with the ``chosen`` action (``None`` if unparsable, as the env parses it), ``followed`` and
    ``kept``."""
    env = make_env(env_name, **env_kwargs)
    rows: list[dict[str, Any]] = []
    for start in range(0, len(decisions), batch_size):
        chunk = decisions[start:start + batch_size]
        prompts = [encode_messages(tokenizer, inject_into_messages(d["messages"], d["skill"]))[-max_prompt_tokens:]
                   for d in chunk]
        for d, gen in zip(chunk, backend.generate(prompts, sampling, seed + start)):
            chosen = env.parse_action(gen.text)
            rows.append({k: d[k] for k in ("task_id", "step", "default", "named", "skill")} | {
                "chosen": chosen, "followed": chosen is not None and norm(chosen) == norm(d["named"]),
                "kept": chosen is not None and norm(chosen) == norm(d["default"])})
    env.close()
    return rows


def follow_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """``decisions``, ``follow_rate`` (None without decisions), ``kept_rate``, ``other_rate`` (another
    action or none), and the follow rate by step and by the default action's verb (``by_step``,
    ``by_default``: ``{key: [decisions, followed]}``), which say where a start stops reading (e.g. a
    default ``take`` that a skill naming another place rarely overrides)."""
    n = len(rows)
    followed = sum(r["followed"] for r in rows)
    kept = sum(r["kept"] for r in rows)
    by_step: dict[str, list[int]] = {}
    by_default: dict[str, list[int]] = {}
    for r in rows:
        for table, key in ((by_step, str(r["step"])), (by_default, (r["default"].split() or ["?"])[0].lower())):
            cell = table.setdefault(key, [0, 0])
            cell[0] += 1
            cell[1] += bool(r["followed"])
    return {"decisions": n, "followed": followed, "follow_rate": followed / n if n else None,
            "kept_rate": kept / n if n else None, "other_rate": (n - followed - kept) / n if n else None,
            "by_step": dict(sorted(by_step.items(), key=lambda kv: int(kv[0]))),
            "by_default": dict(sorted(by_default.items()))}
