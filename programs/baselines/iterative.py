"""Iterative retrieve-and-reason baselines for PAR2-RAG, with the same step budget ``loops``:

- ``IRCoT`` (Trivedi et al., 2023): retrieve for the question, then alternate one chain-of-thought sentence with a
  search for that sentence, until a sentence states the answer or ``loops`` sentences; PAR2's reader (its
  chain-of-thought writer over up to ``context_tokens`` of passage text) then answers from the collected paragraphs.
- ``ReAct``: DSPy's ``dspy.ReAct`` agent with one search tool and at most ``loops`` steps.

Both return ``retrieved``: every passage retrieved, in order of first retrieval (what retrieval is scored on). Their
budgets default to PAR2's (``programs.registry``: H = ``loops``, ``context_tokens``), so the comparison differs in the
method only. Their final reader, and FLARE's, reads by one rule (:func:`reader_context`): everything found, the
newest search's hits first, cut to ``context_tokens``.

Oracle roles (``programs.shared.oracle``; FLARE's sentence step takes the same, :class:`OracleThought`): ``controller``
-- the step that states the answer ("So the answer is ...") and so ends the loop comes once every gold passage has
been retrieved; ``query`` -- every other step, and so its search, is the oracle query from what was retrieved;
``writer`` -- the reader is the perfect reader. ReAct under ``controller`` runs an oracle tool chooser instead of
``dspy.ReAct``: search (the oracle query under ``query``, else the question) until every gold passage has been
found or the step budget is spent, then finish; under ``query`` alone each agent search is the oracle query
whatever the agent wrote. ``all``: no call.
"""
from __future__ import annotations

import re
from contextvars import ContextVar
from typing import Annotated, Any

import dspy

from decoding.choice import MCScoring
from programs.shared.evidence import lenient, within_budget
from programs.shared.oracle import check_roles
from programs.shared.steps import Role
from programs.shared.text import content_words, unechoed
from programs.shared.writer import Writer
from retrieval.corpus import Passage, dedup
from retrieval.retriever import Retriever
from runtime.caps import Cap, Text
from signatures.reasoning import SEARCH_TOOL, AnswerWithSearch, NextThought

ANSWERED = re.compile(r"\banswer is\b", re.I)
#: The sentence step's oracle once every gold passage has been retrieved (it states that the answer is at hand).
ORACLE_ANSWERED = "So the answer is in the passages retrieved."
#: The oracle roles of a retrieve-and-reason step program (IRCoT, FLARE, ReAct).
STEP_ROLES = ("controller", "query", "writer")


class OracleThought:
    """A reasoning step's sentence under the oracle ``roles``, no call: :data:`ORACLE_ANSWERED` once the controller
    oracle says every gold passage is among those retrieved, else the query oracle's next query; None when the roles
    leave the step to the LM."""

    def __init__(self, roles: frozenset[str]):
        self.stop, self.query = Role("controller", roles), Role("query", roles)

    def __call__(self, retrieved: list[Passage]) -> str | None:
        return ORACLE_ANSWERED if self.stop.gold(retrieved) else self.query.gold(retrieved)


#: A period after one of these ends an abbreviation, not a sentence ("U.S. President", "Dr. Berg", "St. Louis").
ABBREVIATION = re.compile(r"(?:\b[A-Za-z]|\b(?:Mr|Mrs|Ms|Dr|Prof|St|Mt|Ft|Jr|Sr|Gen|Col|Lt|Capt|Sgt|Rev|Gov|Sen|Rep|"
                          r"Pres|Inc|Ltd|Co|Corp|No|vs|approx|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec))\.$")


def first_sentence(text: str) -> str:
    """The first sentence of ``text`` on one line (a model asked for one sentence may write more); a period after
    an initial or a common abbreviation does not end it. Echoed format text is not part of it (:func:`unechoed`)."""
    text = " ".join(unechoed(text).split())
    for end in re.finditer(r"[.!?](?=\s|$)", text):
        head = text[:end.end()]
        if end.end() == len(text) or not (end.group() == "." and ABBREVIATION.search(head)):
            return head.strip()
    return text.strip()


def newest_first(latest: list[Passage], collected: list[Passage], limit: int | None = None) -> list[Passage]:
    """IRCoT's ranking of what it holds: the newest hits first, then the earlier ones (at most ``limit``)."""
    return dedup([*latest, *collected])[:limit]


def reader_context(latest: list[Passage], collected: list[Passage], budget: int,
                   max_chars: int | None) -> list[Passage]:
    """What the final reader of a step program (IRCoT, ReAct, FLARE) reads: everything ``collected``, the newest
    search's hits (``latest``) first (:func:`newest_first`), cut to ``budget`` estimated tokens of passage text by
    PAR2's rule (:func:`~programs.shared.evidence.within_budget`): no passage is dropped for being found late."""
    return within_budget(newest_first(latest, collected), budget, max_chars)


class IRCoT(dspy.Module):
    """Interleaved retrieval and chain of thought: each new sentence is the next query (top ``k``); a thought step
    sees at most ``max_passages`` passages, newest first. The reader is PAR2's: its chain-of-thought writer over
    everything collected in the same order (the newest search's hits, then the rest in order of first retrieval), cut
    to ``context_tokens`` estimated tokens of passage text from the end; ``lang`` goes to it.

    Args:
        search: the retriever.
        k: passages per search.
        loops: thought steps at most.
        max_passages: passages a thought step sees at most, newest first.
        context_tokens: estimated tokens of passage text the reader sees (:func:`reader_context`).
        max_chars: each passage shown to the LM cut after this many characters (None: whole).
        oracle: the oracle roles (``--oracle``; see the module).
        mc: how the writer picks multiple-choice letters.
    """

    ORACLE_ROLES = STEP_ROLES

    def __init__(self, search: Retriever, *, k: int = 5, loops: int = 5, max_passages: int = 8,
                 context_tokens: int = 3000, max_chars: int | None = None, oracle: str = "",
                 mc: MCScoring | None = None):
        super().__init__()
        self.oracle = check_roles(oracle, self.ORACLE_ROLES, "ircot")
        self.search, self.k, self.loops = search, k, loops
        self.max_passages, self.context_tokens, self.max_chars = max_passages, context_tokens, max_chars
        self.step = dspy.Predict(NextThought)
        self.oracle_thought = OracleThought(self.oracle)
        self.writer = Writer(use_passages=True, reasoning=True, max_chars=max_chars, mc=mc)  # PAR2's writer

    def forward(self, question: str, options: dict[str, str] | None = None,
                lang: str | None = None) -> dspy.Prediction:
        latest = self.search.search(question, self.k)
        collected, queries, thoughts = list(latest), [question], []
        stop, failures = "loop_budget", 0
        for t in range(self.loops):
            shown = newest_first(latest, collected, self.max_passages)
            if (sentence := self.oracle_thought(collected)) is None:
                out = lenient(self.step, passages=[p.format(self.max_chars) for p in shown], question=question,
                              thoughts=" ".join(thoughts))
                sentence = first_sentence(out.next_sentence) if out is not None else ""
            if not content_words(sentence):
                failures += 1
                stop = "unusable_thought"
                break
            thoughts.append(sentence)
            if ANSWERED.search(sentence):
                stop = "answered"
                break
            if t + 1 < self.loops:
                latest = self.search.search(sentence, self.k)
                collected = dedup([*collected, *latest])
                queries.append(sentence)
        shown = reader_context(latest, collected, self.context_tokens, self.max_chars)
        answer = self.writer(question=question, passages=shown, options=options, lang=lang).answer
        trace = {"iterations": len(thoughts), "queries": queries, "stop_reason": stop, "thoughts": thoughts,
                 "fallbacks": {"thought": failures}, "parse_failures": failures,
                 "context_tokens": self.context_tokens, "context_size": len(collected), "shown": len(shown)}
        return dspy.Prediction(answer=answer, passages=dedup([*shown, *collected]), retrieved=collected, trace=trace)


_CALLS: ContextVar[list | None] = ContextVar("react_search_calls", default=None)


class SearchTool:
    """The agent's search tool: top ``k`` passages as text; each call's query and hits are recorded for the
    running question (a context variable, so concurrent questions keep their own record)."""

    def __init__(self, search: Retriever, k: int, max_chars: int, roles: frozenset[str] = frozenset()):
        self.search, self.k, self.max_chars, self.query = search, k, max_chars, Role("query", roles)

    def __call__(self, query: str) -> str:
        calls = _CALLS.get()
        query = self.query.over(lambda: query, [p for _, hits in calls or () for p in hits])  # whatever the agent wrote
        query = unechoed(str(query))
        hits = self.search.search(query, self.k)
        if calls is not None:
            calls.append((query, hits))
        return "\n".join(p.format(self.max_chars) for p in hits) or "no results"

    def __deepcopy__(self, memo):
        return self  # stateless apart from the shared retriever


def tool_errors(trajectory: dict) -> int:
    """Agent steps whose tool call failed (DSPy writes the error as the observation): on the 0.5B model these are
    arguments that do not match the tool's schema (it copies the schema itself), so no search ran."""
    return sum(key.startswith("observation_") and str(value).startswith("Execution error in ")
               for key, value in trajectory.items())


class ReAct(dspy.Module):
    """``dspy.ReAct`` with the search tool, at most ``loops`` agent steps (finishing is a step). When the agent's
    final answer cannot be parsed (or on multiple choice, or under the ``controller`` or ``writer`` oracle), the shared
    writer answers from the passages found, by IRCoT's reader rule (:func:`reader_context`: the last search's hits
    first, within ``context_tokens``), told ``lang`` (the agent's own answer is not: DSPy's ReAct signature has no
    language field).

    Args:
        search: the retriever.
        k: passages per search.
        loops: agent steps at most (finishing is one).
        context_tokens: estimated tokens of passage text the shared writer sees (:func:`reader_context`).
        max_chars: each passage shown to the LM cut after this many characters (None: whole).
        oracle: the oracle roles (``--oracle``; see the module).
        mc: how the writer picks multiple-choice letters.
    """

    ORACLE_ROLES = STEP_ROLES

    def __init__(self, search: Retriever, *, k: int = 5, loops: int = 5, context_tokens: int = 3000,
                 max_chars: int | None = None, oracle: str = "", mc: MCScoring | None = None):
        super().__init__()
        self.oracle = check_roles(oracle, self.ORACLE_ROLES, "react")
        self.loops, self.context_tokens, self.max_chars = loops, context_tokens, max_chars
        self.tool = SearchTool(search, k, max_chars, self.oracle)
        self.stop, self.reader = Role("controller", self.oracle), Role("writer", self.oracle)
        tool = dspy.Tool(self.tool, name="search", desc=SEARCH_TOOL)
        self.agent = dspy.ReAct(AnswerWithSearch, tools=[tool], max_iters=loops)
        step = self.agent.react  # DSPy's own step signature: its free-text fields capped like ours (runtime.caps)
        step.signature = (step.signature.with_updated_fields("next_thought", type_=Text[96])
                          .with_updated_fields("next_tool_args", type_=Annotated[dict[str, Any], Cap(48)]))
        self.writer = Writer(use_passages=True, max_chars=max_chars, mc=mc)

    def forward(self, question: str, options: dict[str, str] | None = None,
                lang: str | None = None) -> dspy.Prediction:
        calls: list = []
        token = _CALLS.set(calls)
        try:
            out = self.oracle_agent(question) if self.stop.from_gold else lenient(self.agent, question=question)
        finally:
            _CALLS.reset(token)
        passages = dedup([p for _, hits in calls for p in hits])
        fallbacks = {"answer": int(out is None)}
        tools = [v for key, v in out.trajectory.items() if key.startswith("tool_name_")] if out is not None else []
        shown = []  # what the writer reads (nothing when the agent's own answer stands)
        if options or out is None or self.stop.from_gold or self.reader.from_gold:  # multiple choice, the oracle agent
            shown = reader_context(calls[-1][1] if calls else [], passages, self.context_tokens, self.max_chars)
            answer = self.writer(question=question, passages=shown, options=options, lang=lang).answer
        else:
            answer = (out.answer or "").strip()
        stop = ("agent_unparsed" if out is None else "finish" if tools and tools[-1] == "finish" else
                "loop_budget" if len(tools) >= self.loops else "invalid_step")
        errors = tool_errors(out.trajectory) if out is not None else 0
        trace = {"iterations": len(calls), "queries": [q for q, _ in calls], "stop_reason": stop, "tools": tools,
                 "tool_errors": errors, "fallbacks": fallbacks,
                 "parse_failures": fallbacks["answer"] + (stop == "invalid_step") + errors,
                 "context_tokens": self.context_tokens, "context_size": len(passages), "shown": len(shown)}
        return dspy.Prediction(answer=answer, passages=passages, retrieved=passages, trace=trace)

    def oracle_agent(self, question: str) -> dspy.Prediction:
        """The agent's tool choice under the controller oracle, no call: search (the tool's query: the question, or
        the query oracle's) until every gold passage has been found or ``loops`` - 1 searches are spent, then
        finish; the writer answers from what was found."""
        trajectory = {}
        for i in range(self.loops):
            found = [p for _, hits in _CALLS.get() for p in hits]
            if self.stop.gold(found) or i == self.loops - 1:
                trajectory |= {f"tool_name_{i}": "finish", f"observation_{i}": "Completed."}
                break
            trajectory |= {f"tool_name_{i}": "search", f"observation_{i}": self.tool(question)}
        return dspy.Prediction(answer="", trajectory=trajectory)

