"""BM25 (bm25s), reciprocal-rank fusion, batch search and the retrieval flags, on tiny hand-made corpora."""
import math

import pytest
from dspy.utils.dummies import DummyLM

import optimize
from experiments import sessions
from retrieval import first_stage
from retrieval.bm25 import BM25Index, tokenize
from retrieval.corpus import Corpus, Passage, excluded
from retrieval.hybrid import rrf
from retrieval.retriever import RETRIEVERS, RetrievalConfig, Retriever

# "title. text" token lists: d1 [alpha, beta, beta], d2 [gamma, beta], d3 [delta, epsilon]
DOCS = [{"id": "1", "title": "Alpha", "text": "beta beta"}, {"id": "2", "title": "Gamma", "text": "beta"},
        {"id": "3", "title": "Delta", "text": "epsilon"}]


def lucene_bm25(tf: int, df: int, n: int, dl: int, avgdl: float, k1=1.5, b=0.75) -> float:
    return math.log(1 + (n - df + 0.5) / (df + 0.5)) * tf / (k1 * (1 - b + b * dl / avgdl) + tf)


def test_bm25_scores_match_the_lucene_formula_and_skip_non_matching_documents(tmp_path):
    hits = BM25Index.build(Corpus("toy", DOCS), tmp_path).search("Beta?", k=3)
    avgdl = 7 / 3
    assert [h.id for h in hits] == ["toy:1", "toy:2"]  # d3 shares no term: left out, not padded with a 0 score
    assert hits[0].score == pytest.approx(lucene_bm25(2, 2, 3, 3, avgdl), rel=1e-5)  # = 0.24598
    assert hits[1].score == pytest.approx(lucene_bm25(1, 2, 3, 2, avgdl), rel=1e-5)  # = 0.20092
    assert BM25Index.build(Corpus("toy", DOCS), tmp_path).search("zeta", k=3) == []


def test_tokenizer_bigrams_unspaced_scripts_and_keeps_spaced_words():
    assert tokenize("The Danube, Vienna!") == ["the", "danube", "vienna"]
    assert tokenize("東京都") == ["東京", "京都"]
    assert tokenize("iPhone手机") == ["iphone", "手机"]
    assert tokenize("서울특별시는") == ["서울특별시는", "서울", "울특", "특별", "별시", "시는"]
    assert tokenize("القاهرة عاصمة") == ["القاهرة", "عاصمة"]
    assert tokenize("हिन्दी") == ["हिन्दी"]  # vowel signs stay inside the word


def test_bm25_finds_a_chinese_passage_by_a_substring_query(tmp_path):
    docs = [{"id": "a", "title": "东京", "text": "东京是日本的首都"}, {"id": "b", "title": "北京", "text": "北京是中国的首都"}]
    assert BM25Index.build(Corpus("zh", docs, "zh"), tmp_path).search("中国首都", k=1)[0].id == "zh:b"


def test_rrf_sums_reciprocal_ranks():
    a, b, c = (Passage(x, x, "") for x in "abc")
    fused = rrf([[a, b, c], [c, a]], constant=60)
    # a: 1/61 + 1/62 = .032522, c: 1/63 + 1/61 = .032266, b: 1/62 = .016129
    assert [p.id for p in fused] == ["a", "c", "b"]
    assert [p.score for p in fused] == pytest.approx([1 / 61 + 1 / 62, 1 / 63 + 1 / 61, 1 / 62])
    assert [p.id for p in rrf([[a], [b]])] == ["a", "b"]  # a tie keeps first-seen order


def test_hybrid_is_the_fusion_of_the_dense_and_bm25_lists(embedder, tmp_path):
    corpus = Corpus("toy", DOCS)
    dense = Retriever([corpus], embedder, cache_dir=tmp_path).search("gamma beta", 3)
    bm25 = Retriever([corpus], embedder, cache_dir=tmp_path, retriever="bm25").search("gamma beta", 3)
    hybrid = Retriever([corpus], embedder, cache_dir=tmp_path, retriever="hybrid", rrf_k=10).search("gamma beta", 3)
    assert [p.id for p in hybrid] == [p.id for p in rrf([dense, bm25], 10)]
    assert hybrid[0].id == "toy:2" and hybrid[0].score == pytest.approx(2 / 11)  # first in both lists


def test_bm25_respects_excluded_groups(embedder, tmp_path):
    docs = [{**DOCS[0], "group": "q1"}, {**DOCS[1], "group": "q2"}, DOCS[2]]
    for method in ("bm25", "hybrid"):
        r = Retriever([Corpus("toy", docs)], embedder, cache_dir=tmp_path, retriever=method)
        with excluded({"q1"}):
            assert "toy:1" not in [p.id for p in r.search("beta", 3)]
        assert r.search("beta", 1)[0].id == "toy:1"


def test_bm25_cache_is_reused_and_a_changed_or_corrupt_one_rebuilt(tmp_path, monkeypatch, capsys):
    builds = []
    original = BM25Index.from_corpus.__func__
    monkeypatch.setattr(BM25Index, "from_corpus", classmethod(lambda cls, c: builds.append(len(c)) or original(cls, c)))
    BM25Index.build(Corpus("toy", DOCS), tmp_path)
    BM25Index.build(Corpus("toy", DOCS), tmp_path)
    assert builds == [3] and not list(tmp_path.rglob("*.pkl"))
    changed = [*DOCS[:2], {"id": "3", "title": "Delta", "text": "beta epsilon"}]
    assert [h.id for h in BM25Index.build(Corpus("toy", changed), tmp_path).search("epsilon beta", 1)] == ["toy:3"]
    assert builds == [3, 3]  # same name and size, new content: a new index, not the stale one
    (vocab,) = tmp_path.glob(f"toy-{Corpus('toy', DOCS).content_hash[:16]}-bm25s-*/vocab.index.json")
    vocab.write_text("{not json")
    assert BM25Index.build(Corpus("toy", DOCS), tmp_path).search("beta", 1)[0].id == "toy:1"
    assert builds == [3, 3, 3] and "rebuilding BM25 cache" in capsys.readouterr().err


@pytest.mark.parametrize("method", RETRIEVERS)
def test_search_many_equals_one_search_per_query(embedder, tmp_path, method):
    r = Retriever([Corpus("a", DOCS), Corpus("b", [{"id": "x", "title": "Beta", "text": "epsilon gamma"}])],
                  embedder, cache_dir=tmp_path, retriever=method)
    queries = ["beta", "gamma epsilon", "alpha delta", "nothing matches"]
    calls = []
    encode = embedder.encode_queries
    embedder.encode_queries = lambda texts: calls.append(len(texts)) or encode(texts)
    many = r.search_many(queries, 2)
    assert calls == ([] if method == "bm25" else [4])  # one encoding call for all queries
    assert many == [r.search(q, 2) for q in queries]
    assert r.search_many(queries, 1, corpora=["b"]) == [r.search(q, 1, corpora=["b"]) for q in queries]


def test_unknown_retriever_names_the_choices(embedder, tmp_path):
    with pytest.raises(ValueError, match="unknown retriever 'sparse'; choose one of: bm25, dense, hybrid"):
        Retriever([Corpus("toy", DOCS)], embedder, cache_dir=tmp_path, retriever="sparse")


@pytest.mark.parametrize("spelling, stage, uri", [("hybrid", "Hybrid", ""), ("milvus:./rag.db", "Milvus", "./rag.db"),
                                                  ("hybrid:milvus:http://h:19530", "Hybrid", "http://h:19530")])
def test_retriever_spellings_name_the_first_stage_and_the_milvus_uri(spelling, stage, uri):
    config = RetrievalConfig(spelling)
    assert (first_stage.parse(config.method)[0].__name__, config.external) == (stage, uri)


@pytest.mark.parametrize("argv, message", [
    (["--retriever", "sparse"],
     "unknown retriever 'sparse'; choose one of: bm25, dense, hybrid, milvus:URI, hybrid:milvus:URI"),
    (["--retriever", "hybrid:milvus:"],
     "unknown retriever 'hybrid:milvus:'; choose one of: bm25, dense, hybrid, milvus:URI, hybrid:milvus:URI"),
    (["--rerank", "colbert"], "--rerank must be one of none, embed, cross, lm, cross:<model> (got 'colbert')"),
])
def test_bad_retrieval_flags_are_one_clear_line(argv, message, capsys, monkeypatch):
    monkeypatch.setattr(sessions, "make_lm", lambda *a, **k: DummyLM([{"answer": "x"}]))
    with pytest.raises(SystemExit):
        optimize.main(["--program", "rag", "--train", "1", "--dev", "1", "--test", "1", *argv])
    assert message in capsys.readouterr().err.strip().splitlines()[-1]
