"""GPU check: a few SEED (or GRPO) iterations of a random-init model of a real architecture with a
real-model preset's precision and optimiser settings; per-stage seconds, peak GPU memory and the
fraction of trainable parameters the updates changed (the LoRA GPU check).

The model is built from the architecture's published config (no download: the GPU host reaches no
hub) with seedrl's shipped tokenizer (the embedding keeps the architecture's 151,936 rows; ids past
the tokenizer's are never used), saved in bf16 as hub checkpoints are, and loaded by the trainer
from that folder exactly as a user's ``model.name`` would be. Everything else comes from ``--preset``
(its ``model`` precision/dtype/gradient checkpointing, ``algo`` and ``optim`` sections); the env is
swapped for sokoban (pure Python, generated rooms, no data) at a small batch so that the check fits
a few minutes, and evaluation is off. A random-init policy writes no parsable skill, so by default
the oracle analyzer supplies SEED's skills (``--analyzer self`` measures the self-analysis instead):
with it every SEED stage runs, the teacher re-scoring included.

    python benchmarks/gpu_check.py --arch qwen2.5-3b --preset configs/alfworld_seed.yaml \
        --iterations 2 --out gpu_check.json

CPU smoke test of the same code path: ``--arch tiny --device cpu``.

Vision-language (issue 45): ``--arch qwen2.5-vl-3b`` builds a Qwen2.5-VL-3B-Instruct-shaped model
(its published text and vision config values, :data:`VL_ARCHS`) with seedrl's shipped VL processor
(``seedrl/models/assets/vl``: the built-in tokenizer plus Qwen's vision tokens, the image processor
config, the chat template), saved with the processor files so the trainer loads it by path as it
loads ``Qwen/Qwen2.5-VL-3B-Instruct``. With a VL arch the preset's env is kept (pixel Sokoban or
EZPoints, ``mode: rgb_array``): its images go through rollout, old/reference/teacher scoring and the
update. ``benchmarks/gpu_check_vl.sh`` runs both 3B presets; ``--arch tiny-vl --device cpu`` is the
CPU smoke test.

    python benchmarks/gpu_check.py --arch qwen2.5-vl-3b \
        --preset configs/sokoban_visual_seed_qwen2.5vl_3b.yaml --iterations 2 --out vl.json

FSDP (the FSDP GPU check): the same command under ``accelerate launch --use_fsdp --fsdp_version 2
--num_processes 1 benchmarks/gpu_check.py --arch qwen2.5-1.5b ...``; the trainer shards the policy
(:mod:`seedrl.train.fsdp`) and the result says so (``fsdp``). One process per GPU; the check is
written for one (each rank would build its own temporary model folder).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch

# The published config.json values (Qwen/Qwen2.5-*-Instruct on the hub) that shape the network.
ARCHS: dict[str, dict] = {
    "qwen2.5-3b": dict(hidden_size=2048, intermediate_size=11008, num_hidden_layers=36, num_attention_heads=16,
                       num_key_value_heads=2, max_position_embeddings=32768, rope_theta=1000000.0,
                       rms_norm_eps=1e-6, tie_word_embeddings=True, vocab_size=151936),
    "qwen2.5-1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                         num_key_value_heads=2, max_position_embeddings=32768, rope_theta=1000000.0,
                         rms_norm_eps=1e-6, tie_word_embeddings=True, vocab_size=151936),
    # the CPU smoke test: the same code path at a size a laptop runs in seconds
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=4096, rope_theta=1000000.0,
                 rms_norm_eps=1e-6, tie_word_embeddings=True, vocab_size=151936),
}


# Qwen/Qwen2.5-VL-3B-Instruct's published config.json: (text half, vision half). The special token ids
# are not copied: the built model uses the shipped tokenizer's (ids past it are never used, as above).
VL_ARCHS: dict[str, tuple[dict, dict]] = {
    "qwen2.5-vl-3b": (dict(hidden_size=2048, intermediate_size=11008, num_hidden_layers=36, num_attention_heads=16,
                           num_key_value_heads=2, max_position_embeddings=128000, rope_theta=1000000.0,
                           mrope_section=[16, 24, 24], rms_norm_eps=1e-6, tie_word_embeddings=True,
                           vocab_size=151936),
                      dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, out_hidden_size=2048,
                           patch_size=14, spatial_merge_size=2, temporal_patch_size=2, window_size=112,
                           fullatt_block_indexes=[7, 15, 23, 31], tokens_per_second=2, hidden_act="silu")),
    # the CPU smoke test: the same code path at a size a laptop runs in seconds (head dim 16: mrope 2+3+3)
    "tiny-vl": (dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, max_position_embeddings=4096, rope_theta=1000000.0,
                     mrope_section=[2, 3, 3], rms_norm_eps=1e-6, tie_word_embeddings=True, vocab_size=151936),
                dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64, patch_size=14,
                     spatial_merge_size=2, temporal_patch_size=2, window_size=56, fullatt_block_indexes=[1],
                     tokens_per_second=2, hidden_act="silu")),
}


def build_vl_model_folder(arch: str, path: Path, device: str) -> int:
    """Write a random-init Qwen2.5-VL model of ``arch`` (bf16) and seedrl's shipped VL processor to ``path``;
    returns its number of parameters."""
    from transformers import AutoConfig

    from seedrl.models.loading import save_model
    from seedrl.models.vision import VISION_TOKENS, attach_processor, load_processor, model_class

    proc = load_processor("tiny-qwen2.5-vl")  # the shipped processor: built-in tokenizer + vision tokens
    tok = proc.tokenizer
    attach_processor(tok, proc)  # save_model writes the processor files (image processor, chat template)
    text, vision = (dict(x) for x in VL_ARCHS[arch])
    rope = {"rope_type": "default", "rope_theta": text.pop("rope_theta"), "mrope_section": text.pop("mrope_section")}
    special = dict(pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=None)
    ids = {t: tok.convert_tokens_to_ids(t) for t in VISION_TOKENS}
    cfg = AutoConfig.for_model("qwen2_5_vl", text_config=dict(text, rope_parameters=rope, hidden_act="silu",
                                                              attention_dropout=0.0, initializer_range=0.02,
                                                              **special),
                               vision_config=vision, image_token_id=ids["<|image_pad|>"],
                               video_token_id=ids["<|video_pad|>"], vision_start_token_id=ids["<|vision_start|>"],
                               vision_end_token_id=ids["<|vision_end|>"],
                               tie_word_embeddings=text["tie_word_embeddings"], **special)
    torch.manual_seed(0)
    with torch.device(device):
        model = model_class("qwen2_5_vl")._from_config(cfg, dtype=torch.bfloat16)
    n = sum(p.numel() for p in model.parameters())
    save_model(model, tok, path)
    del model
    return n


def build_model_folder(arch: str, path: Path, device: str) -> int:
    """Write a random-init model of ``arch`` (bf16, as hub checkpoints are) and seedrl's tokenizer (a VL
    arch: its processor) to ``path``; returns its number of parameters."""
    from transformers import AutoConfig, AutoModelForCausalLM

    if arch in VL_ARCHS:
        return build_vl_model_folder(arch, path, device)

    from seedrl.models.loading import load_tokenizer, save_model

    tok = load_tokenizer("tiny-3m")
    cfg = AutoConfig.for_model("qwen2", attention_dropout=0.0, hidden_act="silu", initializer_range=0.02,
                               pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=None,
                               **ARCHS[arch])
    torch.manual_seed(0)
    with torch.device(device):  # initialising 3B parameters on a CPU takes minutes; on the GPU, seconds
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    n = sum(p.numel() for p in model.parameters())
    save_model(model, tok, path)
    del model
    return n


def emit(args, trainer, work: Path, n_params: int, build_s: float, load_s: float, **fields) -> None:
    """Print (and with ``--out`` write) the result: what ran, where, and ``fields``; remove the temp
    folder (a 3B run leaves ~40 GB: model folder, checkpoint with optimizer state)."""
    from seedrl.provenance import git_commit
    from seedrl.train.fsdp import is_sharded

    cuda = args.device.startswith("cuda")
    shutil.rmtree(work, ignore_errors=True)
    result = {"command": "python " + " ".join(sys.argv), "commit": git_commit(),
              "device": torch.cuda.get_device_name() if cuda else "cpu", "torch": torch.__version__,
              "arch": args.arch, "parameters": n_params, "preset": args.preset, "env": trainer.cfg.env.name,
              "env_kwargs": trainer.cfg.env.kwargs,
              "precision": trainer.precision.describe(), "fsdp": is_sharded(trainer.model),
              "build_model_s": round(build_s, 1),
              "load_s": round(load_s, 1), **fields,
              "peak_gpu_mem_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if cuda else None}
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


def rollout_only(args, cfg, trainer, work: Path, n_params: int, build_s: float, load_s: float) -> None:
    """N rollouts of the whole batch (tasks x group episodes in lockstep, one generate per turn)."""
    from seedrl.train.fsdp import gathered
    from seedrl.train.update import training_samples

    runs = []
    for _ in range(args.rollout_only):
        t: dict[str, float] = {}
        t0 = time.perf_counter()
        with gathered(trainer.model):  # (a sharded policy generates from its full weights)
            trajs = trainer.collect(t)
        wall = time.perf_counter() - t0
        samples = training_samples(trajs)
        tokens = sum(len(s.response_ids) for s in samples)
        runs.append({"episodes": len(trajs), "step_samples": len(samples), "response_tokens": tokens,
                     "rollout_s": round(wall, 2), "generate_s": round(t.get("generate", 0.0), 2),
                     "gen_tokens_per_s": round(tokens / max(t.get("generate", wall), 1e-9), 1)})
    trainer.close()
    emit(args, trainer, work, n_params, build_s, load_s, backend=cfg.rollout.backend,
         max_new_tokens=cfg.rollout.max_new_tokens, turns=cfg.env.max_steps, rollouts=runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", default="qwen2.5-3b", choices=sorted([*ARCHS, *VL_ARCHS]))
    ap.add_argument("--preset", default="configs/alfworld_seed.yaml")
    ap.add_argument("--algo", default=None, help="override the preset's algo.name (e.g. grpo)")
    ap.add_argument("--analyzer", default="oracle", choices=["oracle", "self"])
    ap.add_argument("--iterations", type=int, default=2)
    ap.add_argument("--tasks", type=int, default=2, help="tasks per iteration")
    ap.add_argument("--group", type=int, default=4, help="rollouts per task")
    ap.add_argument("--max-steps", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="more key=value overrides")
    ap.add_argument("--rollout-only", type=int, default=0, metavar="N",
                    help="no training: N batched multi-turn rollouts (the HF backend's CUDA check)")
    ap.add_argument("--no-checkpoint", action="store_true",
                    help="save no checkpoint at the end (a 3B VL one with optimizer state is ~50 GB of disk)")
    ap.add_argument("--out", default=None, help="write the result JSON here")
    args = ap.parse_args()
    vl = args.arch in VL_ARCHS

    from seedrl.config import TrainConfig, load_config
    from seedrl.train.trainer import Trainer

    work = Path(tempfile.mkdtemp(prefix="seedrl-gpu-check-"))
    # a text arch plays text sokoban; a VL arch keeps the preset's image env (pixel sokoban, EZPoints)
    env = [] if vl else ["env.name=sokoban", "env.kwargs={}"]
    overrides = [
        f"run_dir={work / 'run'}", f"iterations={args.iterations}",
        f"save_every={0 if args.no_checkpoint else args.iterations}",
        f"model.name={work / 'model'}", f"model.device={args.device}",
        *env, f"env.max_steps={args.max_steps}", "env.history_length=2",
        f"rollout.tasks_per_batch={args.tasks}", f"rollout.group_size={args.group}",
        f"rollout.max_new_tokens={args.max_new_tokens}", "rollout.max_prompt_tokens=1024",
        "eval.every=0", "eval.num_tasks=0",
        f"skills.analyzer={args.analyzer}", "skills.max_new_tokens=256", "skills.max_prompt_tokens=4096",
        *([f"algo.name={args.algo}"] if args.algo else []), *args.sets,
    ]
    cfg = load_config(TrainConfig, args.preset, overrides)
    if vl and (cfg.env.kwargs or {}).get("mode") != "rgb_array":
        shutil.rmtree(work, ignore_errors=True)
        ap.error(f"--arch {args.arch} is a vision-language model: --preset must play an image env "
                 f"(env.kwargs.mode: rgb_array, e.g. configs/sokoban_visual_seed_qwen2.5vl_3b.yaml); "
                 f"{args.preset} plays {cfg.env.name} with {cfg.env.kwargs}")
    t0 = time.perf_counter()
    n_params = build_model_folder(args.arch, work / "model", args.device)
    build_s = time.perf_counter() - t0
    cuda = args.device.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    t1 = time.perf_counter()
    trainer = Trainer(cfg)
    load_s = time.perf_counter() - t1
    if args.rollout_only:
        return rollout_only(args, cfg, trainer, work, n_params, build_s, load_s)
    def full(p: torch.Tensor) -> torch.Tensor:  # a sharded (FSDP) parameter: gather it
        return (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().to("cpu", copy=True)

    before = {n: full(p) for n, p in trainer.model.named_parameters() if p.requires_grad}
    t2 = time.perf_counter()
    trainer.train()
    train_s = time.perf_counter() - t2
    changed = total = 0
    vis_changed = vis_total = 0  # the vision tower and merger (".visual."): moved only if the images reached them
    for n, p in trainer.model.named_parameters():
        if n in before:
            diff = full(p) != before[n]
            changed += int(diff.sum())
            total += diff.numel()
            if ".visual." in f".{n}":
                vis_changed += int(diff.sum())
                vis_total += diff.numel()
    rows = [json.loads(line) for line in (work / "run" / "metrics.jsonl").read_text().splitlines() if line.strip()]
    stages = sorted({k for r in rows for k in r if k.startswith("time/")})
    keys = ("rollout/samples", "rollout/response_tokens", "rollout/invalid_format_rate", "skills/parse_rate",
            "skills/signal_frac", "skills/completion_tokens", "opd/gate_mean", "loss/opd", "loss/pg", "grad_norm")
    emit(args, trainer, work, n_params, build_s, load_s, algo=cfg.algo.name, analyzer=cfg.skills.analyzer,
         model_dtype=cfg.model.dtype, gradient_checkpointing=cfg.model.gradient_checkpointing, lr=cfg.optim.lr,
         episodes_per_iteration=args.tasks * args.group, train_s=round(train_s, 1),
         stage_s_per_iteration=[{k[5:]: round(r[k], 2) for k in stages if k in r} for r in rows],
         per_iteration=[{k: r.get(k) for k in keys} for r in rows],
         params_changed_frac=changed / max(total, 1), trainable_params=total,
         **({"vision_params_changed_frac": vis_changed / max(vis_total, 1), "vision_trainable_params": vis_total}
            if vl else {}))


if __name__ == "__main__":
    main()
