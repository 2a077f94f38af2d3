"""What scripts/check_mlflow_ui.py asks the UI for, decided from the store: the score the traces list is filtered by
(the browser-driven checks themselves need Chromium: ``python -m scripts.check_mlflow_ui``)."""
from types import SimpleNamespace

from scripts.check_mlflow_ui import score_to_filter, xpath_literal


def _trace(**scores):
    return SimpleNamespace(info=SimpleNamespace(assessments=[SimpleNamespace(name=n, value=v)
                                                             for n, v in scores.items()]))


def test_the_traces_list_is_filtered_by_the_judge_else_em_at_one_when_a_question_has_it():
    assert score_to_filter([_trace(em=0.0, judge=0.0), _trace(em=1.0, judge=1.0)]) == ("judge", "1.0")
    assert score_to_filter([_trace(em=0.0, f1=0.5), _trace(em=0.0, f1=1.0)]) == ("em", "0.0")  # nobody exact
    assert score_to_filter([_trace(accuracy=1.0)]) == ("accuracy", "1.0")
    assert score_to_filter([_trace()]) == (None, None)


def test_a_passage_with_both_quotes_is_still_found_by_its_text():
    assert xpath_literal("Joan's \"Blue\" fox") == "concat('Joan', \"'\", 's \"Blue\" fox')"
    assert xpath_literal("it's") == '"it\'s"' and xpath_literal("plain") == "'plain'"
