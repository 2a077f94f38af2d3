"""Second-stage rerankers over a retriever's candidates: ``get_reranker(name, search).rerank(query, passages, top_n)``.

Names (:data:`RERANKERS`):
  ``none``  keeps the first-stage order;
  ``embed`` cosine similarity of query and passage under the retriever's own embedder (offline, no extra model);
  ``cross`` a sentence-transformers cross-encoder: ``cross`` loads :data:`DEFAULT_CROSS_ENCODER` (needs the
            Hugging Face hub or its cache), ``cross:<path or model id>`` any other one;
  ``lm``    the configured DSPy LM grades each candidate 0-10 (one short call per passage, signatures/rerank.py).
Every reranker returns the best ``top_n`` first, with ``score`` replaced by its own score; ties keep the
first-stage order.
"""
from __future__ import annotations

import re
from dataclasses import replace
from typing import Protocol

import dspy
import numpy as np

from retrieval.corpus import Passage
from runtime.embedders import Embedder
from runtime.lm import UNREADABLE_ERRORS
from signatures.rerank import GradePassage

RERANKERS = ("none", "embed", "cross", "lm")
DEFAULT_CROSS_ENCODER = "cross-encoder/ms-marco-MiniLM-L6-v2"


class Searcher(Protocol):
    """What the ``embed`` reranker needs of the retriever (:class:`retrieval.retriever.Retriever`)."""

    embedder: Embedder

    def stored_vectors(self, passages: list[Passage]) -> np.ndarray | None: ...


def _passage_text(p: Passage) -> str:
    return f"{p.title}. {p.text}"


class Reranker:
    """Base: subclasses implement ``scores(query, passages) -> one float per passage`` (higher is better)."""

    name = "none"

    def rerank(self, query: str, passages: list[Passage], top_n: int) -> list[Passage]:
        if not passages:
            return []
        scores = [float(s) for s in self.scores(query, passages)]
        order = sorted(range(len(passages)), key=lambda i: -scores[i])  # stable: ties keep first-stage order
        return [replace(passages[i], score=scores[i]) for i in order[:top_n]]

    def scores(self, query: str, passages: list[Passage]) -> list[float]:
        raise NotImplementedError

    def __deepcopy__(self, memo):
        return self  # like the Retriever: copies of a program (e.g. during compilation) share it


class NoReranker(Reranker):
    def rerank(self, query, passages, top_n):
        return list(passages[:top_n])


class EmbedReranker(Reranker):
    """Cosine similarity under the retriever's embedder (query and passage prompts as at indexing time); passage
    vectors are read back from the dense index where the retriever has one, else encoded."""

    name = "embed"

    def __init__(self, search: Searcher):
        self.search, self.embedder = search, search.embedder

    def scores(self, query, passages):
        q = self.embedder.encode_queries([query])[0]
        stored = self.search.stored_vectors(passages)
        vectors = stored if stored is not None else self.embedder.encode_passages([_passage_text(p) for p in passages])
        return vectors @ q


class CrossReranker(Reranker):
    name = "cross"

    def __init__(self, model: str = DEFAULT_CROSS_ENCODER):
        from sentence_transformers import CrossEncoder

        try:
            self.model = CrossEncoder(model)  # sentence-transformers picks the device (GPU where present)
        except Exception as err:  # offline without a cached copy, a wrong id or path
            raise ValueError(f"cross-encoder '{model}' could not be loaded ({type(err).__name__}); pass "
                             "--rerank cross:<local model folder>, or use --rerank embed offline") from None

    def scores(self, query, passages):
        return self.model.predict([(query, _passage_text(p)) for p in passages], show_progress_bar=False)


class LMReranker(Reranker):
    """Pointwise grading by the configured LM; a grade that does not parse counts as 0 and in ``failures``. Each call
    reads the first ``max_chars`` characters of one candidate (its own cap: one short grading call per candidate,
    ``--search-depth`` of them per search; the passages the program then shows its LM are not cut by it)."""

    name = "lm"

    def __init__(self, max_chars: int = 500):
        self.grade, self.max_chars = dspy.Predict(GradePassage), max_chars
        self.calls = self.failures = 0

    def scores(self, query, passages):
        return [self.score_one(query, p) for p in passages]

    def score_one(self, query: str, passage: Passage) -> float:
        self.calls += 1
        try:
            text = self.grade(question=query, passage=passage.format(self.max_chars), config={"max_tokens": 8}).score
        except UNREADABLE_ERRORS:  # any other error (a context overflow, an endpoint) propagates
            text = ""
        match = re.search(r"\d+", str(text))
        if not match:
            self.failures += 1
            return 0.0
        return float(np.clip(int(match.group()), 0, 10))


def get_reranker(name: str, search: Searcher) -> Reranker:
    """The reranker called ``name`` (see the module docstring) for candidates of ``search``."""
    if name == "none":
        return NoReranker()
    if name == "embed":
        return EmbedReranker(search)
    if name == "cross" or name.startswith("cross:") and len(name) > 6:
        return CrossReranker(name[6:] or DEFAULT_CROSS_ENCODER)
    if name == "lm":
        return LMReranker()
    raise ValueError(f"unknown reranker '{name}'; choose one of: {', '.join(RERANKERS)} (or cross:<model>)")
