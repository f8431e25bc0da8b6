"""The update of one iteration: PPO epochs over mini-batches of the batch's step samples (shuffled, or
in order under ``optim.shuffle: false``).

:class:`Updater` holds what the update reads and moves (the policy, the optimizer and its learning-rate
scheduler, the replayed demonstrations, the method's signal) and runs it: mini-batches drawn from the
global sample list (split by sample key with ``optim.split_distinct``), identical samples merged
(``optim.dedupe``, :func:`sample_keys`), micro-batches accumulating gradients, the method's signal term,
the replay of expert demonstrations (PPO-ptx, ``algo.replay_coef``) and, with several processes, the
gradient synchronisation (DDP, or FSDP's collectives)."""

from __future__ import annotations

import logging
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from seedrl.algos import kl_k3, ppo_clip_loss, signal_weights, token_mean
from seedrl.config import TrainConfig
from seedrl.envs.panels import build_panel
from seedrl.errors import SeedRLError
from seedrl.models.prefix import train_forward
from seedrl.models.scoring import right_align
from seedrl.rollout.types import StepSample, Trajectory
from seedrl.train import fsdp
from seedrl.train.checkpoint import newest_checkpoint_note, nonfinite_weights
from seedrl.train.distributed import World, all_gather, dummy_loss, sample_layout, sum_stats
from seedrl.train.policy import adamw

log = logging.getLogger(__name__)


@dataclass
class UpdateBatch:
    """What one update reads, aligned by step sample: ``old_logp``/``ref_logp``/``teacher_logp`` are
    per-sample 1-D log-prob tensors over the response tokens, ``adv`` [N] one advantage per sample
    (broadcast over its tokens), ``signal`` [N] 1 where the sample's trajectory has a skill."""

    samples: list[StepSample]
    old_logp: list[torch.Tensor]
    adv: torch.Tensor
    ref_logp: list[torch.Tensor] | None = None
    teacher_logp: list[torch.Tensor] | None = None
    signal: torch.Tensor | None = None
    #: per sample, what makes two samples' losses identical (:func:`sample_keys`); None: no merging
    keys: list[tuple] | None = None


def sample_keys(batch: UpdateBatch) -> list[tuple]:
    """One key per sample of ``batch``; two samples share a key iff every input of their loss terms is
    equal: prompt and response ids (and images: their digest), advantage, old, reference and teacher
    log-probs and the signal flag (so two samples scored in different batch positions, a float apart,
    never merge)."""
    def vals(xs: list[torch.Tensor] | None, i: int) -> bytes:
        return b"" if xs is None else xs[i].detach().cpu().numpy().tobytes()

    return [(tuple(s.prompt_ids), tuple(s.response_ids), float(batch.adv[i]), vals(batch.old_logp, i),
             vals(batch.ref_logp, i), vals(batch.teacher_logp, i),
             None if batch.signal is None else float(batch.signal[i]), s.image_digest)
            for i, s in enumerate(batch.samples)]


def merge_duplicates(idx: list[int], keys: list[tuple]) -> tuple[list[int], list[int]]:
    """The samples ``idx`` of one mini-batch with duplicates merged: ``(first, counts)``, the first
    index of each distinct key in ``idx`` order and how many of ``idx`` share it. The token-mean loss
    of the merged samples, each token weighted by its count, equals the loss of ``idx``."""
    pos: dict[tuple, int] = {}
    first: list[int] = []
    counts: list[int] = []
    for i in idx:
        k = keys[i]
        if k in pos:
            counts[pos[k]] += 1
        else:
            pos[k] = len(first)
            first.append(i)
            counts.append(1)
    return first, counts


def split_by_key(order: list[int], keys: list[tuple], size: int) -> list[list[int]]:
    """Mini-batches of the sample indices ``order`` in which every sample sharing a key (all copies
    of one sample, :func:`sample_keys`) lands in the same mini-batch: the distinct keys are taken in
    the order of their first sample in ``order``, and a mini-batch closes once it holds ``size``
    samples or more. Every index of ``order`` appears exactly once."""
    groups: dict[tuple, list[int]] = {}
    for i in order:
        groups.setdefault(keys[i], []).append(i)
    out: list[list[int]] = [[]]
    for members in groups.values():
        if len(out[-1]) >= size:
            out.append([])
        out[-1].extend(members)
    return [b for b in out if b]


def replay_demonstrations(env_name: str, env_kwargs: dict[str, Any], *, tasks: int, max_steps: int,
                          history_length: int, noise: float, seed: int) -> list[dict[str, Any]]:
    """The (messages, response) rows ``algo.replay_coef`` replays, before tokenizing: the expert on the
    first ``tasks`` (``algo.replay_demo_tasks``) tasks of the env's ``train`` split (what an SFT warm
    start learns from, never the tasks of ``env.train_split`` when that names an evaluation split),
    played with ``noise`` (``algo.replay_demo_noise``) random actions seeded by the run's seed. Plain
    arguments, so a comparison's held-out panel (:mod:`seedrl.experiments.heldout`) rebuilds the same
    rows from a cell's recorded config."""
    from seedrl.train.sft import expert_demonstrations

    panel = build_panel(env_name, "train", tasks, **env_kwargs)
    return expert_demonstrations(env_name, env_kwargs, list(panel.task_ids), max_steps=max_steps,
                                 history_length=history_length, noise=noise, seed=seed)


def replay_pool(cfg: TrainConfig, tokenizer) -> list[tuple[list[int], list[int]]]:
    """The demonstrations ``algo.replay_coef`` replays (:func:`replay_demonstrations`), tokenized as
    SFT tokenizes them."""
    from seedrl.models.vision import processor_of
    from seedrl.train.sft import tokenize_pairs

    e, a = cfg.env, cfg.algo
    if processor_of(tokenizer) is not None:  # the demonstrations are text: a VL policy would learn them blind
        raise SeedRLError(f"algo.replay_coef > 0 replays text demonstrations, which carry no images; a "
                          f"vision-language policy ({cfg.model.name}) does not take them yet: set algo.replay_coef=0")
    rows = replay_demonstrations(e.name, e.kwargs, tasks=a.replay_demo_tasks, max_steps=e.max_steps,
                                 history_length=e.history_length, noise=a.replay_demo_noise, seed=cfg.seed)
    if not rows:
        raise SeedRLError(f"algo.replay_coef > 0 replays expert demonstrations, and {e.name}'s expert gave none; "
                          f"set algo.replay_coef=0")
    return tokenize_pairs(tokenizer, rows, cfg.rollout.max_prompt_tokens + cfg.rollout.max_new_tokens)


def replay_draw(lengths: list[int], rl_tokens: float, share: float, generator: torch.Generator) -> list[int]:
    """Indices of replay examples (response lengths ``lengths``) for a mini-batch of ``rl_tokens``
    response tokens: drawn without replacement in a seeded order until the replayed tokens reach
    ``share`` of the step's tokens, ``R / (R + rl_tokens) >= share``; at least one, at most all."""
    target = share / (1.0 - share) * rl_tokens
    out: list[int] = []
    got = 0
    for i in torch.randperm(len(lengths), generator=generator).tolist():
        if out and got >= target:
            break
        out.append(i)
        got += lengths[i]
    return out


def training_samples(trajs: list[Trajectory]) -> list[StepSample]:
    """Step samples that enter the update. An episode ended by an env crash or hang says nothing
    about the policy, so it is left out (and counted in ``rollout/env_errors``) rather than
    scored as a failure that would push its group's advantages around."""
    return [s for t in trajs if t.error is None for s in t.steps if s.response_ids]


def check_samples(world: World, trajs: list[Trajectory], samples: list[StepSample]) -> None:
    """Stop the run (one line) when the batch's rollout gave no step sample on any process: every episode
    crashed its env, or every response was empty."""
    if not samples and not (world.active and sum(all_gather(world, len(samples)))):
        errors = sorted({t.error for t in trajs if t.error})
        raise SeedRLError(f"the rollout produced no step samples: {len(trajs)} episodes, "
                          + (f"env errors: {'; '.join(errors[:2])}" if errors else
                             "every response was empty (check rollout.max_new_tokens)"))


def warmup_schedule(warmup_steps: int, warmup_ratio: float, iterations: int) -> tuple[bool, int]:
    """``(per_iteration, warm)``: the learning-rate scheduler steps once per iteration over a warm-up
    of ``int(warmup_ratio * iterations)`` iterations (``optim.warmup_ratio``, verl's
    ``lr_warmup_steps_ratio`` over its training steps), or once per optimizer step over
    ``warmup_steps`` steps."""
    if warmup_ratio > 0:
        return True, int(warmup_ratio * iterations)
    return False, max(0, warmup_steps)


def warmup_factor(warm: int):
    """The LambdaLR multiplier after ``s`` scheduler steps: ``min(1, (s + 1) / warm)``, a linear rise
    whose first step already runs at ``lr / warm`` and which stays at 1 from step ``warm - 1`` on;
    1 throughout when ``warm`` is 0. (verl's ``get_constant_schedule_with_warmup`` gives
    ``min(1, s / warm)``: its first update runs at rate 0; docs/deviations.md.)"""
    def factor(s: int) -> float:
        return min(1.0, (s + 1) / warm) if warm else 1.0
    return factor


class Updater:
    """The PPO update of a run (see the module docstring). ``model`` is the policy; the update's forwards
    run through ``ddp`` (the DDP wrapper of replicas over several processes) or the (possibly sharded)
    policy. It builds the optimizer (AdamW, :func:`seedrl.train.policy.adamw`) and the learning-rate
    scheduler, which steps once per iteration or once per optimizer step (:func:`warmup_schedule`);
    ``replay_pairs``: the (prompt ids, response ids) replayed in every mini-batch (:func:`replay_pool`;
    empty without replay); ``ckpt_dir`` is named when a step makes the weights non-finite."""

    def __init__(self, cfg: TrainConfig, world: World, model: torch.nn.Module, ddp: torch.nn.Module | None,
                 method: Any, tokenizer: Any, precision: Any, device: torch.device,
                 replay_pairs: list[tuple[list[int], list[int]]], ckpt_dir: Path) -> None:
        self.cfg, self.world, self.model, self._ddp = cfg, world, model, ddp
        self._trained = ddp if ddp is not None else model
        self.optimizer = adamw(model, cfg.optim.lr, cfg.optim.weight_decay)
        self.lr_per_iteration, warm = warmup_schedule(cfg.optim.warmup_steps, cfg.optim.warmup_ratio, cfg.iterations)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, warmup_factor(warm))
        self.method, self.tokenizer, self.precision, self.device = method, tokenizer, precision, device
        self.replay_pairs, self.ckpt_dir = replay_pairs, ckpt_dir
        #: ``optim.shared_prefix`` in the update's forwards too (one process: a DDP/FSDP backward is a
        #: collective per forward layout, and the micro-batches are reordered, see :meth:`minibatch_step`)
        self.share_prefix = cfg.optim.shared_prefix and not world.active
        #: the iterations done before this update (seeds its mini-batch draw; names it in messages)
        self.iteration = 0

    def update(self, batch: UpdateBatch, iteration: int) -> dict[str, float]:
        """PPO epochs over mini-batches (a seeded shuffle, or contiguous blocks in the batch's order under
        ``optim.shuffle: false``); micro-batches accumulate gradients. ``iteration``: the
        iterations done before this one.

        Every micro-batch loss is divided by the response-token count of its whole mini-batch, so
        accumulation gives exactly the update of one big batch (token-mean over the mini-batch). A
        signal's loss term is weighted per sample as its aggregation says (:func:`signal_weights`,
        ``algo.opd_agg`` for OPD): SEED's mean over the mini-batch's micro-batches of
        ``optim.micro_batch_size`` samples (cut from the global mini-batch in order, whatever the
        number of processes; a micro-batch without a skill counts as 0), or a token-mean over the
        mini-batch's tokens *with* a teacher signal (samples without a skill left out).

        Several processes: the mini-batches are drawn from the global sample list (every rank's
        samples in rank order) exactly as one process draws them; each rank steps on its own samples
        of a mini-batch with the mini-batch's *global* token counts, and the gradients are summed
        across ranks (:meth:`minibatch_step`)."""
        o = self.cfg.optim
        self.iteration = iteration
        self.method.signal.begin_update(iteration)
        self.model.train()
        layout = sample_layout(self.world, [len(s.response_ids) for s in batch.samples],
                               None if batch.signal is None else [bool(f > 0) for f in batch.signal.tolist()])
        lengths, flags = layout.lengths, layout.signal
        n = len(lengths)
        mb = o.mini_batch_size or n
        g = torch.Generator().manual_seed(self.cfg.seed * 1_000_003 + self.iteration)
        sums: dict[str, float] = {}
        steps = 0
        for _epoch in range(o.ppo_epochs):
            perm = torch.randperm(n, generator=g).tolist() if o.shuffle else list(range(n))
            split = (split_by_key(perm, batch.keys, mb) if o.split_distinct and batch.keys is not None
                     else [perm[start:start + mb] for start in range(0, n, mb)])
            for idx in split:
                denom = float(sum(lengths[i] for i in idx))
                if denom == 0:
                    continue
                signal_w, signal_total = None, 0.0
                if flags is not None:
                    w = signal_weights(torch.tensor([lengths[i] for i in idx]), torch.tensor([flags[i] for i in idx]),
                                       torch.arange(len(idx)) // o.micro_batch_size, self.method.signal.agg).tolist()
                    signal_total = sum(wi * lengths[i] for wi, i in zip(w, idx))
                    signal_w = layout.own(idx, w)  # this rank's, aligned with layout.local(idx)
                # sharded: each backward is a collective, so every rank runs as many micro-batches
                micro = (layout.most_micro_batches(idx, o.micro_batch_size)
                         if fsdp.is_sharded(self.model) else None)
                replay = (replay_draw([len(r) for _, r in self.replay_pairs], denom, self.cfg.algo.replay_share, g)
                          if self.replay_pairs else None)
                stats = self.minibatch_step(batch, layout.local(idx), denom, signal_w=signal_w,
                                            signal_total=signal_total, micro_batches=micro, replay=replay)
                for k, v in stats.items():
                    sums[k] = sums.get(k, 0.0) + v
                steps += 1
        self.step_lr("iteration")  # verl: once per training step, after the update
        sig = self.method.signal
        return ({k: v / max(1, steps) for k, v in sums.items()} | {"optim_steps": steps}
                | {f"{sig.name}/{k}": v for k, v in sig.update_stats().items()})

    def step_lr(self, after: str) -> None:
        """The one place the learning-rate scheduler steps, ``after`` an ``"optimizer_step"`` or an
        ``"iteration"`` (its update, or an iteration that made none): once per optimizer step
        (``optim.warmup_steps``) or once per iteration (``optim.warmup_ratio``, as verl; a skipped
        iteration steps too, so the rate stays a function of the iteration)."""
        if after not in ("optimizer_step", "iteration"):
            raise ValueError(f"step_lr after {after!r}: 'optimizer_step' or 'iteration'")
        if (after == "iteration") == self.lr_per_iteration:
            self.scheduler.step()

    def minibatch_step(self, batch: UpdateBatch, idx: list[int], denom: float,
                       signal_w: list[float] | None = None, signal_total: float = 0.0,
                       micro_batches: int | None = None, replay: list[int] | None = None) -> dict[str, float]:
        """One optimizer step on the samples ``idx`` of ``batch``: PPO clip, entropy, KL, and the
        method's signal (an advantage shift and/or a loss term; see :mod:`seedrl.methods.signals`).
        ``signal_w``: each sample's weight in the signal's loss term (:func:`signal_weights`), aligned
        with ``idx``; ``signal_total``: the mini-batch's sum of weight x tokens over every process
        (the normaliser of the signal's logged stats; 0 = no signal in the mini-batch).
        ``replay``: indices into ``self.replay_pairs`` whose NLL joins the step (:meth:`_replay_loss`).
        ``micro_batches``: how many forward/backward passes every rank runs (a sharded model, whose
        every backward is a collective); see :meth:`_passes` for the passes a rank adds to its own."""
        o = self.cfg.optim
        self.optimizer.zero_grad(set_to_none=True)
        acc: dict[str, float] = {}
        sw = None if signal_w is None else dict(zip(idx, signal_w))
        if batch.keys is not None:  # identical samples: one forward, weighted by their count
            if sw is not None:  # ... and by the sum of their signal weights (copies may differ in it)
                summed: dict[tuple, float] = {}
                for i in idx:
                    summed[batch.keys[i]] = summed.get(batch.keys[i], 0.0) + sw[i]
            idx, weights = merge_duplicates(idx, batch.keys)
            count = dict(zip(idx, weights))
            if sw is not None:
                sw = {i: summed[batch.keys[i]] for i in idx}
        if self.share_prefix:  # samples that share a prompt prefix in the same micro-batch; every weight is
            idx = sorted(idx, key=lambda i: batch.samples[i].prompt_ids)  # per sample, so the sum is the same
        passes: list[list[int] | None] = [idx[s:s + o.micro_batch_size] for s in range(0, len(idx), o.micro_batch_size)]
        passes += [None] * (self._passes(len(passes), micro_batches) - len(passes))
        for j, mi in enumerate(passes):
            with self._grad_sync(last=j == len(passes) - 1):
                if mi is None:  # zero-weighted: pairs this rank's collectives with the other ranks'
                    dummy_loss(self._trained, self.device).backward()
                else:
                    self._micro_batch_loss(batch, mi, denom, None if sw is None else [sw[i] for i in mi],
                                           signal_total, acc,
                                           [count[i] for i in mi] if batch.keys is not None else None).backward()
        if replay:
            self._replay_loss(replay, denom, acc)
        params = [p for p in self.model.parameters() if p.requires_grad]
        if self.world.active:  # DDP/FSDP summed the gradients; the stats are summed here
            acc = sum_stats(self.world, acc)
        gn = torch.nn.utils.clip_grad_norm_(params, self.cfg.optim.grad_clip)
        gn = gn.full_tensor() if hasattr(gn, "full_tensor") else gn  # sharded: a DTensor
        acc["grad_norm"] = float(gn)
        acc["lr"] = self.scheduler.get_last_lr()[0]
        if torch.isfinite(gn):
            self.optimizer.step()
            self._check_finite_weights(params, acc)
        else:  # self.iteration + 1: the number this iteration's metrics row carries
            log.warning("non-finite gradient norm at iteration %d; skipping the step", self.iteration + 1)
            acc["skipped_steps"] = 1.0
        self.step_lr("optimizer_step")
        return acc

    def _check_finite_weights(self, params: list[torch.Tensor], acc: dict[str, float]) -> None:
        """Stop the run (one :class:`SeedRLError` line, every rank alike) when the optimizer step just
        taken made a weight NaN or inf (a finite gradient times a huge rate): no later iteration, row or
        checkpoint is built on such weights, so the newest checkpoint stays the last finite one."""
        names = {id(p): n for n, p in self.model.named_parameters()}
        bad = nonfinite_weights((names.get(id(p), "?"), p) for p in params)
        if self.world.active:  # sharded weights: each rank saw its own shard
            bad = next((b for b in all_gather(self.world, bad) if b is not None), None)
        if bad is not None:
            raise SeedRLError(f"iteration {self.iteration + 1}: the optimizer step made the weights non-finite (NaN/inf "
                              f"in {bad[1]} tensor(s), first {bad[0]}; lr {acc['lr']:g}, grad_norm "
                              f"{acc['grad_norm']:.3g}); stopped without saving them: "
                              f"{newest_checkpoint_note(self.ckpt_dir)}; lower optim.lr")

    def _replay_loss(self, replay: list[int], denom: float, acc: dict[str, float]) -> None:
        """Backward of ``algo.replay_coef`` x the token-mean NLL of the replayed demonstrations
        ``replay`` (PPO-ptx), in micro-batches; logs ``loss/replay`` (the NLL) and
        ``replay/token_share`` (replayed tokens / all response tokens of the step)."""
        pairs = [self.replay_pairs[i] for i in replay]
        rdenom = float(sum(len(r) for _, r in pairs))
        mb = self.cfg.optim.micro_batch_size
        nll_sum = 0.0
        for m in range(0, len(pairs), mb):
            chunk = pairs[m:m + mb]
            b, logp, _ = train_forward(self._trained, [p for p, _ in chunk], [r for _, r in chunk],
                                       self.tokenizer.pad_token_id, self.device, self.share_prefix,
                                       bf16=self.precision.bf16)
            nll = token_mean(-logp, b.response_mask, rdenom)
            (self.cfg.algo.replay_coef * nll).backward()
            nll_sum += float(nll.detach())
        acc["loss/replay"] = nll_sum  # once per optimizer step: the step's acc has no replay keys yet
        acc["replay/token_share"] = rdenom / (rdenom + denom)

    def _passes(self, own: int, micro_batches: int | None) -> int:
        """How many forward/backward passes this rank runs for a mini-batch of which it holds
        ``own`` micro-batches. The passes beyond its own are zero-weighted (:func:`dummy_loss`):
        sharded, every rank runs ``micro_batches`` (each backward is a collective); replicas under
        DDP accumulate without syncing and reduce in their last backward, so a rank with no sample
        in the mini-batch still runs one."""
        if micro_batches is not None:
            return micro_batches
        return max(1, own) if self._ddp is not None else own

    def _grad_sync(self, last: bool):
        """DDP reduces the gradients in the last backward of a mini-batch only (``no_sync`` before)."""
        return self._ddp.no_sync() if self._ddp is not None and not last else nullcontext()

    def _micro_batch_loss(self, batch: UpdateBatch, mi: list[int], denom: float, signal_w: list[float] | None,
                          signal_total: float, acc: dict[str, float],
                          weights: list[int] | None = None) -> torch.Tensor:
        """The loss of the samples ``mi`` of a mini-batch (every term divided by the mini-batch's
        token counts, so the micro-batches' gradients add up to the mini-batch's; the signal's loss
        term weighted by ``signal_w``, see :meth:`minibatch_step`); its stats are added to ``acc``.
        ``weights``: how many identical samples each of ``mi`` stands for (:func:`merge_duplicates`);
        they scale every token sum, never an advantage."""
        c = self.cfg.algo
        sig = self.method.signal
        samples = batch.samples
        b, logp, ent = train_forward(self._trained, [samples[i].prompt_ids for i in mi],
                                     [samples[i].response_ids for i in mi], self.tokenizer.pad_token_id, self.device,
                                     self.share_prefix, with_entropy=c.entropy_coef > 0, bf16=self.precision.bf16,
                                     images=[samples[i].images for i in mi])
        unit = b.response_mask
        # the aggregation mask: a merged sample counts as often as the samples it stands for
        mask = unit if weights is None else unit * torch.tensor(weights, dtype=unit.dtype, device=self.device)[:, None]
        old = right_align([batch.old_logp[i] for i in mi], b.width, self.device)
        a = batch.adv[mi].to(self.device)[:, None] * unit
        distill = batch.teacher_logp is not None and signal_w is not None and signal_total > 0
        if distill:
            teacher = right_align([batch.teacher_logp[i] for i in mi], b.width, self.device)
            has_skill = batch.signal[mi].to(self.device)[:, None]  # samples without a skill: all zero
            # the loss term's aggregation weights (0 without a skill), copies of a merged sample summed
            tmask = unit.to(logp.dtype) * torch.tensor(signal_w, dtype=logp.dtype, device=self.device)[:, None]
            a = sig.advantage(a, teacher, old, unit * has_skill)
        pg, st = ppo_clip_loss(logp, old, a, mask, clip_ratio=c.clip_ratio, clip_ratio_low=c.clip_ratio_low,
                               clip_ratio_high=c.clip_ratio_high, dual_clip_c=c.dual_clip_c, denom=denom)
        loss = c.pg_coef * pg  # 0 under opsd: the distillation term alone (SDAR's pg_loss_coef)
        parts = {"loss/pg": pg.detach()}
        if ent is not None:
            e = token_mean(ent, mask, denom)
            loss = loss - c.entropy_coef * e
            parts["loss/entropy"] = e.detach()
        if batch.ref_logp is not None:
            ref = right_align([batch.ref_logp[i] for i in mi], b.width, self.device)
            kl = token_mean(kl_k3(logp, ref), mask, denom)
            loss = loss + c.kl_coef * kl
            parts["loss/kl"] = kl.detach()
        term = sig.loss(logp, old, teacher, tmask) if distill else None
        if term is not None:
            loss = loss + term.loss
            parts[f"loss/{sig.name}"] = term.value
            sig_w = tmask.sum().item() / signal_total  # micro-batch share of the term's token weight
            for k, v in term.stats.items():
                acc[f"{sig.name}/{k}"] = acc.get(f"{sig.name}/{k}", 0.0) + float(v) * sig_w
        w = mask.sum().item() / denom  # micro-batch share of the mini-batch, for stat averages
        for k, v in parts.items():
            acc[k] = acc.get(k, 0.0) + float(v)  # already divided by the mini-batch token count
        for k, v in st.items():
            acc[f"ppo/{k}"] = acc.get(f"ppo/{k}", 0.0) + float(v) * w
        return loss
