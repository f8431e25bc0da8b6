"""Rollout throughput of the built-in tiny models on this machine.

Measures, per model, precision and batch size (= episodes played in lockstep), generated tokens
per second and environment steps per second of a full multi-turn sokoban rollout with the HF
backend, and the training-side cost of scoring the same samples (old log-probs). Precisions:
``fp32``, ``bf16`` (bf16 autocast over fp32 weights, what training uses with model.precision=bf16)
and ``bf16-weights`` (weights held in bf16: inference only). Every row carries the CPU's detected
bf16 capability (what ``model.precision=auto`` decides on). Prints a markdown table to paste into
benchmarks/RESULTS.md together with the command, commit and machine line it prints.

``--backends hf vllm`` adds the generation backend as a dimension: the same model, weights, env,
batch and precision through HF ``generate`` and through the in-process vLLM engine
(``rollout.backend=vllm``; run it in .venv-vllm: ``make bench-vllm``), with the vLLM/HF ratio of
generated tokens per second. vLLM runs in-process with ``OMP_NUM_THREADS=1`` (its CPU build binds
one thread per core it is given); pass ``--threads 1`` for a like-for-like HF row.

    python benchmarks/rollout_throughput.py [--models tiny-3m tiny-15m] [--batch-sizes 8 32 64]
    OMP_NUM_THREADS=1 .venv-vllm/bin/python benchmarks/rollout_throughput.py --backends hf vllm --threads 1

``--env ezpoints --env-kwargs '{"mode": "rgb_array"}' --models tiny-qwen2.5-vl --vl-heads 2``: a
vision-language policy on an env that shows images (each step's images go to both backends; scoring
reads the same pixel values). ``--vl-heads``: the built-in VL models' attention heads (4: head size 16,
which vLLM's CPU attention refuses; 2 gives 32).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import time

import torch

from seedrl.envs.panels import build_panel
from seedrl.envs.registry import env_class, make_env
from seedrl.models.loading import load_model, load_tokenizer
from seedrl.models.precision import device_capability
from seedrl.models.scoring import batched_logprobs
from seedrl.provenance import cpu_name
from seedrl.rollout.backends import SamplingParams, make_backend
from seedrl.rollout.runner import RolloutSettings, rollout


def machine() -> str:
    cpu = cpu_name()
    return f"{cpu} ({device_capability('cpu').description}), {os.cpu_count()} cores, torch {torch.__version__}, " \
           f"{torch.get_num_threads()} threads, python {platform.python_version()}"


def env_steps_per_second(env_name: str, tasks: int, **kwargs) -> tuple[float, int]:
    """Expert play alone (no model): env steps per second, and steps measured."""
    env = make_env(env_name, **kwargs)
    ids = list(build_panel(env_name, "train").task_ids[:tasks])
    for t in ids:  # build/cache games first: generation is not stepping
        env.reset(t)
    steps, t0 = 0, time.perf_counter()
    for t in ids:
        env.reset(t)
        for _ in range(50):
            a = env.expert_action()
            if a is None:
                break
            steps += 1
            if env.step(a)[2]:
                break
    env.close()
    return steps / (time.perf_counter() - t0), steps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="*", default=["tiny-3m", "tiny-15m"])
    ap.add_argument("--batch-sizes", nargs="+", type=int, default=[8, 32, 64])
    ap.add_argument("--precisions", nargs="+", default=["fp32", "bf16", "bf16-weights"],
                    choices=["fp32", "bf16", "bf16-weights"])
    ap.add_argument("--max-steps", type=int, default=5)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2, help="best of N (the machine may be shared)")
    ap.add_argument("--envs", nargs="*", default=["sokoban", "textworld"], help="env-only expert-play rate")
    ap.add_argument("--backends", nargs="+", default=["hf"], choices=["hf", "vllm"],
                    help="generation backends to compare (vllm: needs .venv-vllm)")
    ap.add_argument("--vllm-kv-cache-gb", type=float, default=0.5)
    ap.add_argument("--env", default="sokoban", help="the env the policy plays")
    ap.add_argument("--env-kwargs", default="{}", help='its kwargs as JSON, e.g. \'{"mode": "rgb_array"}\'')
    ap.add_argument("--vl-heads", type=int, default=None, help="attention heads of the built-in VL models")
    args = ap.parse_args()
    env_kwargs = json.loads(args.env_kwargs)
    if args.vl_heads:
        from seedrl.models.vision import TINY_VL_CONFIGS

        for key, (kind, text, vis) in list(TINY_VL_CONFIGS.items()):
            TINY_VL_CONFIGS[key] = (kind, dict(text, num_attention_heads=args.vl_heads), vis)
    torch.set_num_threads(args.threads)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"command: python benchmarks/rollout_throughput.py --models {' '.join(args.models)} --batch-sizes "
          f"{' '.join(map(str, args.batch_sizes))} --precisions {' '.join(args.precisions)} --threads {args.threads}"
          f" --backends {' '.join(args.backends)} --env {args.env} --env-kwargs '{args.env_kwargs}'"
          + (f" --vl-heads {args.vl_heads}" if args.vl_heads else ""))
    print(f"commit: {commit}\nmachine: {machine()}\n")
    if args.envs:
        print("| env | expert steps/s (reset + step, no model) | steps |\n|---|---|---|")
        for name in args.envs:
            rate, n = env_steps_per_second(name, 8)
            print(f"| {name} | {rate:.0f} | {n} |", flush=True)
        print()
    cap = device_capability("cpu")
    native = "native" if cap.native_bf16 else "emulated"
    print("| model | precision | cpu bf16 | backend | episodes | gen tokens/s | vs hf | env steps/s | rollout s "
          "| score tokens/s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    panel = build_panel(args.env, "train")
    for name in args.models:
        tok = load_tokenizer(name)
        for precision in args.precisions:
            bf16 = precision == "bf16"
            model = load_model(name, "bfloat16" if precision == "bf16-weights" else "float32", tokenizer=tok)
            # untrained models rarely close </action>: every turn runs to max_new_tokens (a worst case)
            settings = RolloutSettings(env_title=env_class(args.env).title or args.env, max_steps=args.max_steps,
                                       history_length=2, sampling=SamplingParams(max_new_tokens=args.max_new_tokens))
            hf_rate: dict[int, float] = {}
            for backend_name in args.backends:
                opts = {"kv_cache_gb": args.vllm_kv_cache_gb} if backend_name == "vllm" else {}
                backend = make_backend(backend_name, model, tok, bf16=bf16, **opts)
                for bs in args.batch_sizes:
                    best = None
                    for r in range(args.repeats):
                        t0 = time.perf_counter()
                        trajs = rollout(backend, tok, lambda: make_env(args.env, **env_kwargs),
                                        list(panel.task_ids[:bs]), 1, settings, seed=r)
                        dt = time.perf_counter() - t0
                        samples = [s for t in trajs for s in t.steps]
                        gen = sum(len(s.response_ids) for s in samples)
                        t1 = time.perf_counter()
                        batched_logprobs(model, [s.prompt_ids for s in samples], [s.response_ids for s in samples],
                                         tok.pad_token_id, micro_batch_size=16, bf16=bf16,
                                         images=[s.images for s in samples])
                        st = time.perf_counter() - t1
                        scored = sum(len(s.prompt_ids) + len(s.response_ids) for s in samples)
                        row = (gen / dt, len(samples) / dt, dt, scored / st)
                        best = row if best is None or row[0] > best[0] else best
                    if backend_name == "hf":
                        hf_rate[bs] = best[0]
                    ratio = f"{best[0] / hf_rate[bs]:.2f}x" if bs in hf_rate else "-"
                    print(f"| {name} | {precision} | {native if precision != 'fp32' else '-'} | {backend_name} | {bs} "
                          f"| {best[0]:.0f} | {ratio} | {best[1]:.1f} | {best[2]:.1f} | {best[3]:.0f} |", flush=True)
                backend.close()


if __name__ == "__main__":
    main()
