"""Self-RAG-style reflective baseline for SEAL-RAG, at the same k and loop budget.

Each round retrieves k passages, drafts an answer (SEAL's answer profile: 2-4 words or "I don't know") and has a
critic grade relevance, support and usefulness. An accepted draft stops the loop; otherwise the critic's query
drives a fresh retrieval. The answer is the best-graded draft (the latest on ties), with its passages.
"""
from __future__ import annotations

from dataclasses import dataclass

import dspy

from programs.evidence import EvidenceWriter, lenient
from programs.retrieval import Passage, Retriever
from programs.text import abstained
from signatures.critic import CritiqueDraft

SUPPORT = {"full": 1.0, "partial": 0.5, "none": 0.0}


@dataclass(frozen=True)
class Draft:
    """One round's answer, the passages it was written from, and its critique."""

    answer: str
    passages: list[Passage]
    critique: dict | None = None  # relevant, support, usefulness; None when not critiqued

    @property
    def score(self) -> float:
        """relevance + support + usefulness, each scaled to [0, 1]; a refusal or a failed critique ranks lowest."""
        c = self.critique
        if abstained(self.answer) or not c:
            return -1.0
        return float(c["relevant"]) + SUPPORT.get(c["support"], 0.0) + (min(max(c["usefulness"], 1), 5) - 1) / 4


class SelfRAG(dspy.Module):
    """Retrieve -> draft -> critique -> retrieve again or stop, with at most ``loops`` re-retrievals.

    ``lang`` (passed by multilingual datasets) is accepted and unused."""

    ROLES = {"critic": "critic"}

    def __init__(self, search: Retriever, k: int = 3, loops: int = 3, max_chars: int = 600, min_usefulness: int = 4):
        super().__init__()
        self.search, self.k, self.loops, self.max_chars = search, k, loops, max_chars
        self.min_usefulness = min_usefulness
        self.writer = EvidenceWriter(max_chars)
        self.critic = dspy.Predict(CritiqueDraft)

    def forward(self, question: str, options: dict[str, str] | None = None,
                lang: str | None = None) -> dspy.Prediction:
        queries, drafts, failures, stop = [question], [], 0, "loop_budget"
        for loop in range(self.loops + 1):
            passages = self.search.search(queries[-1], self.k)                          # retrieve
            answer = self.writer(question=question, passages=passages, options=options).answer  # draft
            if self.loops == 0:  # single pass: nothing to choose between or retrieve again for
                drafts.append(Draft(answer, passages))
                break
            out = lenient(self.critic, question=question, passages=[p.format(self.max_chars) for p in passages],
                          draft=answer)                                                  # critique
            failures += out is None
            critique = {n: out[n] for n in ("relevant", "support", "usefulness")} if out else None
            drafts.append(Draft(answer, passages, critique))
            if self._accepts(drafts[-1]):
                stop = "accepted"
                break
            if loop == self.loops:
                break
            queries.append(self._next_query(question, answer, out, queries))            # retrieve again
        chosen = max(range(len(drafts)), key=lambda i: (drafts[i].score, i))
        best = drafts[chosen]
        trace = {"iterations": len(queries) - 1, "queries": queries, "stop_reason": stop,
                 "critiques": [d.critique for d in drafts], "chosen_round": chosen,
                 "parse_failures": failures}
        return dspy.Prediction(answer=best.answer, passages=best.passages, trace=trace, queries=queries,
                               loops_used=len(queries) - 1, stop_reason=stop)

    def _accepts(self, draft: Draft) -> bool:
        c = draft.critique
        return bool(c) and not abstained(draft.answer) and bool(c["relevant"]) and c["support"] == "full" \
            and c["usefulness"] >= self.min_usefulness

    @staticmethod
    def _next_query(question: str, answer: str, critique: dspy.Prediction | None, queries: list[str]) -> str:
        """The critic's query; when it gave none or one already issued, the question conditioned on the draft."""
        query = (critique.next_query if critique else "").strip()
        if not query or query.lower() in (q.lower() for q in queries):
            return f"{question} {answer}"
        return query
