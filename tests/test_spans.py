"""What a question's trace shows: each search a RETRIEVER span of MLflow documents, each LM call its predictor, role,
tokens and seconds, each gate decision a GATE span; the question's scores as feedback assessments, logged once per
question even when a run resumes; and none of it built outside a trace."""
from __future__ import annotations

import json

import dspy
import mlflow
import pytest
from dspy.utils.dummies import DummyLM
from mlflow.entities import SpanType

import evaluate
import programs
from evaluation import tracking
from evaluation.loop import evaluate as evaluate_loop
from evaluation.metrics import Judge, exact_match
from experiments import sessions
from programs.baselines.crag import CRAG
from programs.coral.coral import CORAL, CORALConfig
from programs.seal.seal import SEAL
from programs.shared.gates import GATE_SPAN, LabelGate
from retrieval.corpus import Corpus
from retrieval.retriever import Retriever
from runtime import store
from runtime.lm import mark_span
from runtime.roles import init_dspy
from signatures.esc import AssessSufficiency
from tests.dummies import routed
from tests.fake_openai import FakeOpenAI
from tests.test_coral import EN, KO, OPTIONS, QUESTION, Queue, batched, rating, scripted
from tests.test_crag import GRADE, grades
from tests.test_seal import (ANSWER, ASSESS, FILM_FACTS, GAP, GAP_BERG, INSUFFICIENT, QUERY, SUFFICIENT, TEXTS,
                             ScriptedSearch, extract)

Q = "Which city is the birthplace of the Blue Fox director?"  # the hashing embedder finds Blue Fox first


class ScriptedLM(DummyLM):
    """A DummyLM that marks its calls' spans as the project's LM client does (``ProjectLM``, which the fake endpoint
    tests run)."""

    def update_history(self, entry):
        super().update_history(entry)
        mark_span(entry)


def _last_run_id() -> str:
    mlflow.set_tracking_uri(store.tracking_uri())
    return mlflow.search_runs(search_all_experiments=True, order_by=["start_time DESC"]).iloc[0].run_id


def _traces(run_id: str, **search):
    mlflow.set_tracking_uri(store.tracking_uri())
    return mlflow.search_traces(run_id=run_id, return_type="list", **search)


def _records(run_id: str) -> dict[str, dict]:
    text = open(store.download(run_id, "predictions/dev.jsonl")).read()
    return {r["id"]: r for r in map(json.loads, text.splitlines())}


def _spans(trace, kind: str):
    return [s for s in trace.data.spans if s.span_type == kind]


def _traced(fn, program=None):
    """``fn()`` as a traced question of ``program`` in this test's store: its trace as stored, and what it returned."""
    tracking.setup("spans")
    with mlflow.start_run() as run:
        with tracking.QuestionTraces(run.info.run_id, ())(dspy.Example(id="q1", question=Q), program):
            out = fn()
    mlflow.flush_trace_async_logging()
    trace, = _traces(run.info.run_id)
    return trace, out


def test_a_traced_question_shows_its_searches_and_its_lm_calls():
    with FakeOpenAI() as server:
        evaluate.main(["--program", "seal", "--dataset", "demo", "--split", "dev", "--train", "0", "--dev", "2",
                       "--test", "0", "--k", "2", "--loops", "1", "--no-cache", "--lm", "openai/fake",
                       "--api-base", server.api_base])
    run_id = _last_run_id()
    records, traces = _records(run_id), _traces(run_id)
    assert len(traces) == 2
    for trace in traces:
        rec = records[trace.info.tags["question_id"]]
        searches = _spans(trace, SpanType.RETRIEVER)
        assert searches[0].inputs == {"query": rec["question"], "k": 2, "corpora": ["demo_en"]}
        docs = [d for s in searches for d in s.outputs]
        assert all(d["page_content"] and set(d["metadata"]) == {"id", "title", "score", "corpus"} for d in docs)
        found = {d["metadata"]["id"]: d["metadata"] for d in docs}
        for p in rec["passages"]:  # what the writer was shown came from these searches, at these scores
            assert found[p["id"]]["title"] == p["title"] and found[p["id"]]["score"] == pytest.approx(p["score"], 1e-3)
        calls = _spans(trace, SpanType.CHAT_MODEL)
        assert len(calls) == rec["lm_calls"]
        assert {(c.attributes["predictor"], c.attributes["role"]) for c in calls} >= {("extract", "critic"),
                                                                                     ("writer.short", "writer")}
        assert sum(c.attributes["prompt_tokens"] for c in calls) == rec["prompt_tokens"]  # --no-cache: all billed
        assert sum(c.attributes["completion_tokens"] for c in calls) == rec["completion_tokens"]
        assert all(0 < c.attributes["seconds"] <= rec["lm_seconds"] for c in calls)


def test_a_questions_scores_are_feedback_the_traces_list_filters_by():
    with FakeOpenAI() as server:
        evaluate.main(["--program", "rag", "--dataset", "demo", "--split", "dev", "--train", "0", "--dev", "3",
                       "--test", "0", "--k", "2", "--lm", "openai/fake", "--api-base", server.api_base])
    run_id = _last_run_id()
    records = _records(run_id)
    for trace in _traces(run_id):
        rec = records[trace.info.tags["question_id"]]
        feedback = {a.name: a for a in trace.info.assessments}
        assert {name: a.value for name, a in feedback.items()} == {m: rec[m] for m in ("em", "f1", "title_recall",
                                                                                      "recall_all")}
        assert {a.source.source_type for a in feedback.values()} == {"CODE"}
    missed = {t.info.tags["question_id"] for t in _traces(run_id, filter_string="feedback.title_recall < 1")}
    assert missed == {i for i, r in records.items() if r["title_recall"] < 1} and 0 < len(missed) < 3


def test_a_resumed_run_logs_no_second_assessment_for_a_question_of_its_checkpoint(monkeypatch):
    monkeypatch.setattr(sessions, "make_lm", lambda *a, **k: DummyLM({"question": {"answer": "Paris"}}))
    argv = ["--program", "direct", "--dataset", "demo", "--split", "dev", "--train", "0", "--test", "0"]
    evaluate.main(argv + ["--dev", "2"])
    first = _last_run_id()
    evaluate.main(argv + ["--dev", "3"])  # the first two questions read back from the checkpoint
    second = _last_run_id()
    assert len(_traces(first)) == 2 and len(_traces(second)) == 1
    ems = [t.info.tags["question_id"] for run in (first, second) for t in _traces(run)
           for a in t.info.assessments if a.name == "em"]
    assert len(ems) == len(set(ems)) == 3


def test_the_judges_verdict_is_feedback_from_the_judge_with_what_it_replied():
    lm = ScriptedLM({"predicted_answer": {"same": "True"}, "question": {"answer": "Lyon"}})
    init_dspy(lm, cache=False)
    examples = [dspy.Example(id="q1", question="Where was Ana Berg born?", answer="Lyon", answers=["Lyon"]),
                dspy.Example(id="q2", question="Where is Blue Fox set?", answer="Paris", answers=["Paris"])]
    metrics = {"em": exact_match, "judge": Judge(lm)}
    tracking.setup("judged")
    with mlflow.start_run() as run:
        evaluate_loop(programs.build("direct"), [ex.with_inputs("question") for ex in examples], metrics,
                      traces=tracking.QuestionTraces(run.info.run_id, metrics))
    mlflow.flush_trace_async_logging()
    by_id = {t.info.tags["question_id"]: t for t in _traces(run.info.run_id)}
    exact, judged = ({a.name: a for a in by_id[i].info.assessments} for i in ("q1", "q2"))
    assert exact["judge"].value == 1.0 and exact["judge"].source.source_type == "CODE"  # an exact match: no call
    assert exact["judge"].rationale == "decided without asking a judge"
    assert judged["judge"].value == 1.0 and judged["em"].value == 0.0
    assert (judged["judge"].source.source_type, judged["judge"].source.source_id) == ("LLM_JUDGE", "dummy")
    assert judged["judge"].rationale == "JudgeAnswer replied same=True"
    writer, judge = _spans(by_id["q2"], SpanType.CHAT_MODEL)
    assert [(c.attributes["predictor"], c.attributes["role"]) for c in (writer, judge)] == [
        ("writer.short", "writer"), ("JudgeAnswer", "judge")]


def _toy_retriever(embedder) -> Retriever:
    docs = [{"id": f"{i}", "title": title, "text": text} for i, (title, text) in enumerate(TEXTS.items())]
    return Retriever([Corpus("toy", docs)], embedder=embedder)


def test_seal_shows_each_sufficiency_decision_as_a_gate_span(embedder):
    lm = ScriptedLM({extract("Blue Fox"): FILM_FACTS, extract("Ana Berg"): {"triples": '["Ana Berg | born in | Lyon"]'},
                     "Ana Berg | born in | Lyon": SUFFICIENT, ASSESS: INSUFFICIENT, GAP: GAP_BERG,
                     QUERY: {"query": "Ana Berg birthplace"}, "[[ ## answer ## ]]": {"answer": "Lyon [1]"}})
    init_dspy(lm, cache=False)
    seal = SEAL(_toy_retriever(embedder), k=1, loops=2)
    trace, _ = _traced(lambda: seal(question=Q), seal)
    gates = _spans(trace, GATE_SPAN)
    assert [g.name for g in gates] == ["LabelGate.sufficient"] * 2
    assert [g.attributes["label"] for g in gates] == ["False", "True"]
    assert all({k: v for k, v in g.attributes.items() if not k.startswith("mlflow.") and k != "label"} == {
        "asked": "generate", "path": "written", "kind": "set", "threshold": 0.5, "at_rest": False, "called": True,
        "failures": 0} for g in gates)
    asked, = {c.attributes["predictor"] for c in _spans(trace, SpanType.CHAT_MODEL)
              if gates[0].start_time_ns <= c.start_time_ns <= gates[0].end_time_ns}
    assert asked == "assess"  # the gate's LM call nests in its span
    searches = _spans(trace, SpanType.RETRIEVER)
    assert [s.inputs["query"] for s in searches] == [Q, "Ana Berg birthplace"]
    assert [d["metadata"]["title"] for d in searches[0].outputs] == ["Blue Fox"]


def test_corals_keep_gate_names_the_passages_it_kept_and_dropped(dummy, embedder):
    scripted(dummy, plan=Queue({"corpora": ["en", "ko"]}),
             batch=Queue(batched(rating(1, 1, 1, 1, 1), rating(2, 5, 5, 4, 5))),
             enough=Queue({"enough": True, "reason": "direct answer"}), write=Queue({"answer": "C"}))
    coral = CORAL(Retriever([Corpus("en", EN, "en"), Corpus("ko", KO, "ko")], embedder),
                  CORALConfig(k=1, critic_batch=True))
    trace, pred = _traced(lambda: coral(question=QUESTION, options=OPTIONS, lang="en"), coral)
    keep, = [g for g in _spans(trace, GATE_SPAN) if g.name == "KeepGate"]
    kept = [x["id"] for x in pred.trace["scores"][0] if x["kept"]]
    assert (keep.attributes["kept"], keep.attributes["dropped"]) == (["ko:k1"], ["en:e1"]) and kept == ["ko:k1"]
    assert keep.outputs["ko:k1"]["total"] == 12.0 and keep.attributes["asked"] == "generate"


def test_crags_grader_names_the_passages_it_kept_and_dropped():
    search = ScriptedSearch({Q: ["Blue Fox", "Red Owl", "Green Cat"]})
    routed({GRADE: grades("incorrect", "correct", "ambiguous"), ANSWER: {"answer": "Lyon [1]"}})
    crag = CRAG(search, k=3, loops=1)
    trace, _ = _traced(lambda: crag(question=Q), crag)
    grader, = _spans(trace, GATE_SPAN)
    assert grader.name == "GradeGate" and grader.outputs == {"toy:0": "incorrect", "toy:2": "correct",
                                                             "toy:3": "ambiguous"}
    assert (grader.attributes["kept"], grader.attributes["dropped"]) == (["toy:2", "toy:3"], ["toy:0"])


def test_a_gate_at_rest_says_so_on_its_span():
    gate = LabelGate(dspy.Predict(AssessSufficiency), "sufficient", ("True", "False"), kind="set", mode="logprob")
    gate.thresholds = {"threshold": 0.0}  # every probability passes: the set is always enough, asked of no one
    trace, _ = _traced(lambda: gate({"question": Q, "facts": ["Ana Berg | born in | Lyon"]}))
    span, = _spans(trace, GATE_SPAN)
    assert {k: span.attributes[k] for k in ("asked", "at_rest", "decided", "called", "label", "threshold")} == {
        "asked": "logprob", "at_rest": True, "decided": "at rest (no call)", "called": False, "label": "True",
        "threshold": 0.0}


def test_outside_a_trace_nothing_is_built(monkeypatch, embedder):
    """Tracing off (no active trace): a search, a gate's decision and a project LM call build no span."""
    def refuse(*args, **kwargs):
        raise AssertionError("a span was built outside a trace")
    monkeypatch.setattr(mlflow, "start_span", refuse)
    monkeypatch.setattr(mlflow, "start_span_no_context", refuse)
    lm = ScriptedLM({ASSESS: SUFFICIENT})
    init_dspy(lm, cache=False)
    retriever = _toy_retriever(embedder)
    assert retriever.search(Q, 1)[0].title == "Blue Fox"
    assert retriever.search_many([Q, "owl"], 1)[1][0].title == "Red Owl"
    assert list(retriever.search_each(Q, 1)) == ["toy"]
    gate = LabelGate(dspy.Predict(AssessSufficiency), "sufficient", ("True", "False"), kind="set")
    assert gate({"question": Q, "facts": ["Ana Berg | born in | Lyon"]}).label == "True" and lm.history
