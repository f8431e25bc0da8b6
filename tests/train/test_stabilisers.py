"""GRPO stabilisers of the trainer: DAPO dynamic sampling, variance filtering of groups, replay of
expert demonstrations (PPO-ptx), clip-higher, sign-weighted advantages and the gradient-share
metrics, checked against hand-computed values and through a real (tiny) Trainer."""

from __future__ import annotations

import math

import pytest
import torch

import seedrl.train.update as update_mod
from seedrl.agent.parsing import action_span, decision_mask, parse_action
from seedrl.errors import SeedRLError
from seedrl.train.trainer import Trainer
from seedrl.train.update import replay_draw
from tests.helpers import tiny_cfg

CHEAP = {"eval.num_tasks": 0, "save_every": 0, "iterations": 1, "rollout.tasks_per_batch": 2,
         "rollout.group_size": 2, "env.max_steps": 2}


def cheap_trainer(tmp_path, **over) -> Trainer:
    return Trainer(tiny_cfg(tmp_path / "run", **(CHEAP | over)))


# --------------------------------------------------------------------------- #
# replay_draw                                                                 #
# --------------------------------------------------------------------------- #
LENGTHS = [5, 17, 3, 40, 8, 12, 9, 21, 1, 30]


@pytest.mark.parametrize("rl_tokens,share", [(100.0, 0.25), (37.0, 0.5), (250.0, 0.1), (10.0, 0.05),
                                             (60.0, 0.6), (3.0, 0.9)])
@pytest.mark.parametrize("seed", [0, 1, 7])
def test_replay_draw_reaches_the_share_with_the_fewest_drawn(rl_tokens, share, seed):
    out = replay_draw(LENGTHS, rl_tokens, share, torch.Generator().manual_seed(seed))
    assert len(out) >= 1
    assert len(set(out)) == len(out) and all(0 <= i < len(LENGTHS) for i in out)
    r = sum(LENGTHS[i] for i in out)
    assert r / (r + rl_tokens) >= share - 1e-12
    if len(out) > 1:  # one example fewer would miss the target
        r_less = r - LENGTHS[out[-1]]
        assert r_less / (r_less + rl_tokens) < share
    # the draw follows the generator's permutation: a prefix of it
    perm = torch.randperm(len(LENGTHS), generator=torch.Generator().manual_seed(seed)).tolist()
    assert out == perm[:len(out)]


def test_replay_draw_is_deterministic_for_a_seeded_generator():
    a = replay_draw(LENGTHS, 80.0, 0.3, torch.Generator().manual_seed(123))
    b = replay_draw(LENGTHS, 80.0, 0.3, torch.Generator().manual_seed(123))
    assert a == b
    draws = {tuple(replay_draw(LENGTHS, 80.0, 0.3, torch.Generator().manual_seed(s))) for s in range(20)}
    assert len(draws) > 1  # the seed matters


def test_replay_draw_hand_case_and_edges():
    g = torch.Generator().manual_seed(0)
    perm = torch.randperm(4, generator=torch.Generator().manual_seed(0)).tolist()
    lengths = [10, 10, 10, 10]
    # share 0.5 of 25 RL tokens: 25 replayed tokens at least -> 3 examples of 10 (20 < 25 <= 30)
    assert replay_draw(lengths, 25.0, 0.5, g) == perm[:3]
    # no RL tokens: one example (at least one)
    assert len(replay_draw(lengths, 0.0, 0.5, torch.Generator().manual_seed(0))) == 1
    # an unreachable share: every example, once each
    out = replay_draw(lengths, 1000.0, 0.9, torch.Generator().manual_seed(0))
    assert sorted(out) == [0, 1, 2, 3]


# --------------------------------------------------------------------------- #
# action_span and decision_mask                                               #
# --------------------------------------------------------------------------- #
def test_action_span_is_the_content_of_the_last_action_block():
    assert action_span("<action>up</action>") == (8, 10)
    text = "<think>x</think><action>left</action> then <ACTION> up </action>"
    s, e = action_span(text)
    assert text[s:e] == parse_action(text) == "up"  # the surrounding spaces are not the action
    text = "<think>hm</think><action>\npush\nbox</action><|im_end|>"
    s, e = action_span(text)
    assert text[s:e] == "push\nbox" and parse_action(text) == "push box"
    # no valid action, as parse_action says: an empty block, or one past MAX_ACTION_CHARS
    assert action_span("<action>  </action>") is None and parse_action("<action>  </action>") is None
    assert action_span("<action>" + "x" * 201 + "</action>") is None
    for none in ["", "<think>no action</think>", "<action>up", "up</action>", "<action>up</actio>"]:
        assert action_span(none) is None and parse_action(none) is None


def _ids(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


def _masked_text(tok, ids, mask):
    assert len(mask) == len(ids)
    marked = [k for k, m in enumerate(mask) if m]
    if marked:  # one contiguous run of tokens
        assert marked == list(range(marked[0], marked[-1] + 1))
    return tok.decode([i for i, m in zip(ids, mask) if m])


@pytest.mark.parametrize("text,action", [
    ("<think>x</think><action>up</action>", "up"),
    ("<action>down</action>", "down"),
    ("<think>" + "the box is left of the target so " * 20 + "</think><action>left</action>", "left"),
    ("<think>plan</think><action>push box left</action>", "push box left"),
])
def test_decision_mask_marks_exactly_the_action_tokens(tiny_tokenizer, text, action):
    ids = _ids(tiny_tokenizer, text)
    assert _masked_text(tiny_tokenizer, ids, decision_mask(tiny_tokenizer, ids)) == action
    # an end-of-turn token after the block is format, not decision
    ids_eos = ids + [tiny_tokenizer.eos_token_id]
    mask = decision_mask(tiny_tokenizer, ids_eos)
    assert not mask[-1] and _masked_text(tiny_tokenizer, ids_eos, mask) == action


def test_decision_mask_without_an_action_block_is_all_false(tiny_tokenizer):
    for text in ["<think>no</think>", "<think>x</think><action>up", "just words"]:
        ids = _ids(tiny_tokenizer, text)
        assert decision_mask(tiny_tokenizer, ids) == [False] * len(ids)
    assert decision_mask(tiny_tokenizer, []) == []


def test_decision_mask_with_two_blocks_marks_only_the_last(tiny_tokenizer):
    first = "<think>x</think><action>left</action>"
    ids = _ids(tiny_tokenizer, first + " then <action>up</action>")
    mask = decision_mask(tiny_tokenizer, ids)
    assert _masked_text(tiny_tokenizer, ids, mask) == "up"
    k0 = next(k for k in range(len(ids) + 1) if len(tiny_tokenizer.decode(ids[:k])) >= len(first))
    assert not any(mask[:k0])  # nothing of the first block


# --------------------------------------------------------------------------- #
# group filters through the Trainer, with scripted outcomes                   #
# --------------------------------------------------------------------------- #
def script_outcomes(tr: Trainer, table: list[list[list[float]]]) -> list[tuple[int, list]]:
    """Make ``tr.collect`` give the episode rewards of ``table[round][group][member]`` (groups in
    group-id order, members in traj_id order; ``won`` = reward > 0). Returns the calls made
    (round, trajectories)."""
    orig = tr.collect
    calls: list[tuple[int, list]] = []

    def collect(timings, round_=0):
        trajs = orig(timings, round_)
        calls.append((round_, trajs))
        groups: dict[int, list] = {}
        for t in sorted(trajs, key=lambda t: t.traj_id):
            groups.setdefault(t.group_id, []).append(t)
        assert len(groups) == tr.cfg.rollout.tasks_per_batch
        for k, gid in enumerate(sorted(groups)):
            members = groups[gid]
            assert len(members) == tr.cfg.rollout.group_size
            for t, r in zip(members, table[len(calls) - 1][k]):
                assert t.steps and t.error is None
                for s in t.steps:
                    s.reward = 0.0
                t.steps[-1].reward = r
                t.won = r > 0
        return trajs

    tr.collect = collect
    return calls


def _groups_of(trajs) -> dict[int, list]:
    out: dict[int, list] = {}
    for t in trajs:
        out.setdefault(t.group_id, []).append(t)
    return out


def test_dynamic_sampling_refills_until_tasks_per_batch_mixed_groups(tmp_path):
    tr = cheap_trainer(tmp_path, **{"algo.dynamic_sampling": "true"})
    # round 0: one mixed group (its 2nd); round 1: none; round 2: both -> 3 mixed, trimmed to 2
    calls = script_outcomes(tr, [[[0.0, 0.0], [1.0, 0.0]],
                                 [[1.0, 1.0], [0.0, 0.0]],
                                 [[1.0, 0.0], [0.0, 2.0]]])
    kept, m = tr.collect_batch({})
    assert [r for r, _ in calls] == [0, 1, 2]
    # group ids are unique across rounds, and every step carries its trajectory's group id
    ids = [sorted({t.group_id for t in trajs}) for _, trajs in calls]
    assert len(set().union(*map(set, ids))) == 6
    assert all(s.group_id == t.group_id for _, trajs in calls for t in trajs for s in t.steps)
    # kept: the mixed groups of the earliest rounds, each whole, none uniform
    groups = _groups_of(kept)
    assert sorted(groups) == [ids[0][1], ids[2][0]]
    assert all(len(ts) == 2 and len({t.episode_reward for t in ts}) > 1 for ts in groups.values())
    assert len({t.traj_id for t in kept}) == len(kept) == 4
    assert m["sampling/rounds"] == 3
    assert m["sampling/episodes"] == 3 * 2 * 2  # rounds * tasks_per_batch * group_size
    assert m["sampling/groups_played"] == 6 and m["sampling/groups_kept"] == 2
    assert m["sampling/success_rate_played"] == pytest.approx(5 / 12)  # 1 + 2 + 2 wins of 12 played
    assert tr.panel_position == 3 * 2  # every round drew fresh tasks


def test_dynamic_sampling_stops_after_one_round_when_every_group_is_mixed(tmp_path):
    tr = cheap_trainer(tmp_path, **{"algo.dynamic_sampling": "true"})
    calls = script_outcomes(tr, [[[0.0, 1.0], [1.0, 0.5]]])
    kept, m = tr.collect_batch({})
    assert len(calls) == 1 and len(kept) == 4 and len(_groups_of(kept)) == 2
    assert (m["sampling/rounds"], m["sampling/episodes"], m["sampling/groups_kept"]) == (1, 4, 2)


def test_dynamic_sampling_rounds_caps_the_refills(tmp_path):
    tr = cheap_trainer(tmp_path, **{"algo.dynamic_sampling": "true", "algo.dynamic_sampling_rounds": 2})
    calls = script_outcomes(tr, [[[0.0, 0.0], [0.0, 0.0]],
                                 [[1.0, 0.0], [1.0, 1.0]],
                                 [[1.0, 0.0], [0.0, 1.0]]])  # a 3rd round is never played
    kept, m = tr.collect_batch({})
    assert len(calls) == 2
    groups = _groups_of(kept)
    assert list(groups) == [min(t.group_id for t in calls[1][1])]  # the one mixed group there was
    assert m["sampling/rounds"] == 2 and m["sampling/episodes"] == 2 * 2 * 2
    assert m["sampling/groups_played"] == 4 and m["sampling/groups_kept"] == 1


def test_dynamic_sampling_in_a_training_iteration_updates_on_mixed_groups_only(tmp_path):
    tr = cheap_trainer(tmp_path, **{"algo.dynamic_sampling": "true", "algo.invalid_penalty": 0.0})
    script_outcomes(tr, [[[0.0, 0.0], [1.0, 0.0]], [[0.0, 2.0], [3.0, 3.0]]])
    seen = {}
    orig_adv = tr.scorer.advantages

    def advantages(trajs, samples):
        seen["trajs"], seen["adv"] = trajs, orig_adv(trajs, samples)
        return seen["adv"]

    tr.scorer.advantages = advantages
    m = tr.train_iteration()
    assert m["sampling/rounds"] == 2 and m["sampling/episodes"] == 8 and m["sampling/groups_kept"] == 2
    assert len(_groups_of(seen["trajs"])) == 2
    assert bool((seen["adv"] != 0).all())  # every kept group has an outcome advantage
    assert "grad/decision_token_frac" in m and "grad/pos_share" in m


def test_keep_group_frac_keeps_the_groups_of_largest_reward_std(tmp_path):
    tr = cheap_trainer(tmp_path, **{"algo.keep_group_frac": 0.5, "rollout.tasks_per_batch": 4,
                                    "rollout.group_size": 3})
    # std: 0, 0.471, 0.236, 0.816 -> ceil(0.5 * 4) = 2 groups: the 4th and the 2nd
    calls = script_outcomes(tr, [[[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.5, 0.0, 0.0], [2.0, 0.0, 1.0]]])
    kept, m = tr.collect_batch({})
    ids = sorted({t.group_id for t in calls[0][1]})
    assert len(calls) == 1
    assert sorted(_groups_of(kept)) == [ids[1], ids[3]]
    assert all(len(ts) == 3 for ts in _groups_of(kept).values())
    assert m["sampling/rounds"] == 1 and m["sampling/episodes"] == 12
    assert m["sampling/groups_played"] == 4 and m["sampling/groups_kept"] == 2


def test_without_filters_collect_batch_is_one_plain_rollout(tmp_path):
    tr = cheap_trainer(tmp_path)
    calls = script_outcomes(tr, [[[0.0, 0.0], [0.0, 0.0]]])
    kept, m = tr.collect_batch({})
    assert len(calls) == 1 and kept is calls[0][1] and m == {}


# --------------------------------------------------------------------------- #
# replay (PPO-ptx)                                                            #
# --------------------------------------------------------------------------- #
def test_replay_joins_every_minibatch_with_its_token_share(tmp_path, monkeypatch):
    share = 0.3
    tr = cheap_trainer(tmp_path, **{"algo.replay_coef": 0.5, "algo.replay_share": share,
                                    "algo.replay_demo_tasks": 4, "optim.mini_batch_size": 2})
    assert tr.replay_pairs and all(len(r) > 0 for _, r in tr.replay_pairs)
    draws = []

    def recording(lengths, rl_tokens, share_, generator):
        out = replay_draw(lengths, rl_tokens, share_, generator)
        draws.append((lengths, rl_tokens, share_, out))
        return out

    monkeypatch.setattr(update_mod, "replay_draw", recording)
    m = tr.train_iteration()
    assert draws and len(draws) == m["optim_steps"]
    shares = []
    for lengths, rl, s, out in draws:
        assert s == share and lengths == [len(r) for _, r in tr.replay_pairs] and rl > 0
        r = sum(lengths[i] for i in out)
        shares.append(r / (r + rl))
        assert shares[-1] >= share
        if len(out) > 1:  # within one example of the target
            r_less = r - lengths[out[-1]]
            assert r_less / (r_less + rl) < share
    assert m["replay/token_share"] == pytest.approx(sum(shares) / len(shares))
    assert m["replay/token_share"] >= share
    assert math.isfinite(m["loss/replay"]) and m["loss/replay"] > 0


def test_no_replay_keys_without_replay(tmp_path):
    tr = cheap_trainer(tmp_path)
    assert tr.replay_pairs == []
    m = tr.train_iteration()
    assert not any(k.startswith(("replay/", "sampling/")) or k == "loss/replay" for k in m)


# --------------------------------------------------------------------------- #
# clip-higher and sign weighting                                              #
# --------------------------------------------------------------------------- #
def test_clip_ratio_low_and_high_reach_ppo_clip_loss(tmp_path, monkeypatch):
    tr = cheap_trainer(tmp_path, **{"algo.clip_ratio_high": 0.28, "algo.clip_ratio_low": 0.15})
    seen = []
    orig = update_mod.ppo_clip_loss

    def recording(*args, **kwargs):
        seen.append(kwargs)
        return orig(*args, **kwargs)

    monkeypatch.setattr(update_mod, "ppo_clip_loss", recording)
    tr.train_iteration()
    assert seen
    assert all(k["clip_ratio_high"] == 0.28 and k["clip_ratio_low"] == 0.15 for k in seen)
    assert all(k["clip_ratio"] == tr.cfg.algo.clip_ratio for k in seen)


def test_sign_coefficients_scale_the_trainer_advantages(tmp_path):
    tr = cheap_trainer(tmp_path, **{"rollout.group_size": 4, "algo.invalid_penalty": 0.0})
    trajs = tr.collect({})
    for i, t in enumerate(trajs):
        for s in t.steps:
            s.reward = 0.0
        t.steps[-1].reward = 10.0 if i % 2 == 0 else 0.0
    samples = [s for t in trajs for s in t.steps if s.response_ids]
    base = tr.scorer.advantages(trajs, samples)
    assert bool((base > 0).any()) and bool((base < 0).any())

    tr.cfg.algo.neg_adv_coef = 0.0
    only_pos = tr.scorer.advantages(trajs, samples)
    assert not bool((only_pos < 0).any())
    torch.testing.assert_close(only_pos, torch.where(base > 0, base, torch.zeros_like(base)))

    tr.cfg.algo.pos_adv_coef, tr.cfg.algo.neg_adv_coef = 2.0, 0.5
    scaled = tr.scorer.advantages(trajs, samples)
    torch.testing.assert_close(scaled, torch.where(base > 0, 2.0 * base, 0.5 * base))


# --------------------------------------------------------------------------- #
# config                                                                      #
# --------------------------------------------------------------------------- #
@pytest.mark.parametrize("key,value", [("algo.keep_group_frac", 0), ("algo.keep_group_frac", 1.5),
                                       ("algo.replay_share", 1), ("algo.replay_share", 0),
                                       ("algo.dynamic_sampling_rounds", 0), ("algo.neg_adv_coef", -1)])
def test_config_rejects_out_of_range_stabilisers(tmp_path, key, value):
    with pytest.raises(SeedRLError, match=key.split(".")[1]):
        tiny_cfg(tmp_path / "r", **{key: value})


def test_config_accepts_the_edges(tmp_path):
    cfg = tiny_cfg(tmp_path / "r", **{"algo.keep_group_frac": 1.0, "algo.replay_share": 0.99,
                                     "algo.neg_adv_coef": 0.0, "algo.clip_ratio_high": 0.28})
    assert (cfg.algo.keep_group_frac, cfg.algo.replay_share, cfg.algo.neg_adv_coef) == (1.0, 0.99, 0.0)


@pytest.mark.parametrize("over", [{"algo.dynamic_sampling": "true"}, {"algo.keep_group_frac": 0.5},
                                  {"algo.replay_coef": 0.1}])
def test_filters_and_replay_refuse_rollout_shards(tmp_path, over):
    with pytest.raises(SeedRLError, match="single process"):
        Trainer(tiny_cfg(tmp_path / "r", **(CHEAP | over)), rollout_shards=2)


def test_dynamic_sampling_with_no_mixed_group_skips_the_update(tmp_path):
    """Every group uniform in every round: the iteration logs its sampling and makes no update
    (it used to crash as 'the rollout produced no step samples')."""
    tr = Trainer(tiny_cfg(tmp_path / "r", **{"eval.num_tasks": 0, "save_every": 0, "rollout.group_size": 2,
                                             "env.max_steps": 2, "algo.dynamic_sampling": "true",
                                             "algo.dynamic_sampling_rounds": 2}))
    inner = tr.collect

    def all_fail(timings, round_=0):
        trajs = inner(timings, round_)
        for t in trajs:
            t.won = False
            for st in t.steps:
                st.reward = 0.0
        return trajs

    tr.collect = all_fail
    before = {k: v.clone() for k, v in tr.model.state_dict().items()}
    m = tr.train_iteration()
    assert m["update/skipped"] == 1 and m["sampling/rounds"] == 2 and m["sampling/groups_kept"] == 0
    assert m["sampling/episodes"] == 2 * tr.cfg.rollout.tasks_per_batch * 2
    assert tr.iteration == 1
    assert all(torch.equal(before[k], v) for k, v in tr.model.state_dict().items())


def test_dedupe_gives_the_update_of_the_unmerged_batch(tmp_path):
    """optim.dedupe merges identical samples into one weighted forward: the optimizer step must equal
    the one over every copy (fp32; up to float rounding), and the stats must agree."""
    import copy

    from seedrl.train.update import UpdateBatch, sample_keys, training_samples

    tr = Trainer(tiny_cfg(tmp_path / "r", **{"eval.num_tasks": 0, "save_every": 0, "rollout.group_size": 2,
                                             "env.max_steps": 2, "optim.ppo_epochs": 2,
                                             "optim.mini_batch_size": 4, "model.precision": "fp32"}))
    samples = training_samples(tr.collect({}))
    samples = samples + samples[:3] + samples[:1]  # duplicates: three twice, one three times
    old = tr.scorer.logprobs(tr.model, samples)
    adv = torch.linspace(-1.0, 1.0, len(samples))
    adv[len(samples) - 4:] = torch.cat([adv[:3], adv[:1]])  # the copies keep their advantage
    state = copy.deepcopy(tr.model.state_dict())
    opt_state = copy.deepcopy(tr.optimizer.state_dict())
    plain = tr.update(UpdateBatch(samples, old, adv))
    w_plain = {k: v.clone() for k, v in tr.model.state_dict().items()}
    tr.model.load_state_dict(state)
    tr.optimizer.load_state_dict(opt_state)
    tr.iteration = 0  # the same mini-batch shuffle
    ub = UpdateBatch(samples, old, adv)
    ub.keys = sample_keys(ub)
    assert len(set(ub.keys)) == len(samples) - 4
    merged = tr.update(ub)
    for k in ("loss/pg", "ppo/approx_kl", "ppo/clipfrac", "grad_norm", "optim_steps"):
        assert merged[k] == pytest.approx(plain[k], rel=1e-5, abs=1e-7)
    moved = max(float((w_plain[k] - state[k]).abs().max()) for k in state)
    assert moved > 0
    assert max(float((w_plain[k] - v).abs().max()) for k, v in tr.model.state_dict().items()) < 1e-3 * moved


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_split_by_key_keeps_copies_together_and_covers_the_batch(seed):
    from seedrl.train.update import split_by_key

    g = torch.Generator().manual_seed(seed)
    keys = [("k", int(x)) for x in torch.randint(0, 7, (40,), generator=g)]
    order = torch.randperm(40, generator=g).tolist()
    split = split_by_key(order, keys, 8)
    flat = [i for b in split for i in b]
    assert sorted(flat) == list(range(40))  # every sample once
    home = {keys[i]: n for n, b in enumerate(split) for i in b}
    assert all(home[keys[i]] == n for n, b in enumerate(split) for i in b)  # copies never split
    assert all(len(b) >= 8 for b in split[:-1])
    # the distinct keys come in the order of their first sample in `order`
    first = list(dict.fromkeys(keys[i] for i in order))
    assert list(dict.fromkeys(keys[i] for i in flat)) == first


def test_split_by_key_by_hand():
    """keys a a b c b d, order 0..5, size 3: a's two copies (2 samples, < 3) take b's two as well
    (4 >= 3: closed); c and d make the last."""
    from seedrl.train.update import split_by_key

    keys = [("a",), ("a",), ("b",), ("c",), ("b",), ("d",)]
    assert split_by_key(list(range(6)), keys, 3) == [[0, 1, 2, 4], [3, 5]]
    # all keys distinct: exactly the plain consecutive chunks of `order`
    assert split_by_key([4, 2, 0, 5, 1, 3], [(i,) for i in range(6)], 4) == [[4, 2, 0, 5], [1, 3]]


def test_split_distinct_scores_each_distinct_sample_once_per_epoch(tmp_path, monkeypatch):
    """optim.split_distinct: with no duplicates it is the default update bit for bit (the same
    mini-batches); with duplicates, an epoch's forward rows are the distinct samples, not more."""
    import copy

    from seedrl.train.update import UpdateBatch, sample_keys, training_samples

    over = {"rollout.group_size": 2, "env.max_steps": 2, "optim.ppo_epochs": 2, "optim.mini_batch_size": 4,
            "model.precision": "fp32"}
    tr = cheap_trainer(tmp_path, **over)
    samples = training_samples(tr.collect({}))
    old = tr.scorer.logprobs(tr.model, samples)
    adv = torch.linspace(-1.0, 1.0, len(samples))
    state, opt_state = copy.deepcopy(tr.model.state_dict()), copy.deepcopy(tr.optimizer.state_dict())

    def run(split: bool, batch_samples, batch_old, batch_adv):
        tr.model.load_state_dict(state)
        tr.optimizer.load_state_dict(opt_state)
        tr.iteration = 0
        tr.cfg.optim.split_distinct = split
        ub = UpdateBatch(batch_samples, batch_old, batch_adv)
        ub.keys = sample_keys(ub)
        out = tr.update(ub)
        return out, {k: v.clone() for k, v in tr.model.state_dict().items()}

    assert len(set(sample_keys(UpdateBatch(samples, old, adv)))) == len(samples)
    (plain, w_plain), (split, w_split) = run(False, samples, old, adv), run(True, samples, old, adv)
    assert plain == split and all(torch.equal(w_plain[k], w_split[k]) for k in state)

    dup = samples + samples * 3  # every sample 4 times: each mini-batch of 4 holds one distinct sample
    rows = []
    orig = update_mod.Updater._micro_batch_loss
    monkeypatch.setattr(update_mod.Updater, "_micro_batch_loss",
                        lambda self, b, mi, *a, **k: rows.append(len(mi)) or orig(self, b, mi, *a, **k))
    run(False, dup, old * 4, adv.repeat(4))
    default_rows, rows[:] = sum(rows), []
    out, _ = run(True, dup, old * 4, adv.repeat(4))
    assert sum(rows) == over["optim.ppo_epochs"] * len(samples) < default_rows
    assert out["optim_steps"] == over["optim.ppo_epochs"] * len(samples)


def test_split_distinct_needs_dedupe(tmp_path):
    with pytest.raises(Exception, match="optim.dedupe=true"):
        tiny_cfg(tmp_path / "r", **{"optim.split_distinct": True, "optim.dedupe": False})


def test_uniform_group_mass_is_the_advantage_share_of_all_equal_groups():
    """adv/uniform_group_mass: sum|A| over samples of groups whose outcomes are all equal / sum|A|.
    Group 0 (both won) holds |A| 1 + 3, group 1 (one won) holds |A| 2 + 2 + 2: share 4 / 10."""
    from seedrl.rollout.types import StepSample, Trajectory
    from seedrl.train.metrics import rollout_metrics

    def traj(tid, gid, won, n):
        steps = [StepSample([1], [2], [-0.1], traj_id=tid, group_id=gid, step=k, reward=float(won and k == n - 1),
                            action_valid=True) for k in range(n)]
        return Trajectory(traj_id=tid, group_id=gid, task_id="t", steps=steps, won=won)

    trajs = [traj(0, 0, True, 1), traj(1, 0, True, 1), traj(2, 1, True, 1), traj(3, 1, False, 2)]
    samples = [s for t in trajs for s in t.steps]
    adv = torch.tensor([1.0, -3.0, 2.0, -2.0, -2.0])
    m = rollout_metrics(trajs, samples, [torch.tensor(s.logprobs) for s in samples], adv)
    assert m["adv/uniform_groups"] == 0.5
    assert m["adv/uniform_group_mass"] == pytest.approx(0.4)


def test_episode_discount_favours_the_shorter_win(tmp_path):
    """Two wins in one group, of 1 and 2 steps (the second step of the longer one is the win):
    with the outcome alone both score the same (advantage 0); with episode_discount the 1-step win
    is above its group mean and the 2-step win below it."""
    from seedrl.rollout.types import StepSample, Trajectory

    tr = cheap_trainer(tmp_path, **{"algo.invalid_penalty": 0.0})

    def step(tid, k, r):
        return StepSample([1], [2], [-0.1], traj_id=tid, group_id=0, step=k, reward=r, action_valid=True)

    trajs = [Trajectory(0, 0, "t", steps=[step(0, 0, 10.0)], won=True),
             Trajectory(1, 0, "t", steps=[step(1, 0, 0.0), step(1, 1, 10.0)], won=True)]
    samples = [s for t in trajs for s in t.steps]
    assert tr.scorer.advantages(trajs, samples).abs().max() < 1e-6
    tr.cfg.algo.episode_discount = 0.5
    assert tr.scorer.returns(trajs).tolist() == [10.0, 5.0]
    adv = tr.scorer.advantages(trajs, samples)
    assert adv[0] > 0 and adv[1] < 0 and adv[2] < 0


def test_iterations_that_never_update_warn_louder_and_the_run_says_it_never_learnt(tmp_path, caplog):
    """A tiny random policy loses every episode: dynamic sampling keeps no group, no iteration updates. The
    third skip in a row warns with the fix, the sixth is an error line, and the run ends saying none updated."""
    import logging

    tr = cheap_trainer(tmp_path, **{"algo.dynamic_sampling": "true", "algo.dynamic_sampling_rounds": 1,
                                    "iterations": 7, "rollout.tasks_per_batch": 1, "env.max_steps": 1})
    with caplog.at_level(logging.WARNING):  # the streak: seedrl.train.collect; the end: the trainer
        tr.train()
    msgs = [(r.levelno, r.getMessage()) for r in caplog.records
            if r.name in ("seedrl.train.trainer", "seedrl.train.collect")]
    streak = [(lv, m) for lv, m in msgs if "in a row" in m]
    assert [lv for lv, _ in streak] == [logging.WARNING, logging.ERROR], msgs
    assert streak[0][1].startswith("3 iterations in a row (1-3) made no update") and \
        "raise algo.dynamic_sampling_rounds" in streak[0][1]
    assert streak[1][1].startswith("STILL no update: 6 iterations in a row (since iteration 1)")
    assert msgs[-1][1].startswith("no iteration of this run updated the policy: all 7 it ran were skipped")


def test_a_run_that_updates_says_nothing_about_skips(tmp_path, caplog):
    import logging

    with caplog.at_level(logging.WARNING):
        cheap_trainer(tmp_path, iterations=2).train()
    assert not [r for r in caplog.records if "no update" in r.getMessage() or "updated the policy" in r.getMessage()]
