"""Typed run configuration. Unknown keys are errors that name the key and the valid ones.

A run is described by one YAML preset (``configs/*.yaml``) plus ``--set a.b=value`` overrides;
the resolved config is written into the run folder so every number can be traced to it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from seedrl.envs.registry import DEFAULT_ENV
from seedrl.errors import SeedRLError
from seedrl.fileio import atomic_write
from seedrl.methods import (
    AGGREGATED_SIGNALS,
    METHOD_NAMES,
    METHODS,
    MICRO_BATCH_MEAN,
    OPD_AGGS,
    SIGNAL_TOKEN_MEAN,
)

#: range-checked field types: a bad value fails when the config is built, naming the field. Every
#: float is finite (``.inf``, ``inf`` and ``nan`` are refused: an infinite rate or coefficient makes
#: every weight NaN at the first step)
PosInt = Annotated[int, Field(gt=0)]


def _threads(value: Any) -> Any:
    """``torch_threads``: a positive integer, ``auto`` or unset, one error naming both choices."""
    if value is None or value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and value > 0):
        return value
    raise ValueError(f"a positive number of threads or 'auto' (got {value!r})")


#: ``torch_threads``: a number, ``auto`` (seedrl.train.threads) or unset
Threads = Annotated[int | Literal["auto"] | None, BeforeValidator(_threads)]
NonNegInt = Annotated[int, Field(ge=0)]
PosFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
NonNegFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]
#: a learning rate: above 1 every optimizer (AdamW moves each weight by about lr per step) diverges
LearningRate = Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)]
#: a sampling temperature: above 10 the distribution is uniform noise for any model
MAX_TEMPERATURE = 10.0
PosTemperature = Annotated[float, Field(gt=0, le=MAX_TEMPERATURE, allow_inf_nan=False)]
Temperature = Annotated[float, Field(ge=0, le=MAX_TEMPERATURE, allow_inf_nan=False)]
Fraction = Annotated[float, Field(ge=0, le=1)]
Name = Annotated[str, Field(min_length=1)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


_DEVICE = re.compile(r"^(cpu|mps|(cuda|xpu|npu|hpu)(:\d+)?)$")


def check_device(device: str, what: str = "model.device") -> str:
    """``device`` if torch can name it (cpu, cuda, cuda:1, mps, ...), else a one-line error."""
    if not isinstance(device, str) or not _DEVICE.match(device.strip()):
        raise SeedRLError(f"{what} must be cpu, cuda, cuda:<index> or mps, got {device!r}")
    return device.strip()


class ModelConfig(_Strict):
    name: Name = "tiny-3m"
    #: the dtype the weights are held in. Weights the optimizer updates must be float32 (a bf16 weight
    #: does not move at lr 1e-6); bfloat16/float16 only for a frozen base under LoRA, or evaluation
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    device: Name = "cpu"
    init_seed: NonNegInt = 0
    lora: dict[str, Any] | None = None
    #: compute precision: bf16 = forward/backward under bf16 autocast over the fp32 weights; fp32;
    #: auto = bf16 only where the device computes bf16 natively (CUDA from Ampere on, CPUs with
    #: AVX512-BF16/AMX), fp32 elsewhere (seedrl.models.precision)
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    gradient_checkpointing: bool = False
    #: import Python code shipped with the model (a config.json ``auto_map``): off, so loading a model
    #: folder or hub repo never runs its code; a folder that needs it is refused in one line
    trust_remote_code: bool = False

    @field_validator("device")
    @classmethod
    def _torch_device(cls, v: str) -> str:
        try:
            return check_device(v)
        except SeedRLError as exc:
            raise ValueError(str(exc).replace("model.device must", "must")) from None

    @model_validator(mode="before")
    @classmethod
    def _legacy_autocast(cls, data: Any) -> Any:
        """Run folders written before ``precision`` existed say ``autocast_bf16: true|false``."""
        if isinstance(data, dict) and "autocast_bf16" in data:
            data = dict(data)
            old = data.pop("autocast_bf16")
            legacy = "bf16" if old else "fp32"
            given = data.get("precision")
            if given is not None and given != "auto" and given != legacy:
                raise ValueError(f"autocast_bf16={old} (the legacy key) contradicts precision={given!r}; set "
                                 f"only model.precision (fp32 | bf16 | auto)")
            data["precision"] = legacy  # the check above leaves only None, "auto" or legacy itself
        return data


class EnvConfig(_Strict):
    name: Name = DEFAULT_ENV
    kwargs: dict[str, Any] = Field(default_factory=dict)
    max_steps: PosInt = 15
    history_length: NonNegInt = 2
    step_timeout_s: PosFloat = 60.0
    workers: PosInt = 8
    #: where env calls run (seedrl.rollout.executors): thread = a daemon thread per episode; process =
    #: worker processes that hold their episodes' envs (GIL-bound engines step in parallel), killed and
    #: replaced when they hang or die (their other episodes replayed there); ray = the same as Ray actors,
    #: on this machine or a cluster (env.ray_address). A faulty env ends only its own episode (ray: the
    #: episodes its actor holds).
    executor: Literal["thread", "process", "ray"] = "thread"
    #: the Ray cluster for executor=ray ("auto" = the cluster this machine belongs to; None = start a
    #: local Ray instance)
    ray_address: str | None = None
    train_split: Name = "train"
    #: size of the train panel (None = the env's default)
    train_size: PosInt | None = None
    #: which steps the invalid-action penalty hits. format (verl-agent's rule): the response breaks
    #: the env's output format (e.g. no <think>...</think> or <action>...</action>, CJK characters);
    #: a well-formed but inadmissible command is *not* penalised. admissible: the env did not accept
    #: the action (unparsable, or inadmissible). Both rates are always logged.
    invalid_action: Literal["format", "admissible"] = "format"


class RolloutConfig(_Strict):
    #: hf: ``transformers`` generate on the policy itself. vllm: an in-process vLLM engine colocated
    #: with the trainer (needs the ``vllm`` extra), its weights synced in place after every update
    backend: Literal["hf", "vllm"] = "hf"
    #: vLLM engine dtype; auto: bfloat16 when the run computes in bf16 (``model.precision``), else the
    #: policy's dtype. The trainer keeps fp32 master weights either way; a bf16 engine samples from a
    #: bf16 copy of them (the PPO ratio is then taken against fp32 re-scoring: ``check/rollout_logp_drift``)
    vllm_dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    #: CUDA: the share of GPU memory vLLM may take (weights + KV cache); the trainer needs the rest
    vllm_gpu_memory_utilization: Annotated[float, Field(gt=0, le=1)] = 0.4
    #: KV-cache size in GiB; on CPU the default is 1 (vLLM would otherwise reserve a share of host
    #: RAM); on CUDA it overrides ``vllm_gpu_memory_utilization`` when set
    vllm_kv_cache_gb: PosFloat | None = None
    #: the engine's context length (prompt + response); default: the model's max_position_embeddings
    vllm_max_model_len: PosInt | None = None
    #: no CUDA graphs / torch.compile: fast start (seconds), slower decoding; default: on CPU only
    vllm_enforce_eager: bool | None = None
    #: CUDA only: free the KV cache and weights of the engine during the update, wake it (and reload
    #: the updated weights) before the next generation
    vllm_sleep: bool = False
    tasks_per_batch: PosInt = 8
    group_size: PosInt = 8
    #: RL rollouts always sample, so > 0
    temperature: PosTemperature = 1.0
    top_p: Annotated[float, Field(gt=0, le=1)] = 1.0
    max_new_tokens: PosInt = 64
    max_prompt_tokens: PosInt = 2048
    #: hf: the tokens every prompt of a generate call begins with (the instructions) run once and their
    #: KV cache is copied into every row (seedrl.rollout.backends.HFBackend); the same tokens up to float
    #: rounding. vllm caches shared prefixes itself
    shared_prefix: bool = False


class APIAnalyzerConfig(_Strict):
    base_url: Name = "http://127.0.0.1:8000/v1"
    model: Name = "gpt-4o-mini"
    api_key_env: str = "OPENAI_API_KEY"
    temperature: Temperature = 0.0
    max_tokens: PosInt = 1024
    timeout_s: PosFloat = 60.0
    concurrency: PosInt = 8
    parse_retries: NonNegInt = 1


class SkillsConfig(_Strict):
    """Hindsight analysis (SEED): who writes the skill, and how much it may write."""

    #: self = the rollout policy itself (SEED's default), api = an OpenAI-compatible endpoint,
    #: oracle = programmatic skills from privileged env state
    analyzer: Literal["self", "api", "oracle"] = "self"
    #: with the oracle analyzer: ``privileged`` skills state what the env's state knows (the positive
    #: control); ``observed`` ones only what the trajectory revealed (Stage-1 labels a self-analyzer can
    #: learn; envs whose oracle has ``observed_hindsight``)
    oracle_view: Literal["privileged", "observed"] = "privileged"
    max_new_tokens: PosInt = 256
    max_prompt_tokens: PosInt = 4096
    #: the analyzer's prompt: ``seed`` (SEED's structure: instructions first, the episode last, steps
    #: from 0, "Action valid" = the turn's format validity), ``seed_visual`` (SEED's visual analysis: the
    #: ``seed`` prompt with each step's image where it is marked, read by a vision-language self
    #: analyzer) or ``legacy`` (the prompt earlier Stage-1
    #: data and the tiny CPU presets' models were trained on); ``seedrl/skills/prompts.py``
    analysis_prompt: Literal["seed", "legacy", "seed_visual"] = "seed"
    #: cap on each observation in the analysis prompt (characters, head kept); None = uncapped, as SEED
    max_obs_chars: PosInt | None = None
    #: a skill of fewer words is no skill (no teacher signal for its trajectory). SEED's API analyzer
    #: asks for 5; its self-analysis (policy_vllm) keeps any non-empty skill, as 1 (or 0) does here:
    #: the GPU presets that follow SEED set 1
    min_words: NonNegInt = 5
    #: trajectories analysed per generate call by the self analyzer
    batch_size: PosInt = 64
    #: the self analyzer's calls by size instead: prompts longest first, a call's rows x (its longest
    #: prompt + max_new_tokens) within this budget (and at most batch_size rows), so prompts of like
    #: length share a call and little of its left-padded batch is padding (the same greedy skills up to
    #: float rounding). None: batch_size trajectories a call, in order
    batch_tokens: PosInt | None = None
    #: OPID step-level skills: the analyzer also names critical steps ({"step", "skill"} entries of a
    #: ``step_skills`` list), and those steps are re-scored with only their ``**Critical-Step Skill**``
    #: block ("critical-first" routing); every other step keeps the episode skill. Off = SEED's
    #: episode-only mode.
    step_skills: bool = False
    #: at most this many critical steps per trajectory (OPID uses 5 for ALFWorld)
    max_step_skills: int = Field(default=5, ge=0)
    api: APIAnalyzerConfig = Field(default_factory=APIAnalyzerConfig)


class AlgoConfig(_Strict):
    #: the method (seedrl/methods/__init__.py lists them all: grpo, gigpo, seed, seed_nogate, sdar,
    #: grpo_opsd, opsd, rlsd, skill_sd, opid)
    name: str = "grpo"
    opd_coef: NonNegFloat = 0.01
    #: gate sharpness (0 = uniform gate)
    opd_beta: NonNegFloat = 5.0
    #: how the OPD term (and Skill-SD's) is averaged over a mini-batch (seedrl.algos.signal_weights): ``micro_batch_mean``
    #: as SEED's code (verl): a token-mean over each micro-batch's tokens with a skill, 0 for a
    #: micro-batch without one, averaged over the mini-batch's micro-batches of
    #: ``optim.micro_batch_size`` samples (which then shapes the update); ``signal_token_mean``: a
    #: token-mean over all the mini-batch's tokens with a skill, up to 1/coverage larger with sparse
    #: skills, what every run before this key used (their saved configs load as it, load_run_config), and
    #: every Skill-SD run saved before config_version 2 (Skill-SD read no key until then)
    opd_agg: Literal[OPD_AGGS] = MICRO_BATCH_MEAN  # one of seedrl.methods.OPD_AGGS
    opid_coef: NonNegFloat = 1e-3
    skill_sd_coef: NonNegFloat = 1e-3
    #: weight of the PPO policy-gradient term in the loss (SDAR's ``actor.pg_loss_coef``): 1 for every
    #: method but ``opsd`` (0: the distillation term alone); the KL and entropy terms keep their own
    #: coefficients
    pg_coef: NonNegFloat = 1.0
    #: rlsd: the mixing coefficient lambda of the teacher's token weights at step 0, decaying linearly
    #: to 0 over ``rlsd_warmdown`` iterations (SDAR's ``algorithm.rlsd.rlsd_lambda``, ``warmdown_steps``:
    #: 0.5 and 100 in its launchers), and the clip range of the token weights (``clip_eps``, 0.2)
    rlsd_lambda: Annotated[float, Field(ge=0, le=1)] = 0.5
    rlsd_warmdown: PosInt = 100
    rlsd_clip_eps: Annotated[float, Field(ge=0, lt=1)] = 0.2
    #: sdar, skill_sd, grpo_opsd, opsd, rlsd: folder of <task type>.md skill files (default: the ones shipped for
    #: the env), or SDAR's own skill folder (skills/<env>/ of a ZJU-REAL/SDAR checkout, recognised by
    #: its skill_mapping.json) for the published baseline's skill text; the run records which
    #: (skill_source.json in the run folder)
    static_skill_dir: str | None = None
    #: mean_std (GRPO, SEED) or mean (OPID's default); GiGPO's mode (``mean_std_norm`` / ``mean_norm``)
    #: for both its episode and its step part
    adv_norm: Literal["mean_std", "mean"] = "mean_std"
    #: GiGPO's step-level credit (verl-agent ``algorithm.gigpo.step_advantage_w``): the weight of the
    #: step-relative advantage (anchor-state groups: step samples of one task group whose observation is
    #: the same, compared on their discounted step returns) added to the episode-relative one; 0 = none
    #: (GRPO, and SEED's launchers), ``gigpo`` sets 1 as verl-agent's launchers
    step_advantage_w: NonNegFloat = 0.0
    #: the discount of GiGPO's step returns (verl-agent ``algorithm.gamma``: 0.95 in its launchers)
    step_gamma: Annotated[float, Field(ge=0, le=1)] = 0.95
    #: GiGPO's anchor-state match: None = identical observations; a threshold in (0, 1) = verl-agent's
    #: ``enable_similarity`` with ``similarity_thresh`` (difflib ratio to a cluster's first member)
    step_similarity: Annotated[float, Field(gt=0, lt=1)] | None = None
    adv_stats: Literal["steps", "trajectories"] = "steps"
    invalid_penalty: NonNegFloat = 0.1
    #: PPO clip range: ratios outside [1 - clip_ratio, 1 + clip_ratio] are clipped
    clip_ratio: Annotated[float, Field(gt=0, lt=1)] = 0.2
    #: dual-clip constant c > 1 (verl)
    dual_clip_c: Annotated[float, Field(gt=1, allow_inf_nan=False)] = 3.0
    kl_coef: NonNegFloat = 0.01
    entropy_coef: NonNegFloat = 0.001
    #: asymmetric PPO clip, DAPO's "clip-higher" (arXiv 2503.14476: low 0.2, high 0.28); None = clip_ratio
    clip_ratio_low: Annotated[float, Field(gt=0, lt=1)] | None = None
    clip_ratio_high: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    #: weights of positive and negative advantages (1, 1: GRPO; 1, 0: rejection-sampling fine-tuning
    #: on the policy's own better-than-group episodes)
    #: the episode return GRPO normalises is ``R * episode_discount ** (steps - 1)``: 1 = the outcome
    #: alone (verl-agent); < 1 prefers the shorter of two wins. Sampled episodes often recover from a
    #: wrong move and still win, so the outcome alone barely tells the move that wastes steps from the
    #: right one, while a greedy (deterministic) policy loops on it forever (the GRPO ladder)
    episode_discount: Annotated[float, Field(gt=0, le=1)] = 1.0
    pos_adv_coef: NonNegFloat = 1.0
    neg_adv_coef: NonNegFloat = 1.0
    #: DAPO dynamic sampling (verl ``filter_groups``): drop every group whose episode rewards are all
    #: equal and roll out more tasks until ``rollout.tasks_per_batch`` groups remain, at most
    #: ``dynamic_sampling_rounds`` rollouts per iteration (then update on the groups kept; with none,
    #: the iteration makes no update: ``update/skipped``). Dropped episodes are counted (``sampling/*``):
    #: they cost environment episodes like any other.
    dynamic_sampling: bool = False
    dynamic_sampling_rounds: PosInt = 4
    #: RAGEN StarPO-S variance filtering (arXiv 2504.20073): keep this share of each batch's groups,
    #: those with the largest episode-reward std first (1.0 keeps all; RAGEN uses 0.25)
    keep_group_frac: Annotated[float, Field(gt=0, le=1)] = 1.0
    #: replay of supervised data in the update (InstructGPT's PPO-ptx, arXiv 2203.02155): every
    #: mini-batch adds expert demonstrations of the env's ``train`` split (the warm start's kind of
    #: data) making up ``replay_share`` of its response tokens, with an NLL term of weight ``replay_coef``
    replay_coef: NonNegFloat = 0.0
    replay_share: Annotated[float, Field(gt=0, lt=1)] = 0.25
    replay_demo_tasks: PosInt = 256
    replay_demo_noise: Fraction = 0.2

    @field_validator("name")
    @classmethod
    def _known_method(cls, v: str) -> str:
        if v not in METHODS:
            raise ValueError(f"unknown method {v!r}; valid: {', '.join(METHOD_NAMES)}")
        return v


class OptimConfig(_Strict):
    lr: LearningRate = 1e-6
    weight_decay: NonNegFloat = 0.01
    #: max gradient norm (0 would zero every update)
    grad_clip: PosFloat = 1.0
    ppo_epochs: PosInt = 1
    #: step samples per optimizer step (None = the whole batch); micro-batches of
    #: micro_batch_size accumulate into it, so neither needs to divide the other
    mini_batch_size: PosInt | None = 64
    micro_batch_size: PosInt = 8
    #: draw each epoch's mini-batches by a seeded permutation of the batch's step samples (a function of
    #: ``seed`` and the iteration). False: contiguous blocks of ``mini_batch_size`` samples in the batch's
    #: order (trajectory after trajectory, a group's trajectories together), as SEED's and verl-agent's
    #: actor (``actor.shuffle: False``; ``update_policy`` splits the batch in order)
    shuffle: bool = True
    #: linear learning-rate warm-up over this many optimizer steps (the scheduler steps once per
    #: optimizer step); 0 = none
    warmup_steps: NonNegInt = 0
    #: linear learning-rate warm-up over this share of the run's ``iterations`` (verl's
    #: ``lr_warmup_steps_ratio``: ``int(warmup_ratio * iterations)`` iterations, the scheduler stepping
    #: once per iteration, so the rate never changes within an iteration); 0 = none. Not together
    #: with ``warmup_steps``
    warmup_ratio: Annotated[float, Field(ge=0, lt=1)] = 0.0
    #: the PPO ratio's old log-probs: ``recompute`` (a forward pass over the batch) or ``rollout`` (the
    #: generator's own, recorded while sampling: hf backend only, which samples from the policy's own
    #: weights; saves that pass; ``check/rollout_logp_drift`` is then 0 by construction: measure it
    #: with ``recompute``, ~1e-4 on the hf backend)
    old_logp: Literal["recompute", "rollout"] = "recompute"
    #: compute each distinct step sample once: the old/reference log-prob passes score each distinct
    #: (prompt, response) pair once, and a mini-batch's identical samples (same pair, advantage and
    #: log-probs) run one forward/backward weighted by their count. The same update up to float
    #: rounding; a peaked policy's groups repeat most of their steps
    dedupe: bool = True
    #: the scoring passes (old, reference and teacher log-probs) and, in one process, the update's
    #: forwards run a prompt prefix that several samples share (>= 32 tokens: a group's step-0 prompt,
    #: the instructions every prompt begins with, teacher prompts up to their skill block) once and reuse
    #: its KV cache for each sample's continuation (``seedrl.models.prefix.shared_prefix_logprobs``; in
    #: the update ``shared_prefix_forward``, whose cache keeps its graph, the micro-batches cut from the
    #: mini-batch sorted by prompt). The same log-probs and gradients up to float rounding (fp32: within
    #: 1e-5); a batch with no shared prefix is scored as without it, bit for bit
    shared_prefix: bool = False
    #: with ``dedupe``, draw the mini-batches over the batch's distinct samples: every copy of one
    #: sample falls in the same mini-batch (a mini-batch closes at ``mini_batch_size`` samples), so each
    #: distinct sample runs one forward/backward per epoch instead of one per mini-batch its copies land
    #: in. A different split of the same batch (all copies together), so not the same update bit for bit;
    #: the same samples, weights and number of optimizer steps (up to the last partial mini-batch).
    #: One process only
    split_distinct: bool = False

    @model_validator(mode="after")
    def _one_warmup(self) -> OptimConfig:
        if self.warmup_steps and self.warmup_ratio:
            raise ValueError(f"optim.warmup_steps={self.warmup_steps} (optimizer steps) and optim.warmup_ratio="
                             f"{self.warmup_ratio} (a share of the iterations) both set a warm-up; set only one "
                             f"of them")
        return self

    @model_validator(mode="after")
    def _split_needs_dedupe(self) -> OptimConfig:
        if self.split_distinct and not self.dedupe:
            raise ValueError("optim.split_distinct splits the batch by optim.dedupe's sample keys; set "
                             "optim.dedupe=true as well")
        return self


class EvalConfig(_Strict):
    split: Name = "valid_seen"
    #: several panels evaluated at every evaluation point (None = [split]); the first is the one
    #: reported as ``eval/success_rate`` and returned as ``eval_before``/``eval_after``
    splits: list[str] | None = None
    #: first N tasks of each panel (None = all; 0 = no evaluation)
    num_tasks: NonNegInt | None = 32
    #: tasks each evaluation panel is built with (None = the split's default size, the env's
    #: ``splits``); a panel of N is the default panel's tasks in order, then more of the split's
    #: range, so a larger panel holds a smaller one as its head
    panel_size: PosInt | None = None
    every: NonNegInt = 0  # 0 = only before and after training
    greedy: bool = True
    #: sampling temperature when not greedy (must then be > 0)
    temperature: Temperature = 0.4
    batch_size: PosInt = 32
    max_steps: PosInt | None = None

    @model_validator(mode="after")
    def _sampling_temperature(self) -> EvalConfig:
        if not self.greedy and self.temperature <= 0:
            raise ValueError("eval.temperature must be > 0 when eval.greedy is false (sampling); set "
                             "eval.greedy=true for argmax decoding")
        return self

    @property
    def split_list(self) -> list[str]:
        """The evaluated panels, primary first, without repeats."""
        return list(dict.fromkeys(self.splits)) if self.splits else [self.split]


class LogConfig(_Strict):
    tensorboard: bool = False
    wandb: bool = False
    wandb_project: str = "seedrl"
    progress: bool = True
    #: trajectories per iteration written to ``run_dir/traces/iter_XXXXXX.json`` (0 = off): drawn
    #: by a seeded shuffle, successes and failures alternating; read by ``seedrl view``
    trace_trajectories: NonNegInt = 4
    #: upper bound on one iteration's trace file in bytes (steps past it are left out and counted);
    #: the default bounds a 150-iteration run at 30 MB of traces
    trace_max_bytes: Annotated[int, Field(ge=4096)] = 200_000


class TrainConfig(_Strict):
    run_dir: Name = "runs/default"
    seed: NonNegInt = 0
    iterations: NonNegInt = 10
    save_every: NonNegInt = 5  # 0 = never
    keep_checkpoints: NonNegInt = 2  # 0 = keep all
    #: torch's intra-op threads: a number, ``auto`` (the cores no other process is using, chosen again
    #: as the load changes: seedrl.train.threads), or unset (torch's default)
    torch_threads: Threads = None
    model: ModelConfig = Field(default_factory=ModelConfig)
    env: EnvConfig = Field(default_factory=EnvConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    algo: AlgoConfig = Field(default_factory=AlgoConfig)
    skills: SkillsConfig = Field(default_factory=SkillsConfig)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    log: LogConfig = Field(default_factory=LogConfig)

    @model_validator(mode="after")
    def _rollout_logprobs(self) -> TrainConfig:
        if self.optim.old_logp == "rollout" and self.rollout.backend != "hf":
            raise ValueError(f"optim.old_logp=rollout reuses the generator's log-probs, which only the hf backend "
                             f"computes with the policy's own weights; with rollout.backend={self.rollout.backend} "
                             f"use optim.old_logp=recompute")
        return self

    @property
    def opd_per_micro_batch(self) -> bool:
        """True when the method's OPD term is averaged per micro-batch (``algo.opd_agg``
        ``micro_batch_mean`` with an OPD signal): ``optim.micro_batch_size`` then shapes the update."""
        return self.algo.opd_agg == MICRO_BATCH_MEAN and METHODS[self.algo.name].signal in AGGREGATED_SIGNALS

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

    run_dir: Name = "runs/sft"
    seed: NonNegInt = 0
    #: torch's intra-op threads: a number, ``auto`` (the cores no other process is using, chosen again
    #: as the load changes: seedrl.train.threads), or unset (torch's default)
    torch_threads: Threads = None
    model: ModelConfig = Field(default_factory=ModelConfig)
    env: EnvConfig = Field(default_factory=EnvConfig)
    #: JSONL with {"messages": [...], "response": "..."} or {"prompt": "...", "response": "..."}
    data: Name | None = None
    demo_tasks: NonNegInt = 256
    #: with ``data``: also train on expert demonstrations from this many train tasks, so a policy
    #: fine-tuned to write skills (SEED Stage 1) does not forget how to act
    mix_demo_tasks: NonNegInt = 0
    #: probability of a random (non-expert) action during demonstration play, so demos include recoveries
    demo_noise: Fraction = 0.1
    #: also train on expert demonstrations of this many train tasks whose step prompts carry a hindsight
    #: skill (the env oracle's, about an attempt at the same task) where SEED's teacher prompt puts it,
    #: so the policy learns to read skills (seedrl.train.sft.skill_demonstrations)
    skill_demo_tasks: NonNegInt = 0
    #: random-action probability of the attempts those skills are written about (so they also fail)
    skill_attempt_noise: Fraction = 0.5
    #: env kwargs laid over ``env.kwargs`` for the plain demonstrations (e.g. ``{expert: prior}``: a
    #: skill-free searcher where the env's own expert knows hidden facts), and for the skill-conditioned
    #: ones (e.g. ``{expert: oracle}``: the expert that acts on what the skill states). Tasks and the
    #: evaluation use ``env.kwargs`` alone
    demo_env_kwargs: dict[str, Any] = Field(default_factory=dict)
    skill_demo_env_kwargs: dict[str, Any] = Field(default_factory=dict)
    #: random-action probability while the skill-conditioned demonstrations are played (default
    #: ``demo_noise``): off-path states (the agent somewhere the skill says the object is not), each
    #: labelled with what the expert does from there
    skill_demo_noise: Fraction | None = None
    #: each skill-conditioned demonstration first takes k random admissible actions, k drawn uniformly
    #: from 0..this, every row still labelled with the expert's action: the skill's target shown from the
    #: states a skill-free policy reaches (standing at a receptacle the skill says is wrong), not only from
    #: the expert's path. 0: off
    skill_demo_random_prefix: NonNegInt = 0
    #: who takes those first k actions: ``random`` admissible actions, or ``start``: the start model's
    #: (``model.name``) own greedy answers to the skill-free step prompt (an unparsable answer is replaced
    #: by a random admissible action), so the skill's target is also shown from the states the start's own
    #: skill-free play reaches, where a follow-rate probe asks (e.g. standing where it would "take" an
    #: object that is not there)
    skill_demo_prefix_source: Literal["random", "start"] = "random"
    #: also train on counterfactual pairs (seedrl.train.sft.counterfactual_skill_demonstrations) at the states
    #: of the start model's (``model.name``) own greedy skill-free episodes on this many train tasks: at each
    #: of the first ``counterfactual_decisions`` states, ``counterfactual_per_state`` skills naming other
    #: plausible places (the env oracle's counterfactual skills), each labelled with the action that goes
    #: there, so the skill, not the start's habit at that state, decides the target. 0: off
    counterfactual_demo_tasks: NonNegInt = 0
    counterfactual_decisions: PosInt = 3
    counterfactual_per_state: PosInt = 2
    #: who plays and labels the skill-free demonstrations: ``expert`` (the env's expert with
    #: ``demo_env_kwargs`` and ``demo_noise``) or ``start``: the start model's (``model.name``) own greedy
    #: episodes on the same train tasks, labelled with its own responses (self-distillation), so a
    #: fine-tune that adds skill-conditioned rows keeps the start's skill-free policy, which is what its
    #: harm is measured against, instead of refitting the expert's arbitrary choices
    demo_source: Literal["expert", "start"] = "expert"
    #: which of the train split's tasks (``env.train_size`` of them) give the ``demo_tasks``
    #: demonstrations: ``first`` in panel order, or ``per_type``: as even over the env's task types
    #: (``Env.task_type``; EZPoints: the pair of card values) as their sizes allow
    #: (:func:`seedrl.train.stage1.select_tasks`, as Stage-1 data does). Measured on EZPoints: evening
    #: alone did not make a tiny pixel start read the cards (it wrote the new commonest answer blind;
    #: benchmarks/results/visual_tiny/notes.md, item 8)
    demo_sampling: Literal["first", "per_type"] = "first"
    epochs: PosInt = 2
    lr: LearningRate = 1e-3
    weight_decay: NonNegFloat = 0.0
    batch_size: PosInt = 32
    micro_batch_size: PosInt = 16
    #: sort each batch by length before cutting it into micro-batches, so short examples are not padded
    #: to the batch's longest (HF's group_by_length, within a batch: the same gradient up to float
    #: summation order; off by default so earlier SFT runs reproduce bit for bit)
    group_by_length: bool = False
    #: run a prompt prefix that a micro-batch's examples share (>= 32 tokens: the instructions every step
    #: prompt begins with) once, its KV cache in the graph (seedrl.models.prefix.shared_prefix_forward):
    #: the same loss and gradient up to float rounding; off by default so earlier SFT runs reproduce bit
    #: for bit. Not with label_smoothing
    shared_prefix: bool = False
    #: label smoothing of the response tokens' cross-entropy (seedrl.algos.smoothed_nll): a warm start
    #: that keeps probability on the moves it was not shown, so RL can still sample them; 0 = plain NLL
    label_smoothing: Annotated[float, Field(ge=0, lt=1)] = 0.0
    grad_clip: PosFloat = 1.0
    #: linear learning-rate warm-up over this many optimizer steps
    warmup_steps: NonNegInt = 20
    #: ... or over ``int(warmup_ratio * total steps)`` (verl's SFT ``optim.warmup_steps_ratio``); not together
    #: with ``warmup_steps``
    warmup_ratio: Annotated[float, Field(ge=0, lt=1)] = 0.0
    #: after the warm-up the rate follows a cosine down to ``lr_floor * lr`` (verl's SFT trainer: 0)
    lr_floor: Fraction = 0.1
    #: AdamW's betas (verl's SFT trainer: 0.9, 0.95)
    betas: tuple[Annotated[float, Field(ge=0, lt=1)], Annotated[float, Field(ge=0, lt=1)]] = (0.9, 0.999)
    max_seq_tokens: PosInt = 2048
    eval: EvalConfig = Field(default_factory=EvalConfig)

    @model_validator(mode="after")
    def _one_warmup(self) -> SFTConfig:
        if self.warmup_steps and self.warmup_ratio:
            raise ValueError(f"warmup_steps={self.warmup_steps} (optimizer steps) and warmup_ratio="
                             f"{self.warmup_ratio} (a share of the steps) both set a warm-up; set warmup_steps=0 "
                             f"to use warmup_ratio")
        if self.shared_prefix and self.label_smoothing:
            raise ValueError("shared_prefix computes the plain NLL, not the label-smoothed one; set label_smoothing=0 "
                             "or shared_prefix=false")
        return self


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


class StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping (plain YAML keeps the last, so a
    second ``rollout:`` section silently replaced the first), naming the key and both lines. Keys merged
    in with ``<<:`` may be overridden, as YAML means them to be."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, Any] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.setdefault(key, key_node.start_mark)
                except TypeError:  # an unhashable key: the base class says so
                    continue
                if first is not key_node.start_mark:
                    a, b = first, key_node.start_mark
                    where = (f"line {a.line + 1}, columns {a.column + 1} and {b.column + 1}" if a.line == b.line
                             else f"lines {a.line + 1} and {b.line + 1}")
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping", node.start_mark,
                        f"key {key!r} appears twice ({where}); keep one", b)
        return super().construct_mapping(node, deep=deep)


def strict_yaml_load(text: str) -> Any:
    """``yaml.safe_load`` that refuses duplicated keys (:class:`StrictLoader`)."""
    return yaml.load(text, Loader=StrictLoader)  # noqa: S506 - a SafeLoader subclass


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """``line L, column C: <problem>`` of a YAML error, on one line."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return where + " ".join(str(problem).split())


def parse_yaml_value(raw: str, what: str) -> Any:
    """A YAML scalar/flow value given on the command line; a syntax error names ``what``."""
    try:
        return strict_yaml_load(raw)
    except yaml.YAMLError as exc:
        raise SeedRLError(f"{what}: {raw!r} is not valid YAML ({_yaml_problem(exc)}); quote or fix it") from None


def parse_overrides(items: list[str] | None) -> list[tuple[str, Any]]:
    out = []
    for item in items or []:
        if "=" not in item:
            raise SeedRLError(f"--set expects key=value (e.g. --set optim.lr=1e-5), got {item!r}")
        key, raw = item.split("=", 1)
        key = key.strip()
        if not key or any(not part for part in key.split(".")):
            raise SeedRLError(f"--set expects key=value with a dotted key such as optim.lr, got {item!r}")
        out.append((key, parse_yaml_value(raw, f"--set {key}") if raw != "" else ""))
    return out


def _explain(exc: ValidationError, cls: type[BaseModel]) -> SeedRLError:
    """One line per problem; unknown keys list the valid keys of their section."""
    msgs = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in err["loc"])
        if not loc:  # a check across fields: its message names them
            msg = err["msg"]
            msgs.append(msg[len("Value error, "):] if msg.startswith("Value error, ") else msg)
        elif err["type"] == "extra_forbidden":
            section: Any = cls
            for part in err["loc"][:-1]:
                section = section.model_fields[str(part)].annotation
            valid = ", ".join(getattr(section, "model_fields", {}))
            msgs.append(f"unknown config key {loc!r}; valid keys here: {valid}")
        else:
            msg = err["msg"]
            msg = msg[len("Value error, "):] if msg.startswith("Value error, ") else msg
            msgs.append(f"config key {loc!r}: {msg} (got {err.get('input')!r})"
                        if err["type"] in _RANGE_ERRORS else f"config key {loc!r}: {msg}")
    return SeedRLError("; ".join(msgs))


_RANGE_ERRORS = {"greater_than", "greater_than_equal", "less_than", "less_than_equal", "string_too_short",
                 "finite_number"}


def read_config_file(path: str | Path) -> dict[str, Any]:
    """The mapping in a YAML config file; any problem (missing, a folder, unreadable, bad YAML, not a
    mapping) is one line that names the file."""
    p = Path(path)
    if not p.exists():
        presets = sorted(x.name for x in Path("configs").glob("*.yaml")) if Path("configs").is_dir() else []
        raise SeedRLError(f"config {str(path)!r} not found; presets in configs/: {', '.join(presets) or 'none'}")
    if p.is_dir():
        raise SeedRLError(f"config {str(path)!r} is a folder; give a YAML file such as configs/demo_sokoban.yaml")
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise SeedRLError(f"config {str(path)!r} cannot be read: {reason}") from None
    try:
        data = strict_yaml_load(text)
    except yaml.YAMLError as exc:
        raise SeedRLError(f"config {str(path)!r} is not valid YAML: {_yaml_problem(exc)}; fix the file") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SeedRLError(f"config {str(path)!r} must be a mapping of keys (run_dir: ..., model: {{...}}) at the "
                          f"top level, got a {type(data).__name__}")
    return data


def load_config(cls: type[_Strict], path: str | Path | None = None, overrides: list[str] | None = None):
    """Read a YAML preset (or defaults), apply ``key=value`` overrides, validate. A run's saved
    ``config.yaml`` read as a preset loads too: its ``config_version`` is not a setting, but a version
    this seedrl knows gives the file the defaults of its time, as :func:`load_run_config` reads it (so
    ``seedrl train -c <run>/config.yaml --resume`` resumes the run it describes); a file without one is
    read with today's defaults."""
    data: dict[str, Any] = read_config_file(path) if path is not None else {}
    version = data.pop(CONFIG_VERSION_KEY, None)
    if (isinstance(version, int) and not isinstance(version, bool)
            and LEGACY_CONFIG_VERSION <= version < RUN_CONFIG_VERSION):
        _legacy_defaults(data, version)
    for key, value in parse_overrides(overrides):
        _set_path(data, key, value)
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        raise _explain(exc, cls) from None


#: the top-level key of a run's saved ``config.yaml`` that says which defaults it was saved under
CONFIG_VERSION_KEY = "config_version"
#: the version :func:`save_config` writes into a run's ``config.yaml``. Bump it (and add the old
#: version's defaults to :func:`_legacy_defaults`) when a default changes what a run computes.
RUN_CONFIG_VERSION = 2
#: the version of a ``config.yaml`` without ``config_version``: saved before versions were written
LEGACY_CONFIG_VERSION = 0


def _legacy_defaults(data: dict[str, Any], version: int) -> None:
    """Give the saved config ``data`` of ``version`` the defaults of its time, in place.

    Version 0 (no ``config_version``: saved before versions were written) had no version to say its
    era; every save lists every key of its time, so the missing keys tell it. A config without
    ``skills.analysis_prompt`` used the legacy analyzer prompt (and its env the defaults of that era,
    ``Env.legacy_kwargs``, e.g. this project's step prompt on real ALFWorld); a method with an OPD
    term without ``algo.opd_agg`` averaged that term over the signal tokens (``signal_token_mean``;
    other methods have no OPD term: the default stays). Skill-SD ignored ``algo.opd_agg`` before version 2
    and averaged its term over the signal tokens: a Skill-SD run saved before it loads with
    ``signal_token_mean``, whatever its saved key says. Version 1 saves every key, but not an env's
    kwargs it left at their defaults: an env whose default changed with version 2 (Search's and WebShop's
    step prompt in verl-agent's structure) gets, for a run saved below it, the kwargs of its time
    (``Env.kwargs_before``)."""
    _env_kwargs_before(data, version)
    algo = data.get("algo")
    if isinstance(algo, dict) and algo and version < 2:
        spec = METHODS.get(algo.get("name", "grpo"))
        if spec is not None and spec.signal == "skill_sd":  # its term was a token-mean over the signal tokens
            algo["opd_agg"] = SIGNAL_TOKEN_MEAN
    if version != LEGACY_CONFIG_VERSION:
        return
    skills = data.get("skills")
    if isinstance(skills, dict) and skills and "analysis_prompt" not in skills:
        skills["analysis_prompt"] = "legacy"
        env = data.get("env")
        if isinstance(env, dict):  # env defaults changed in the same era (e.g. a step-prompt layout)
            from seedrl.envs.registry import env_class

            try:
                legacy = env_class(env.get("name", DEFAULT_ENV)).legacy_kwargs
            except SeedRLError:  # an unknown env: validation names it below
                legacy = {}
            if legacy:
                env["kwargs"] = {**legacy, **(env.get("kwargs") or {})}
    algo = data.get("algo")
    if isinstance(algo, dict) and algo and "opd_agg" not in algo:
        spec = METHODS.get(algo.get("name", "grpo"))
        if spec is not None and spec.signal == "opd":
            algo["opd_agg"] = SIGNAL_TOKEN_MEAN


def _env_kwargs_before(data: dict[str, Any], version: int) -> None:
    """The saved env's kwargs of a run saved under ``version``: every ``Env.kwargs_before`` entry of a
    later version, under the kwargs the run set itself."""
    env = data.get("env")
    if not isinstance(env, dict) or version >= RUN_CONFIG_VERSION:
        return
    from seedrl.envs.registry import env_class

    try:
        before = env_class(env.get("name", DEFAULT_ENV)).kwargs_before
    except SeedRLError:  # an unknown env: validation names it below
        return
    old: dict[str, Any] = {}
    for since in sorted(before):
        if version < since:
            old = {**before[since], **old}  # the earliest change's value is the one the run had
    if old:
        env["kwargs"] = {**old, **(env.get("kwargs") or {})}


def load_run_config(path: str | Path) -> TrainConfig:
    """A run folder's saved ``config.yaml``, with the defaults of the version it was saved under
    (``config_version``; absent: :data:`LEGACY_CONFIG_VERSION`, see :func:`_legacy_defaults`), so
    resuming or evaluating an old run never switches its analyzer prompt, env defaults or OPD
    aggregation silently. A version newer than this seedrl's is refused."""
    data: dict[str, Any] = read_config_file(path)
    version = data.pop(CONFIG_VERSION_KEY, LEGACY_CONFIG_VERSION)
    if not isinstance(version, int) or isinstance(version, bool) or not 0 <= version <= RUN_CONFIG_VERSION:
        raise SeedRLError(f"config {str(path)!r} has config_version {version!r}; this seedrl reads versions "
                          f"0-{RUN_CONFIG_VERSION} (a newer seedrl saved it: upgrade seedrl to read it)")
    _legacy_defaults(data, version)
    try:
        return TrainConfig.model_validate(data)
    except ValidationError as exc:
        raise _explain(exc, TrainConfig) from None


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
    """Write ``cfg`` as YAML, atomically (never a half config.yaml). A run config (:class:`TrainConfig`)
    starts with ``config_version`` (:data:`RUN_CONFIG_VERSION`), which :func:`load_run_config` reads."""
    data = cfg.model_dump(mode="json")
    if isinstance(cfg, TrainConfig):
        data = {CONFIG_VERSION_KEY: RUN_CONFIG_VERSION} | data
    atomic_write(path, yaml.safe_dump(data, sort_keys=False))
