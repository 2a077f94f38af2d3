import copy

import pytest

from programs.rerank import get_reranker
from programs.retrieval import Corpus, Retriever


@pytest.fixture
def search(embedder):
    docs = [{"id": str(i), "title": t, "text": x} for i, (t, x) in enumerate(
        [("Owl", "owls hunt mice at night"), ("Fox", "foxes dig dens"), ("Cat", "cats chase mice")])]
    return Retriever([Corpus("toy", docs)], embedder=embedder)


def test_embed_reranker_orders_by_cosine_to_the_query_and_replaces_scores(search):
    hits = search.search("fox dens", 3)
    reranked = get_reranker("embed", search).rerank("owls hunt mice", hits, 2)
    assert [p.title for p in reranked] == ["Owl", "Cat"]
    assert reranked[0].score > reranked[1].score and reranked[0].score != next(p for p in hits if p.title == "Owl").score


def test_none_keeps_order_and_unknown_names_fail_with_the_choices(search):
    hits = search.search("fox dens", 3)
    assert get_reranker("none", search).rerank("owls", hits, 2) == hits[:2]
    with pytest.raises(ValueError, match="unknown reranker 'bm25'.*none, embed"):
        get_reranker("bm25", search)


def test_programs_copied_for_compilation_share_the_reranker(search):
    reranker = get_reranker("embed", search)
    assert copy.deepcopy({"r": reranker})["r"] is reranker
