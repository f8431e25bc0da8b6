"""Plain vs shared-prefix scoring (``optim.shared_prefix``) of one batch of the tiny loop.

    python benchmarks/shared_prefix_scoring.py --config configs/demo_sokoban.yaml --repeats 5
    python benchmarks/shared_prefix_scoring.py --config configs/household_grpo.yaml --repeats 5

Plays one batch with the config's model and env (by default 8 groups x 4 samples, responses capped at 12
tokens, 3 steps: ``--set`` overrides any of it), then times the loop's no-gradient scoring passes on it
with the switch off and on: ``old`` (the Scorer's own pass over the step samples, with the config's
``optim.dedupe`` and ``optim.micro_batch_size``; the reference pass costs the same) and ``teacher``
(every sample's prompt with a SEED skill block after the task line, plus the student prompts beside
them, as a teacher batch of a method that scores both), and ``update``: the update's forward and backward
over the distinct samples in micro-batches cut from their prompt-sorted order (``optim.shared_prefix``
runs each micro-batch as a tree, :func:`seedrl.models.prefix.prompt_tree`). Prints, per pass, the samples,
the mean prompt and response tokens, the plan (for the update, how many micro-batches ran as a tree; for
the scoring passes, the one ``shared_prefix_logprobs`` takes: one level of groups or prompt-sorted trees), the tokens the forwards run with each path (a
count, padding excluded), the median seconds of ``--repeats`` runs of each path and the largest
difference between their log-probs, as a markdown block for benchmarks/RESULTS.md. Run it on a quiet
machine: a second process on two cores halves either time.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import subprocess
import tempfile
import time

import torch

from seedrl.config import TrainConfig, load_config
from seedrl.methods.teacher import teacher_prompt_ids
from seedrl.models.prefix import (
    plan_shared_prefixes,
    plan_tree_scoring,
    shared_prefix_forward,
    tokens_run,
)
from seedrl.models.scoring import forward_logprobs, pack, unalign
from seedrl.train.scoring import unique_pairs
from seedrl.train.trainer import Trainer

#: the batch of the tiny loop that the issue describes (8 groups x 4 samples, ~12-token responses)
DEFAULTS = ["rollout.tasks_per_batch=8", "rollout.group_size=4", "rollout.max_new_tokens=12", "env.max_steps=3",
            "eval.num_tasks=0", "log.progress=false", "save_every=0"]
#: a skill of the length the analyzers write (~60 words)
SKILL = ("Before each push, check that the cell beyond the box is floor or a target, never a wall or another box. "
         "A box pushed into a corner that is not a target can never be moved again, so plan the last push of each "
         "box first and walk around the box to reach its far side instead of pushing it along a wall. When two "
         "boxes are in a row, move the one nearer the target first.")


def timed(fn, repeats: int) -> tuple[float, list[torch.Tensor]]:
    """The median wall seconds of ``repeats`` calls of ``fn`` (after one warm-up call) and its result."""
    out = fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def update_chunks(samples, micro_batch_size: int) -> list[tuple[list[list[int]], list[list[int]]]]:
    """The update's micro-batches of ``samples``: (prompts, responses), cut from their prompt-sorted order."""
    order = sorted(samples, key=lambda s: s.prompt_ids)
    return [([s.prompt_ids for s in order[k:k + micro_batch_size]], [s.response_ids for s in order[k:k + micro_batch_size]])
            for k in range(0, len(order), micro_batch_size)]


def update_pass(model, chunks, pad_id: int, bf16: bool, shared: bool) -> list[torch.Tensor]:
    """Forward and backward (of the summed log-probs) of every micro-batch, in training mode; the
    log-probs per sample."""
    out: list[torch.Tensor] = []
    model.train()
    for prompts, responses in chunks:
        if shared:
            lp, _ = shared_prefix_forward(model, prompts, responses, pad_id, bf16=bf16)
        else:
            lp, _ = forward_logprobs(model, pack(prompts, responses, pad_id), bf16=bf16)
        lp.sum().backward()
        out += unalign(lp, [len(r) for r in responses])
    model.zero_grad(set_to_none=True)
    model.eval()
    return out


def max_diff(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max(((x - y).abs().max().item() for x, y in zip(a, b) if len(x)), default=0.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="configs/demo_sokoban.yaml")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--set", action="append", default=[], dest="overrides")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        cfg = load_config(TrainConfig, args.config, [*DEFAULTS, *args.overrides, f"run_dir={d}"])
        tr = Trainer(cfg)
        trajs = tr.collect({})
        samples = [s for t in trajs for s in t.steps if s.response_ids]
        tok, sc = tr.tokenizer, tr.scorer
        teacher = [teacher_prompt_ids("after_task", tok, s.messages, SKILL, cfg.rollout.max_prompt_tokens)
                   for s in samples]
        distinct = [samples[i] for i in unique_pairs(samples)[1]] if cfg.optim.dedupe else samples  # what it runs
        passes = {
            "old": (lambda: sc.logprobs(tr.model, samples),
                    [s.prompt_ids for s in distinct], [s.response_ids for s in distinct]),
            "teacher": (lambda: sc.score(tr.model, teacher + [s.prompt_ids for s in samples],
                                         [s.response_ids for s in samples] * 2),
                        teacher + [s.prompt_ids for s in samples], [s.response_ids for s in samples] * 2),
        }
        rows = []
        chunks = update_chunks(distinct, cfg.optim.micro_batch_size)
        res = {on: timed(lambda on=on: update_pass(tr.model, chunks, tok.pad_token_id, tr.precision.bf16, on),
                         args.repeats) for on in (False, True)}
        # the update cuts its micro-batches from the same prompt-sorted order as the tree scoring plan
        d_prompts, d_responses = [s.prompt_ids for s in distinct], [s.response_ids for s in distinct]
        plain_tok = sum(len(p) + len(r) for p, r in zip(d_prompts, d_responses))
        _, tree_tok, trees = plan_tree_scoring(d_prompts, d_responses, cfg.optim.micro_batch_size)
        rows.append(("update", len(distinct), statistics.mean(len(s.prompt_ids) for s in distinct),
                     statistics.mean(len(s.response_ids) for s in distinct), f"{trees} trees", plain_tok, tree_tok,
                     res[False][0], res[True][0], max_diff(res[False][1], res[True][1])))
        for name, (fn, prompts, responses) in passes.items():
            res = {}
            for on in (False, True):
                tr.cfg.optim.shared_prefix = on
                res[on] = timed(fn, args.repeats)
            groups = plan_shared_prefixes(prompts, responses)
            plain_tok, shared_tok = tokens_run(prompts, responses, groups)
            chunks, tree_tok, trees = plan_tree_scoring(prompts, responses, cfg.optim.micro_batch_size)
            plan = f"{len(groups)} groups"
            if chunks and (not groups or tree_tok < shared_tok):  # the plan shared_prefix_logprobs takes
                plan, shared_tok = f"{trees} trees", tree_tok
            rows.append((name, len(prompts), statistics.mean(len(p) for p in prompts),
                         statistics.mean(len(r) for r in responses), plan, plain_tok, shared_tok,
                         res[False][0], res[True][0], max_diff(res[False][1], res[True][1])))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"config {args.config} {' '.join('--set ' + o for o in args.overrides)}; model {cfg.model.name}, "
          f"micro_batch_size {cfg.optim.micro_batch_size}, dedupe {cfg.optim.dedupe}, "
          f"{tr.precision.describe()}; {args.repeats} repeats (median); commit {commit}; "
          f"{platform.processor() or platform.machine()}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} thread(s)\n")
    print("| pass | samples run | prompt tok | response tok | plan | tokens plain | tokens shared | plain s | "
          "shared s | speed-up | max abs diff |")
    print("|---" * 11 + "|")
    for name, n, p, r, g, tp, ts, t0, t1, diff in rows:
        print(f"| {name} | {n} | {p:.0f} | {r:.1f} | {g} | {tp} | {ts} | {t0:.3f} | {t1:.3f} | "
              f"{t0 / t1 if t1 else float('nan'):.2f}x | {diff:.1e} |")


if __name__ == "__main__":
    main()
