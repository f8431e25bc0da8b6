"""SFT step time with and without ``group_by_length``, on a Stage-1-like mix of lengths.

Stage-1 SFT mixes analysis prompts (~1,900 tokens: a whole trajectory) with action prompts (~300
tokens); cut into micro-batches in random order, nearly every micro-batch holds a long one and pads
everything to it. This times optimizer steps of the same batches both ways (alternated, best of N)
and counts the tokens the forward passes compute.

    python benchmarks/sft_step.py [--model tiny-3m] [--long-frac 0.35] [--steps 4] [--threads 1]
"""

from __future__ import annotations

import argparse
import time

import torch

from seedrl.models.loading import load_model, load_tokenizer
from seedrl.models.precision import device_capability, resolve_precision
from seedrl.provenance import cpu_name, git_commit
from seedrl.train.sft import micro_batches, sft_train


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="tiny-3m")
    ap.add_argument("--long-frac", type=float, default=0.35, help="share of ~1,900-token examples")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--micro-batch-size", type=int, default=8)
    ap.add_argument("--steps", type=int, default=4, help="optimizer steps per timing")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    tok = load_tokenizer(args.model)
    g = torch.Generator().manual_seed(0)
    n = args.batch_size * args.steps
    pairs = []
    for _ in range(n):
        long = torch.rand((), generator=g).item() < args.long_frac
        plen = int(torch.randint(1800, 2000, (), generator=g)) if long else int(torch.randint(250, 350, (), generator=g))
        rlen = int(torch.randint(60, 120, (), generator=g)) if long else int(torch.randint(4, 12, (), generator=g))
        pairs.append((torch.randint(5, len(tok), (plen,), generator=g).tolist(),
                      torch.randint(5, len(tok), (rlen,), generator=g).tolist()))
    precision = resolve_precision("auto", "cpu")
    lengths = [len(p) + len(r) for p, r in pairs]
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(0)).tolist()
    best = {}
    padded = {}
    for group in (False, True):
        padded[group] = sum(len(mb) * max(lengths[i] for i in mb)
                            for s in range(0, n, args.batch_size)
                            for mb in micro_batches(perm[s:s + args.batch_size], lengths, args.micro_batch_size, group))
    for _ in range(args.repeats):
        for group in (False, True):
            model = load_model(args.model, tokenizer=tok)
            t0 = time.perf_counter()
            sft_train(model, tok, pairs, epochs=1, lr=1e-4, batch_size=args.batch_size,
                      micro_batch_size=args.micro_batch_size, seed=0, bf16=precision.bf16, group_by_length=group)
            best[group] = min(best.get(group, 1e9), (time.perf_counter() - t0) / args.steps)
    print(f"command: python benchmarks/sft_step.py --model {args.model} --long-frac {args.long_frac} "
          f"--batch-size {args.batch_size} --micro-batch-size {args.micro_batch_size} --steps {args.steps} "
          f"--repeats {args.repeats} --threads {args.threads}")
    print(f"commit: {git_commit()}")
    print(f"machine: {cpu_name()} ({device_capability('cpu').description}), torch {torch.__version__}, {args.threads} thread(s); "
          f"{precision.describe()}")
    print()
    print("| group_by_length | s per step | padded tokens per step | vs plain |")
    print("|---|---|---|---|")
    for group in (False, True):
        print(f"| {'on' if group else 'off'} | {best[group]:.2f} | {padded[group] // args.steps:,} | "
              f"{best[group] / best[False]:.2f} |")


if __name__ == "__main__":
    main()
