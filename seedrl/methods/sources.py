"""Skill sources: who writes a run's skills (``MethodSpec.skills``), as an analyzer object.

``static`` -> the env's static skill files (SDAR); ``hindsight`` -> ``skills.analyzer``: the policy
itself (``self``, SEED's default), an OpenAI-compatible endpoint (``api``) or the env's programmatic
oracle (``oracle``). ``none`` -> no analyzer at all.
"""

from __future__ import annotations

from seedrl.config import TrainConfig
from seedrl.methods import method_spec_for


def make_analyzer(cfg: TrainConfig, backend, tokenizer, bf16: bool = False, source: str | None = None):
    """The analyzer of ``source`` (default: the run's method's; None when it uses no skills).
    SEED's Stage 1 asks for ``source="hindsight"`` whatever the method of the config it reads."""
    s = cfg.skills
    source = source or method_spec_for(cfg.algo.name).skills
    if source == "none":
        return None
    if source == "static":
        from seedrl.skills.analyzers.static import StaticSkillAnalyzer

        return StaticSkillAnalyzer(cfg.env.name, cfg.algo.static_skill_dir)
    if s.analyzer == "self":
        from seedrl.skills.analyzers.self_analyzer import SelfAnalyzer

        return SelfAnalyzer(backend, tokenizer, s.max_new_tokens, s.max_prompt_tokens, s.max_obs_chars,
                            s.min_words, batch_size=s.batch_size, seed=cfg.seed,
                            bf16=bf16, step_skills=s.step_skills,
                            max_step_skills=s.max_step_skills, analysis_prompt=s.analysis_prompt,
                            batch_tokens=s.batch_tokens)
    if s.analyzer == "api":
        from seedrl.skills.analyzers.api import APIAnalyzer

        return APIAnalyzer(**s.api.model_dump(), min_words=s.min_words, max_obs_chars=s.max_obs_chars,
                           step_skills=s.step_skills, max_step_skills=s.max_step_skills,
                           analysis_prompt=s.analysis_prompt)
    from seedrl.skills.analyzers.oracle import OracleAnalyzer

    return OracleAnalyzer(env_name=cfg.env.name, min_words=s.min_words, step_skills=s.step_skills,
                          max_step_skills=s.max_step_skills, view=s.oracle_view)
