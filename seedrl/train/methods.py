"""Methods are configurations of the one RL loop: which skill, which signal, where it enters.

| method    | skills                    | signal                                             | enters as   |
|-----------|---------------------------|----------------------------------------------------|-------------|
| grpo      | none                      | none                                               | -           |
| seed      | hindsight (analyzer)      | OPD, gate sigmoid(beta * (teacher - logp))         | loss        |
| grpo_opsd | hindsight (analyzer)      | OPD, uniform gate (beta = 0)                       | loss        |
| sdar      | static file per task type | OPD, gate sigmoid(beta * (teacher - logp))         | loss        |
| opid      | hindsight (analyzer)      | opid_coef * (teacher - old)                        | advantage   |
| skill_sd  | hindsight (analyzer)      | rho * k3 reverse KL to the teacher                 | loss        |

Every method shares rollout, GRPO advantages, PPO clip, KL and entropy; the teacher is always the
rollout-time policy with the skill inserted after the task line, scored before the update.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from seedrl.config import TrainConfig


@dataclass(frozen=True)
class MethodSpec:
    skills: Literal["none", "hindsight", "static"]
    signal: Literal["none", "opd", "opid", "skill_sd"]
    opd_beta: float = 0.0

    @property
    def uses_skills(self) -> bool:
        return self.skills != "none"


def method_spec(cfg: TrainConfig) -> MethodSpec:
    a = cfg.algo
    return {
        "grpo": MethodSpec("none", "none"),
        "seed": MethodSpec("hindsight", "opd", a.opd_beta),
        "grpo_opsd": MethodSpec("hindsight", "opd", 0.0),
        "sdar": MethodSpec("static", "opd", a.opd_beta),
        "opid": MethodSpec("hindsight", "opid"),
        "skill_sd": MethodSpec("hindsight", "skill_sd"),
    }[a.name]


def make_analyzer(cfg: TrainConfig, backend, tokenizer):
    s = cfg.skills
    if method_spec(cfg).skills == "static":
        from seedrl.skills.analyzers.static import StaticSkillAnalyzer

        return StaticSkillAnalyzer(cfg.env.name, cfg.algo.static_skill_dir)
    if s.analyzer == "self":
        from seedrl.skills.analyzers.self_analyzer import SelfAnalyzer

        return SelfAnalyzer(backend, tokenizer, s.max_new_tokens, s.max_prompt_tokens, s.max_obs_chars,
                            s.min_words, batch_size=s.batch_size, seed=cfg.seed)
    if s.analyzer == "api":
        from seedrl.skills.analyzers.api import APIAnalyzer

        return APIAnalyzer(**s.api.model_dump(), min_words=s.min_words, max_obs_chars=s.max_obs_chars)
    from seedrl.skills.analyzers.oracle import OracleAnalyzer

    return OracleAnalyzer(env_name=cfg.env.name)
