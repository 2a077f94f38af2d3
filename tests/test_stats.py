import math

from optimizers.stats import mcnemar_exact, paired_t


def test_mcnemar_counts_discordant_pairs_and_gives_the_exact_binomial_p():
    a = [True, True, True, False, True, False]
    b = [False, False, False, True, True, False]
    # 3 vs 1 discordant: p = 2 * P(X <= 1 | n=4, 1/2) = 2 * 5/16
    assert mcnemar_exact(a, b) == (3, 1, 0.625)
    assert mcnemar_exact([True, False], [True, False]) == (0, 0, 1.0)


def test_paired_t_is_undefined_without_differences():
    assert math.isnan(paired_t([0.5, 1.0], [0.5, 1.0]))
    assert 0.0 < paired_t([1.0, 0.9, 0.8, 0.7], [0.5, 0.6, 0.2, 0.4]) < 0.05
