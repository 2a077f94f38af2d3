"""A retriever is a file: a toy first stage written as a file of the retrieval package (here in a folder added to
its path) registers itself, is spelled by --retriever and searched through the Retriever like the built-in ones,
following docs/extending.md ("Add a first-stage retriever")."""
import subprocess
import sys
from pathlib import Path

import pytest

import retrieval
import retrieval.retriever
from retrieval import first_stage
from retrieval.corpus import Corpus, excluded
from retrieval.retriever import Retriever

TOY = '''"""``overlap``: documents scored by how many words of the query their title and text hold."""
import re

from retrieval.corpus import _EXCLUDED
from retrieval.first_stage import FirstStage, register


def words(text: str) -> set[str]:
    return set(re.findall(r"\\w+", text.lower()))


@register
class Overlap(FirstStage):
    name = "overlap"

    def __init__(self, corpora, setup, arg=""):
        self.corpora = {c.name: c for c in corpora}

    def search(self, queries, k, names):
        return [{name: self.top(query, self.corpora[name], k) for name in names} for query in queries]

    @staticmethod
    def top(query, corpus, k):
        scores = [(len(words(query) & words(f"{d['title']}. {d['text']}")), row) for row, d in enumerate(corpus.docs)
                  if str(d.get("group", "")) not in _EXCLUDED.get()]
        return [corpus.passage(row, score) for score, row in sorted(scores, key=lambda s: -s[0])[:k] if score]
'''
DOCS = [{"id": "1", "title": "Danube", "text": "The Danube flows through Vienna.", "group": "q1"},
        {"id": "2", "title": "Seine", "text": "The Seine flows through Paris."},
        {"id": "3", "title": "Nile", "text": "The Nile flows north."}]


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """The folder holding ``overlap.py``, on the retrieval package's path and discovered for this test only."""
    folder = tmp_path / "more_retrieval"
    folder.mkdir()
    (folder / "overlap.py").write_text(TOY)
    monkeypatch.setattr(first_stage, "_STAGES", dict(first_stage.stages()))
    monkeypatch.setattr(retrieval, "__path__", [*retrieval.__path__, str(folder)])
    yield folder
    sys.modules.pop("retrieval.overlap", None)


def test_a_retriever_file_is_spelled_and_searched_through_the_retriever(toy, embedder, tmp_path):
    assert "overlap" in retrieval.retriever.RETRIEVERS and "overlap" in retrieval.retriever.SPELLINGS
    r = Retriever([Corpus("en", DOCS), Corpus("fr", DOCS[1:2], "fr")], embedder, cache_dir=tmp_path,
                  retriever="overlap")
    assert type(r.stage).__name__ == "Overlap"
    assert [(p.id, p.score) for p in r.search("seine paris river", 3)] == [("en:2", 2.0), ("fr:2", 2.0)]
    assert [p.id for p in r.search("danube flows", 2, corpora=["en"])] == ["en:1", "en:2"]
    with excluded({"q1"}):
        assert [p.id for p in r.search("danube flows", 2, corpora=["en"])] == ["en:2", "en:3"]
    assert r.search_many(["nile", "vienna"], 1) == [r.search("nile", 1), r.search("vienna", 1)]
    assert {name: [p.id for p in hits] for name, hits in r.search_each("paris", 1).items()} == \
        {"en": ["en:2"], "fr": ["fr:2"]}
    reranked = Retriever([Corpus("en", DOCS)], embedder, cache_dir=tmp_path, retriever="overlap", rerank="embed")
    hits = reranked.search("flows through", 2)  # no stored vectors: the embed reranker encodes the passages
    cosines = embedder.encode_passages([f"{p.title}. {p.text}" for p in hits]) @ \
        embedder.encode_queries(["flows through"])[0]
    assert [p.score for p in hits] == pytest.approx(list(cosines)) and hits[0].score >= hits[1].score
    with pytest.raises(ValueError, match=r"^unknown retriever 'overlap:x'; choose one of: bm25, dense, hybrid, "
                                         r"overlap, milvus:URI, hybrid:milvus:URI$"):
        Retriever([Corpus("en", DOCS)], embedder, retriever="overlap:x")


def test_the_command_line_offers_a_retriever_file(toy):
    code = (f"import retrieval; retrieval.__path__.append({str(toy)!r}); from experiments import cli; "
            "(flag,) = [a for a in cli.parser('x')._actions if '--retriever' in a.option_strings]; "
            "print(flag.metavar, cli.parser('x').parse_args(['--retriever', 'overlap']).retriever)")
    done = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parents[1], capture_output=True, text=True,
                          check=True)
    assert done.stdout.split() == ["bm25|dense|hybrid|overlap|milvus:URI|hybrid:milvus:URI", "overlap"]


def test_the_built_in_first_stages_register_themselves():
    assert retrieval.retriever.SPELLINGS == ("bm25", "dense", "hybrid", "milvus:URI", "hybrid:milvus:URI")
    assert retrieval.retriever.RETRIEVERS == ("bm25", "dense", "hybrid")
