"""The update module (seedrl/train/update.py) by hand: which samples merge, what replay draws and rebuilds,
when a batch without samples stops the run, and the Updater's step around the loss (passes, gradient sync,
precision, stats over ranks, non-finite steps, what a signal receives). Written against the mutants
`make mutants` left alive; a test's docstring names the broken versions it kills."""

from __future__ import annotations

import math

import pytest
import torch

from seedrl.errors import SeedRLError
from seedrl.rollout.types import StepSample, Trajectory
from seedrl.train.distributed import World
from seedrl.train.update import (
    UpdateBatch,
    check_samples,
    merge_duplicates,
    replay_draw,
    replay_pool,
    sample_keys,
    training_samples,
)
from tests.helpers import tiny_cfg


def _sample(prompt=(1, 2), response=(3,)) -> StepSample:
    return StepSample(list(prompt), list(response), [0.0] * len(response), traj_id=0, group_id=0, step=0,
                      reward=0.0, action_valid=True)


def _batch(n: int = 2, **over) -> UpdateBatch:
    """``n`` copies of one sample, every loss input equal; ``over`` replaces a field for the last copy."""
    t = lambda: [torch.tensor([-0.5, -1.0]) for _ in range(n)]  # noqa: E731
    b = UpdateBatch(samples=[_sample() for _ in range(n)], old_logp=t(), adv=torch.ones(n), ref_logp=t(),
                    teacher_logp=t(), signal=torch.ones(n))
    for field, value in over.items():
        if field == "adv":
            b.adv[-1] = value
        elif field == "signal":
            b.signal[-1] = value
        else:
            getattr(b, field)[-1] = value
    return b


def test_copies_share_a_key_and_any_loss_input_tells_them_apart():
    """Kills: a log-prob list or the signal left out of the key (two samples a float apart merged)."""
    keys = sample_keys(_batch())
    assert keys[0] == keys[1]
    for field in ("old_logp", "ref_logp", "teacher_logp"):
        keys = sample_keys(_batch(**{field: torch.tensor([-0.5, -1.0 + 1e-6])}))
        assert keys[0] != keys[1], field
    assert len(set(sample_keys(_batch(adv=2.0)))) == 2
    assert len(set(sample_keys(_batch(signal=0.0)))) == 2
    b = _batch()
    b.samples[1] = _sample(response=(4,))
    assert len(set(sample_keys(b))) == 2
    # without reference, teacher and signal every copy still shares one key
    plain = UpdateBatch(samples=[_sample(), _sample()], old_logp=[torch.zeros(1)] * 2, adv=torch.zeros(2))
    assert len(set(sample_keys(plain))) == 1


def test_merge_duplicates_by_hand():
    keys = [("a",), ("b",), ("a",), ("c",), ("b",), ("a",)]
    assert merge_duplicates([5, 1, 0, 3, 4], keys) == ([5, 1, 3], [2, 2, 1])
    assert merge_duplicates([], keys) == ([], [])


def test_replay_draw_stops_as_soon_as_the_share_is_reached_and_not_before():
    """Kills: the drawn-token count starting at 1, and ``>`` for ``>=`` (one example too many when the
    share is met exactly)."""
    perm = torch.randperm(3, generator=torch.Generator().manual_seed(0)).tolist()
    lengths = [0, 0, 0]
    lengths[perm[0]], lengths[perm[1]], lengths[perm[2]] = 10, 9, 5
    # share 0.5 of 20 RL tokens: 20 replayed needed; 10 + 9 = 19 falls one short, so a third is drawn
    assert replay_draw(lengths, 20.0, 0.5, torch.Generator().manual_seed(0)) == perm
    lengths[perm[1]] = 10  # 10 + 10 = 20 meets it exactly: two
    assert replay_draw(lengths, 20.0, 0.5, torch.Generator().manual_seed(0)) == perm[:2]


def test_training_samples_leave_out_crashed_episodes_and_empty_responses():
    ok, crashed = Trajectory(traj_id=0, group_id=0, task_id="a"), Trajectory(traj_id=1, group_id=0, task_id="a")
    ok.steps = [_sample(), _sample(response=())]
    crashed.steps, crashed.error = [_sample()], "env died"
    assert training_samples([ok, crashed]) == [ok.steps[0]]


def _trajs(errors: list[str | None]) -> list[Trajectory]:
    out = []
    for i, e in enumerate(errors):
        t = Trajectory(traj_id=i, group_id=0, task_id="t")
        t.error = e
        out.append(t)
    return out


def test_a_batch_without_samples_stops_the_run_and_says_why():
    """Kills: the stop inverted, the errors dropped or unsorted, the wording of either cause."""
    one = World()
    check_samples(one, _trajs([None]), [_sample()])  # a sample: nothing to say
    with pytest.raises(SeedRLError) as e:
        check_samples(one, _trajs(["b: reset failed", None, "a: timed out", "b: reset failed", "c: x"]), [])
    assert str(e.value) == ("the rollout produced no step samples: 5 episodes, env errors: a: timed out; "
                            "b: reset failed")
    with pytest.raises(SeedRLError) as e:
        check_samples(one, _trajs([None, None]), [])
    assert str(e.value) == ("the rollout produced no step samples: 2 episodes, every response was empty "
                            "(check rollout.max_new_tokens)")


def test_with_several_processes_a_rank_without_samples_goes_on_when_another_has_some(monkeypatch):
    """Kills: the other ranks' counts ignored (a rank whose episodes all crashed stopping a run that has
    samples elsewhere), and a rank with samples asking the others at all."""
    from seedrl.train import update

    gathered = []
    two = World(rank=0, size=2)

    def gather(world, value):
        assert world is two
        gathered.append(value)
        return [value, 3]

    monkeypatch.setattr(update, "all_gather", gather)
    check_samples(two, _trajs(["x"]), [])  # rank 1 has 3 samples
    assert gathered == [0]
    check_samples(two, _trajs([None]), [_sample()])
    assert gathered == [0]
    monkeypatch.setattr(update, "all_gather", lambda world, value: [0, 0])
    with pytest.raises(SeedRLError, match="no step samples"):
        check_samples(two, _trajs(["x"]), [])


def _replay_cfg(tmp_path, **over):
    return tiny_cfg(tmp_path, **({"algo.replay_coef": 0.1, "algo.replay_demo_tasks": 4,
                                  "algo.replay_demo_noise": 0.5} | over))


def test_replay_pool_is_seeded_by_the_run_and_never_cut_to_the_prompt_budget_alone(tmp_path, tiny_tokenizer):
    """Kills: the demonstrations' noise drawn without the run's seed, and the token budget of a pair taken as
    prompt minus response tokens instead of their sum."""
    from seedrl.rollout.runner import encode_messages
    from seedrl.train.update import replay_demonstrations

    cfg = _replay_cfg(tmp_path, **{"rollout.max_prompt_tokens": 400, "rollout.max_new_tokens": 200})
    pairs = replay_pool(cfg, tiny_tokenizer)
    assert pairs == replay_pool(cfg, tiny_tokenizer)
    assert pairs != replay_pool(_replay_cfg(tmp_path, seed=1, **{"rollout.max_prompt_tokens": 400,
                                                                  "rollout.max_new_tokens": 200}), tiny_tokenizer)
    e, a = cfg.env, cfg.algo
    rows = replay_demonstrations(e.name, e.kwargs, tasks=a.replay_demo_tasks, max_steps=e.max_steps,
                                 history_length=e.history_length, noise=a.replay_demo_noise, seed=cfg.seed)
    full = [encode_messages(tiny_tokenizer, r["messages"]) for r in rows]
    assert 200 < max(len(p) for p in full) <= 400 - 20  # a prompt the difference (200) would cut
    assert [p for p, _ in pairs] == full


def test_replay_pool_without_demonstrations_names_the_key_to_turn_off(tmp_path, tiny_tokenizer, monkeypatch):
    from seedrl.train import update

    monkeypatch.setattr(update, "replay_demonstrations", lambda *a, **k: [])
    cfg = _replay_cfg(tmp_path)
    with pytest.raises(SeedRLError) as e:
        replay_pool(cfg, tiny_tokenizer)
    assert str(e.value) == (f"algo.replay_coef > 0 replays expert demonstrations, and {cfg.env.name}'s expert "
                            f"gave none; set algo.replay_coef=0")


def test_replay_demonstrations_play_the_train_tasks_of_the_runs_env_options():
    """Kills: the train panel built without the env options (a 5x5 run replaying 6x6 rooms)."""
    from seedrl.envs.panels import build_panel
    from seedrl.train.update import replay_demonstrations

    kw = {"dim": 5}
    rows = replay_demonstrations("sokoban", kw, tasks=3, max_steps=1, history_length=1, noise=0.0, seed=0)
    assert [r["task_id"] for r in rows] == list(build_panel("sokoban", "train", 3, **kw).task_ids)
    assert rows[0]["task_id"] != build_panel("sokoban", "train", 1).task_ids[0]


# --------------------------------------------------------------------------- #
# Updater: the step around the loss (passes, gradient sync, precision, replay) #
# --------------------------------------------------------------------------- #
def _updater(tmp_path, replay_pairs=(), model=None, ddp=None, **over):
    """A tiny GRPO run's Updater (fp32, micro-batches of 2), optionally over another ``model`` (``ddp``: a
    wrapper of it, as the trainer passes DDP's)."""
    from seedrl.train.trainer import Trainer
    from seedrl.train.update import Updater

    tr = Trainer(tiny_cfg(tmp_path, **({"eval.num_tasks": 0, "optim.micro_batch_size": 2} | over)))
    model = model or tr.model
    return Updater(tr.cfg, tr.world, model, ddp(model) if ddp else None, tr.method, tr.tokenizer, tr.precision,
                   tr.device, list(replay_pairs), tmp_path / "ckpt"), tr


def _synthetic(n: int, response_len: int = 2) -> UpdateBatch:
    g = torch.Generator().manual_seed(n)
    samples = [_sample(torch.randint(5, 200, (6,), generator=g).tolist(),
                       torch.randint(5, 200, (response_len,), generator=g).tolist()) for _ in range(n)]
    return UpdateBatch(samples=samples, old_logp=[torch.full((response_len,), -3.0) for _ in range(n)],
                       adv=torch.linspace(-1, 1, n))


class _FakeDDP(torch.nn.Module):
    """DDP's interface on one process: the forward of the wrapped model, and ``no_sync`` recorded."""

    def __init__(self, module):
        super().__init__()
        self.module, self.syncing, self.forwards = module, True, []

    def forward(self, *a, **k):
        self.forwards.append(self.syncing)
        return self.module(*a, **k)

    def no_sync(self):
        from contextlib import contextmanager

        @contextmanager
        def ctx():
            self.syncing = False
            try:
                yield
            finally:
                self.syncing = True
        return ctx()


def test_under_ddp_only_the_last_backward_of_a_mini_batch_syncs(tmp_path):
    """Kills: a sync in another backward than the last (or none), extra zero-weighted passes, and a rank
    without samples skipping the pass whose backward joins the others' all-reduce."""
    up, _ = _updater(tmp_path, ddp=_FakeDDP)
    ddp = up._ddp
    assert up.iteration == 0  # a fresh updater has done no iteration
    batch = _synthetic(5)
    up.minibatch_step(batch, list(range(5)), denom=10.0)  # 3 micro-batches of 2, 2, 1
    assert ddp.forwards == [False, False, True]
    ddp.forwards.clear()
    up.minibatch_step(batch, [], denom=10.0)  # none of this mini-batch's samples is on this rank
    assert ddp.forwards == [True]
    ddp.forwards.clear()  # sharded: as many passes as the busiest rank, the extra one zero-weighted
    up.minibatch_step(batch, list(range(5)), denom=10.0, micro_batches=4)
    assert ddp.forwards == [False, False, False, True]
    assert (up._passes(0, None), up._passes(3, None), up._passes(2, 5)) == (1, 3, 5)
    up._ddp = None
    assert (up._passes(0, None), up._passes(3, None), up._passes(2, 5)) == (0, 3, 5)


def test_a_sharded_policy_runs_as_many_passes_as_the_busiest_rank_asks(tmp_path, monkeypatch):
    """Kills: the pass count of a sharded model dropped or computed from anything but the mini-batch's
    indices and ``optim.micro_batch_size``."""
    from seedrl.train import fsdp
    from seedrl.train.update import Updater

    up, _ = _updater(tmp_path, **{"optim.mini_batch_size": 5})
    seen = []
    monkeypatch.setattr(Updater, "minibatch_step",
                        lambda self, batch, idx, denom, **k: seen.append((len(idx), k["micro_batches"])) or {})
    up.update(_synthetic(7), 0)
    assert seen == [(5, None), (2, None)]
    seen.clear()
    monkeypatch.setattr(fsdp, "is_sharded", lambda model: model is up.model)
    up.update(_synthetic(7), 0)
    assert seen == [(5, 3), (2, 1)]  # ceil(5 / 2), ceil(2 / 2)


def test_a_one_token_mini_batch_still_steps(tmp_path):
    """Kills: the empty-mini-batch guard firing on one token."""
    up, _ = _updater(tmp_path)
    assert up.update(_synthetic(1, response_len=1), 0)["optim_steps"] == 1


def test_a_parameter_the_loss_does_not_reach_is_left_alone(tmp_path):
    """The gradients are cleared to None, not to zero: AdamW then skips a parameter that got no gradient
    in this step instead of decaying it and moving it by its momentum. Kills: ``zero_grad(set_to_none=False)``."""
    from seedrl.models.loading import load_model

    model = load_model("tiny-micro", init_seed=0)
    model.register_parameter("unused", torch.nn.Parameter(torch.ones(3)))
    up, _ = _updater(tmp_path, model=model, **{"optim.weight_decay": 0.5, "optim.lr": 0.1})
    model.unused.grad = torch.ones(3)  # left from a step in which it took part
    up.minibatch_step(_synthetic(2), [0, 1], denom=4.0)
    assert torch.equal(model.unused.detach(), torch.ones(3))


def test_replay_nll_is_the_token_mean_over_every_replayed_example_in_the_runs_precision(tmp_path, monkeypatch):
    """Kills: each micro-batch's NLL averaged over its own tokens, a micro-batch's NLL overwriting the
    others', and replay scored in another precision than the run's."""
    import seedrl.models.prefix as prefix_mod
    from seedrl.models.scoring import forward_logprobs, pack

    g = torch.Generator().manual_seed(3)
    pairs = [(torch.randint(5, 200, (4 + k,), generator=g).tolist(), torch.randint(5, 200, (1 + 2 * k,), generator=g)
              .tolist()) for k in range(3)]  # 1, 3 and 5 response tokens: micro-batches of 2 and 1
    up, tr = _updater(tmp_path, replay_pairs=pairs, **{"algo.replay_coef": 0.5})
    with torch.no_grad():
        b = pack([p for p, _ in pairs], [r for _, r in pairs], tr.tokenizer.pad_token_id, tr.device)
        logp, _ = forward_logprobs(up.model, b)
        want = float((-logp * b.response_mask).sum() / b.response_mask.sum())
    precisions = []

    def scoring(model, batch, **k):
        precisions.append(k.get("bf16"))
        return forward_logprobs(model, batch, **k)

    monkeypatch.setattr(prefix_mod, "forward_logprobs", scoring)  # the update's forwards: prefix.train_forward
    acc = {}
    up._replay_loss([0, 1, 2], denom=9.0, acc=acc)
    assert acc["loss/replay"] == pytest.approx(want, rel=1e-5)
    assert acc["replay/token_share"] == pytest.approx(9 / 18)
    assert precisions == [False, False]
    up.precision = type(up.precision)(**{**up.precision.__dict__, "bf16": True})
    up._replay_loss([0], denom=9.0, acc={})
    assert precisions[-1] is True
    precisions.clear()
    up.replay_pairs = []  # the policy's own forward (one micro-batch), in either precision
    up.minibatch_step(_synthetic(2), [0, 1], denom=4.0)
    up.precision = type(up.precision)(**{**up.precision.__dict__, "bf16": False})
    up.minibatch_step(_synthetic(2), [0, 1], denom=4.0)
    assert precisions == [True, False]


def test_with_several_processes_the_steps_stats_are_summed_over_ranks_and_any_ranks_bad_weights_stop_it(
        tmp_path, monkeypatch):
    """Kills: the stats of one rank logged as the step's, and the non-finite check reading this rank's
    shard only (or the other ranks' finite ones)."""
    from seedrl.train import update

    up, _ = _updater(tmp_path)
    up.world = World(rank=0, size=2)
    summed = []

    def fake_sum(world, acc):
        assert world is up.world
        summed.append(dict(acc))
        return {k: 2 * v for k, v in acc.items()}

    monkeypatch.setattr(update, "sum_stats", fake_sum)
    monkeypatch.setattr(update, "all_gather", lambda world, value: [value, None])
    stats = up.minibatch_step(_synthetic(2), [0, 1], denom=4.0)
    assert summed and stats["loss/pg"] == 2 * summed[0]["loss/pg"]
    monkeypatch.setattr(update, "all_gather", lambda world, value: [None, ("model.embed.weight", 1)])
    with pytest.raises(SeedRLError, match=r"NaN/inf in 1 tensor\(s\), first model.embed.weight;"):
        up.minibatch_step(_synthetic(2), [0, 1], denom=4.0)

    def gather(world, value):  # this rank's own verdict goes to the others, over this run's world
        assert world is up.world
        return [value, None]

    monkeypatch.setattr(update, "all_gather", gather)
    monkeypatch.setattr(update, "nonfinite_weights", lambda named: ("lm_head.weight", 2))
    with pytest.raises(SeedRLError, match=r"NaN/inf in 2 tensor\(s\), first lm_head.weight;"):
        up.minibatch_step(_synthetic(2), [0, 1], denom=4.0)


def test_non_finite_weights_stop_the_run_naming_the_first_tensor_the_rate_and_the_checkpoint(tmp_path, monkeypatch):
    """Kills: the check fed unnamed tensors, and each part of its one line."""
    from seedrl.train import update

    up, _ = _updater(tmp_path)
    up.iteration = 4
    seen = []

    def fake(named):
        named = list(named)
        seen.append([n for n, _ in named])
        return (named[1][0], 3)

    monkeypatch.setattr(update, "nonfinite_weights", fake)
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", lambda params, clip: torch.tensor(0.5))
    with pytest.raises(SeedRLError) as e:
        up.minibatch_step(_synthetic(2), [0, 1], denom=4.0)
    names = [n for n, p in up.model.named_parameters() if p.requires_grad]
    assert seen == [names]
    lr = up.scheduler.get_last_lr()[0]
    assert str(e.value) == (f"iteration 5: the optimizer step made the weights non-finite (NaN/inf in 3 tensor(s), "
                            f"first {names[1]}; lr {lr:g}, grad_norm 0.5); stopped without saving them: no "
                            f"checkpoint was written; lower optim.lr")


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before:UserWarning")  # a skipped step
def test_a_non_finite_gradient_norm_skips_the_step_and_says_at_which_iteration(tmp_path, monkeypatch, caplog):
    """Kills: the step taken anyway, the skip not counted, the warning's wording and iteration number."""
    up, _ = _updater(tmp_path)
    up.iteration = 2
    before = [p.detach().clone() for p in up.model.parameters()]
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", lambda params, clip: torch.tensor(float("nan")))
    with caplog.at_level("WARNING", logger="seedrl.train.update"):
        stats = up.minibatch_step(_synthetic(2), [0, 1], denom=4.0)
    assert stats["skipped_steps"] == 1.0
    assert all(torch.equal(a, p.detach()) for a, p in zip(before, up.model.parameters()))
    assert [r.getMessage() for r in caplog.records if r.name == "seedrl.train.update"] == [
        "non-finite gradient norm at iteration 3; skipping the step"]


def test_a_sharded_gradient_norm_is_read_as_its_full_value(tmp_path, monkeypatch):
    """FSDP's clip returns a DTensor; the logged and checked norm is its full tensor. Kills: the DTensor
    used as is."""
    class Sharded:
        def full_tensor(self):
            return torch.tensor(2.5)

    up, _ = _updater(tmp_path)
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", lambda params, clip: Sharded())
    assert up.minibatch_step(_synthetic(2), [0, 1], denom=4.0)["grad_norm"] == 2.5


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before:UserWarning")  # a skipped step
def test_the_lr_scheduler_steps_after_what_it_is_keyed_on_and_nothing_else(tmp_path):
    up, _ = _updater(tmp_path, **{"optim.warmup_steps": 4})
    assert not up.lr_per_iteration
    up.step_lr("iteration")
    assert up.scheduler.last_epoch == 0
    up.step_lr("optimizer_step")
    assert up.scheduler.last_epoch == 1
    with pytest.raises(ValueError) as e:
        up.step_lr("OPTIMIZER_STEP")
    assert str(e.value) == "step_lr after 'OPTIMIZER_STEP': 'optimizer_step' or 'iteration'"


def test_padding_carries_no_advantage_and_entropy_is_computed_only_when_it_is_used(tmp_path):
    """Samples of different response lengths share a micro-batch (padding); ``algo.entropy_coef`` 0
    computes and logs no entropy. Kills: the advantage divided by the mask (inf at the padding, a NaN
    step), and the entropy pass run at coefficient 0."""
    up, _ = _updater(tmp_path, **{"algo.entropy_coef": 0})
    batch = _synthetic(2, response_len=3)
    batch.samples[0].response_ids = batch.samples[0].response_ids[:1]
    batch.old_logp[0] = batch.old_logp[0][:1]
    stats = up.minibatch_step(batch, [0, 1], denom=4.0)
    assert "skipped_steps" not in stats and math.isfinite(stats["grad_norm"]) and math.isfinite(stats["loss/pg"])
    assert "loss/entropy" not in stats
    up.cfg.algo.entropy_coef = 0.01
    assert "loss/entropy" in up.minibatch_step(batch, [0, 1], denom=4.0)


def test_the_distillation_term_needs_a_teacher_weights_and_a_skill_in_the_mini_batch(tmp_path):
    """SEED's OPD term joins a step only when the batch has teacher log-probs, the step has signal weights,
    and some sample of the mini-batch has a skill (``signal_total`` > 0). Kills: each of the three
    conditions loosened."""
    up, _ = _updater(tmp_path, **{"algo.name": "seed", "skills.analyzer": "oracle"})
    key = f"loss/{up.method.signal.name}"

    def batch(teacher: bool, skill: float) -> UpdateBatch:
        b = _synthetic(2)
        b.teacher_logp = [torch.full((2,), -1.0) for _ in range(2)] if teacher else None
        b.signal = torch.full((2,), skill)
        return b

    assert key in up.minibatch_step(batch(True, 1.0), [0, 1], 4.0, signal_w=[0.5, 0.5], signal_total=2.0)
    assert key not in up.minibatch_step(batch(True, 0.0), [0, 1], 4.0, signal_w=[0.0, 0.0], signal_total=0.0)
    assert key not in up.minibatch_step(batch(True, 1.0), [0, 1], 4.0)  # no weights
    assert key not in up.minibatch_step(batch(False, 1.0), [0, 1], 4.0, signal_w=[0.5, 0.5], signal_total=2.0)


class _Recorder:
    """A signal that records what the loss hands it (its advantage leaves ``adv`` as it is)."""

    name, agg = "rec", "token_mean"

    def __init__(self):
        self.adv_args, self.loss_args = [], []

    def advantage(self, adv, teacher, old, tmask):
        self.adv_args.append((teacher, old, tmask))
        return adv

    def loss(self, logp, old, teacher, tmask):
        self.loss_args.append((old, teacher, tmask))
        return None


def test_a_signal_gets_the_teacher_the_old_log_probs_and_the_skill_mask_right_aligned(tmp_path, monkeypatch):
    """What OPID's advantage shift and Skill-SD's loss read. Kills: any of them replaced or the skill mask
    computed another way (a division, another dtype)."""
    up, _ = _updater(tmp_path)
    rec = _Recorder()
    monkeypatch.setattr(up.method, "signal", rec)
    b = _synthetic(2, response_len=3)
    b.samples[0].response_ids = b.samples[0].response_ids[:2]  # padded by one in the micro-batch
    b.old_logp = [torch.tensor([-3.0, -2.0]), torch.tensor([-1.0, -2.0, -3.0])]
    b.teacher_logp = [torch.tensor([-0.5, -0.25]), torch.tensor([-4.0, -5.0, -6.0])]
    b.signal = torch.tensor([1.0, 0.0])  # the second sample's trajectory has no skill
    up.minibatch_step(b, [0, 1], 5.0, signal_w=[0.5, 0.0], signal_total=1.0)
    teacher = torch.tensor([[0.0, -0.5, -0.25], [-4.0, -5.0, -6.0]])
    old = torch.tensor([[0.0, -3.0, -2.0], [-1.0, -2.0, -3.0]])
    (t, o, m), = rec.adv_args
    assert torch.equal(t, teacher) and torch.equal(o, old)
    assert torch.equal(m, torch.tensor([[0.0, 1.0, 1.0], [0.0, 0.0, 0.0]]))
    (o, t, m), = rec.loss_args
    assert torch.equal(o, old) and torch.equal(t, teacher)
    assert m.dtype == torch.float32 and torch.equal(m, torch.tensor([[0.0, 0.5, 0.5], [0.0, 0.0, 0.0]]))


def test_the_dual_clip_constant_reaches_the_ppo_loss(tmp_path, monkeypatch):
    """Kills: ``algo.dual_clip_c`` dropped (the loss's own default, 3.0, or none)."""
    from seedrl.algos import ppo_clip_loss
    from seedrl.train import update

    seen = []

    def recording(*a, **k):
        seen.append(k["dual_clip_c"])
        return ppo_clip_loss(*a, **k)

    monkeypatch.setattr(update, "ppo_clip_loss", recording)
    up, _ = _updater(tmp_path, **{"algo.dual_clip_c": 5.0})
    up.minibatch_step(_synthetic(2), [0, 1], denom=4.0)
    assert seen == [5.0]


def test_the_mini_batch_draw_is_a_function_of_seed_and_iteration_pinned(tmp_path, monkeypatch):
    """A run's mini-batches depend only on (``seed``, iteration): a resumed or repeated run draws the same
    ones, and two seeds never share an iteration's draw (``seed * 1_000_003 + iteration``, pinned so a
    change to it shows as the behaviour change it is; the behaviour reference runs seed 0 only). Kills:
    another mixing constant."""
    from seedrl.train.update import Updater

    up, _ = _updater(tmp_path, seed=2, **{"optim.mini_batch_size": 3})
    seen = []
    monkeypatch.setattr(Updater, "minibatch_step", lambda self, batch, idx, denom, **k: seen.append(idx) or {})
    up.update(_synthetic(6), 5)
    perm = torch.randperm(6, generator=torch.Generator().manual_seed(2 * 1_000_003 + 5)).tolist()
    assert seen == [perm[:3], perm[3:]]


def test_without_shuffle_the_mini_batches_are_contiguous_blocks_in_sample_order_every_epoch(tmp_path, monkeypatch):
    """``optim.shuffle: false`` is SEED's actor (``actor.shuffle: False``; ``update_policy`` cuts the batch
    with ``batch.split(ppo_mini_batch_size)``): consecutive blocks of the batch's samples, the last one
    short, the same blocks in every epoch. Kills: the seeded permutation drawn regardless of the option."""
    from seedrl.train.update import Updater

    up, _ = _updater(tmp_path, seed=2, **{"optim.mini_batch_size": 3, "optim.shuffle": False, "optim.ppo_epochs": 2})
    seen = []
    monkeypatch.setattr(Updater, "minibatch_step", lambda self, batch, idx, denom, **k: seen.append(idx) or {})
    up.update(_synthetic(7), 5)
    assert seen == [[0, 1, 2], [3, 4, 5], [6]] * 2


def test_shuffle_is_on_by_default_so_saved_runs_keep_their_draw(tmp_path):
    """A run saved before ``optim.shuffle`` existed has no such key: it must load with the seeded draw it
    trained with. Kills: the default flipped to SEED's order."""
    from seedrl.config import OptimConfig

    assert OptimConfig().shuffle is True


def _distill_batch() -> UpdateBatch:
    """Two samples with skills, a teacher that differs from the old policy, advantages of both signs."""
    b = _synthetic(2, response_len=3)
    b.adv = torch.tensor([1.5, -0.5])
    b.teacher_logp = [torch.tensor([-1.0, -4.0, -2.5]), torch.tensor([-2.0, -3.5, -6.0])]
    b.signal = torch.ones(2)
    return b


def _grads(up, batch: UpdateBatch) -> list[torch.Tensor]:
    """The gradient of one micro-batch loss over both samples (no optimizer step)."""
    up.model.zero_grad(set_to_none=True)
    up._micro_batch_loss(batch, [0, 1], 6.0, [0.5, 0.5], 3.0, {}).backward()
    return [p.grad.clone() for p in up.model.parameters() if p.grad is not None]


def test_under_opsd_the_advantages_never_reach_the_gradient(tmp_path):
    """SDAR's OPSD (``pg_loss_coef=0``): the update is the distillation term (with KL and entropy), so
    flipping every advantage's sign leaves the gradient as it is, and it equals ``sdar``'s gradient at
    zero advantages; under ``sdar`` the same flip changes it. Kills: the PG term left in under opsd
    (``algo.pg_coef`` ignored), or the OPD term dropped with it."""
    opsd, _ = _updater(tmp_path / "opsd", **{"algo.name": "opsd"})
    sdar, _ = _updater(tmp_path / "sdar", **{"algo.name": "sdar"})
    assert opsd.cfg.algo.pg_coef == 0 and sdar.cfg.algo.pg_coef == 1
    sdar.model.load_state_dict(opsd.model.state_dict())
    b = _distill_batch()
    flipped = _distill_batch()
    flipped.adv = -b.adv
    zero = _distill_batch()
    zero.adv = torch.zeros(2)
    g_opsd = _grads(opsd, b)
    assert any(g.abs().sum() > 0 for g in g_opsd)  # the OPD term (and KL) still moves the policy
    for a, f, z in zip(g_opsd, _grads(opsd, flipped), _grads(sdar, zero)):
        torch.testing.assert_close(a, f, rtol=0, atol=0)
        torch.testing.assert_close(a, z, rtol=1e-6, atol=1e-9)
    assert any(not torch.equal(a, f) for a, f in zip(_grads(sdar, b), _grads(sdar, flipped)))
    acc: dict[str, float] = {}
    opsd._micro_batch_loss(b, [0, 1], 6.0, [0.5, 0.5], 3.0, acc)
    assert acc["loss/opd"] != 0 and "loss/pg" in acc  # the PG value is still logged, weighted 0


def test_rlsd_hands_the_ppo_loss_the_teacher_weighted_advantage_of_its_step(tmp_path, monkeypatch):
    """RLSD replaces the advantage the PPO clip loss sees by ``rlsd_advantage`` with the lambda of the
    update's step (verl's steps count from 1: after 0 iterations, lambda = 0.5 (1 - 1/100)); from step
    ``rlsd_warmdown`` on it is GRPO's. Kills: the signal's advantage not applied, the step not set by
    the update (``begin_update`` not called), or counted from 0."""
    from seedrl.algos import ppo_clip_loss, rlsd_advantage
    from seedrl.train import update

    seen = []

    def recording(logp, old, adv, mask, **k):
        seen.append((adv.detach().clone(), old.clone()))
        return ppo_clip_loss(logp, old, adv, mask, **k)

    monkeypatch.setattr(update, "ppo_clip_loss", recording)
    up, _ = _updater(tmp_path, **{"algo.name": "rlsd", "optim.mini_batch_size": 2, "optim.dedupe": False})
    stats = up.update(_distill_batch(), 0)
    assert up.method.signal.step == 1 and stats["rlsd/lambda"] == pytest.approx(0.495)
    (adv, old), = seen
    b = _distill_batch()
    teacher = torch.stack(b.teacher_logp)
    base = b.adv[:, None].expand(2, 3)
    # the mini-batch's order is a permutation: match rows by their old log-probs (all -3 here) and sign
    order = [0, 1] if adv[0, 0] > 0 else [1, 0]
    expected = rlsd_advantage(base[order], teacher[order], old, torch.ones(2, 3), lam=0.495, clip_eps=0.2)
    torch.testing.assert_close(adv, expected)
    assert not torch.allclose(adv, base[order])  # the teacher did re-weight the tokens
    seen.clear()
    stats = up.update(_distill_batch(), 99)  # step 100 = the warm-down's end: plain GRPO
    assert stats["rlsd/lambda"] == 0.0
    flat = seen[0][0]
    assert torch.all(flat == flat[:, :1]) and sorted(flat[:, 0].tolist()) == [-0.5, 1.5]
