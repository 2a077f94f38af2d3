"""A question's LM calls by predictor (``runtime.metering.Cost.lm_calls_by``, named by ``evaluation.callers``): each
record counts its program's calls under the predictors that made them, traced or not, under evaluation threads and
the program's own dspy.Parallel threads, the judge's apart; a resumed run's records read back keep them."""
import dspy
import pytest

from evaluation.loop import evaluate
from evaluation.metrics import Judge, exact_match
from runtime import metering
from tests.test_evaluation import EXAMPLES

ANSWERS = {"question": {"draft": "a draft", "answer": "affirmative"}}  # not the gold "yes": the judge is asked
COUNTED = {"draft": 1, "answer": 2}


class Drafted(dspy.Module):
    """Two predictors: ``draft`` once, then ``answer`` twice (in two threads of its own with ``parallel``)."""

    def __init__(self, parallel: bool = False):
        super().__init__()
        self.parallel = parallel
        self.draft = dspy.Predict("question -> draft")
        self.answer = dspy.Predict("question, draft -> answer")

    def forward(self, question):
        draft = self.draft(question=question).draft
        asks = [{"question": question, "draft": draft}, {"question": question + " again", "draft": draft}]
        if self.parallel:
            outs = dspy.Parallel(num_threads=2, disable_progress_bar=True)([(self.answer, a) for a in asks])
        else:
            outs = [self.answer(**a) for a in asks]
        return dspy.Prediction(answer=outs[0].answer, passages=[])


@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize("threads", [1, 3])
def test_an_untraced_evaluations_records_count_the_programs_lm_calls_by_predictor(dummy, threads, parallel):
    dummy(ANSWERS)
    judge = Judge(dspy.utils.DummyLM([{"same": True}] * len(EXAMPLES)))
    records, summary = evaluate(Drafted(parallel), EXAMPLES, {"em": exact_match, "judge": judge}, threads=threads)
    assert summary["judge"] == 1.0 and summary["judge_lm_calls"] == 1.0  # the judge was asked, and metered apart
    assert [r["lm_calls_by"] for r in records] == [COUNTED] * len(EXAMPLES)
    assert all(r["lm_calls"] == sum(COUNTED.values()) for r in records)


def test_a_resumed_runs_records_keep_their_lm_calls_by_predictor(dummy, tmp_path):
    lm = dummy(ANSWERS)
    ckpt = tmp_path / "dev.jsonl"
    evaluate(Drafted(), EXAMPLES[:2], {"em": exact_match}, checkpoint=ckpt)
    asked = len(lm.history)
    records, _ = evaluate(Drafted(), EXAMPLES, {"em": exact_match}, checkpoint=ckpt)
    assert len(lm.history) - asked == sum(COUNTED.values())  # only the third question was asked again
    assert [r["lm_calls_by"] for r in records] == [COUNTED] * len(EXAMPLES)


def test_an_lm_call_outside_an_evaluated_question_counts_under_no_predictor(dummy):
    dummy(ANSWERS)
    with metering.metered() as cost:
        Drafted().draft(question="question 0")
    assert cost.lm_calls_by == {metering.NO_PREDICTOR: 1}
