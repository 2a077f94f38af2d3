"""CRAG-style corrective retrieval, a baseline for SEAL-RAG at the same k and loop budget.

A retrieval evaluator grades each of the top-k passages ``correct``, ``ambiguous`` or ``incorrect`` (one critic
call per passage). The set's action follows the grades: any correct passage -> *correct* (keep the set's passages
not graded incorrect, as CRAG passes on only the relevant knowledge); every
passage incorrect -> *incorrect* (drop them all and search again with a rewritten query); otherwise *ambiguous*
(keep the best non-incorrect passages, at most k - max(1, k // 2), and fill up to k from a rewritten-query
search). Each re-search fetches k passages
not fetched before and counts against ``loops`` (``loops=0``: grade and refine only). The grades are
:class:`GradeGate`'s. The kept passages are then
refined by decompose-then-recompose: each is cut into sentence strips, strips sharing no content word with the
question or the queries are dropped, and the rest are joined back in order. The shared evidence writer answers from
the final k passages (graded best first).

Oracle roles (``programs.shared.oracle``): ``relevance`` (a gold passage is graded correct, any other incorrect),
``query`` (the rewrite is the oracle query from the passages held), ``writer`` (the perfect reader of the refined
passages). ``all``: no call.
"""
from __future__ import annotations

from dataclasses import replace

import dspy

from decoding.choice import MCScoring
from decoding.decisions import YES_NO, decide, record, relative, rest_note
from programs.shared.evidence import EvidenceWriter, lenient, search_excluding
from programs.shared.gates import DecisionGate, DecisionMode, sorted_passages
from programs.shared.oracle import check_roles
from programs.shared.steps import RoleStep
from programs.shared.text import clip, content_words, repeats, sentences
from retrieval.corpus import Passage
from retrieval.retriever import Retriever
from signatures.critic import GradeRetrieval, JudgeRelevance
from signatures.query import RewriteQuery

GRADES = ("correct", "ambiguous", "incorrect")
#: Fixed thresholds on the relevance score of an uncompiled program: thirds of the probability scale (the paper's
#: values belong to its own T5 evaluator's scale).
THRESHOLDS = {"lower": 1 / 3, "upper": 2 / 3}


def graded(score: float, thresholds: dict[str, float]) -> str:
    """A passage's grade from its relevance score: correct at or above ``upper``, incorrect below ``lower``."""
    return "correct" if score >= thresholds["upper"] else "incorrect" if score < thresholds["lower"] else "ambiguous"


def action(grades: list[str]) -> str:
    """The set's action from its passages' grades (CRAG's upper/lower thresholds on a three-way grade)."""
    if "correct" in grades:
        return "correct"
    return "incorrect" if grades and all(g == "incorrect" for g in grades) else "ambiguous"


def refine(passage: Passage, terms: set[str], max_chars: int | None) -> Passage:
    """Decompose-then-recompose: the passage with only the sentence strips (of the text a prompt shows) that share
    a content word with ``terms``; the first strip when none does."""
    strips = sentences(passage.clip(max_chars).removesuffix(" …"))
    kept = [s for s in strips if content_words(s) & terms] or strips[:1]
    return replace(passage, text=" ".join(kept))


class GradeGate(DecisionGate):
    """CRAG's retrieval evaluator: each passage graded correct, ambiguous or incorrect. As written: the grade
    ``grade`` writes (unreadable: ambiguous). Scored, CRAG's way: P(yes) of ``relevance``'s yes/no decision, correct
    at or above the ``upper`` threshold, incorrect below ``lower``; fused: that probability fused with the passage's
    retrieval score first, and not asked when a fit gave the LM no weight. The relevance oracle grades a gold
    passage correct and any other incorrect, without a call."""

    def __init__(self, grade: dspy.Predict, relevance: dspy.Predict | None, chars: int,
                 mode: str | DecisionMode = "generate", roles: frozenset[str] = frozenset()):
        super().__init__("passage", mode, roles, "relevance", **THRESHOLDS)
        self.grade, self.relevance, self.chars = grade, relevance, chars

    def __call__(self, question: str, passages: list[Passage], grades: dict[str, str]) -> int:
        """Grade ``passages`` into ``grades``; returns the number of unreadable grades (graded ambiguous). Inside a
        trace one ``GradeGate`` span, its outputs the grades, ``kept`` the ids graded correct or ambiguous and
        ``dropped`` those graded incorrect."""
        with self.span(type(self).__name__) as span:
            if self.from_gold:
                grades.update((p.id, "correct" if self.gold(p) else "incorrect") for p in passages)
                failures = 0
            else:
                failures = getattr(self, self.path)(question, passages, grades)
            if span is not None:
                span.set_outputs({p.id: grades[p.id] for p in passages})
                sorted_passages(span, passages, {p.id for p in passages if grades[p.id] != "incorrect"})
            return failures

    def written(self, question: str, passages: list[Passage], grades: dict[str, str]) -> int:
        failures = 0
        for p in passages:
            out = lenient(self.grade, question=question, passage=p.format(self.chars))
            failures += out is None or out.grade not in GRADES
            grades[p.id] = out.grade if out is not None and out.grade in GRADES else "ambiguous"
        return failures

    def scored(self, question: str, passages: list[Passage], grades: dict[str, str]) -> int:
        probs, failures = self.probabilities(question, passages)
        grades.update((p.id, graded(s, self.thresholds)) for p, s in zip(passages, probs))
        return failures

    def fused(self, question: str, passages: list[Passage], grades: dict[str, str]) -> int:
        probs, failures = self.probabilities(question, passages) if self.reads_lm else ([], 0)
        fused = self.fuse(probs or [0.5] * len(passages), relative([p.score for p in passages]))
        grades.update((p.id, graded(s, self.thresholds)) for p, s in zip(passages, fused))
        return failures

    def probabilities(self, question: str, passages: list[Passage]) -> tuple[list[float], int]:
        """P(yes) per passage (0.5 when unreadable, counted), each recorded with its relative retrieval score."""
        probs, failures = [], 0
        for p, score in zip(passages, relative([p.score for p in passages])):
            yes = decide(self.relevance, {"relevant": YES_NO}, question=question,
                         passage=p.format(self.chars)).prob("relevant", "yes")
            failures += yes is None
            probs.append(0.5 if yes is None else yes)
            record(self, probs[-1], score, [p])
        return probs, failures


class CRAG(dspy.Module):
    """Grade the top-k, then keep, refine or re-search with a rewritten query; at most ``loops`` re-searches.

    ``lang`` (the question's language, passed by multilingual datasets) asks the writer for the answer in it.

    Args:
        search: the retriever.
        k: passages per search.
        loops: re-searches at most.
        max_chars: each passage shown to the LM cut after this many characters (None: whole).
        max_query_words: a rewritten query's words at most.
        stuck_jaccard: a rewritten query this close (content-word Jaccard) to an earlier one is stuck.
        decisions: the decision mode of the grade gate (``--decisions``).
        oracle: the oracle roles (``--oracle``; see the module).
        mc: how the writer picks multiple-choice letters.
    """

    ROLES = {"grade": "critic", "grade_relevance": "critic", "rewrite": "planner"}
    ORACLE_ROLES = ("relevance", "query", "writer")

    def __init__(self, search: Retriever, *, k: int = 3, loops: int = 3, max_chars: int | None = None,
                 max_query_words: int = 12, stuck_jaccard: float = 0.7, decisions: str = "generate",
                 oracle: str = "", mc: MCScoring | None = None):
        super().__init__()
        self.oracle = check_roles(oracle, self.ORACLE_ROLES, "crag")
        self.grade_relevance = DecisionMode(decisions).predictor(JudgeRelevance)  # scored grades only
        grade = dspy.Predict(GradeRetrieval)
        self.grade_gate = GradeGate(grade, self.grade_relevance, max_chars, decisions, self.oracle)
        self.search, self.k, self.loops, self.max_chars = search, k, loops, max_chars
        self.max_query_words, self.stuck_jaccard = max_query_words, stuck_jaccard
        self.grade = grade
        self.rewrite = dspy.Predict(RewriteQuery)
        self.rewrite_step = RoleStep(self.rewrite, "query", self.oracle,
                                     demo=lambda query: {"query": clip(query, max_query_words)})
        self.writer = EvidenceWriter(max_chars, mc=mc)

    def resting(self) -> str | None:
        """What CRAG runs as while its grade gate decides whatever the probability (see
        :func:`decoding.decisions.rest_note`): at rest every passage is graded correct."""
        return rest_note("grader", self.grade_gate, "one retrieval, every passage kept")

    def forward(self, question: str, options: dict[str, str] | None = None,
                lang: str | None = None) -> dspy.Prediction:
        queries, actions, failures, stop = [question], [], 0, "loop_budget"
        passages = self.search.search(question, self.k)
        fetched, grades = {p.id for p in passages}, {}
        for loop in range(self.loops + 1):
            failures += self.grade_gate(question, [p for p in passages if p.id not in grades], grades)
            actions.append(action([grades[p.id] for p in passages]))
            if actions[-1] == "correct":
                stop = "correct"
                break
            if loop == self.loops:
                break
            reply = self.rewrite_step({"question": question, "earlier_queries": list(queries)}, passages)
            failures += reply.failures
            query = clip(reply.value or "", self.max_query_words)
            if repeats(query, queries, self.stuck_jaccard):
                stop = "stuck"
                break
            queries.append(query)
            kept = [p for p in passages if grades[p.id] != "incorrect"] if actions[-1] == "ambiguous" else []
            kept = kept[:self.k - max(1, self.k // 2)]  # leave room for new evidence (k=1: all of it)
            new = search_excluding(self.search, query, self.k - len(kept), fetched)
            fetched.update(p.id for p in new)
            passages = kept + new
        if actions[-1] == "correct":  # the relevant knowledge only
            passages = [p for p in passages if grades[p.id] != "incorrect"]
        passages = sorted(passages, key=lambda p: GRADES.index(grades.get(p.id, "ambiguous")))
        terms = set().union(*map(content_words, queries))
        out = self.writer(question=question, passages=[refine(p, terms, self.max_chars) for p in passages],
                          options=options, lang=lang)
        trace = {"iterations": len(queries) - 1, "queries": queries, "stop_reason": stop, "actions": actions,
                 "grades": [grades.get(p.id) for p in passages], "parse_failures": failures,
                 **({"grader_decided": decided} if (decided := self.grade_gate.decided) else {})}
        return dspy.Prediction(answer=out.answer, passages=passages, trace=trace, queries=queries,
                               loops_used=len(queries) - 1, stop_reason=stop, citations=out.get("citations", []))
