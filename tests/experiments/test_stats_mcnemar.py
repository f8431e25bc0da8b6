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
