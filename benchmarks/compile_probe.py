"""Where a training step of a tiny model spends its time, and whether ``torch.compile`` buys any of it.

    python benchmarks/compile_probe.py                       # tiny-3m, 32 x 250 tokens, 2 threads
    python benchmarks/compile_probe.py --compile             # also time torch.compile(dynamic=True)

One forward and backward of a random batch (the shape of the demo's update micro-batch: 32 samples of
~250 tokens), timed after a warm-up at three nearby lengths so a compiled model has seen several shapes;
prints the mean seconds per step, the share of ``aten::mm`` and of attention in a profile of two steps, and
the matmuls' throughput against their FLOP count (forward 2·tokens·params of the linear layers, backward
twice that). Speed only: no result of the model is read. Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.profiler import profile


def linear_params(model) -> int:
    return sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))


def main() -> None:
    from seedrl.models.loading import load_model

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="tiny-3m")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--length", type=int, default=250)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--compile", action="store_true", help="also time torch.compile(dynamic=True)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"{args.model}, {args.batch} x {args.length} tokens, {args.threads} threads, "
          f"cpu capability {torch.backends.cpu.get_cpu_capability()}, torch {torch.__version__}")
    for mode in ("eager", "compile") if args.compile else ("eager",):
        model = load_model(args.model)
        model.train()
        vocab = model.config.vocab_size
        if mode == "compile":
            model.forward = torch.compile(model.forward, dynamic=True)

        def step(length: int, model=model, vocab=vocab) -> None:
            ids = torch.randint(0, vocab, (args.batch, length))
            logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
            torch.log_softmax(logits.float(), -1).gather(-1, ids[..., None]).mean().backward()

        t0 = time.perf_counter()
        step(args.length)
        first = time.perf_counter() - t0
        for length in (args.length - 10, args.length + 10):
            step(length)
        t0 = time.perf_counter()
        for _ in range(args.repeats):
            step(args.length)
        per = (time.perf_counter() - t0) / args.repeats
        line = f"{mode}: first step {first:.2f} s, then {per:.3f} s a step"
        if mode == "eager":
            with profile() as p:
                step(args.length), step(args.length)
            ev = p.key_averages()
            total = sum(e.self_cpu_time_total for e in ev)
            mm = sum(e.self_cpu_time_total for e in ev if e.key in ("aten::mm", "aten::addmm", "aten::bmm"))
            att = sum(e.self_cpu_time_total for e in ev if "scaled_dot_product" in e.key)
            flops = 6 * args.batch * args.length * linear_params(model) * 2  # two profiled steps
            line += (f"; profile: matmuls {mm / total:.0%} of the time at {flops / (mm / 1e6) / 1e9:.0f} GFLOP/s, "
                     f"attention {att / total:.0%}")
        print(line, flush=True)


if __name__ == "__main__":
    main()
