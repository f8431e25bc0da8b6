"""Typed run configuration. Unknown keys are errors that name the key and the valid ones.

A run is described by one YAML preset (``configs/*.yaml``) plus ``--set a.b=value`` overrides;
the resolved config is written into the run folder so every number can be traced to it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from seedrl.envs.registry import DEFAULT_ENV
from seedrl.errors import SeedRLError
from seedrl.methods import METHOD_NAMES, METHODS


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ModelConfig(_Strict):
    name: str = "tiny-3m"
    #: the dtype the weights are held in. Weights the optimizer updates must be float32 (a bf16 weight
    #: does not move at lr 1e-6); bfloat16/float16 only for a frozen base under LoRA, or evaluation
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    device: str = "cpu"
    init_seed: int = 0
    lora: dict[str, Any] | None = None
    #: compute precision: bf16 = forward/backward under bf16 autocast over the fp32 weights; fp32;
    #: auto = bf16 only where the device computes bf16 natively (CUDA from Ampere on, CPUs with
    #: AVX512-BF16/AMX), fp32 elsewhere (seedrl.models.precision)
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    gradient_checkpointing: bool = False

    @model_validator(mode="before")
    @classmethod
    def _legacy_autocast(cls, data: Any) -> Any:
        """Run folders written before ``precision`` existed say ``autocast_bf16: true|false``."""
        if isinstance(data, dict) and "autocast_bf16" in data:
            data = dict(data)
            old = data.pop("autocast_bf16")
            data.setdefault("precision", "bf16" if old else "fp32")
        return data


class EnvConfig(_Strict):
    name: str = DEFAULT_ENV
    kwargs: dict[str, Any] = Field(default_factory=dict)
    max_steps: int = 15
    history_length: int = 2
    step_timeout_s: float = 60.0
    workers: int = 8
    train_split: str = "train"
    #: size of the train panel (None = the env's default)
    train_size: int | None = None
    #: which steps the invalid-action penalty hits. format (verl-agent's rule): the response breaks
    #: the env's output format (e.g. no <think>...</think> or <action>...</action>, CJK characters);
    #: a well-formed but inadmissible command is *not* penalised. admissible: the env did not accept
    #: the action (unparsable, or inadmissible). Both rates are always logged.
    invalid_action: Literal["format", "admissible"] = "format"


class RolloutConfig(_Strict):
    backend: Literal["hf"] = "hf"
    tasks_per_batch: int = 8
    group_size: int = 8
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 64
    max_prompt_tokens: int = 2048


class APIAnalyzerConfig(_Strict):
    base_url: str = "http://127.0.0.1:8000/v1"
    model: str = "gpt-4o-mini"
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float = 0.0
    max_tokens: int = 1024
    timeout_s: float = 60.0
    concurrency: int = 8
    parse_retries: int = 1


class SkillsConfig(_Strict):
    """Hindsight analysis (SEED): who writes the skill, and how much it may write."""

    #: self = the rollout policy itself (SEED's default), api = an OpenAI-compatible endpoint,
    #: oracle = programmatic skills from privileged env state
    analyzer: Literal["self", "api", "oracle"] = "self"
    max_new_tokens: int = 256
    max_prompt_tokens: int = 4096
    max_obs_chars: int | None = 2000
    min_words: int = 5
    #: trajectories analysed per generate call by the self analyzer
    batch_size: int = 64
    #: OPID step-level skills: the analyzer also names critical steps ({"step", "skill"} entries of a
    #: ``step_skills`` list), and those steps are re-scored with only their ``**Critical-Step Skill**``
    #: block ("critical-first" routing); every other step keeps the episode skill. Off = SEED's
    #: episode-only mode.
    step_skills: bool = False
    #: at most this many critical steps per trajectory (OPID uses 5 for ALFWorld)
    max_step_skills: int = Field(default=5, ge=0)
    api: APIAnalyzerConfig = Field(default_factory=APIAnalyzerConfig)


class AlgoConfig(_Strict):
    #: the method (seedrl/methods.py lists them all: grpo, seed, seed_nogate, sdar, grpo_opsd,
    #: skill_sd, opid)
    name: str = "grpo"
    opd_coef: float = 0.01
    opd_beta: float = 5.0
    opid_coef: float = 1e-3
    skill_sd_coef: float = 1e-3
    #: sdar: folder of <task type>.md skill files (default: the ones shipped for the env)
    static_skill_dir: str | None = None
    #: mean_std (GRPO, SEED) or mean (OPID's default)
    adv_norm: Literal["mean_std", "mean"] = "mean_std"
    adv_stats: Literal["steps", "trajectories"] = "steps"
    invalid_penalty: float = 0.1
    clip_ratio: float = 0.2
    dual_clip_c: float = 3.0
    kl_coef: float = 0.01
    entropy_coef: float = 0.001

    @field_validator("name")
    @classmethod
    def _known_method(cls, v: str) -> str:
        if v not in METHODS:
            raise ValueError(f"unknown method {v!r}; valid: {', '.join(METHOD_NAMES)}")
        return v


class OptimConfig(_Strict):
    lr: float = 1e-6
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    ppo_epochs: int = 1
    #: step samples per optimizer step (None = the whole batch)
    mini_batch_size: int | None = 64
    micro_batch_size: int = 8
    warmup_steps: int = 0


class EvalConfig(_Strict):
    split: str = "valid_seen"
    #: several panels evaluated at every evaluation point (None = [split]); the first is the one
    #: reported as ``eval/success_rate`` and returned as ``eval_before``/``eval_after``
    splits: list[str] | None = None
    num_tasks: int | None = 32
    every: int = 0  # 0 = only before and after training
    greedy: bool = True
    temperature: float = 0.4
    batch_size: int = 32
    max_steps: int | None = None

    @property
    def split_list(self) -> list[str]:
        """The evaluated panels, primary first, without repeats."""
        return list(dict.fromkeys(self.splits)) if self.splits else [self.split]


class LogConfig(_Strict):
    tensorboard: bool = False
    wandb: bool = False
    wandb_project: str = "seedrl"
    progress: bool = True


class TrainConfig(_Strict):
    run_dir: str = "runs/default"
    seed: int = 0
    iterations: int = 10
    save_every: int = 5
    keep_checkpoints: int = 2
    torch_threads: int | None = None
    model: ModelConfig = Field(default_factory=ModelConfig)
    env: EnvConfig = Field(default_factory=EnvConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    algo: AlgoConfig = Field(default_factory=AlgoConfig)
    skills: SkillsConfig = Field(default_factory=SkillsConfig)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    log: LogConfig = Field(default_factory=LogConfig)

    @model_validator(mode="after")
    def _method_defaults(self) -> TrainConfig:
        """A method's own defaults (``MethodSpec.defaults``) for the fields the config leaves unset."""
        for dotted, value in METHODS[self.algo.name].defaults.items():
            section, key = dotted.split(".")
            sub = getattr(self, section)
            if key not in sub.model_fields_set:
                setattr(sub, key, value)
        return self


class SFTConfig(_Strict):
    """Supervised warm start: expert demonstrations from the env, or (prompt, response) JSONL."""

    run_dir: str = "runs/sft"
    seed: int = 0
    torch_threads: int | None = None
    model: ModelConfig = Field(default_factory=ModelConfig)
    env: EnvConfig = Field(default_factory=EnvConfig)
    #: JSONL with {"messages": [...], "response": "..."} or {"prompt": "...", "response": "..."}
    data: str | None = None
    demo_tasks: int = 256
    #: with ``data``: also train on expert demonstrations from this many train tasks, so a policy
    #: fine-tuned to write skills (SEED Stage 1) does not forget how to act
    mix_demo_tasks: int = 0
    #: probability of a random (non-expert) action during demonstration play, so demos include recoveries
    demo_noise: float = 0.1
    #: also train on expert demonstrations of this many train tasks whose step prompts carry a hindsight
    #: skill (the env oracle's, about an attempt at the same task) where SEED's teacher prompt puts it,
    #: so the policy learns to read skills (seedrl.train.sft.skill_demonstrations)
    skill_demo_tasks: int = 0
    #: random-action probability of the attempts those skills are written about (so they also fail)
    skill_attempt_noise: float = 0.5
    epochs: int = 2
    lr: float = 1e-3
    weight_decay: float = 0.0
    batch_size: int = 32
    micro_batch_size: int = 16
    grad_clip: float = 1.0
    warmup_steps: int = 20
    max_seq_tokens: int = 2048
    eval: EvalConfig = Field(default_factory=EvalConfig)


def _set_path(d: dict[str, Any], dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    cur = d
    for k in keys[:-1]:
        nxt = cur.get(k)
        if nxt is None:
            nxt = cur[k] = {}
        if not isinstance(nxt, dict):
            raise SeedRLError(f"--set {dotted}: {k!r} is not a section")
        cur = nxt
    cur[keys[-1]] = value


def parse_overrides(items: list[str] | None) -> list[tuple[str, Any]]:
    out = []
    for item in items or []:
        if "=" not in item:
            raise SeedRLError(f"--set expects key=value, got {item!r}")
        key, raw = item.split("=", 1)
        out.append((key.strip(), yaml.safe_load(raw) if raw != "" else ""))
    return out


def _explain(exc: ValidationError, cls: type[BaseModel]) -> SeedRLError:
    """One line per problem; unknown keys list the valid keys of their section."""
    msgs = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in err["loc"])
        if err["type"] == "extra_forbidden":
            section: Any = cls
            for part in err["loc"][:-1]:
                section = section.model_fields[str(part)].annotation
            valid = ", ".join(getattr(section, "model_fields", {}))
            msgs.append(f"unknown config key {loc!r}; valid keys here: {valid}")
        else:
            msgs.append(f"config key {loc!r}: {err['msg']}")
    return SeedRLError("; ".join(msgs))


def load_config(cls: type[_Strict], path: str | Path | None = None, overrides: list[str] | None = None):
    """Read a YAML preset (or defaults), apply ``key=value`` overrides, validate."""
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.exists():
            presets = sorted(x.name for x in Path("configs").glob("*.yaml")) if Path("configs").is_dir() else []
            raise SeedRLError(f"config {str(path)!r} not found; presets in configs/: {', '.join(presets) or 'none'}")
        data = yaml.safe_load(p.read_text()) or {}
    for key, value in parse_overrides(overrides):
        _set_path(data, key, value)
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        raise _explain(exc, cls) from None


def with_overrides(cfg: _Strict, overrides: list[str] | None):
    """A copy of ``cfg`` with ``key=value`` overrides applied (validated like a loaded config)."""
    if not overrides:
        return cfg
    data = cfg.model_dump(mode="json")
    for key, value in parse_overrides(overrides):
        _set_path(data, key, value)
    try:
        return type(cfg).model_validate(data)
    except ValidationError as exc:
        raise _explain(exc, type(cfg)) from None


def save_config(cfg: BaseModel, path: str | Path) -> None:
    Path(path).write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
