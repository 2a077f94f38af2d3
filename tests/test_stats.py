import math

import pytest

from evaluation.stats import bootstrap_ci, holm, mcnemar_exact, paired_t


def test_mcnemar_counts_discordant_pairs_and_gives_the_exact_binomial_p():
    a = [True, True, True, False, True, False]
    b = [False, False, False, True, True, False]
    # 3 vs 1 discordant: p = 2 * P(X <= 1 | n=4, 1/2) = 2 * 5/16
    assert mcnemar_exact(a, b) == (3, 1, 0.625)
    assert mcnemar_exact([True, False], [True, False]) == (0, 0, 1.0)


def test_paired_t_is_undefined_without_differences():
    assert math.isnan(paired_t([0.5, 1.0], [0.5, 1.0]))
    assert 0.0 < paired_t([1.0, 0.9, 0.8, 0.7], [0.5, 0.6, 0.2, 0.4]) < 0.05


def test_holm_matches_a_hand_computed_example():
    # sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 = 0.02, 0.03, 0.06, 0.04 -> monotone 0.02, 0.03, 0.06, 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    adjusted = holm([0.5, math.nan, 0.9])
    assert adjusted[0] == 1.0 and math.isnan(adjusted[1]) and adjusted[2] == 1.0  # capped; NaN not counted


def test_bootstrap_ci_of_paired_differences():
    pairs = [(1, 0)] * 12 + [(0, 0)] * 8  # seal right on 12 of 20 where the other is never right
    mean, low, high = bootstrap_ci(pairs)
    assert mean == pytest.approx(0.6) and 0.3 < low < 0.6 < high < 0.85
    assert bootstrap_ci([0.5, 0.5]) == (0.5, 0.5, 0.5)  # no spread, no interval
    assert all(math.isnan(x) for x in bootstrap_ci([]))
    with pytest.raises(ValueError, match="pairs"):
        bootstrap_ci([(1, 2, 3)])


def test_two_runs_are_paired_by_question_id_on_the_questions_both_scored():
    from evaluation.stats import paired_scores

    a = [{"id": "q1", "f1": 1.0}, {"id": "q2", "f1": None, "retryable": True}, {"id": "q3", "f1": 0.5},
         {"id": "q4", "f1": 0.0}]
    b = [{"id": "q3", "f1": 0.5}, {"id": "q1", "f1": 0.0}, {"id": "q2", "f1": 1.0}, {"id": "q5", "f1": 1.0}]
    assert paired_scores(a, b, "f1") == {"q1": (1.0, 0.0), "q3": (0.5, 0.5)}  # in a's order, ids both scored
    copies = [{"id": "c1", "base_id": "q", "em": 1.0}, {"id": "c2", "base_id": "q", "em": 0.0}]
    assert paired_scores(copies, [{"id": "q", "em": 1.0}], "em") == {"q": (0.0, 1.0)}  # the worst circular copy


def test_the_compile_verdict_pairs_the_stages_by_question():
    """Issue 73: optimize.py dropped each stage's unscored questions before zipping the two, so it paired different
    questions: "+0.500 on the same 3 test questions" where the difference on the 2 both scored is 0."""
    import optimize
    from runtime.settings import Settings

    before = [{"id": "q1", "f1": None, "retryable": True}, {"id": "q2", "f1": 1.0}, {"id": "q3", "f1": 0.0}]
    after = [{"id": "q1", "f1": 1.0}, {"id": "q2", "f1": 1.0}, {"id": "q3", "f1": 0.0}]
    line = optimize.verdict(before, after, "f1", Settings(dataset="demo", program="rag"))
    assert line.startswith("compiled - uncompiled on the same 2 test questions: f1 +0.000 (95% CI +0.00 to +0.00)")
