"""PAR2-RAG (Algorithm 1 of the paper): retrieve broadly before committing narrowly.

Coverage Anchor: a planner writes ``subqueries`` (m) searches, each with a reason; each is run, reranked to its best
``k`` and deduplicated, and the hits are merged, round robin, into the anchor context.
Iterative Chain: for t = 1..``loops`` (H) the writer writes a step response r_t (its reasoning and a short answer)
from the question and the whole context C_t (up to ``context_tokens``); the evidence-sufficiency controller (ESC)
judges r_t over the same context and says STOP, or CONTINUE with one reformulated query whose top ``k`` extend C_t
(C_{t+1} = C_t ∪ E_{t+1}). The answer is the last step's short answer. As in Algorithm 1 the controller is asked
at t = H too, and a CONTINUE there retrieves once more: C_{H+1} is held (scored as retrieved), not read. The
prediction's ``retrieved`` is all of C_t in order of first retrieval (what retrieval is scored on); ``passages`` is
what the writer last saw.

Ablations: ``anchor=False`` (Iterative Chain only: C_1 is the question's own top ``k``) and ``chain=False``
(Coverage Anchor only: one write over the anchor). Parse failures never crash: an unusable plan is asked for once
more, then the question itself is the only sub-query; an unusable ESC reply is asked for once more, then means
STOP. Both are counted in the trace. The controller's decision is ``esc_gate`` (``programs.shared.gates``): as
written, or P(STOP) against its threshold (``decisions``), a step records ``p_stop`` and how a fitted gate decided
(``decided``); a gate at rest STOPs without a call (stop reason ``esc_at_rest``: PAR2 runs as ``par2_anchor``,
:meth:`PAR2.resting`). With ``oracle="controller"`` the controller says STOP exactly when every gold passage is in
C_t, without a call; otherwise it is asked only for the query. With ``oracle="query"`` the plan is the one oracle
query from nothing held and every CONTINUE searches the oracle query from C_t (``programs.shared.oracle``); with
``writer`` each step response is the perfect reader's answer over the context shown. ``all``: no call.

Reranking: every search goes through the retriever, which applies its own second stage where it has one.
``search_rerank`` (a :mod:`retrieval.rerank` name, default ``none``) adds one in the program: each search then fetches
``search_depth`` candidates and the reranker keeps the best ``k`` for that search. ``embed`` scores by cosine under the
retriever's own embedder, so over the dense retriever it keeps the retriever's order.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from itertools import chain as flatten, zip_longest

import dspy

from decoding.choice import MCScoring
from decoding.decisions import REST, rest_note
from programs.shared.evidence import within_budget
from programs.shared.gates import LabelGate
from programs.shared.oracle import check_roles, taught
from programs.shared.steps import RoleStep
from programs.shared.text import APOSTROPHES, negated, normalize, query_text
from programs.shared.writer import Writer
from retrieval.corpus import Passage, dedup
from retrieval.rerank import get_reranker
from retrieval.retriever import Retriever
from signatures.esc import DecideNextStep
from signatures.planner import PlanSearches

BULLET = re.compile(r"^(?:[-*\u2022]|\d+[.):]|(?:search|query)\s*\d*\s*:)\s*", re.I)
KEYED = re.compile(r'^"?([a-z_ ]{1,20})"?\s*:\s*(.*)$', re.I)  # a JSON/YAML-style 'key: value' line
QUERY_KEYS = frozenset({"query", "search", "search terms", "search_terms", "terms"})
PREAMBLE = re.compile(r"^(?:here (?:is|are)|sure|okay|ok|the following|below (?:is|are)|i (?:will|would))\b", re.I)
FORMAT_ECHO = frozenset({"search terms", "search terms reason", "search terms why it is needed"})
#: An echoed field header ("[[ ## decision ## ]]") or the echoed choice ("STOP or CONTINUE"): not a decision.
ECHOED = re.compile(r"\[\[\s*##.*?##\s*\]\]|\b(?:STOP|CONTINUE)\s*(?:or|/|\|)\s*(?:STOP|CONTINUE)\b", re.I)
ANSWERED_NO = re.compile(r"\s*\?\s*(?:no|nope|not)\b", re.I)  # "Continue? No."


@dataclass(frozen=True)
class SubQuery:
    query: str
    reason: str = ""


def plan_lines(text: str, m: int) -> list[SubQuery] | None:
    """The first ``m`` distinct searches of the planner's 'search terms | reason' lines (bullets, numbering and
    quotes stripped; a line without '|' is all query); None when no line has a content word. Preambles, headings
    (a line ending in ':'), the echoed format line and JSON keys other than a query are not searches."""
    plan: dict[str, SubQuery] = {}
    for line in (text or "").translate(APOSTROPHES).splitlines():
        if re.fullmatch(r"'{3}\w*", line.strip()):
            continue  # a code fence (its backticks read as apostrophes)
        line = BULLET.sub("", line.strip().strip('[]{},"\'`').strip())
        if keyed := KEYED.match(line):
            if keyed.group(1).strip().lower() not in QUERY_KEYS:
                continue  # "reason": ..., "searches": [ ...
            value = keyed.group(2).strip()
            quoted = re.match(r'"([^"]*)"', value)  # {"query": "...", "reason": "..."} on one line
            line = quoted.group(1) if quoted else value.strip('[]{},"\'`')
        if line.endswith(":") or PREAMBLE.match(line):
            continue
        query, _, reason = line.partition("|")
        query = query.strip().strip('"\'').strip()
        if query_text(query) and normalize(query) not in plan and normalize(query) not in FORMAT_ECHO:
            plan[normalize(query)] = SubQuery(query, reason.strip())
    return list(plan.values())[:m] or None


def esc_decision(text: str) -> str | None:
    """STOP or CONTINUE when the reply means exactly one of them (any case), else None. A word negated in its clause
    (:func:`~programs.shared.text.negated`: "It is not necessary to continue", "We cannot continue", "Dont continue") or
    answered "no" ("Continue? No.") means the other; echoed headers and the echoed choice are not read. The
    controller's one decision."""
    text = ECHOED.sub(" ", (text or "").translate(APOSTROPHES))
    said = set()
    for match in re.finditer(r"\b(STOP|CONTINUE)\b", text, re.I):
        flip = negated(text[:match.start()]) != bool(ANSWERED_NO.match(text, match.end()))
        said.add({"STOP": "CONTINUE", "CONTINUE": "STOP"}[match.group(1).upper()] if flip else match.group(1).upper())
    return said.pop() if len(said) == 1 else None


def controller_reply(out: dspy.Prediction, action: str | None = None) -> str | None:
    """The controller's action (``action`` when given, else as written: :func:`esc_decision`), None when it is
    unreadable or asks to CONTINUE with nothing to search for."""
    action = action or esc_decision(out.decision)
    return None if action == "CONTINUE" and not query_text(out.get("next_query")) else action


def step_response(out: dspy.Prediction) -> str:
    """r_t as the controller reads it: the writer's reasoning, then its answer."""
    reasoning = " ".join((out.get("reasoning") or "").split())
    return f"{reasoning} So the answer is: {out.answer}" if reasoning else out.answer


def interleave(lists: list[list[Passage]]) -> list[Passage]:
    """Round robin over ranked lists (every list's best first), each passage once."""
    return dedup([p for p in flatten.from_iterable(zip_longest(*lists)) if p is not None])


@dataclass
class _Run:
    """One question's bookkeeping; ``trace()`` is what the Prediction reports."""

    searches: list[list[Passage]] = field(default_factory=list)  # every search's ranked hits, in search order
    plan: list[SubQuery] = field(default_factory=list)
    queries: list[str] = field(default_factory=list)
    steps: list[dict] = field(default_factory=list)
    fallbacks: dict = field(default_factory=lambda: {"plan": 0, "esc": 0})
    parse_failures: int = 0

    @property
    def context(self) -> list[Passage]:
        """C_t, deduplicated, in order of first retrieval (the anchor's searches round robin, then each chain
        search's hits)."""
        anchor = len(self.plan) or 1
        return dedup([*interleave(self.searches[:anchor]), *flatten.from_iterable(self.searches[anchor:])])

    def extend(self, hits: list[list[Passage]]) -> int:
        """C_{t+1} = C_t ∪ hits; returns how many passages were new."""
        before = len(self.context)
        self.searches += hits
        return len(self.context) - before

    def ranked(self) -> list[Passage]:
        """The whole C_t ordered by rank within its search, round robin over all searches (every search's best
        first): cutting its tail drops the lowest-ranked passages of every search, never one search wholesale."""
        return interleave(self.searches)

    def trace(self, stop_reason: str, budget: int) -> dict:
        return {"iterations": len(self.steps), "queries": list(self.queries), "stop_reason": stop_reason,
                "plan": [asdict(s) for s in self.plan], "steps": self.steps, "fallbacks": dict(self.fallbacks),
                "parse_failures": self.parse_failures, "context_tokens": budget, "context_size": len(self.context),
                "continued": any(s.get("action") == "CONTINUE" for s in self.steps),
                "at_rest": sum(s.get("decided") == REST for s in self.steps)}


class PAR2(dspy.Module):
    """PAR2-RAG: a Coverage Anchor of planned sub-queries, then an Iterative Chain of draft and controller (ESC)
    steps (the paper's defaults: m = H = k = 5). Each step response r_t is the writer's reasoning with its answer,
    which the ESC judges; the short answer is what is scored. ``lang`` (the question's language, passed by
    multilingual datasets) asks the writer for the answer in it, as ``rag`` does.

    Args:
        search: the retriever.
        k: passages per search after reranking.
        loops: H, the chain's steps at most.
        subqueries: m, the sub-queries the planner writes.
        search_rerank, search_depth: the program's own reranker over each search's ``search_depth`` candidates
            (``none``: the top ``k`` as retrieved).
        context_tokens: the estimated tokens of passage text the writer and the ESC see of C_t (see
            :meth:`_Run.ranked` for what a cut drops).
        max_chars: each passage shown to the LM cut after this many characters (None: whole).
        anchor, chain: run the Coverage Anchor and the Iterative Chain (the ablations leave one out).
        decisions: the decision mode of the controller's gate (``--decisions``).
        oracle: the oracle roles (``--oracle``; see the module).
        mc: how the writer picks multiple-choice letters.
    """

    ROLES = {"planner": "planner", "esc": "critic"}
    ORACLE_ROLES = ("controller", "query", "writer")

    def __init__(self, search: Retriever, *, k: int = 5, loops: int = 5, subqueries: int = 5,
                 search_rerank: str = "none", search_depth: int = 20, context_tokens: int = 3000,
                 max_chars: int | None = None, anchor: bool = True, chain: bool = True, decisions: str = "generate",
                 oracle: str = "", mc: MCScoring | None = None):
        super().__init__()
        self.oracle = check_roles(oracle, self.oracle_roles(chain=chain), "par2" if chain else "par2_anchor")
        if loops < 1 or subqueries < 1 or k < 1 or context_tokens < 1:
            raise ValueError(f"PAR2 needs loops, subqueries, k and context_tokens >= 1 (got {loops}, {subqueries}, "
                             f"{k}, {context_tokens})")
        self.search, self.k, self.loops, self.subqueries = search, k, loops, subqueries
        self.depth = max(search_depth, k) if search_rerank != "none" else k
        self.context_tokens, self.max_chars = context_tokens, max_chars
        self.use_anchor, self.use_chain = anchor, chain
        self.reranker = get_reranker(search_rerank, search)
        self.planner = dspy.Predict(PlanSearches)
        self.plan_step = RoleStep(self.planner, "query", self.oracle, field="searches", tries=2,
                                  read=lambda out: plan_lines(out.searches, subqueries),
                                  given=lambda query: [SubQuery(query, "oracle query")],
                                  demo=lambda plan: {"searches": plan[0].query})  # the oracle's plan: its one query
        self.esc = dspy.Predict(DecideNextStep)
        self.next_query = RoleStep(self.esc, "query", self.oracle, field="next_query",
                                   demo=lambda query: {"decision": "CONTINUE", "next_query": query})
        self.esc_gate = LabelGate(self.esc, "decision", ("STOP", "CONTINUE"), kind="correct", mode=decisions,
                                  roles=self.oracle, role="controller", parse=controller_reply, tries=2)
        self.writer = Writer(use_passages=True, reasoning=True, max_chars=max_chars, mc=mc)

    def resting(self) -> str | None:
        """What PAR2 runs as while its controller's gate decides whatever the probability (see
        :func:`decoding.decisions.rest_note`): at rest it STOPs after the first write."""
        if not self.use_chain or self.loops < 2:
            return None  # no controller decision to rest
        return rest_note("controller", self.esc_gate,
                         "par2_anchor" if self.use_anchor else "its first write over the question's top k")

    @classmethod
    def oracle_roles(cls, chain: bool = True, **_) -> tuple[str, ...]:
        """The oracle roles of a PAR2 variant: without the chain there is no controller."""
        return cls.ORACLE_ROLES if chain else ("query", "writer")

    def forward(self, question: str, options: dict[str, str] | None = None,
                lang: str | None = None) -> dspy.Prediction:
        run = _Run()
        if self.use_anchor:                                                     # Stage 1: Coverage Anchor
            run.plan = self._plan(question, run)                                # {q_i} <- P(q)
            run.extend(self._retrieve([s.query for s in run.plan], run))       # C_anchor
        else:
            run.extend(self._retrieve([question], run))                        # chain only: C_1 = R(q)
        stop, answer = "loop_budget", ""
        hops = self.loops if self.use_chain else 1
        for t in range(1, hops + 1):                                            # Stage 2: Iterative Chain
            shown = within_budget(run.ranked(), self.context_tokens, self.max_chars)
            out = self.writer(question=question, passages=shown, options=options, lang=lang)  # r_t <- G(q, C_t)
            answer, response = out.answer, step_response(out)
            step = {"t": t, "answer": answer, "response": response, "context": len(run.context),
                    "shown": len(shown)}
            run.steps.append(step)
            if not self.use_chain:
                stop = "single_write"
                break
            action, query = self._decide(question, shown, response, answer, run)  # (a, q*_{t+1}) <- E(q, r_t, C_t)
            step.update(action=action, query=query)
            if action == "STOP":
                stop = "esc_at_rest" if step.get("decided") == REST else "esc_stop"
                break
            if not run.extend(self._retrieve([query], run)):                   # C_{t+1} <- C_t ∪ R(q*_{t+1})
                stop = "no_new_evidence"  # same question and context would give the same draft again
                break
            # at t = H the loop ends here, as Algorithm 1's: a <- r_H, and C_{H+1} is retrieved, not read
        return dspy.Prediction(answer=answer, passages=shown, retrieved=run.context,
                               trace=run.trace(stop, self.context_tokens))

    def _plan(self, question: str, run: _Run) -> list[SubQuery]:
        """The planner's sub-queries (the query oracle's one query from nothing held), asked twice at most."""
        plan, failed, _ = self.plan_step({"question": question, "count": self.subqueries})
        run.parse_failures += failed
        if plan is None:
            run.fallbacks["plan"] += 1
            return [SubQuery(question, "fallback: the plan could not be read")]
        return plan

    def _retrieve(self, queries: list[str], run: _Run) -> list[list[Passage]]:
        """Top ``depth`` per query (one batch when the retriever has ``search_many``), reranked to the best ``k``
        (``depth`` is ``k`` without a program-level reranker)."""
        run.queries += queries
        many = getattr(self.search, "search_many", None)
        hits = many(queries, self.depth) if many else [self.search.search(q, self.depth) for q in queries]
        return [self.reranker.rerank(q, h, self.k) for q, h in zip(queries, hits)]

    def _decide(self, question: str, shown: list[Passage], response: str, answer: str,
                run: _Run) -> tuple[str, str]:
        """The controller's (action, query) (:attr:`esc_gate`); an unreadable reply means STOP. Under the controller
        oracle a CONTINUE asks the controller only for its query; a CONTINUE's query is the query step's (the query
        oracle's from C_t)."""
        inputs = {"question": question, "draft_answer": response, "passages": [p.format(self.max_chars) for p in shown]}
        ruling = self.esc_gate(inputs, gold=run.context, answer=answer)
        if ruling.oracle and ruling.label == "STOP":
            taught(self.esc, inputs, decision="STOP", next_query="")
            return "STOP", ""
        if ruling.oracle:  # CONTINUE: the query oracle's, or the controller's reply to a CONTINUE
            reply = self.next_query(inputs, run.context, ask=lambda: self.esc_gate.written(inputs, label="CONTINUE"))
            if reply.oracle:
                return "CONTINUE", reply.value
            ruling = reply.value
        run.steps[-1].update(ruling.trace("p_stop"))
        run.parse_failures += ruling.failures
        if ruling.label is None:
            run.fallbacks["esc"] += 1
            return "STOP", ""
        query = " ".join(query_text(ruling.output.get("next_query")).split())
        return ruling.label, self.next_query.over(lambda: query, run.context) if ruling.label == "CONTINUE" else query
