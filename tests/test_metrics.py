import math

import dspy
import pytest

from evaluation.metrics import Judge, accuracy, exact_match, f1, paragraph_id, retrieval_scores
from retrieval.corpus import Passage

EX = dspy.Example(question="Capital of France?", answer="Paris", answers=["Paris", "City of Paris"])


def pred(answer, **kw):
    return dspy.Prediction(answer=answer, **kw)


def test_em_and_f1_use_dspy_normalisation_and_bool_under_trace():
    assert exact_match(EX, pred("the Paris.")) == 1.0
    assert exact_match(EX, pred("Lyon")) == 0.0
    assert f1(EX, pred("Paris France")) == pytest.approx(2 / 3)
    assert f1(EX, pred("Paris France"), trace=[]) is True and f1(EX, pred("Lyon"), trace=[]) is False
    assert exact_match(EX, pred(None)) == 0.0


def test_accuracy_compares_letters():
    mc = dspy.Example(answer="B")
    assert accuracy(mc, pred("b")) == 1.0 and accuracy(mc, pred("C")) == 0.0 and accuracy(mc, pred("")) == 0.0


def test_retrieval_scores_hand_computed():
    ps = [Passage(str(i), t, "") for i, t in enumerate(["A", "X", "A", "B", "Y"])]
    s = retrieval_scores(["A", "B"], ps, k=3)  # distinct titles A, X, B -> hits at ranks 1 and 3
    assert s["title_precision"] == pytest.approx(2 / 3) and s["title_recall"] == 1.0
    assert s["title_f1"] == pytest.approx(0.8) and s["all_pass"] == 1.0 and s["recall_any"] == 1.0
    assert s["ndcg"] == pytest.approx((1 + 1 / 2) / (1 + 1 / 1.5849625), rel=1e-6)
    miss = retrieval_scores(["A", "B"], ps, k=1)
    assert miss["all_pass"] == 0.0 and miss["title_recall"] == 0.5
    assert retrieval_scores(["A"], [], k=5)["recall_any"] == 0.0


def test_judge_calls_its_lm_and_skips_idk(dummy):
    lm = dummy([{"same": "True"}, {"same": "False"}])
    judge = Judge(lm)
    assert judge(EX, pred("Paris, France")) == 1.0
    assert judge(EX, pred("Lyon"), trace=[]) is False
    assert judge(EX, pred("I don't know")) == 0.0  # no LM call: the scripted answers are all used
    assert judge(EX, pred("the paris")) == 1.0  # exact match after normalisation: no call either
    assert len(lm.history) == 2


def test_an_unreadable_verdict_is_asked_again_sampled_then_raised_not_scored_wrong():
    from dspy.utils.dummies import DummyLM

    from evaluation.metrics import UnreadableVerdict
    from runtime.lm import ATTEMPT

    attempts = []

    class Recording(DummyLM):
        def __call__(self, *args, **kwargs):
            attempts.append(ATTEMPT.get())
            return super().__call__(*args, **kwargs)

    # the first reply unreadable (and the adapter's JSON fallback's), the sampled second one read
    judge = Judge(Recording([{"verdict": "yes"}, {"verdict": "yes"}, {"same": "True"}]))
    assert judge(EX, pred("Paris, France")) == 1.0 and attempts == [0, 0, 1]
    judge = Judge(DummyLM([{"verdict": "yes"}] * 4))
    with pytest.raises(UnreadableVerdict, match="2 unreadable replies, the last: AdapterParseError"):
        judge(EX, pred("Paris, France"))


@pytest.mark.parametrize("error", ["bug", "overflow", "unreachable"])
def test_a_judge_error_is_raised_not_scored(error):
    """Only an unreadable reply was ever meant to count as wrong: any other error of the judge's LM scored 0."""
    from dspy.utils.dummies import DummyLM
    from dspy.utils.exceptions import LMTransportError

    from runtime.lm import ContextOverflow

    raised = {"bug": RuntimeError("client bug"), "overflow": ContextOverflow("the prompt does not fit"),
              "unreachable": LMTransportError("connection refused")}[error]

    class Failing(DummyLM):
        def __call__(self, *args, **kwargs):
            raise raised

    with pytest.raises(type(raised)):
        Judge(Failing([]))(EX, pred("Paris, France"))


def test_ndcg_is_binary_gain_over_an_ideal_of_min_gold_k_and_matches_sklearn():
    from sklearn.metrics import ndcg_score

    ps = [Passage(str(i), t, "") for i, t in enumerate(["X", "A", "A"])]  # distinct titles X, A: one hit at rank 2
    # DCG = 1/log2(3); ideal with 2 gold titles and k = 5 puts both first: 1 + 1/log2(3), although only 2 came back
    assert retrieval_scores(["A", "B"], ps, k=5)["ndcg"] == pytest.approx((1 / 1.5849625) / (1 + 1 / 1.5849625))
    assert retrieval_scores(["A", "B"], ps, k=1)["ndcg"] == 0.0
    # sklearn, ranking X, A, three non-gold fillers, then the unretrieved gold B (past the cutoff): the same number
    relevance, scores = [[0, 1, 0, 0, 0, 1]], [[6, 5, 4, 3, 2, 1]]
    assert retrieval_scores(["A", "B"], ps, k=5)["ndcg"] == pytest.approx(ndcg_score(relevance, scores, k=5))


def test_judge_lets_a_dead_judge_server_stop_the_run():
    from dspy.utils.dummies import DummyLM

    from runtime.lm import ServerError

    class DeadServer(DummyLM):
        def __call__(self, *args, **kwargs):
            raise ServerError("llama.cpp server for the judge exited with code 1")

    judge = Judge(DeadServer([]))
    with pytest.raises(ServerError):
        judge(EX, pred("Paris, France"))


def test_retrieval_is_scored_by_paragraph_over_everything_retrieved_in_order_of_first_retrieval():
    from evaluation.loop import record

    para = {n: Passage(f"musique:0000{n}", "Kel Ora" if n < 3 else f"T{n}", f"text {n}") for n in range(1, 7)}
    example = dspy.Example(id="q", question="?", answer="x", answers=["x"], gold_titles=["Kel Ora", "T5"],
                           gold_ids=["musique:00001", "musique:00005"]).with_inputs("question")
    # the writer last saw only a non-gold "Kel Ora" paragraph (same title as the gold one) and T6
    pred = dspy.Prediction(answer="x", passages=[para[2], para[6]],
                           retrieved=[para[2], para[3], para[1], para[4], para[6], para[5]])
    rec = record(example, pred, {}, k=2)
    assert rec["recall_any"] == 0.0 and rec["all_pass"] == 0.0       # @2: paragraphs 2 and 3, neither gold
    assert rec["recall_all"] == 1.0 and rec["all_pass_all"] == 1.0 and rec["recall_any_all"] == 1.0
    assert rec["ndcg_all"] == pytest.approx((1 / math.log2(4) + 1 / math.log2(7)) / (1 + 1 / math.log2(3)))
    assert rec["retrieved_n"] == 6
    by_title = record(example.copy(gold_ids=None), pred, {}, k=2)    # without paragraph ids: titles
    assert by_title["recall_any"] == 1.0


def test_paragraph_ids_fold_windows_and_pool_ids_into_their_source_paragraph():
    assert paragraph_id("pool_en:musique/00012#w1") == "musique:00012" == paragraph_id("musique:00012")
    assert paragraph_id("hotpotqa:Blue Fox") == "hotpotqa:Blue Fox"


def test_the_xrag_language_reader_raises_an_endpoint_error_instead_of_voting_no(dummy):
    from dspy.utils.dummies import DummyLM
    from dspy.utils.exceptions import LMTransportError

    from evaluation.xlingual import JudgePanel

    class Unreachable(DummyLM):
        def __call__(self, *args, **kwargs):
            raise LMTransportError("connection refused")

    dummy([])
    german = dspy.Example(id="x", question="Wo trainiert die Läuferin Ohm?", answer="in Graz", answers=["in Graz"],
                          lang="de")
    with pytest.raises(LMTransportError):  # "Oslo": lingua cannot tell, so the panel's readers are asked
        JudgePanel([Unreachable([])]).language(german, pred("Oslo"))


@pytest.mark.parametrize("verdicts, expected", [((True, True, None), 1.0), ((False, False, None), 0.0),
                                                ((True, False, None), None), ((None,), None)])
def test_a_panel_decides_without_an_unreadable_judge_only_where_its_vote_could_not_change_the_verdict(
        dummy, verdicts, expected):
    from dspy.utils.dummies import DummyLM

    from evaluation.metrics import UnreadableVerdict
    from evaluation.xlingual import JudgePanel

    dummy([])
    panel = JudgePanel([DummyLM([{"same": v}] if v is not None else [{"verdict": "yes"}] * 4) for v in verdicts])
    german = dspy.Example(id="x", question="Wann wurde der Hafen gebaut?", answer="1902", answers=["1902"], lang="de")
    if expected is None:
        with pytest.raises(UnreadableVerdict, match="judges gave no readable verdict"):
            panel(german, pred("im Jahre neunzehnhundertzwei"))
    else:
        assert panel(german, pred("im Jahre neunzehnhundertzwei")) == expected
