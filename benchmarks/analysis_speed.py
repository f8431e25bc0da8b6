"""SEED's self-analysis before / after the generation speed-ups, on the same trajectories, in one run.

    python benchmarks/analysis_speed.py --config configs/household_seed.yaml \\
        --set model.name=/tmp/hh/S2/sft/model --set torch_threads=1 --pairs 3

Plays one rollout batch of ``--config`` (``skills.analyzer`` is forced to ``self``), then times
``SelfAnalyzer.analyze`` on those trajectories in ``--pairs`` interleaved pairs (interleaving keeps a
shared machine's load drift out of the ratio):

- **before**: transformers' own KV cache (``torch.cat`` per step) and a log-prob recorded per token;
- **after**: the defaults, a cache that fills preallocated buffers (``seedrl.models.kvcache``) and no
  log-probs (``SamplingParams.logprobs=False``).

With ``--batch-tokens N[,M...]`` the plans are instead **in order** (``skills.batch_size`` trajectories a
call, in trajectory order) and **by size N** for each budget (``skills.batch_tokens=N``: prompts longest
first, a call's rows x width within N), all on the current generation path, each also timed answering one
token per prompt in the same calls (its prefill alone; the rest is decoding).

It prints a markdown table (seconds per run, the first plan's time over each plan's, per round) and fails if the two ever
write different skill text: greedy analysis must be bit-identical. A model that writes skills (a
Stage-1 start) stops at ``"}``; an untrained one runs every answer to ``skills.max_new_tokens``.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from seedrl.config import TrainConfig, load_config
from seedrl.experiments.compare import git_state, machine_info, weight_fingerprint
from seedrl.rollout.backends import HFBackend, SamplingParams
from seedrl.skills.analyzers.self_analyzer import SelfAnalyzer, plan_calls
from seedrl.train.trainer import Trainer


class _RecordingBackend:
    """The pre-change generation: transformers' cache and log-probs recorded whatever the params say."""

    def __init__(self, backend: HFBackend) -> None:
        self.inner = HFBackend(backend.model, backend.tokenizer, bf16=backend.bf16, preallocate=False)
        self.model = backend.model

    def generate(self, prompts, params, seed):
        return self.inner.generate(prompts, dataclasses.replace(params, logprobs=True), seed)


def timed(analyzer: SelfAnalyzer, trajs) -> tuple[float, list]:
    """Seconds of one ``analyze`` call and its results."""
    t0 = time.perf_counter()
    rs = analyzer.analyze(trajs)
    return time.perf_counter() - t0, rs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="configs/household_seed.yaml")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    ap.add_argument("--batch-tokens", help="time calls in order against calls by size with these budgets "
                                           "(comma-separated), each also with its prefill alone")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        cfg = load_config(TrainConfig, args.config, [*args.overrides, "skills.analyzer=self", f"run_dir={d}",
                                                     "eval.num_tasks=0", "log.progress=false", "algo.kl_coef=0"])
        tr = Trainer(cfg)
        trajs = tr.collect({})
        s = cfg.skills
        if args.batch_tokens:
            plans = {"in order": (tr.backend, None)}
            plans |= {f"by size {int(n)}": (tr.backend, int(n)) for n in args.batch_tokens.split(",")}
        else:
            plans = {"before": (_RecordingBackend(tr.backend), s.batch_tokens), "after": (tr.backend, s.batch_tokens)}
        analyzers = {k: SelfAnalyzer(b, tr.tokenizer, s.max_new_tokens, s.max_prompt_tokens, s.max_obs_chars,
                                     s.min_words, batch_size=s.batch_size, seed=cfg.seed, bf16=tr.precision.bf16,
                                     analysis_prompt=s.analysis_prompt, batch_tokens=bt)
                     for k, (b, bt) in plans.items()}
        first = next(iter(plans))
        seconds: dict[str, list[float]] = {k: [] for k in analyzers}
        prefill: dict[str, list[float]] = {k: [] for k in analyzers}
        texts: dict[str, list[str]] = {}
        prompts = [analyzers[first].prompt_ids(t) for t in trajs]
        one = SamplingParams(max_new_tokens=1, greedy=True, logprobs=False)
        for _ in range(args.pairs):
            for k, a in analyzers.items():
                dt, rs = timed(a, trajs)
                seconds[k].append(dt)
                texts[k] = [r.raw for r in rs]
                tokens = [r.completion_tokens for r in rs]
                if args.batch_tokens:  # the same calls answering one token: what their prefill costs
                    t0 = time.perf_counter()
                    for call in plan_calls([len(p) for p in prompts], s.batch_size, a.batch_tokens, s.max_new_tokens):
                        with a._precision():
                            tr.backend.generate([prompts[i] for i in call], one, seed=cfg.seed)
                    prefill[k].append(time.perf_counter() - t0)
            if any(texts[k] != texts[first] for k in texts):
                raise SystemExit("the plans wrote different skill text: the speed-up changed the analysis")
        tr.close()
    git, m = git_state(), machine_info()
    start = Path(cfg.model.name)
    print("command: python " + " ".join(sys.argv))
    print(f"start: {cfg.model.name} (sha256 {weight_fingerprint(start)[0] if start.is_dir() else None})")
    print(f"commit: {git['commit']}{' (dirty)' if git['dirty'] else ''}; machine: {m['cpu_model']}, "
          f"{m['cpu_bf16']}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, bf16 {tr.precision.bf16}; {len(trajs)} trajectories, "
          f"batch_size {s.batch_size}, max_new_tokens {s.max_new_tokens}, parsed "
          f"{sum(r.skill is not None for r in rs)}\n")
    prompt_tokens = [len(p) for p in prompts]
    print(f"prompt tokens: {sum(prompt_tokens)} (mean {statistics.mean(prompt_tokens):.0f}, max {max(prompt_tokens)}); "
          f"completion tokens: {sum(tokens)} (mean {statistics.mean(tokens):.0f}, max {max(tokens)})\n")
    print("| analysis | calls | median s | all runs (s) | prefill alone, median s | "
          f"{first} / this, median of the rounds' ratios |\n|---|---|---|---|---|---|")
    for k, xs in seconds.items():
        calls = len(plan_calls(prompt_tokens, s.batch_size, analyzers[k].batch_tokens, s.max_new_tokens))
        ratios = [b / a for b, a in zip(seconds[first], xs)]
        pre = f"{statistics.median(prefill[k]):.2f}" if prefill[k] else "-"
        print(f"| {k} | {calls} | {statistics.median(xs):.2f} | {', '.join(f'{x:.2f}' for x in xs)} | {pre} | "
              f"{statistics.median(ratios):.2f}x |")
    print("\nidentical skill text: yes")


if __name__ == "__main__":
    main()
