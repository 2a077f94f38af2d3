import json

import dspy
import pytest
from dspy.utils.exceptions import LMTransportError

from evaluation.loop import QuestionError, evaluate, load_checkpoint
from evaluation.metrics import exact_match
from runtime.lm import ServerError
from tests.dummies import unreadable

EXAMPLES = [dspy.Example(id=f"q{i}", question=f"question {i}", answer="yes", answers=["yes"]).with_inputs("question")
            for i in range(3)]


class Flaky(dspy.Module):
    """Fails the first ``failures`` calls per question, then answers through the configured LM."""

    def __init__(self, failures):
        super().__init__()
        self.failures, self.seen = failures, {}
        self.predict = dspy.Predict("question -> answer")

    def forward(self, question):
        self.seen[question] = self.seen.get(question, 0) + 1
        if self.seen[question] <= self.failures:
            raise unreadable("could not parse the model output")
        return dspy.Prediction(answer=self.predict(question=question).answer, passages=[])


def test_a_failed_parse_is_retried_then_scored(dummy):
    dummy({"question": {"answer": "yes"}})
    records, summary = evaluate(Flaky(failures=1), EXAMPLES, {"em": exact_match}, retries=1)
    assert summary["em"] == 1.0 and summary["failed_examples"] == 0 and all(r["tries"] == 2 for r in records)
    assert summary["lm_calls"] == 1.0  # metered per question


def test_the_judges_lm_calls_are_counted_apart_from_the_programs(dummy):
    from evaluation.metrics import Judge

    dummy({"question": {"answer": "affirmative"}})
    judge = Judge(dspy.utils.DummyLM([{"same": True}] * 3))
    records, summary = evaluate(Flaky(failures=0), EXAMPLES, {"em": exact_match, "judge": judge})
    assert summary["judge"] == 1.0 and summary["em"] == 0.0  # every answer went to the judge
    assert summary["lm_calls"] == 1.0 and summary["judge_lm_calls"] == 1.0
    assert all(r["lm_calls"] == 1 and r["judge_lm_calls"] == 1 for r in records)


def test_persistent_failures_are_counted_not_fatal(dummy):
    dummy({"question": {"answer": "yes"}})
    records, summary = evaluate(Flaky(failures=5), EXAMPLES, {"em": exact_match}, retries=1)
    assert summary["failed_examples"] == 3 and summary["em"] == 0.0
    assert "could not parse" in records[0]["error"] and records[0]["answer"] is None


def test_checkpoint_resumes_without_rerunning(dummy, tmp_path):
    dummy({"question": {"answer": "yes"}})
    ckpt = tmp_path / "dev.jsonl"
    prog = Flaky(failures=0)
    evaluate(prog, EXAMPLES[:2], {"em": exact_match}, checkpoint=ckpt)
    records, summary = evaluate(prog, EXAMPLES, {"em": exact_match}, checkpoint=ckpt)
    assert prog.seen == {"question 0": 1, "question 1": 1, "question 2": 1}
    assert summary["n"] == 3 and len(ckpt.read_text().splitlines()) == 3
    assert json.loads(ckpt.read_text().splitlines()[0])["id"] == "q0"


def test_a_failure_is_asked_again_only_by_a_run_that_may_try_it_more_times(dummy, tmp_path):
    dummy({"question": {"answer": "yes"}})
    ckpt, prog = tmp_path / "dev.jsonl", Flaky(failures=2)
    (first,), _ = evaluate(prog, EXAMPLES[:1], {"em": exact_match}, retries=0, checkpoint=ckpt)
    assert first["failed"] and first["tries"] == 1 and prog.seen == {"question 0": 1}
    (second,), _ = evaluate(prog, EXAMPLES[:1], {"em": exact_match}, retries=2, checkpoint=ckpt)
    assert not second["failed"] and second["tries"] == 2 and prog.seen == {"question 0": 3}  # 2 failures, then yes
    evaluate(prog, EXAMPLES[:1], {"em": exact_match}, retries=0, checkpoint=ckpt)
    assert prog.seen == {"question 0": 3}
    prog.seen.clear()
    ckpt.unlink()
    evaluate(prog, EXAMPLES[:1], {"em": exact_match}, retries=1, checkpoint=ckpt)  # failed after 2 tries
    (kept,), _ = evaluate(prog, EXAMPLES[:1], {"em": exact_match}, retries=0, checkpoint=ckpt)
    assert kept["failed"] and prog.seen == {"question 0": 2}  # a smaller budget keeps the failure final


def test_dead_server_stops_the_run():
    class Dead(dspy.Module):
        def forward(self, question):
            raise ServerError("llama.cpp server died again")

    with pytest.raises(ServerError):
        evaluate(Dead(), EXAMPLES, {"em": exact_match})


def test_metrics_are_broken_down_by_group_and_trace_counts_averaged(dummy):
    class Looping(dspy.Module):
        def forward(self, question):
            n = int(question.split()[-1])
            rested = {"at_rest": n % 2} if n else {}  # a program with no gate has no such count
            return dspy.Prediction(answer="yes" if n else "no", passages=[],
                                   trace={"iterations": n + 1, "unparsed_verdicts": 3 * n} | rested)

    examples = [ex.copy(lang=lang) for ex, lang in zip(EXAMPLES, ["ko", "ko", "es"])]
    _, summary = evaluate(Looping(), examples, {"em": exact_match}, groups=("lang",))
    assert summary["em_by_lang/ko"] == 0.5 and summary["em_by_lang/es"] == 1.0 and summary["n_by_lang/ko"] == 2
    assert summary["iterations"] == 2.0 and summary["unparsed_verdicts"] == 3.0
    assert summary["at_rest"] == 0.5  # over the two questions whose trace counts it


def test_circular_score_needs_every_copy_right(dummy):
    import data
    from evaluation.metrics import accuracy

    class AlwaysA(dspy.Module):
        def forward(self, question, options, lang):
            return dspy.Prediction(answer="A", passages=[])

    examples = data.circular(data.load("demo_culture").examples[:3])
    records, summary = evaluate(AlwaysA(), examples, {"accuracy": accuracy}, groups=("rotation",))
    assert summary["n"] == 12 and summary["n_questions"] == 3
    assert summary["accuracy"] == 0.25 and summary["circular_accuracy"] == 0.0  # the letter bias shows, and scores 0
    assert {r["base_id"] for r in records} == {ex.id for ex in data.load("demo_culture").examples[:3]}
    assert sum(summary[f"n_by_rotation/{i}"] for i in range(4)) == 12


def test_tier_scores_average_languages_beside_the_pooled_figure():
    from evaluation.loop import summarize

    def rec(i, lang, tier, acc):
        return {"id": str(i), "failed": False, "accuracy": acc, "source_lang": lang, "tier": tier}

    # high tier: en 3 of 4 right, es 0 of 1 -> pooled 3/5 = 0.6, language mean (0.75 + 0) / 2 = 0.375
    records = [rec(0, "en", "high", 1), rec(1, "en", "high", 1), rec(2, "en", "high", 1), rec(3, "en", "high", 0),
               rec(4, "es", "high", 0), rec(5, "ko", "mid", 1)]
    s = summarize(records, {"accuracy": None}, ("source_lang", "tier"))
    assert s["accuracy_by_tier/high"] == 0.6 and s["accuracy_by_tier_langmean/high"] == 0.375
    assert s["accuracy_by_tier_langmean/mid"] == 1.0
    assert "accuracy_by_tier_langmean/high" not in summarize(records, {"accuracy": None}, ("tier",))


def test_records_score_retrieval_and_citations_by_paragraph_id_where_the_data_has_ids():
    """XRAG's supporting article (no gold titles) still gets retrieval measures; MuSiQue's paragraphs that share a
    gold title are not gold, for recall nor for citation precision."""
    from evaluation.loop import record
    from retrieval.corpus import Passage

    gold_para, same_title = Passage("m:1", "Rome", "Rome is the capital."), Passage("m:2", "Rome", "Rome has a zoo.")
    pred = dspy.Prediction(answer="Rome", passages=[same_title, gold_para], citations=["m:2"])
    musique = dspy.Example(id="q", question="?", answer="Rome", gold_titles=["Rome"], gold_ids=["m:1"])
    rec = record(musique, pred, {}, k=1)
    assert rec["title_recall"] == 0.0 and rec["recall_all"] == 1.0  # the first passage is not the gold paragraph
    assert rec["citation_precision"] == 0.0  # it cites the paragraph that only shares the title
    xrag = dspy.Example(id="x", question="?", answer="Rome", supporting=["m:1"])
    rec = record(xrag, pred, {}, k=2)
    assert rec["title_recall"] == 1.0 and rec["citation_precision"] == 0.0


def test_a_question_without_gold_passages_still_counts_the_passages_retrieved():
    """BLEnD's questions have answers and no gold passages: nothing to score recall against, but what a program read
    is its cost (the ceiling's passages/q), counted by paragraph id over everything it retrieved."""
    from evaluation.loop import record
    from retrieval.corpus import Passage

    shown = [Passage("kb:1", "Food", "rice"), Passage("kb:2", "Food", "bread")]
    pred = dspy.Prediction(answer="rice", passages=shown[:1], retrieved=[*shown, shown[0]])
    rec = record(dspy.Example(id="b", question="?", answer="rice", answers=["rice"]), pred, {}, k=1)
    assert rec["retrieved_n"] == 2 and "title_recall" not in rec
    assert "retrieved_n" not in record(dspy.Example(id="b", question="?", answer="rice", answers=["rice"]), pred, {}, k=None)


class Raising(dspy.Module):
    """Raises ``error`` on the questions in ``on`` (every question when None), else answers "yes"; records the retry
    attempt (``ATTEMPT``) of each call."""

    def __init__(self, error=None, on=None):
        super().__init__()
        self.error, self.on, self.calls = error, on, []

    def forward(self, question):
        from runtime.lm import ATTEMPT

        self.calls.append((question, ATTEMPT.get()))
        if self.error is not None and (self.on is None or question in self.on):
            raise self.error
        return dspy.Prediction(answer="yes", passages=[])


def test_a_refused_connection_is_retryable_and_the_next_run_asks_again(tmp_path, monkeypatch):
    """Issue 59's repro: a program raising ConnectionRefusedError was tried twice (the second time sampled), recorded
    as a final failure scored 0, and the next run made 0 calls."""
    monkeypatch.setenv("RAG_ENDPOINT_BACKOFF", "0")
    ckpt = tmp_path / "dev.jsonl"
    refused = Raising(ConnectionRefusedError(111, "Connection refused"))
    with pytest.warns(RuntimeWarning, match="1 question.* ended on transient errors"):
        (rec,), summary = evaluate(refused, EXAMPLES[:1], {"em": exact_match}, retries=1, checkpoint=ckpt)
    assert refused.calls == [("question 0", 0), ("question 0", 0)]  # retried greedily
    assert rec["retryable"] and rec["failed"] and rec["em"] is None and "em" not in summary  # not scored
    assert rec["error_class"] == "ConnectionRefusedError" and summary["failed_by_class/ConnectionRefusedError"] == 1
    assert load_checkpoint(ckpt)["q0"]["retryable"]
    back = Raising()
    (rec,), summary = evaluate(back, EXAMPLES[:1], {"em": exact_match}, checkpoint=ckpt)
    assert back.calls == [("question 0", 0)] and rec["em"] == 1.0 and summary["failed_examples"] == 0


def test_a_bug_in_retrieval_stops_the_run_with_one_line_naming_the_question_and_the_program(embedder, tmp_path):
    """Issue 59's repro: ``--rrf-k -1`` makes every hybrid search divide by zero, and every question scored 0."""
    import programs
    from data import demo
    from retrieval.retriever import Retriever

    bundle = demo.load_multihop()
    program = programs.build("rag", search=Retriever(bundle.corpora, embedder, retriever="hybrid", rrf_k=-1), k=3)
    ckpt = tmp_path / "dev.jsonl"
    with pytest.raises(QuestionError) as stop:
        evaluate(program, bundle.examples[:3], {"em": exact_match}, k=3, retries=1, checkpoint=ckpt)
    line = str(stop.value)
    assert "\n" not in line and line.startswith(f"question {bundle.examples[0].id}: the program RAG (eval) raised "
                                                "ZeroDivisionError: ")
    assert stop.value.code == 4 and isinstance(stop.value.__cause__, ZeroDivisionError)
    assert load_checkpoint(ckpt) == {}  # nothing was scored


@pytest.mark.parametrize("error", [KeyError("passages"), TypeError("'NoneType' object is not iterable"),
                                   FileNotFoundError(2, "No such file or directory"), PermissionError(13, "denied")])
def test_a_program_bug_stops_the_run_at_once_and_a_rerun_resumes_the_finished_questions(tmp_path, error):
    ckpt = tmp_path / "dev.jsonl"
    buggy = Raising(error, on={"question 1"})
    stop = rf"^question q1: the program Raising \(eval\) raised {type(error).__name__}: "
    with pytest.raises(QuestionError, match=stop):
        evaluate(buggy, EXAMPLES, {"em": exact_match}, retries=2, checkpoint=ckpt)
    assert buggy.calls == [("question 0", 0), ("question 1", 0)]  # no retry, no question after it
    assert list(load_checkpoint(ckpt)) == ["q0"]
    fixed = Raising()
    records, summary = evaluate(fixed, EXAMPLES, {"em": exact_match}, checkpoint=ckpt)
    assert [q for q, _ in fixed.calls] == ["question 1", "question 2"] and summary["em"] == 1.0


def test_a_remote_400_and_a_context_overflow_stop_the_run_and_a_503_is_retryable(monkeypatch):
    from dspy.utils.exceptions import LMInvalidRequestError, LMServerError

    from runtime.lm import ContextOverflow

    monkeypatch.setenv("RAG_ENDPOINT_BACKOFF", "0")
    for permanent in (LMInvalidRequestError("unknown parameter 'foo'", status=400),
                      ContextOverflow("the prompt does not fit openai/x's context window: 5000 tokens > 4096")):
        program = Raising(permanent)
        with pytest.raises(QuestionError, match=f"question q0: .* raised {type(permanent).__name__}: "):
            evaluate(program, EXAMPLES[:1], {"em": exact_match}, retries=1)
        assert len(program.calls) == 1
    program = Raising(LMServerError("Service Unavailable", status=503))
    with pytest.warns(RuntimeWarning, match="transient errors"):
        (rec,), summary = evaluate(program, EXAMPLES[:1], {"em": exact_match}, retries=1)
    assert len(program.calls) == 2 and rec["retryable"] and summary["failed_by_class/LMServerError"] == 1


def test_failures_are_counted_by_class_from_the_records_so_a_resumed_run_reports_them(tmp_path, monkeypatch):
    monkeypatch.setenv("RAG_ENDPOINT_BACKOFF", "0")
    ckpt = tmp_path / "dev.jsonl"
    program = Raising(unreadable(), on={"question 0", "question 2"})
    records, summary = evaluate(program, EXAMPLES, {"em": exact_match}, retries=1, checkpoint=ckpt)
    assert [r.get("error_class") for r in records] == ["AdapterParseError", None, "AdapterParseError"]
    assert [a for _, a in program.calls] == [0, 1, 0, 0, 1]  # the unreadable replies were asked again, sampled
    assert summary["failed_by_class/AdapterParseError"] == 2 and summary["em"] == pytest.approx(1 / 3)
    program = Raising()
    assert evaluate(program, EXAMPLES, {"em": exact_match}, checkpoint=ckpt)[1] == summary and not program.calls


def test_a_metric_that_could_not_be_computed_is_none_and_counted_from_the_stored_records(tmp_path):
    """A judge whose replies stay unreadable gives no score (not a silent 0); the count is in the records, so the
    resumed run, which calls no judge, reports it too."""
    from evaluation.metrics import Judge

    lm = dspy.utils.DummyLM([{"verdict": "yes"}] * 8)  # no `same` field: unreadable
    metrics = {"em": exact_match, "judge": Judge(lm)}
    ckpt = tmp_path / "dev.jsonl"
    answers = Raising()
    answers.forward = lambda question: dspy.Prediction(answer="affirmative", passages=[])
    records, summary = evaluate(answers, EXAMPLES[:2], metrics, checkpoint=ckpt)
    assert [r["judge"] for r in records] == [None, None] and [r["em"] for r in records] == [0.0, 0.0]
    assert records[0]["metric_errors"]["judge"].startswith("UnreadableVerdict: 2 unreadable replies")
    assert not any(r.get("retryable") or r["failed"] for r in records)  # final: the program answered
    assert summary["judge_errors_by_class/UnreadableVerdict"] == 2 and "judge" not in summary
    calls = len(lm.history)
    assert evaluate(answers, EXAMPLES[:2], metrics, checkpoint=ckpt)[1] == summary and len(lm.history) == calls


def test_means_leave_out_what_was_not_scored():
    from evaluation.loop import per_question, summarize

    records = [{"id": "a", "failed": False, "em": 1.0, "lang": "ko", "base_id": "q"},
               {"id": "b", "failed": True, "em": None, "lang": "ko", "base_id": "q", "retryable": True},
               {"id": "c", "failed": False, "em": 0.0, "lang": "es", "base_id": "r"}]
    s = summarize(records, {"em": None}, ("lang",))
    assert s["em"] == 0.5 and s["em_by_lang/ko"] == 1.0 and s["n_by_lang/ko"] == 2
    assert per_question(records, "em") == {"r": 0.0} and s["circular_em"] == 0.0  # q's worst copy is unknown


def test_an_unanswered_question_has_no_score_of_any_kind(monkeypatch):
    """Issue 73: a question left retryable kept title_recall, all_pass and ndcg at 0 (a flaky endpoint's run logged
    title_recall 0.667 where the undisturbed run has 1.000), and one whose judge was unreachable kept its EM, so
    each mean had its own denominator. Unanswered (retryable) questions have no score; the means are over the
    answered ones, and the summary says how many those are."""
    from dspy.utils.exceptions import LMTransportError

    from retrieval.corpus import Passage

    monkeypatch.setenv("RAG_ENDPOINT_BACKOFF", "0")
    examples = [dspy.Example(id=f"q{i}", question=f"question {i}", answer="yes", answers=["yes"],
                             gold_titles=[f"T{i}"]).with_inputs("question") for i in range(4)]

    class Cited(dspy.Module):  # retrieves and cites each question's gold passage; q1's endpoint is down
        def forward(self, question):
            if question == "question 1":
                raise ConnectionRefusedError(111, "Connection refused")
            gold = Passage(f"kb:{question[-1]}", f"T{question[-1]}", "text")
            return dspy.Prediction(answer="no" if question == "question 2" else "yes", passages=[gold],
                                   citations=[gold.id])

    def judge(example, pred, trace=None):  # q2's judge is unreachable
        if example.id == "q2":
            raise LMTransportError("connection refused")
        return 1.0

    with pytest.warns(RuntimeWarning, match="2 question.* ended on transient errors"):
        records, summary = evaluate(Cited(), examples, {"em": exact_match, "judge": judge}, k=2, retries=0)
    for rec in (records[1], records[2]):
        scores = {key: rec[key] for key in ("em", "judge", "title_precision", "title_recall", "title_f1", "recall_any",
                                            "all_pass", "ndcg", "recall_all", "recall_any_all", "all_pass_all",
                                            "ndcg_all", "retrieved_n", "citation_precision") if key in rec}
        assert rec["retryable"] and "title_recall" in scores and set(scores.values()) == {None}, scores
    assert (summary["n"], summary["answered"], summary["retryable_examples"]) == (4, 2, 2)
    for key in ("em", "judge", "title_recall", "all_pass", "ndcg", "recall_all", "citation_precision"):
        assert summary[key] == 1.0, key  # the two answered questions, each fully right


class DownAfterTwoCalls(dspy.Module):
    """Question 0 makes two LM calls, then its endpoint drops (a transient error) while ``down``; others make one."""

    def __init__(self, down: bool):
        super().__init__()
        self.down = down
        self.predict = dspy.Predict("question -> answer")

    def forward(self, question):
        answer = self.predict(question=question).answer
        if question == "question 0":
            answer = self.predict(question=question + "?").answer
            if self.down:
                raise LMTransportError("connection reset")
        return dspy.Prediction(answer=answer, passages=[])


def test_cost_means_cover_every_asked_question_and_every_attempt_at_it(dummy, tmp_path, monkeypatch):
    """Issue 73: a question left unanswered spent LM calls, tokens and seconds; asked again, its new record held only
    the new attempt's, so the finished run's cost per question dropped the unanswered attempt's spend."""
    monkeypatch.setenv("RAG_ENDPOINT_BACKOFF", "0")
    dummy({"question": {"answer": "yes"}})
    ckpt = tmp_path / "dev.jsonl"
    with pytest.warns(RuntimeWarning, match="transient errors"):
        records, summary = evaluate(DownAfterTwoCalls(down=True), EXAMPLES[:2], {"em": exact_match}, retries=0,
                                    checkpoint=ckpt)
    assert records[0]["retryable"] and [r["lm_calls"] for r in records] == [2, 1]
    assert (summary["answered"], summary["em"], summary["lm_calls"]) == (1, 1.0, 1.5)  # cost over both asked
    first = records[0]
    records, summary = evaluate(DownAfterTwoCalls(down=False), EXAMPLES[:2], {"em": exact_match}, retries=0,
                                checkpoint=ckpt)
    q0 = records[0]
    assert q0["lm_calls"] == 4 and sum(q0["lm_calls_by"].values()) == 4  # both attempts' calls
    assert q0["seconds"] > first["seconds"] and q0["lm_seconds"] > first["lm_seconds"]
    assert (summary["answered"], summary["lm_calls"]) == (2, 2.5)
