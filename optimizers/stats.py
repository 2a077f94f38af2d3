"""Paired significance tests for two programs evaluated on the same questions (scipy)."""
from __future__ import annotations

import math

from scipy.stats import binomtest, ttest_rel


def mcnemar_exact(a: list[bool], b: list[bool]) -> tuple[int, int, float]:
    """Discordant counts (only a right, only b right) and the exact two-sided McNemar p-value."""
    only_a = sum(x and not y for x, y in zip(a, b))
    only_b = sum(y and not x for x, y in zip(a, b))
    return only_a, only_b, float(binomtest(only_a, only_a + only_b, 0.5).pvalue) if only_a + only_b else 1.0


def paired_t(a: list[float], b: list[float]) -> float:
    """Two-sided paired t-test p-value; NaN when the pairs never differ (the test is undefined)."""
    return float(ttest_rel(a, b).pvalue) if any(x != y for x, y in zip(a, b)) else math.nan
