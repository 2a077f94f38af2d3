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


def test_holm_adjusts_in_input_order_and_stays_monotone():
    from optimizers.stats import holm

    # sorted 0.01, 0.02, 0.04 -> 3*0.01=0.03, 2*0.02=0.04, max(0.04, 1*0.04)=0.04
    assert holm([0.04, 0.01, 0.02]) == [0.04, 0.03, 0.04]
    assert holm([0.5, 0.6]) == [1.0, 1.0]
    adjusted = holm([0.01, math.nan])
    assert adjusted[0] == 0.01 and math.isnan(adjusted[1])


def test_bootstrap_ci_brackets_the_mean_and_is_degenerate_without_spread():
    from optimizers.stats import bootstrap_ci

    diffs = [1.0] * 6 + [0.0] * 14 + [-1.0] * 2
    low, high = bootstrap_ci(diffs)
    assert low < sum(diffs) / len(diffs) < high and low > -0.2 and high < 0.5
    assert bootstrap_ci([0.0, 0.0, 0.0]) == (0.0, 0.0)
