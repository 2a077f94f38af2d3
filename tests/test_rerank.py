"""Second-stage rerankers: contract (best first, own score, top_n), the LM grader's parsing, and wiring into search."""
import copy

import pytest

from retrieval.corpus import Corpus, Passage
from retrieval.rerank import RERANKERS, get_reranker
from retrieval.retriever import Retriever

DOCS = [{"id": str(i), "title": t, "text": x} for i, (t, x) in enumerate([
    ("Seine", "The Seine flows through Paris."), ("Danube", "The Danube flows through Vienna and Budapest."),
    ("Nile", "The Nile flows through Cairo."), ("Loire", "The Loire is the longest river in France.")])]


@pytest.fixture
def search(embedder, tmp_path):
    return Retriever([Corpus("rivers", DOCS)], embedder, cache_dir=tmp_path, retriever="bm25")


def test_none_keeps_the_first_stage_order(search):
    found = search.search("flows through", 3)
    assert get_reranker("none", search).rerank("q", found, 2) == found[:2]


def test_embed_scores_by_cosine_under_the_retrievers_embedder(search, embedder):
    candidates = [Passage(f"rivers:{d['id']}", d["title"], d["text"]) for d in DOCS]
    out = get_reranker("embed", search).rerank("Budapest Vienna", candidates, 2)
    q = embedder.encode_queries(["Budapest Vienna"])[0]
    expected = embedder.encode_passages([f"{d['title']}. {d['text']}" for d in DOCS[1:2]])[0] @ q
    assert [p.id for p in out] == ["rivers:1", out[1].id] and len(out) == 2
    assert out[0].score == pytest.approx(float(expected)) and out[0].score > out[1].score


def test_lm_grades_each_candidate_and_counts_unparseable_grades(search, dummy):
    dummy([{"score": "3"}, {"score": "9/10"}, {"score": "not sure"}])
    reranker = get_reranker("lm", search)
    candidates = [Passage(f"rivers:{i}", DOCS[i]["title"], DOCS[i]["text"]) for i in range(3)]
    out = reranker.rerank("Which river flows through Vienna?", candidates, 3)
    assert [(p.id, p.score) for p in out] == [("rivers:1", 9.0), ("rivers:0", 3.0), ("rivers:2", 0.0)]
    assert reranker.calls == 3 and reranker.failures == 1


def test_a_prompt_past_the_context_window_is_no_unparseable_grade(search):
    from runtime.lm import ContextOverflow
    from runtime.roles import init_dspy
    from tests.dummies import Overflowing

    init_dspy(Overflowing([{"score": "3"}], marker="Danube"), cache=False)
    candidates = [Passage(f"rivers:{i}", DOCS[i]["title"], DOCS[i]["text"]) for i in range(2)]
    with pytest.raises(ContextOverflow):
        get_reranker("lm", search).rerank("Which river flows through Vienna?", candidates, 2)


def test_search_reranks_rerank_depth_candidates_down_to_k(embedder, tmp_path, dummy):
    r = Retriever([Corpus("rivers", DOCS)], embedder, cache_dir=tmp_path, retriever="bm25", rerank="lm",
                  rerank_depth=3)
    first_stage = Retriever([Corpus("rivers", DOCS)], embedder, cache_dir=tmp_path, retriever="bm25")
    candidates = first_stage.search("the river flows through", 3)
    dummy([{"score": "1"}, {"score": "2"}, {"score": "8"}])
    (best,) = r.search("the river flows through", 1)
    assert best.id == candidates[2].id and best.score == 8.0 and r.reranker.calls == 3


def test_unknown_reranker_names_the_choices(search):
    with pytest.raises(ValueError, match="unknown reranker 'colbert'; choose one of: none, embed, cross, lm"):
        get_reranker("colbert", search)
    assert RERANKERS == ("none", "embed", "cross", "lm")


def test_unloadable_cross_encoder_is_one_line_with_the_offline_fix(search, tmp_path):
    with pytest.raises(ValueError, match="could not be loaded .*--rerank embed offline"):
        get_reranker(f"cross:{tmp_path}", search)


def test_embed_reads_indexed_vectors_back_instead_of_encoding_again(embedder, tmp_path):
    r = Retriever([Corpus("rivers", DOCS)], embedder, cache_dir=tmp_path, retriever="hybrid", rerank="embed",
                  rerank_depth=4)
    encoded = embedder.passage_calls
    found = r.search("Vienna Budapest river", 2)
    dense = Retriever([Corpus("rivers", DOCS)], embedder, cache_dir=tmp_path).search("Vienna Budapest river", 2)
    assert embedder.passage_calls == encoded  # no passage was embedded at query time
    # every document is a candidate here, so reranking by cosine gives the dense ranking and scores
    assert [p.id for p in found] == [p.id for p in dense]
    assert [p.score for p in found] == pytest.approx([p.score for p in dense], abs=1e-5)


def test_programs_copied_for_compilation_share_the_reranker(search):
    reranker = get_reranker("embed", search)
    assert copy.deepcopy({"r": reranker})["r"] is reranker
