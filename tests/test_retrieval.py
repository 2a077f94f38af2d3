import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from retrieval.corpus import Corpus, Passage
from retrieval.dense import CorpusIndex
from retrieval.retriever import Retriever

DOCS = [
    {"id": "1", "title": "Danube", "text": "The Danube flows through Vienna and Budapest into the Black Sea."},
    {"id": "2", "title": "Seine", "text": "The Seine is the river of Paris and flows into the English Channel."},
    {"id": "3", "title": "Nile", "text": "The Nile flows north through Egypt into the Mediterranean Sea."},
]
ES = [{"id": "a", "title": "Sena", "text": "El Sena es el río de París."}]


def test_search_ranks_by_overlap_with_stable_ids(embedder):
    r = Retriever([Corpus("rivers", DOCS)], embedder)
    hits = r.search("which river flows through Paris", k=2)
    assert [h.id for h in hits] == ["rivers:2", hits[1].id] and hits[0].title == "Seine"
    assert hits[0].corpus == "rivers" and hits[0].score >= hits[1].score
    assert len(r.search("river", k=10)) == 3  # k larger than the corpus returns every document once


def test_multi_corpus_search_each_and_union(embedder):
    r = Retriever([Corpus("en", DOCS, "en"), Corpus("es", ES, "es")], embedder)
    each = r.search_each("Sena París", k=1)
    assert set(each) == {"en", "es"} and each["es"][0].lang == "es"
    assert r.search("Sena París", k=1, corpora=["es"])[0].id == "es:a"
    assert r.languages() == {"en": "en", "es": "es"}
    with pytest.raises(KeyError, match="unknown corpora"):
        r.search("x", 1, corpora=["fr"])


def test_second_build_loads_from_cache_without_embedding(embedder, tmp_path):
    corpus = Corpus("rivers", DOCS)
    CorpusIndex.build(corpus, embedder, tmp_path)
    calls = embedder.passage_calls
    again = CorpusIndex.build(Corpus("rivers", DOCS), embedder, tmp_path)
    assert embedder.passage_calls == calls and again.index.ntotal == 3


def test_corrupt_cache_is_rebuilt(embedder, tmp_path, capsys):
    corpus = Corpus("rivers", DOCS)
    CorpusIndex.build(corpus, embedder, tmp_path)
    (index_file,) = tmp_path.glob("rivers-*/index.faiss")
    index_file.write_bytes(b"not a faiss index")
    calls = embedder.passage_calls
    rebuilt = CorpusIndex.build(corpus, embedder, tmp_path)
    assert embedder.passage_calls > calls and rebuilt.index.ntotal == 3
    assert "rebuilding index cache" in capsys.readouterr().err


def test_concurrent_builds_of_one_index_embed_once(embedder, tmp_path, monkeypatch):
    encode = embedder._encode
    monkeypatch.setattr(embedder, "_encode", lambda texts, q: time.sleep(0.3) or encode(texts, q))
    with ThreadPoolExecutor(2) as pool:
        built = list(pool.map(lambda _: CorpusIndex.build(Corpus("rivers", DOCS), embedder, tmp_path), range(2)))
    assert embedder.passage_calls == 1 and [b.index.ntotal for b in built] == [3, 3]


def test_changed_corpus_gets_a_new_index_and_keeps_the_most_recently_used_versions(embedder, tmp_path, monkeypatch):
    monkeypatch.setattr("retrieval.dense.KEEP_VERSIONS", 2)
    versions = [Corpus("rivers", DOCS[:n]) for n in (1, 2, 3)]
    CorpusIndex.build(versions[0], embedder, tmp_path)
    time.sleep(0.01)
    CorpusIndex.build(versions[1], embedder, tmp_path)
    time.sleep(0.01)
    CorpusIndex.build(Corpus("rivers", DOCS[:1]), embedder, tmp_path)  # a cache hit counts as a use
    time.sleep(0.01)
    assert CorpusIndex.build(versions[2], embedder, tmp_path).index.ntotal == 3
    kept = {json.loads((p / "meta.json").read_text())["ntotal"] for p in tmp_path.glob("rivers-*")}
    assert kept == {1, 3}  # the 2-document version was the least recently used


@pytest.mark.parametrize("docs, message", [([{"id": "1", "title": "t"}], "lacks"),
                                           ([DOCS[0], DOCS[0]], "duplicate")])
def test_bad_corpus_is_rejected_with_a_reason(docs, message):
    with pytest.raises(ValueError, match=message):
        Corpus("bad", docs)


def test_hnsw_and_ivf_indexes_search(embedder):
    for kind in ("hnsw", "ivf"):
        r = Retriever([Corpus("rivers", DOCS)], embedder, index_type=kind)
        assert r.search("Nile Egypt", k=1)[0].title == "Nile"


def test_passage_format_truncates_at_a_word_boundary():
    p = Passage("c:1", "Title", "alpha beta gamma delta")
    assert p.format(max_chars=12) == "[Title] alpha beta …"
    assert p.format() == "[Title] alpha beta gamma delta"


def test_dedup_keeps_first_occurrence_in_order():
    from retrieval.corpus import dedup

    a, b = Passage("c:1", "A", "x", score=0.9), Passage("c:2", "B", "y")
    assert dedup([a, b, Passage("c:1", "A", "x", score=0.1)]) == [a, b]
