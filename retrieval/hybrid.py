"""Hybrid retrieval (``--retriever hybrid``, ``hybrid:milvus:URI``): BM25 and a dense list fused by reciprocal rank."""
from __future__ import annotations

from dataclasses import replace

from retrieval.corpus import Corpus, Passage
from retrieval.first_stage import FirstStage, Setup, build, find, register, stages


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


@register
class Hybrid(FirstStage):
    """``hybrid[:DENSE]``: the top ``fuse_depth`` (at least ``k``) of ``bm25`` and of a vector stage (``dense``, or
    the one ``DENSE`` spells, e.g. ``milvus:URI``), fused by :func:`rrf` with constant ``rrf_k``."""

    name = "hybrid"

    def __init__(self, corpora: list[Corpus], setup: Setup, arg: str = ""):
        self.dense, self.lexical = build(arg or "dense", corpora, setup), build("bm25", corpora, setup)
        self.fuse_depth, self.rrf_k = setup.fuse_depth, setup.rrf_k

    def search(self, queries, k, names):
        depth = max(k, self.fuse_depth)
        both = zip(self.dense.search(queries, depth, names), self.lexical.search(queries, depth, names))
        return [{name: rrf([dense[name], lexical[name]], self.rrf_k)[:k] for name in names} for dense, lexical in both]

    def stored_vectors(self, passages):
        return self.dense.stored_vectors(passages)

    @classmethod
    def spellings(cls):
        """``hybrid``, and ``hybrid:`` before each vector stage's spelling that takes an argument."""
        return (cls.name, *(f"{cls.name}:{s}" for stage in stages().values() if stage.vectors and stage.arg
                            for s in stage.spellings()))

    @classmethod
    def accepts(cls, arg):
        """Nothing, or the spelling of a vector stage that takes an argument."""
        if not arg:
            return True
        found = find(arg)
        return found is not None and found[0].vectors and bool(found[0].arg)

    @classmethod
    def external(cls, arg):
        if not arg:
            return ""
        stage, inner = find(arg)
        return stage.external(inner)
