"""Paired significance tests for two programs evaluated on the same questions (scipy)."""
from __future__ import annotations

import math

import numpy as np
from scipy.stats import binomtest, bootstrap, ttest_rel


def mcnemar_exact(a: list[bool], b: list[bool]) -> tuple[int, int, float]:
    """Discordant counts (only a right, only b right) and the exact two-sided McNemar p-value."""
    only_a = sum(x and not y for x, y in zip(a, b))
    only_b = sum(y and not x for x, y in zip(a, b))
    return only_a, only_b, float(binomtest(only_a, only_a + only_b, 0.5).pvalue) if only_a + only_b else 1.0


def paired_t(a: list[float], b: list[float]) -> float:
    """Two-sided paired t-test p-value; NaN when the pairs never differ (the test is undefined)."""
    return float(ttest_rel(a, b).pvalue) if any(x != y for x, y in zip(a, b)) else math.nan


def bootstrap_ci(values: list[float], confidence: float = 0.95, n_resamples: int = 9999,
                 seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of the mean of ``values`` (e.g. per-question paired differences)."""
    if len(set(values)) <= 1:
        return (values[0], values[0]) if values else (math.nan, math.nan)
    res = bootstrap((list(values),), np.mean, confidence_level=confidence, n_resamples=n_resamples,
                    method="percentile", random_state=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def holm(pvalues: list[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values, in the input order (NaN stays NaN and is not counted)."""
    ranked = sorted((p, i) for i, p in enumerate(pvalues) if not math.isnan(p))
    adjusted, running = [math.nan] * len(pvalues), 0.0
    for rank, (p, i) in enumerate(ranked):
        running = max(running, min(1.0, (len(ranked) - rank) * p))
        adjusted[i] = running
    return adjusted
