"""seedrl.train.metrics by hand: where the policy gradient comes from, how far the teacher moves, the
episode digests. The rollout metrics through the loop: tests/train/test_trainer.py and test_stabilisers.py."""

from __future__ import annotations

import math

import pytest
import torch

from seedrl.train.metrics import gradient_shares, rollout_digests, teacher_metrics


def test_gradient_shares_by_hand():
    # weights |A| * (1 - p_old):  s0 (A=1):  p 0.5, 0.75   -> 0.5, 0.25
    #                             s1 (A=-2): p 0.5, 0.9, 1 -> 1.0, 0.2, 0.0
    #                             s2 (A=0):  p 0.1         -> 0
    #                             s3 (A=3):  no tokens
    adv = torch.tensor([1.0, -2.0, 0.0, 3.0])
    old = [torch.tensor([0.5, 0.75]).log(), torch.tensor([0.5, 0.9, 1.0]).log(), torch.tensor([0.1]).log(),
           torch.zeros(0)]
    decision = [[False, True], [True, False, True], [True], []]
    m = gradient_shares(adv, old, decision)
    assert set(m) == {"grad/pos_share", "grad/neg_share", "grad/decision_share", "grad/decision_token_frac",
                      "rollout/decision_nll"}
    # decision tokens' -log p: 0.75, 0.5, 1.0 and 0.1
    assert m["rollout/decision_nll"] == pytest.approx(-(math.log(0.75) + math.log(0.5) + 0 + math.log(0.1)) / 4)
    total = 0.5 + 0.25 + 1.0 + 0.2
    assert m["grad/pos_share"] == pytest.approx(0.75 / total, rel=1e-6)
    assert m["grad/neg_share"] == pytest.approx(1.2 / total, rel=1e-6)
    assert m["grad/decision_share"] == pytest.approx((0.25 + 1.0 + 0.0) / total, rel=1e-6)
    assert m["grad/decision_token_frac"] == pytest.approx(4 / 6)


def test_gradient_shares_without_any_advantage_give_no_shares():
    old = [torch.tensor([0.5, 0.75]).log(), torch.tensor([0.2]).log()]
    m = gradient_shares(torch.zeros(2), old, [[True, False], [False]])
    assert m == {"grad/decision_token_frac": pytest.approx(1 / 3), "rollout/decision_nll": pytest.approx(-math.log(0.5))}


def test_teacher_metrics_tail_and_advantage_sides_by_hand():
    """The shift's tail (|teacher - old| > 1 nat), its size where gradients flow (weight 1 - p_old) and its
    agreement with the advantage's sign, worked out by hand; a sample without a signal (its big shift
    included) never counts, nor does a token the policy is sure of (p_old = 1)."""
    from seedrl.skills.analyzers.base import AnalysisResult

    # p_old 0.5 and 1 | 0.75, 0.75, 0.5: gradient weights 1 - p_old = 0.5, 0 | 0.25, 0.25, 0.5
    old = [torch.tensor([0.5, 1.0]).log(), torch.tensor([0.75, 0.75, 0.5]).log(), torch.zeros(1)]
    shift = [torch.tensor([2.0, 0.0]), torch.tensor([-3.0, 0.5, 1.5]), torch.tensor([5.0])]
    teacher = [o + d for o, d in zip(old, shift)]
    signal, adv = torch.tensor([1.0, 1.0, 0.0]), torch.tensor([1.0, -1.0, 1.0])
    results = [AnalysisResult(0, "skill"), AnalysisResult(1, None)]
    m = teacher_metrics(results, [], old, teacher, signal, adv)
    assert m["skills/parse_rate"] == 0.5
    assert m["teacher/delta_mean"] == pytest.approx(1.0 / 5)  # 2 + 0 - 3 + 0.5 + 1.5, not the 5.0
    assert m["teacher/delta_tail_frac"] == pytest.approx(3 / 5)  # 2, -3, 1.5
    assert m["teacher/delta_mean_adv_pos"] == pytest.approx(1.0)
    assert m["teacher/delta_mean_adv_neg"] == pytest.approx(-1 / 3)
    # |shift| * w: 1.0, 0 | 0.75, 0.125, 0.75 over w 1.5; agreement (1.0 + 0.75 - 0.125 - 0.75) / 2.625
    assert m["teacher/delta_abs_gradw"] == pytest.approx(2.625 / 1.5)
    assert m["teacher/adv_agree_gradw"] == pytest.approx(1 / 3)
    # linear interpolation over the sorted shifts (-3, 0, 0.5, 1.5, 2): positions 0.04 and 3.96
    assert m["teacher/delta_p01"] == pytest.approx(-2.88) and m["teacher/delta_p99"] == pytest.approx(1.98)
    # without any signal: no teacher metrics at all
    assert not any(k.startswith("teacher/") for k in teacher_metrics(results, [], old, teacher, torch.zeros(3), adv))


def test_teacher_outcome_agreement_reads_the_episode_not_the_advantage():
    """``teacher/outcome_agree_gradw`` weighs the shift's sign against the episode's outcome: a lost
    episode whose advantage is positive (its all-lost group ranked it by the invalid-action penalty)
    counts against a shift that agrees with its advantage. By hand, with the weights of the test above."""
    from seedrl.rollout.types import StepSample
    from seedrl.skills.analyzers.base import AnalysisResult

    old = [torch.tensor([0.5, 1.0]).log(), torch.tensor([0.75, 0.75, 0.5]).log()]
    shift = [torch.tensor([2.0, 0.0]), torch.tensor([-3.0, 0.5, 1.5])]
    teacher = [o + d for o, d in zip(old, shift)]
    samples = [StepSample([], [], [], traj_id=t, group_id=0, step=0, reward=0.0, action_valid=True) for t in (7, 3)]
    adv = torch.tensor([1.0, 1.0])  # both positive: sample 0 won, sample 1 lost in an all-lost group
    m = teacher_metrics([AnalysisResult(0, "skill")], samples, old, teacher, torch.ones(2), adv, {3: False, 7: True})
    # |shift| * w: 1.0 (won, +) | 0.75 (-), 0.125 (+), 0.75 (+) on a lost episode, over 2.625
    assert m["teacher/adv_agree_gradw"] == pytest.approx((1.0 - 0.75 + 0.125 + 0.75) / 2.625)
    assert m["teacher/outcome_agree_gradw"] == pytest.approx((1.0 + 0.75 - 0.125 - 0.75) / 2.625)
    # the outcome is read by traj_id, not by the sample's position
    swapped = teacher_metrics([AnalysisResult(0, "skill")], samples, old, teacher, torch.ones(2), adv, {3: True, 7: False})
    assert swapped["teacher/outcome_agree_gradw"] == pytest.approx(-m["teacher/outcome_agree_gradw"])
    assert "teacher/outcome_agree_gradw" not in teacher_metrics([], samples, old, teacher, torch.ones(2), adv)


def test_the_policy_gradient_weighted_agreement_counts_each_advantage_by_its_size():
    """``teacher/adv_agree_pgw`` weighs the agreement by ``|A|`` as well: a tiny penalty-made advantage of
    the other sign (an all-lost group under ``adv_norm: mean``) barely counts, while ``adv_agree_gradw``
    counts its sign as fully as a win's. By hand, with the weights of the tests above."""
    from seedrl.skills.analyzers.base import AnalysisResult

    old = [torch.tensor([0.5, 1.0]).log(), torch.tensor([0.75, 0.75, 0.5]).log()]
    shift = [torch.tensor([2.0, 0.0]), torch.tensor([-3.0, 0.5, 1.5])]
    teacher = [o + d for o, d in zip(old, shift)]
    adv = torch.tensor([2.0, 0.1])  # sample 0: a win's advantage; sample 1: a small positive one
    m = teacher_metrics([AnalysisResult(0, "skill")], [], old, teacher, torch.ones(2), adv)
    # |shift| * w: 1.0 (+) | 0.75 (-), 0.125 (+), 0.75 (+); signs of A both +
    assert m["teacher/adv_agree_gradw"] == pytest.approx((1.0 - 0.75 + 0.125 + 0.75) / 2.625)
    assert m["teacher/adv_agree_pgw"] == pytest.approx((2.0 + 0.1 * (-0.75 + 0.125 + 0.75)) / (2.0 + 0.1 * 1.625))
    # equal sizes: the two agree
    even = teacher_metrics([AnalysisResult(0, "skill")], [], old, teacher, torch.ones(2), torch.tensor([1.0, -1.0]))
    assert even["teacher/adv_agree_pgw"] == pytest.approx(even["teacher/adv_agree_gradw"])


def test_rollout_digests_tell_which_episodes_two_runs_shared():
    """One hash per episode in traj_id order, equal iff the task and every response's tokens are equal."""
    from seedrl.rollout.types import StepSample, Trajectory

    def traj(tid, task, responses):
        return Trajectory(tid, tid // 2, task, steps=[StepSample([9], r, [0.0] * len(r), tid, tid // 2, i, 0.0, True)
                                                      for i, r in enumerate(responses)])

    a = [traj(0, "t0", [[1, 2], [3]]), traj(1, "t0", [[1, 2]]), traj(2, "t1", [[4]])]
    d = rollout_digests(a)
    assert len(d) == 3 and all(len(x) == 8 and int(x, 16) >= 0 for x in d)
    assert rollout_digests(list(reversed(a))) == d  # ordered by traj_id, not by arrival
    b = [traj(0, "t0", [[1, 2], [4]]),   # second turn differs
         traj(1, "t0", [[1, 2]]),         # identical
         traj(2, "t9", [[4]])]            # same tokens on another task
    assert [x == y for x, y in zip(d, rollout_digests(b))] == [False, True, False]
    # where one turn ends and the next begins is part of the episode: [1, 2], [3] is not [1], [2, 3]
    assert rollout_digests([traj(0, "t0", [[1], [2, 3]])])[0] != d[0]
