"""Success-rate statistics for evaluations and experiments: intervals and tests between arms.

scipy is imported inside the tests that use it, so importing this module stays cheap.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

Alternative = Literal["two-sided", "greater", "less"]


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval for a success rate (95% by default).

    Example: `wilson_interval(8, 20)` is about `(0.22, 0.61)`; `wilson_interval(0, 0)` is `(0, 1)`.
    """
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def discordant(a: Sequence[bool], b: Sequence[bool]) -> tuple[int, int]:
    """The discordant pairs of two paired lists of outcomes: (a succeeded and b failed, the reverse).

    Raises:
        ValueError: the lists differ in length.

    Example:
        >>> discordant([True, True, False, False], [False, True, True, False])
        (1, 1)
    """
    if len(a) != len(b):
        raise ValueError(f"paired outcomes must have one entry per seed on both sides ({len(a)} vs {len(b)})")
    return sum(1 for x, y in zip(a, b) if x and not y), sum(1 for x, y in zip(a, b) if y and not x)


def mcnemar_p(a: Sequence[bool], b: Sequence[bool], alternative: Alternative = "two-sided") -> float:
    """Exact McNemar test of two paired lists of outcomes: a binomial test on the discordant pairs.

    Pair i is one seed played by both sides. Only the pairs where the sides disagree carry
    information: `a_only` (a succeeded, b failed) and `b_only`. Under "no difference" each
    discordant pair goes either way with probability 1/2.

    Args:
        a: outcomes of side a, one per seed.
        b: outcomes of side b on the same seeds, in the same order.
        alternative: "two-sided"; "greater" (a succeeds more often than b); "less".

    Returns:
        The p-value; 1.0 when no pair is discordant.

    Raises:
        ValueError: the lists differ in length.

    Example: a wins 6 seeds that b loses and b wins 1 that a loses: two-sided p = 2 * P(X >= 6)
    for X ~ Binomial(7, 1/2) = 2 * 8/128 = 0.125.

        >>> round(mcnemar_p([True] * 6 + [False] + [True] * 3, [False] * 6 + [True] + [True] * 3), 4)
        0.125
    """
    a_only, b_only = discordant(a, b)
    if a_only + b_only == 0:
        return 1.0
    from scipy.stats import binomtest

    return float(binomtest(a_only, a_only + b_only, 0.5, alternative=alternative).pvalue)


def fisher_p(s1: int, n1: int, s2: int, n2: int, alternative: Alternative = "two-sided") -> float:
    """Fisher's exact test of two independent success rates, s1/n1 against s2/n2.

    Use it for arms that played different seeds; for the same seeds, `mcnemar_p` is the
    stronger test.

    Args:
        s1: successes of arm 1 out of n1 episodes.
        s2: successes of arm 2 out of n2 episodes.
        alternative: "two-sided"; "greater" (arm 1's rate is higher); "less".

    Example: 8/10 against 2/10, two-sided: the tables at least as extreme as [[8, 2], [2, 8]]
    have probability (2 * (C(10,8)C(10,2) + C(10,9)C(10,1) + C(10,10)C(10,0))) / C(20,10)
    = 2 * 2126 / 184756, about 0.023.

        >>> round(fisher_p(8, 10, 2, 10), 4)
        0.023
    """
    if not (0 <= s1 <= n1 and 0 <= s2 <= n2):
        raise ValueError(f"successes must lie between 0 and the episode count ({s1}/{n1}, {s2}/{n2})")
    if n1 == 0 or n2 == 0:
        return 1.0
    from scipy.stats import fisher_exact

    return float(fisher_exact([[s1, n1 - s1], [s2, n2 - s2]], alternative=alternative).pvalue)
