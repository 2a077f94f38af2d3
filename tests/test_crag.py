"""CRAG baseline and the shared evidence writer, on DummyLM with a scripted search."""
import dspy
import pytest

import programs
from programs.baselines.crag import CRAG, action, refine
from programs.shared.evidence import EvidenceWriter, cited_passages, clean_answer
from retrieval.corpus import Passage
from runtime.roles import Roles, assign_roles
from tests.test_seal import ANSWER, P, Q, Queue, ScriptedSearch, routed

GRADE, REWRITE = "`[[ ## grade ## ]]`", "[[ ## earlier_queries ## ]]"


def grades(*names):
    return Queue(*({"grade": g} for g in names))


def test_action_follows_the_grades():
    assert action(["incorrect", "correct"]) == "correct"
    assert action(["incorrect", "incorrect"]) == "incorrect"
    assert action(["ambiguous", "incorrect"]) == "ambiguous" and action([]) == "ambiguous"


def test_refine_keeps_strips_that_share_a_word_with_the_queries():
    p = Passage("x:1", "Ana Berg", "Ana Berg was a director. She liked owls. She was born in Lyon.")
    assert refine(p, {"berg", "born"}, 600).text == "Ana Berg was a director. She was born in Lyon."
    assert refine(p, {"zebra"}, 600).text == "Ana Berg was a director."  # nothing matches: the first strip
    assert refine(p, {"born"}, 30).text == "Ana Berg was a director."  # only what a prompt shows is refined


def test_correct_grade_keeps_the_set_without_a_second_search():
    search = ScriptedSearch({Q: ["Blue Fox", "Red Owl"]})
    lm = routed({GRADE: grades("correct", "incorrect"), ANSWER: {"answer": "Lyon [1]"}})
    pred = CRAG(search, k=2, loops=1)(question=Q)
    assert pred.stop_reason == "correct" and len(search.calls) == 1 and pred.trace["actions"] == ["correct"]
    assert pred.answer == "Lyon" and pred.citations == ["toy:0"] and len(lm.history) == 3  # 2 grades + answer


def test_incorrect_set_is_replaced_by_a_rewritten_query_at_the_same_k():
    search = ScriptedSearch({"ana berg": ["Blue Fox", "Ana Berg", "Green Cat"], Q: ["Blue Fox", "Red Owl"]})
    routed({GRADE: grades("incorrect", "incorrect", "correct", "ambiguous"),
            REWRITE: {"query": "Ana Berg film director birthplace"}, ANSWER: {"answer": "Lyon [1]"}})
    pred = CRAG(search, k=2, loops=1)(question=Q)
    assert pred.queries == [Q, "Ana Berg film director birthplace"]
    assert pred.trace["actions"] == ["incorrect", "correct"]
    assert [p.title for p in pred.passages] == ["Ana Berg", "Green Cat"]  # Blue Fox was fetched before: blocked
    assert search.calls[1][1] == 4 and pred.loops_used == 1


def test_ambiguous_set_keeps_the_best_held_passage_and_budget_zero_never_re_searches():
    search = ScriptedSearch({"ana berg": ["Ana Berg", "Grey Elk"], Q: ["Blue Fox", "Red Owl", "Green Cat"]})
    routed({GRADE: grades("ambiguous", "incorrect", "ambiguous", "correct", "incorrect"),
            REWRITE: {"query": "Ana Berg birthplace"}, ANSWER: {"answer": "Lyon [1]"}})
    pred = CRAG(search, k=3, loops=1)(question=Q)
    # 2 of k=3 kept (the non-incorrect ones), 1 slot refilled; graded best first
    assert pred.trace["actions"] == ["ambiguous", "correct"]
    assert [p.title for p in pred.passages] == ["Ana Berg", "Blue Fox", "Green Cat"]
    search = ScriptedSearch({Q: ["Blue Fox"]})
    routed({GRADE: grades("incorrect"), REWRITE: {"query": "x y z"}, ANSWER: {"answer": "Paris [1]"}})
    pred = CRAG(search, k=1, loops=0)(question=Q)
    assert len(search.calls) == 1 and pred.stop_reason == "loop_budget" and len(pred.passages) == 1


def test_a_repeated_rewrite_stops_the_loop():
    search = ScriptedSearch({Q: ["Blue Fox"]})
    routed({GRADE: grades("incorrect"), REWRITE: {"query": "director of the film Blue Fox born where"},
            ANSWER: {"answer": "I don't know"}})
    pred = CRAG(search, k=1, loops=3)(question=Q)
    assert pred.stop_reason == "stuck" and pred.queries == [Q] and pred.citations == []


def test_evidence_writer_parses_citations_and_normalises_refusals():
    passages = [P["Blue Fox"], P["Ana Berg"]]
    assert [p.title for p in cited_passages("Lyon [2, 1] [2] [7]", passages)] == ["Ana Berg", "Blue Fox"]
    assert cited_passages("born 1931", passages) == []  # bare numbers (a year) are not citations
    assert clean_answer("Lyon [2].", 2) == "Lyon" and clean_answer("I don’t know the answer.", 2) == "I don't know"
    lm = routed({ANSWER: {"answer": "I don’t know [1]"}})
    out = EvidenceWriter()(question=Q, passages=passages)
    assert out.answer == "I don't know" and out.citations == []  # a refusal cites nothing
    assert "[2] [Ana Berg]" in lm.history[-1]["messages"][-1]["content"]


@pytest.mark.parametrize("raw, cited, answer", [
    ("Lyon [Passage 2]", ["Ana Berg"], "Lyon"),  # a named citation
    ("Lyon [passages 1 and 2].", ["Blue Fox", "Ana Berg"], "Lyon"),
    ("Lyon [1, 2]", ["Blue Fox", "Ana Berg"], "Lyon"),
    ("Lyon [2][1]", ["Ana Berg", "Blue Fox"], "Lyon"),  # adjacent marks
    ("in [1990] [1]", ["Blue Fox"], "in [1990]"),  # a bracketed year is part of the answer, not a citation
    ("[1931]", [], "[1931]"),
    ("Lyon [1, 1990]", [], "Lyon [1, 1990]"),  # one number out of range: not a citation mark
    ("Lyon [Doc 7]", [], "Lyon"),  # a named mark with no passage of that number: cut, cites nothing
    ("Lyon (2)", [], "Lyon (2)"),
])
def test_citations_are_bracketed_passage_numbers_only(raw, cited, answer):
    passages = [P["Blue Fox"], P["Ana Berg"]]
    assert [p.title for p in cited_passages(raw, passages)] == cited
    assert clean_answer(raw, len(passages)) == answer


@pytest.mark.parametrize("name", ["seal", "self_rag", "crag"])
def test_every_arm_uses_the_same_writer_signature(name, embedder):
    from retrieval.corpus import Corpus
    from retrieval.retriever import Retriever

    retriever = Retriever([Corpus("toy", [{"id": "0", "title": "t", "text": "x"}])], embedder)
    arm, rag = programs.build(name, search=retriever, k=1), programs.build("rag_cited", search=retriever, k=1)
    assert arm.writer.short.signature.instructions == rag.writer.short.signature.instructions
    assert list(arm.writer.short.signature.fields) == list(rag.writer.short.signature.fields)
    assert not isinstance(programs.build("rag", search=retriever).writer, EvidenceWriter)  # default rag unchanged
    with pytest.raises(ValueError, match=r"^build\('rag'\): cite is no run setting"):
        programs.build("rag", search=retriever, cite=True)  # a variant's argument is never dropped in silence


def test_crag_roles(embedder):
    from retrieval.corpus import Corpus
    from retrieval.retriever import Retriever

    retriever = Retriever([Corpus("toy", [{"id": "0", "title": "t", "text": "x"}])], embedder)
    crag = programs.build("crag", search=retriever, k=2, loops=1)
    writer, planner, critic = dspy.utils.DummyLM([{}]), dspy.utils.DummyLM([{}]), dspy.utils.DummyLM([{}])
    assign_roles(crag, Roles(writer=writer, planner=planner, critic=critic))
    assert crag.grade.lm is critic and crag.rewrite.lm is planner and crag.writer.short.lm is writer


def test_a_rewrite_that_says_none_is_no_query_and_nothing_is_searched_for_it():
    search = ScriptedSearch({Q: ["Blue Fox"]})
    routed({GRADE: grades("incorrect"), REWRITE: {"query": "None"}, ANSWER: {"answer": "I don't know"}})
    pred = CRAG(search, k=1, loops=3)(question=Q)
    assert pred.stop_reason == "stuck" and [q for q, _ in search.calls] == [Q]
