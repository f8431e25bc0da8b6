"""Methods are configurations of the one RL loop: which skill, which signal, where it enters.

| method    | skills               | distillation signal                      |
|-----------|----------------------|------------------------------------------|
| grpo      | none                 | none                                     |
| seed      | hindsight (analyzer) | OPD loss, gate sigmoid(beta * delta)     |
| grpo_opsd | hindsight (analyzer) | OPD loss, uniform gate (beta = 0)        |
"""

from __future__ import annotations

from dataclasses import dataclass

from seedrl.config import TrainConfig


@dataclass(frozen=True)
class MethodSpec:
    uses_skills: bool
    opd: bool
    opd_beta: float = 0.0


def method_spec(cfg: TrainConfig) -> MethodSpec:
    a = cfg.algo
    if a.name == "grpo":
        return MethodSpec(uses_skills=False, opd=False)
    if a.name == "seed":
        return MethodSpec(uses_skills=True, opd=True, opd_beta=a.opd_beta)
    if a.name == "grpo_opsd":
        return MethodSpec(uses_skills=True, opd=True, opd_beta=0.0)
    raise AssertionError(f"unhandled method {a.name}")  # config validation lists the valid names


def make_analyzer(cfg: TrainConfig, backend, tokenizer):
    s = cfg.skills
    if s.analyzer == "self":
        from seedrl.skills.analyzers.self_analyzer import SelfAnalyzer

        return SelfAnalyzer(backend, tokenizer, s.max_new_tokens, s.max_prompt_tokens, s.max_obs_chars,
                            s.min_words, batch_size=cfg.eval.batch_size, seed=cfg.seed)
    if s.analyzer == "api":
        from seedrl.skills.analyzers.api import APIAnalyzer

        return APIAnalyzer(**s.api.model_dump(), min_words=s.min_words, max_obs_chars=s.max_obs_chars)
    from seedrl.skills.analyzers.oracle import OracleAnalyzer

    return OracleAnalyzer(env_name=cfg.env.name)
