"""Rerankers behind one interface: ``get_reranker(name, search).rerank(query, passages, top_n)`` -> best first.

Names: ``none`` (keep the retriever's order) and ``embed`` (cosine of query and passage under the retriever's own
embedder; the passage text is embedded as the index embedded it)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from programs.retrieval import Passage, Retriever

RERANKERS = ("none", "embed")


class Reranker:
    """Keeps the incoming order (``none``)."""

    def rerank(self, query: str, passages: list[Passage], top_n: int) -> list[Passage]:
        return list(passages)[:top_n]

    def __deepcopy__(self, memo):
        return self  # like the Retriever: copies of a program (e.g. during compilation) share it


class EmbedReranker(Reranker):
    """Cosine similarity to the query under the retriever's embedder; passage vectors are memoised by id."""

    def __init__(self, search: Retriever):
        self.embedder, self._vectors = search.embedder, {}

    def rerank(self, query: str, passages: list[Passage], top_n: int) -> list[Passage]:
        passages = list(passages)
        if not passages:
            return []
        fresh = [p for p in dict.fromkeys(passages) if p.id not in self._vectors]
        if fresh:
            vectors = self.embedder.encode_passages([f"{p.title}. {p.text}" for p in fresh])
            self._vectors.update(zip((p.id for p in fresh), vectors))
        scores = np.stack([self._vectors[p.id] for p in passages]) @ self.embedder.encode_queries([query])[0]
        order = sorted(range(len(passages)), key=lambda i: -scores[i])[:top_n]
        return [replace(passages[i], score=float(scores[i])) for i in order]


def get_reranker(name: str, search: Retriever) -> Reranker:
    if name == "none":
        return Reranker()
    if name == "embed":
        return EmbedReranker(search)
    raise ValueError(f"unknown reranker '{name}'; choose one of: {', '.join(RERANKERS)}")
