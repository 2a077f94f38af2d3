"""Two runs' scores paired by question id, paired significance tests for two programs evaluated on the same
questions (scipy, imported on first use: it costs every CLI 0.7 s at start), a paired bootstrap CI of a mean
difference, and Holm-Bonferroni correction across many tests."""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from evaluation.loop import per_question


def paired_scores(a: list[dict], b: list[dict], metric: str) -> dict[str, tuple[float, float]]:
    """Two runs' ``metric`` scores paired by question id (:func:`per_question`), ``{id: (a's, b's)}`` in ``a``'s
    order: only the questions both scored, so a difference never pairs one question's score with another's."""
    x, y = per_question(a, metric), per_question(b, metric)
    return {q: (x[q], y[q]) for q in x if q in y}


def mcnemar_exact(a: list[bool], b: list[bool]) -> tuple[int, int, float]:
    """Discordant counts (only a right, only b right) and the exact two-sided McNemar p-value."""
    from scipy.stats import binomtest

    only_a = sum(x and not y for x, y in zip(a, b))
    only_b = sum(y and not x for x, y in zip(a, b))
    return only_a, only_b, float(binomtest(only_a, only_a + only_b, 0.5).pvalue) if only_a + only_b else 1.0


def paired_t(a: list[float], b: list[float]) -> float:
    """Two-sided paired t-test p-value; NaN when the pairs never differ (the test is undefined)."""
    from scipy.stats import ttest_rel

    return float(ttest_rel(a, b).pvalue) if any(x != y for x, y in zip(a, b)) else math.nan


def bootstrap_ci(values_or_pairs: Sequence, confidence: float = 0.95, n_resamples: int = 9999,
                 seed: int = 13) -> tuple[float, float, float]:
    """Mean and percentile bootstrap CI (``scipy.stats.bootstrap``) of per-question values, or of the paired
    differences ``a - b`` when given ``(a, b)`` pairs (resampling questions keeps each pair together).

    Returns ``(mean, low, high)``; NaNs for no data; a zero-width interval when every value is the same."""
    data = np.asarray(values_or_pairs, dtype=float)
    if data.ndim == 2:
        if data.shape[1] != 2:
            raise ValueError(f"bootstrap_ci takes numbers or (a, b) pairs, got rows of {data.shape[1]}")
        data = data[:, 0] - data[:, 1]
    if data.size == 0:
        return math.nan, math.nan, math.nan
    mean = float(data.mean())
    if np.all(data == data[0]):
        return mean, mean, mean
    from scipy.stats import bootstrap

    ci = bootstrap((data,), np.mean, confidence_level=confidence, n_resamples=n_resamples, method="percentile",
                   rng=np.random.default_rng(seed)).confidence_interval
    return mean, float(ci.low), float(ci.high)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values, in the input order: the i-th smallest of m is multiplied by m - i
    (i from 0), made non-decreasing, capped at 1. NaNs (undefined tests) stay NaN and do not count in m."""
    order = sorted((i for i, p in enumerate(pvalues) if not math.isnan(p)), key=lambda i: pvalues[i])
    adjusted, running = [math.nan] * len(pvalues), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(order) - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted
