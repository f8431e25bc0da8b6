"""The exact McNemar test the demo reports, against hand-computed binomial tails."""

import pytest

from seedrl.experiments.stats import mcnemar_exact


def test_mcnemar_exact_by_hand():
    # b=1, c=9: n=10, P(X<=1) = (1 + 10) / 1024 -> p = 22/1024
    assert mcnemar_exact(1, 9) == pytest.approx(22 / 1024)
    assert mcnemar_exact(9, 1) == pytest.approx(22 / 1024)  # symmetric
    # b=0, c=5: P(X<=0) = 1/32 -> p = 1/16 (five flips one way are not significant at 0.05)
    assert mcnemar_exact(0, 5) == pytest.approx(1 / 16)
    # b=0, c=6: p = 2/64 < 0.05
    assert mcnemar_exact(0, 6) == pytest.approx(2 / 64)
    # balanced or empty: p = 1
    assert mcnemar_exact(4, 4) == 1.0 and mcnemar_exact(0, 0) == 1.0


def test_efficiency_ratio_interval_hand_cases():
    from seedrl.experiments.stats import efficiency_ratio_ci

    base = [(0, 0.5), (10, 0.6), (20, 0.8)]
    # the same curves: ratio 1 in every resample
    r = efficiency_ratio_ci({0: base, 1: base}, {0: base, 1: base})
    assert r["ratio"] == 1.0 and r["ci95"] == [1.0, 1.0] and r["never_frac"] == 0.0 and r["n_seeds"] == 2
    # seed 0's method reaches 0.8 at 10 episodes (baseline at 20); seed 1's never moves. Resamples
    # {0,0} (1/4): ratio 0.5; {1,1} and {0,1} (3/4): the mean curve peaks at 0.5 or 0.65 < 0.8: never
    fast, flat = [(0, 0.5), (10, 0.8), (20, 0.8)], [(0, 0.5), (10, 0.5), (20, 0.5)]
    r = efficiency_ratio_ci({0: fast, 1: flat}, {0: base, 1: base}, n_boot=4000)
    assert r["ratio"] is None  # the mean curve over both seeds never reaches the threshold
    assert r["ci95"] == [0.5, None] and abs(r["never_frac"] - 0.75) < 0.03 and r["undefined_frac"] == 0.0
    assert efficiency_ratio_ci({0: fast}, {0: base}) | {"never_frac": 0} == {
        "n_seeds": 1, "ratio": 0.5, "ci95": [0.5, 0.5], "never_frac": 0, "undefined_frac": 0.0}
    # the baseline meets its own final value at 0 episodes: no ratio is defined
    start = [(0, 0.8), (10, 0.7), (20, 0.8)]
    r = efficiency_ratio_ci({0: fast}, {0: start})
    assert r["ratio"] is None and r["undefined_frac"] == 1.0 and r["ci95"] == [None, None]
    with pytest.raises(ValueError, match="different schedules"):
        efficiency_ratio_ci({0: fast[:2]}, {0: base})
    assert efficiency_ratio_ci({}, {0: base})["n_seeds"] == 0


def test_paired_outcomes_on_a_hand_case():
    """The harm of a literacy start (seedrl eval --with-skills --against): after's success minus before's on
    the same tasks, with the discordant counts in the right direction."""
    import pytest

    from seedrl.experiments.stats import mcnemar_exact, paired_outcomes

    before = {"a": True, "b": True, "c": False, "d": False, "e": True}
    after = {"a": True, "b": False, "c": False, "d": False, "e": False}
    h = paired_outcomes(before, after)
    assert h == {"diff": -0.4, "only_before": 2, "only_after": 0, "p": mcnemar_exact(2, 0)}
    assert paired_outcomes(after, before)["diff"] == 0.4
    with pytest.raises(ValueError):
        paired_outcomes(before, {"a": True})
