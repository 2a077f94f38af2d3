"""Self-RAG-style reflective baseline for SEAL-RAG, at the same k and loop budget.

Each round drafts an answer from k passages with the writer every arm shares (2-4 words with cited passages, or
"I don't know") and has a critic grade relevance, support and usefulness. An accepted draft stops the loop;
otherwise the critic's query (or, when it repeats an earlier query, the question with the draft) fetches k passages
not held before, which are merged with the held ones, newest first and alternating, back to k. A loop whose every
query option repeats an earlier one stops ("stuck"). The answer is the best-graded draft (the latest on ties), with
its passages. The critique and the acceptance are :class:`AcceptGate`'s.

Oracle roles (``programs.shared.oracle``): ``verdict`` stands in for the critique (no call: a draft is accepted, and
graded top on every scale, exactly when it is right by the task metric), ``query`` for the critic's next query (the
oracle query from the passages held), ``writer`` for the drafts (the perfect reader). ``all``: no call.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from itertools import chain, zip_longest

import dspy

from decoding.choice import MCScoring
from decoding.decisions import decide, record, rest_note
from programs.shared.evidence import EvidenceWriter, lenient, search_excluding
from programs.shared.gates import DecisionGate
from programs.shared.oracle import check_roles
from programs.shared.steps import RoleStep
from programs.shared.text import abstained, normalize, query_text, repeats
from retrieval.corpus import Passage
from retrieval.retriever import Retriever
from signatures.critic import CritiqueDraft

SUPPORT = {"full": 1.0, "partial": 0.5, "none": 0.0}
REFLECTION = {"relevant": ("True", "False"), "support": tuple(SUPPORT), "usefulness": tuple("12345")}


def reflection(decision) -> dict | None:
    """A critique read as probabilities: P(relevant), expected support (full 1, partial 0.5), P(full support),
    expected usefulness (1-5); None when any of them is unreadable."""
    support = decision.distribution("support")
    values = {"relevant": decision.prob("relevant", "True"), "usefulness": decision.expected("usefulness"),
              "support": sum(SUPPORT[k] * p for k, p in support.items()) if support else None,
              "support_full": support["full"] if support else None}
    return None if any(v is None for v in values.values()) else {**values, "scored": True}


@dataclass(frozen=True)
class Draft:
    """One round's answer, the passages it was written from, and its critique."""

    answer: str
    passages: list[Passage]
    critique: dict | None = None  # relevant, support, usefulness; None when not critiqued
    citations: list[str] = field(default_factory=list)  # ids of the passages the draft cites

    @property
    def score(self) -> float:
        """relevance + support + usefulness, each scaled to [0, 1]; a refusal or a failed critique ranks lowest."""
        c = self.critique
        if abstained(self.answer) or not c:
            return -1.0
        support = c["support"] if c.get("scored") else SUPPORT.get(c["support"], 0.0)
        return float(c["relevant"]) + support + (min(max(c["usefulness"], 1), 5) - 1) / 4


def oracle_critique(right: bool) -> dict:
    """The verdict oracle's critique of a draft: top on every scale when it is right, bottom otherwise."""
    return {"relevant": float(right), "support": float(right), "support_full": float(right),
            "usefulness": 5 if right else 1, "scored": True, "oracle": right}


class AcceptGate(DecisionGate):
    """Self-RAG's critique of a draft and its acceptance. As written: the critic's relevance, support and usefulness;
    accepted when relevant, fully supported and useful enough. Scored (``fused`` alike: there is no per-passage
    decision to fuse), as Self-RAG reads its reflection tokens: P(relevant), P(fully supported) + 0.5 P(partially),
    expected usefulness (:func:`reflection`); accepted when P(relevant) and P(fully supported) reach the gate's
    thresholds, recorded for calibration as their minimum, labelled by the draft's correctness. Under the verdict
    oracle, no call: the critique of :func:`oracle_critique`, accepted exactly when the answer is right."""

    def __init__(self, critic: dspy.Predict, min_usefulness: int, mode: str = "generate",
                 roles: frozenset[str] = frozenset()):
        super().__init__("correct", mode, roles, "verdict", relevant=0.5, support=0.5)
        self.critic, self.min_usefulness = critic, min_usefulness

    def __call__(self, inputs: dict, answer: str) -> tuple[dspy.Prediction | None, dict | None]:
        """The critic's output (None without a call) and its critique of ``answer`` (None when unreadable)."""
        if self.from_gold:
            return None, oracle_critique(self.gold(answer))
        return self.asked(inputs, answer)

    def written(self, inputs: dict, answer: str) -> tuple:
        out = lenient(self.critic, **inputs)
        return out, {n: out[n] for n in ("relevant", "support", "usefulness")} if out else None

    def scored(self, inputs: dict, answer: str) -> tuple:
        decision = decide(self.critic, REFLECTION, **inputs)
        critique = reflection(decision) if decision.output is not None else None
        if critique:  # one threshold on both probabilities: accepted when their minimum reaches it
            record(self, min(critique["relevant"], critique["support_full"]), answer=answer)
            critique |= {"decided": self.decided} if self.decided else {}
        return decision.output, critique

    def accepts(self, draft: "Draft") -> bool:
        c = draft.critique
        if c and "oracle" in c:
            return c["oracle"]
        if not c or abstained(draft.answer):
            return False
        if c.get("scored"):
            t = self.thresholds
            return c["relevant"] >= t["relevant"] and c["support_full"] >= t["support"] \
                and c["usefulness"] >= self.min_usefulness
        return bool(c["relevant"]) and c["support"] == "full" and c["usefulness"] >= self.min_usefulness


class SelfRAG(dspy.Module):
    """Retrieve -> draft -> critique -> retrieve again or stop, with at most ``loops`` re-retrievals.

    ``lang`` (the question's language, passed by multilingual datasets) asks the writer for the answer in it.

    Args:
        search: the retriever.
        k: passages per search.
        loops: re-retrievals at most.
        max_chars: each passage shown to the LM cut after this many characters (None: whole).
        min_usefulness: the critic's usefulness (1-5) a draft needs to be accepted.
        stuck_jaccard: a next query this close (content-word Jaccard) to an earlier one is stuck.
        decisions: the decision mode of the acceptance gate (``--decisions``).
        oracle: the oracle roles (``--oracle``; see the module).
        mc: how the writer picks multiple-choice letters.
    """

    ROLES = {"critic": "critic"}
    ORACLE_ROLES = ("verdict", "query", "writer")

    def __init__(self, search: Retriever, *, k: int = 3, loops: int = 3, max_chars: int | None = None,
                 min_usefulness: int = 4, stuck_jaccard: float = 0.7, decisions: str = "generate",
                 oracle: str = "", mc: MCScoring | None = None):
        super().__init__()
        self.oracle = check_roles(oracle, self.ORACLE_ROLES, "self_rag")
        self.search, self.k, self.loops, self.max_chars = search, k, loops, max_chars
        self.stuck_jaccard = stuck_jaccard
        self.writer = EvidenceWriter(max_chars, mc=mc)
        self.critic = dspy.Predict(CritiqueDraft)
        self.critic_gate = AcceptGate(self.critic, min_usefulness, decisions, self.oracle)
        self.query_step = RoleStep(self.critic, "query", self.oracle, field="next_query")

    def resting(self) -> str | None:
        """What Self-RAG runs as while its acceptance gate decides whatever the probability (see
        :func:`decoding.decisions.rest_note`): at rest relevance and support pass every draft."""
        return rest_note("acceptance", self.critic_gate, "usefulness alone decides")

    def forward(self, question: str, options: dict[str, str] | None = None,
                lang: str | None = None) -> dspy.Prediction:
        queries, drafts, failures, stop = [question], [], 0, "loop_budget"
        passages = self.search.search(question, self.k)                                 # retrieve
        fetched = {p.id for p in passages}
        for loop in range(self.loops + 1):
            written = self.writer(question=question, passages=passages, options=options, lang=lang)  # draft
            answer, cited = written.answer, written.get("citations", [])
            if self.loops == 0:  # single pass: nothing to choose between or retrieve again for
                drafts.append(Draft(answer, passages, citations=cited))
                break
            inputs = {"question": question, "passages": [p.format(self.max_chars) for p in passages], "draft": answer}
            out, critique = self.critic_gate(inputs, answer)                            # critique
            failures += critique is None
            drafts.append(Draft(answer, passages, critique, cited))
            if self.critic_gate.accepts(drafts[-1]):
                stop = "accepted"
                break
            if loop == self.loops:
                break
            query = self.query_step(inputs, passages,  # the oracle's: a repeat still fetches new passages
                                    ask=lambda: self._next_query(question, answer, out, queries)).value
            if query is None:
                stop = "stuck"
                break
            queries.append(query)                                                        # retrieve again
            new = search_excluding(self.search, query, self.k, fetched)
            fetched.update(p.id for p in new)
            passages = merge(passages, new, self.k)
        chosen = max(range(len(drafts)), key=lambda i: (drafts[i].score, i))
        best = drafts[chosen]
        trace = {"iterations": len(queries) - 1, "queries": queries, "stop_reason": stop,
                 "critiques": [d.critique for d in drafts], "chosen_round": chosen,
                 "parse_failures": failures}
        return dspy.Prediction(answer=best.answer, passages=best.passages, trace=trace, queries=queries,
                               loops_used=len(queries) - 1, stop_reason=stop, citations=best.citations)

    def _next_query(self, question: str, answer: str, critique: dspy.Prediction | None,
                    queries: list[str]) -> str | None:
        """The critic's query (:func:`query_text`: "None" is none); when it gave none or it repeats an earlier query
        (content-word Jaccard at or above ``stuck_jaccard``), the question conditioned on the draft (not on a
        refusal), unless exactly that query was issued before; None when neither is left. (Repeats still fetch new
        passages: held ones are blocked.)"""
        proposal = query_text(critique.next_query if critique else "")
        if not repeats(proposal, queries, self.stuck_jaccard):
            return proposal
        fallback = f"{question} {answer}"
        if abstained(answer) or normalize(fallback) in {normalize(q) for q in queries}:
            return None
        return fallback


def merge(held: list[Passage], new: list[Passage], k: int) -> list[Passage]:
    """Held and newly fetched passages back to ``k``: newest first, alternating with the held ones in their order
    (k=3 keeps 2 new and 1 held; k=1 keeps the newest)."""
    return [p for p in chain.from_iterable(zip_longest(new, held)) if p is not None][:k]
