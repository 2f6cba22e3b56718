"""The tests between arms: McNemar's exact test on paired outcomes, Fisher's exact test on rates.

Each case is worked out by hand (binomial and hypergeometric sums) and checked against
scipy.stats called directly.
"""

from __future__ import annotations

import doctest
from math import comb

import pytest
from scipy import stats

import crl.tasks.evaluation
from crl.tasks.evaluation import fisher_p, mcnemar_p


def test_docstring_examples():
    result = doctest.testmod(crl.tasks.evaluation)
    assert result.failed == 0 and result.attempted >= 2


def test_mcnemar_counts_only_discordant_pairs():
    # 5 pairs where a alone succeeds, 1 where b alone does, 4 concordant (ignored).
    a = [True] * 5 + [False] + [True, True, False, False]
    b = [False] * 5 + [True] + [True, True, False, False]
    by_hand = 2 * (comb(6, 5) + comb(6, 6)) / 2**6  # two-sided: 2 * P(X >= 5), X ~ Binomial(6, 1/2)
    assert by_hand == pytest.approx(0.21875)
    assert mcnemar_p(a, b) == pytest.approx(by_hand)
    assert mcnemar_p(a, b) == pytest.approx(stats.binomtest(5, 6, 0.5).pvalue)


def test_mcnemar_one_sided_directions():
    a = [True] * 7 + [False]
    b = [False] * 7 + [True]
    greater = (comb(8, 7) + comb(8, 8)) / 2**8  # P(X >= 7), X ~ Binomial(8, 1/2) = 9/256
    assert mcnemar_p(a, b, "greater") == pytest.approx(greater)
    assert mcnemar_p(a, b, "less") == pytest.approx(1 - comb(8, 8) / 2**8)  # P(X <= 7)
    assert mcnemar_p(b, a, "less") == pytest.approx(greater)
    assert mcnemar_p(a, b, "greater") == pytest.approx(stats.binomtest(7, 8, 0.5, alternative="greater").pvalue)


def test_mcnemar_without_discordant_pairs_is_one_and_lengths_must_match():
    assert mcnemar_p([True, False], [True, False]) == 1.0
    assert mcnemar_p([], []) == 1.0
    with pytest.raises(ValueError, match="one entry per seed"):
        mcnemar_p([True], [True, False])


def test_fisher_two_sided_by_hand():
    # 8/10 against 2/10: tables with arm 1 successes k in {0,1,2,8,9,10} are at least as extreme.
    total = comb(20, 10)
    by_hand = sum(comb(10, k) * comb(10, 10 - k) for k in (0, 1, 2, 8, 9, 10)) / total
    assert fisher_p(8, 10, 2, 10) == pytest.approx(by_hand)
    assert fisher_p(8, 10, 2, 10) == pytest.approx(stats.fisher_exact([[8, 2], [2, 8]]).pvalue)


def test_fisher_one_sided_by_hand():
    # 3/4 against 0/4, greater: P(arm 1 has >= 3 of the 3 successes) = C(4,3) C(4,0) / C(8,3) = 4/56.
    assert fisher_p(3, 4, 0, 4, "greater") == pytest.approx(4 / 56)
    assert fisher_p(3, 4, 0, 4, "greater") == pytest.approx(
        stats.fisher_exact([[3, 1], [0, 4]], alternative="greater").pvalue
    )
    assert fisher_p(3, 4, 0, 4, "less") == pytest.approx(1.0)


def test_fisher_edge_cases():
    assert fisher_p(0, 0, 3, 5) == 1.0
    assert fisher_p(5, 5, 5, 5) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="between 0 and the episode count"):
        fisher_p(6, 5, 1, 5)
