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


def test_seconds_are_timed_only_where_the_machine_was_left_to_the_run(dummy, monkeypatch):
    """Each record holds the machine's load per core beside it; s/q is the mean over the questions timed at most at
    ``IDLE_LOAD`` (the others ran beside other work), "void" when none was."""
    from evaluation.leaderboard import cell_table
    from experiments.suite import Cell, Result

    dummy(ANSWERS)
    now = [0.0]  # the load per core the machine reports: each question sets its own as it runs

    class Loaded(Drafted):
        def forward(self, question):
            now[0] = {"question 0": 0.5, "question 1": 1.1, "question 2": 3.0}[question]
            return super().forward(question)
    monkeypatch.setattr(metering, "machine_load", lambda: now[0])
    records, summary = evaluate(Loaded(), EXAMPLES[:3], {"em": exact_match})
    assert [r["load"] for r in records] == [0.5, 1.1, 3.0]
    assert summary["timed_idle"] == 2 and summary["load"] == pytest.approx(4.6 / 3)
    assert summary["seconds_idle"] == pytest.approx((records[0]["seconds"] + records[1]["seconds"]) / 2)
    row = cell_table([Result(Cell("rag", "demo"), "run", summary, records)]).splitlines()[2]
    assert " (2 of 3 idle) |" in row
    contended = summary | {"timed_idle": 0, "load": 2.4}
    assert "| void (load 2.4/core) |" in cell_table([Result(Cell("rag", "demo"), "run", contended, records)])
