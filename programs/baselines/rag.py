"""Baselines shared by every method's comparison: no retrieval (``direct``, ``cot``) and single-shot ``rag``
(``rag_cot``, ``rag_cited``: the same pass under another method's writer)."""
from __future__ import annotations

import dspy

from decoding.choice import MCScoring
from programs.shared.evidence import EvidenceWriter
from programs.shared.oracle import check_roles
from programs.shared.writer import Writer
from retrieval.retriever import Retriever


class Direct(dspy.Module):
    """Closed-book answer (``reasoning=True`` gives the chain-of-thought baseline). Oracle role: ``writer`` (no
    context: it abstains)."""

    ORACLE_ROLES = ("writer",)

    def __init__(self, reasoning: bool = False, oracle: str = "", mc: MCScoring | None = None):
        super().__init__()
        self.oracle = check_roles(oracle, self.ORACLE_ROLES, "direct")
        self.writer = Writer(use_passages=False, reasoning=reasoning, mc=mc)

    def forward(self, question: str, options: dict[str, str] | None = None,
                lang: str | None = None) -> dspy.Prediction:
        out = self.writer(question=question, options=options, lang=lang)
        return dspy.Prediction(answer=out.answer, passages=[], trace={"iterations": 0, "queries": [],
                                                                      "stop_reason": "no_retrieval"})


class RAG(dspy.Module):
    """Retrieve the top-``k`` passages for the question once, then write the answer from them.

    ``cite=True`` uses the evidence loops' writer (2-4 words with cited passages, or "I don't know"), so ``rag``
    is compared with seal, self_rag and crag under one answer profile; ``reasoning=True`` the chain-of-thought
    writer of RAG-Critic's first draft, Self-Refine's draft and PAR2's steps. Oracle role: ``writer``.

    Args:
        search: the retriever.
        k: passages retrieved.
        max_chars: each passage shown to the LM cut after this many characters (None: whole).
        cite: the evidence loops' writer.
        reasoning: the chain-of-thought writer.
        oracle: the oracle roles (``--oracle``; see the module).
        mc: how the writer picks multiple-choice letters.
    """

    ORACLE_ROLES = ("writer",)

    def __init__(self, search: Retriever, *, k: int = 5, max_chars: int | None = None, cite: bool = False,
                 reasoning: bool = False, oracle: str = "", mc: MCScoring | None = None):
        super().__init__()
        self.oracle = check_roles(oracle, self.ORACLE_ROLES, "rag")
        if cite and reasoning:
            raise ValueError("RAG takes cite=True or reasoning=True, not both: the evidence writer does not reason")
        self.search, self.k = search, k
        self.writer = (EvidenceWriter(max_chars, mc=mc) if cite
                       else Writer(use_passages=True, reasoning=reasoning, max_chars=max_chars, mc=mc))

    def forward(self, question: str, options: dict[str, str] | None = None,
                lang: str | None = None) -> dspy.Prediction:
        passages = self.search.search(question, self.k)
        out = self.writer(question=question, passages=passages, options=options, lang=lang)
        return dspy.Prediction(answer=out.answer, passages=passages, trace={"iterations": 1, "queries": [question],
                                                                            "stop_reason": "single_pass"},
                               citations=out.get("citations", []))
