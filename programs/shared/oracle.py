"""Oracle roles (``--oracle ROLE[,ROLE]``): a role's decisions replaced by the gold labels of the question being
answered -- the upper bound each role leaves on the table, and a check of each method's loop that no model weakness
can hide. Oracle rows are bounds, never results.

Decision roles (:data:`DECISION_ROLES`): ``relevance`` (a passage is a gold passage), ``sufficiency`` (the passages
held include every gold passage), ``controller`` (STOP once every gold passage has been retrieved), ``verdict`` (the
answer judged is right by the task metric), ``planner`` (the corpora holding a gold passage not yet held -- a gold
paragraph id names its corpus -- else the corpus of the culture the question is about), ``gap`` (the missing gold
titles the question or a held passage names). Gold passages are paragraph ids where the data has
them (MuSiQue's ``gold_ids``, XRAG's supporting article), else gold titles. A span question without gold passages
(BLEnD, CLIcK, open QA: answers only) is labelled by the oracle writer's span rule (:meth:`Gold.supports`):
``relevance``, a passage holds a gold answer (multiple choice: the gold option's text); ``sufficiency`` and
``controller``, one of the passages does. On BLEnD that is a loose bound: a question's own survey documents are
left out, so a passage holds an answer word by sharing it with another question's answers.

Generative roles (:data:`GENERATIVE_ROLES`) write what a perfect reader of the program's own prompt would, never
reading a passage the program has not retrieved or held (the revealed-only rule): ``query`` (:meth:`Gold.query`:
every generated query -- sub-questions, rewrites, micro-queries, next-hop and search-step queries), ``plan``
(:meth:`Gold.plan`: RAG-Critic's correction, a supplementary search or a regeneration), ``writer``
(:meth:`Gold.writer`: the gold answer when the context shown supports it, else :data:`~programs.shared.text.IDK`;
wired once, in the shared :class:`~programs.shared.writer.Writer`). ``all`` is every role a program has.

LM calls that no role names are mapped to the closest one, each in its program's docstring: SEAL's fact extraction to
``relevance`` (gold-first ranking, an empty ledger), Self-RAG's critique and MetaRAG's monitor and internal and
consistency checks to ``verdict``, MetaRAG's external check to ``sufficiency``, the IRCoT/FLARE step that states the
answer and ReAct's tool choice to ``controller``, translation (t_rag) to ``query``, and the calls that only edit
what a writer reads (cross_rag's passage translation, RAG-Critic's RefineDoc, Self-Refine's feedback and revision)
to ``writer``. Under ``all`` no registered program with oracle roles makes an LM call.

The labels never travel in a program's inputs: the evaluation sets them around each question's call
(:func:`gold_labels`), and a program built with oracle roles reads one role's labels with :func:`labelling`, only for
the roles it was built with. ``gap`` reaches a prompt by design: its titles are the gap a micro-query is written
from, so it tests the repair that follows a perfect gap specification.

An oracle answer that stands in for a predictor's call is recorded as that call in DSPy's trace (:func:`taught`),
so a program built with ``--oracle all`` can be BootstrapFewShot's teacher (``optimize.py --teacher oracle``): its
gold sub-queries, plans, gaps and answers become the demos of the same predictors of the program that makes LM calls.

One label is read without a role: the culture's language (``Gold.own``), which *defines* the fixed own-corpus
scope C_own (:func:`own_language`) -- the CORAL paper's own-corpus rows, an oracle by its own account on BLEnD,
whose questions are English while their culture is not. The programs that read it declare it (:data:`OWN`), and their
run names and rows carry it as an oracle mark (``mono_rag+oracle:own``); a compile gives them the same label.
"""
from __future__ import annotations

import re
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Callable, Iterable

import dspy

from programs.shared.text import IDK, mentions
from retrieval.corpus import Passage
from runtime.metering import count

DECISION_ROLES = ("relevance", "sufficiency", "controller", "verdict", "planner", "gap")
GENERATIVE_ROLES = ("query", "plan", "writer")
ROLES = DECISION_ROLES + GENERATIVE_ROLES
ALL = "all"  # every role the program has
#: The gold label a fixed own-corpus scope (C_own) reads in every run, without a role (:func:`own_language`): its run
#: names and rows carry it as an oracle mark (a program's registry spec declares it in ``reads``).
OWN = "own"


def parse_roles(text: str | Iterable[str] | None) -> tuple[str, ...]:
    """``"verdict,relevance"`` -> ``("relevance", "verdict")``; ``"all"`` (alone or not) -> ``("all",)``; an unknown
    role is one error naming the choices."""
    names = [r.strip() for r in (text.split(",") if isinstance(text, str) else text or ()) if r.strip()]
    if unknown := [r for r in names if r not in (*ROLES, ALL)]:
        raise ValueError(f"unknown --oracle role '{unknown[0]}'; choose from: {', '.join((*ROLES, ALL))}")
    return (ALL,) if ALL in names else tuple(r for r in ROLES if r in names)


def expand(roles: Iterable[str], allowed: Iterable[str]) -> tuple[str, ...]:
    """The roles ``roles`` (parsed) asks of a program whose roles are ``allowed``: all of them for ``all``, else
    those of ``roles`` it has."""
    roles, allowed = tuple(roles), tuple(allowed)
    return allowed if ALL in roles else tuple(r for r in roles if r in allowed)


def check_roles(text: str | Iterable[str] | None, allowed: Iterable[str], program: str) -> frozenset[str]:
    """The oracle roles a program is built with (``all``: every one of ``allowed``); a role it has no decision for
    is one error naming its roles."""
    roles, allowed = parse_roles(text), tuple(allowed)
    if ALL in roles:
        return frozenset(allowed)
    if stray := [r for r in roles if r not in allowed]:
        raise ValueError(f"--oracle {stray[0]}: {program} has no such decision; its oracle roles: "
                         f"{', '.join(allowed) or 'none'}")
    return frozenset(roles)


@dataclass(frozen=True)
class Hop:
    """One step of a gold decomposition (MuSiQue's ``question_decomposition``): its question ("Hagar >> spouse",
    "who did #1 marry after ...", ``#N`` naming hop N's answer), its answer, and the gold key of its supporting
    paragraph (None when the data names none)."""

    question: str
    answer: str
    key: str | None = None


def _bare(title: str) -> str:
    """A title as text mentions it: "Ed Wood (film)" -> "Ed Wood"."""
    return re.sub(r"\s*\([^)]*\)\s*$", "", title).strip() or title


def _said(phrase: str, texts: Iterable[str]) -> bool:
    return any(mentions(t, phrase) for t in texts)


def _said_any(phrases: Iterable[str], texts: list[str]) -> bool:
    return any(_said(p, texts) for p in phrases)


@dataclass(frozen=True)
class Gold:
    """One question's gold labels, one method per role. ``keys``: its gold passages under ``key`` (paragraph ids or
    titles); ``correct``: whether an answer is right by the task metric; ``culture``: the language of the corpus
    of the culture the question is about (XRAG: of its supporting article); ``titles``: the gold passages' titles;
    ``own``: the language of the culture the question is about where the data names one (BLEnD, CLIcK), which
    the fixed own-corpus scope searches; ``question``, ``answers`` (the gold answer first); ``hops``: the gold
    decomposition (MuSiQue); ``span``: the perfect reader needs an answer span in its context (single-hop data:
    XRAG, open QA, BLEnD, CLIcK) rather than every gold passage; ``ids``: ``keys`` are paragraph ids
    (``<corpus>:<id>``), each naming the corpus that holds it; ``options``: multiple choice's options (letter ->
    text), whose gold text is the span :meth:`relevance` and :meth:`sufficiency` look for without gold passages
    (:attr:`by_span`)."""

    keys: frozenset[str] = frozenset()
    key: Callable[[Passage], str] = attrgetter("title")
    correct: Callable[[str], bool] | None = None
    culture: str | None = None
    titles: frozenset[str] = frozenset()
    own: str | None = None
    question: str = ""
    answers: tuple[str, ...] = ()
    hops: tuple[Hop, ...] = ()
    span: bool = False
    ids: bool = False
    options: dict[str, str] | None = field(default=None, compare=False)

    @property
    def by_span(self) -> bool:
        """Passages are labelled by answer span (:meth:`supports`): a span question without gold passages."""
        return self.span and not self.keys

    def missing(self, role: str) -> bool:
        """Whether this question gives no label for ``role``."""
        labelled = bool(self.keys) or (self.by_span and bool(self.spans(self.options)))
        return {"verdict": self.correct is None, "planner": self.culture is None, "gap": not self.titles,
                "query": not self.question, "writer": not self.answers}.get(role, not labelled)

    def relevance(self, passage: Passage) -> bool:
        """A gold passage; without gold passages (:attr:`by_span`), one that holds a gold answer."""
        return self.supports([passage], self.options) if self.by_span else self.key(passage) in self.keys

    def sufficiency(self, passages: Iterable[Passage]) -> bool:
        """Every gold passage is among ``passages``; without gold passages (:attr:`by_span`), one holds a gold
        answer."""
        return self.supports(passages, self.options) if self.by_span else self.keys <= {self.key(p) for p in passages}

    def controller(self, retrieved: Iterable[Passage]) -> bool:
        """STOP: every gold passage is among those retrieved so far (:meth:`sufficiency`)."""
        return self.sufficiency(retrieved)

    def verdict(self, answer: str) -> bool:
        return self.correct(answer)

    def planner(self, held: Iterable[Passage] = ()) -> tuple[str, ...]:
        """The corpora a perfect planner who knew where the evidence lives names: those holding a gold passage none
        of the ``held`` ones is (the corpus of each missing gold id; the culture's first, then by name), else -- gold
        by title or culture only (BLEnD), or every gold passage held -- the culture's language, whose corpus it
        names. Corpus names only, never a passage."""
        keys = {self.key(p) for p in held}
        missing = {k.partition(":")[0] for k in self.keys - keys} if self.ids else set()
        return tuple(sorted(missing, key=lambda c: (c != self.culture, c))) or (self.culture,)

    def gap(self, held: Iterable[Passage]) -> tuple[str, ...]:
        """The gold titles none of the ``held`` passages has that the question or a held passage mentions (a title
        nothing the program read names stays unknown to it)."""
        held = list(held)
        texts = [self.question, *(f"{p.title} {p.text}" for p in held)]
        return tuple(t for t in sorted(self.titles - {p.title for p in held}) if _said(_bare(t), texts))

    def query(self, held: Iterable[Passage]) -> str:
        """The next query a perfect reader of the ``held`` passages would search for. With a decomposition: its
        first hop whose supporting paragraph is not held, each ``#N`` in it replaced by hop N's answer once a held
        passage holds that answer, else by hop N's own question ("spouse of Hagar"); ``A >> r`` reads "r of A".
        With gold titles only: the first missing one the question or a held passage mentions. Otherwise (nothing
        missing, or nothing revealed) the question itself."""
        held = list(held)
        if self.hops:
            keys = {self.key(p) for p in held}
            texts = [p.text for p in held]
            for hop in self.hops:
                resolved = hop.key in keys if hop.key else _said(hop.answer, texts)
                if not resolved:
                    return self._render(hop, texts)
            return self.question
        return next(iter(self.gap(held)), self.question)

    def _render(self, hop: Hop, texts: list[str]) -> str:
        def earlier(match: re.Match) -> str:
            n = int(match.group(1))
            if not 1 <= n <= len(self.hops):
                return match.group(0)
            prior = self.hops[n - 1]
            return prior.answer if _said(prior.answer, texts) else self._render(prior, texts)

        text = re.sub(r"#(\d+)", earlier, hop.question)
        if ">>" in text:
            subject, _, relation = text.rpartition(">>")
            text = f"{relation.strip()} of {subject.strip()}"
        return " ".join(text.split())

    def plan(self, held: Iterable[Passage]) -> str | None:
        """A correction plan's one choice: the oracle :meth:`query` to search when a gold passage is missing from
        the ``held`` passages, else None (regenerate from what is held)."""
        held = list(held)
        return None if self.sufficiency(held) else self.query(held)

    def supports(self, passages: Iterable[Passage], options: dict[str, str] | None = None,
                 max_chars: int | None = None) -> bool:
        """Whether a context of ``passages`` (as shown: cut at ``max_chars``) lets a perfect reader answer: every
        gold passage is among them, or (with ``span``) a gold answer -- for multiple choice, the gold option's
        text -- occurs in one of them."""
        passages = list(passages)
        if not self.span:
            return bool(self.keys) and self.sufficiency(passages)
        return _said_any(self.spans(options), [p.format(max_chars) for p in passages])

    def spans(self, options: dict[str, str] | None = None) -> tuple[str, ...]:
        """The gold answers as a context holds them: for multiple choice (``options``), the gold option's text."""
        return tuple(options[a] for a in self.answers if a in options) if options else self.answers

    def writer(self, passages: Iterable[Passage] = (), options: dict[str, str] | None = None,
               max_chars: int | None = None) -> str:
        """A perfect reader's answer from a context of ``passages``: the gold answer when they support it
        (:meth:`supports`), else the abstention :data:`~programs.shared.text.IDK`; no passages (closed book)
        abstain."""
        return self.answers[0] if self.supports(passages, options, max_chars) else IDK


_GOLD: ContextVar[Gold | None] = ContextVar("gold_labels", default=None)


@contextmanager
def gold_labels(gold: Gold):
    """Within the block (one question's call), oracle roles read ``gold``."""
    token = _GOLD.set(gold)
    try:
        yield
    finally:
        _GOLD.reset(token)


def labelling(roles: frozenset[str], role: str) -> Callable | None:
    """The gold labelling of ``role`` for the question being answered when ``role`` is among the program's oracle
    ``roles``, else None (the program decides as usual). A question without that label is an error (the example
    fails): a gold label is never guessed. Each call of the labelling is metered (``runtime.metering``) as one
    ``oracle_calls``: the LM call the role stands in for."""
    if role not in roles:
        return None
    gold = _GOLD.get()
    if gold is None or gold.missing(role):
        raise ValueError(f"--oracle {role}: no gold label for this question (the evaluation sets them per question)")
    label = getattr(gold, role)

    def called(*args, **kwargs):  # each call stands in for one LM call: metered as ``oracle_calls``
        count("oracle_calls")
        return label(*args, **kwargs)
    return called


def own_language(lang: str) -> str:
    """The language of the question's own corpus (the fixed scope C_own): its culture's (``Gold.own``) where the
    question being answered has one, else ``lang``, the language it is written in (also outside an evaluation: a
    direct call, DSPy's compile, which set no labels)."""
    gold = _GOLD.get()
    return (gold.own if gold else None) or lang


_TEACHING: ContextVar[bool] = ContextVar("teaching", default=False)


@contextmanager
def teaching():
    """Within the block (a teacher's call in a compile), oracle answers are recorded by :func:`taught`."""
    token = _TEACHING.set(True)
    try:
        yield
    finally:
        _TEACHING.reset(token)


def taught(predictor: dspy.Predict, inputs: dict | Callable[[], dict], **outputs) -> None:
    """Within :func:`teaching`, record an oracle answer ``outputs`` given in place of ``predictor``'s call on
    ``inputs`` (a dict, or what makes it: read only when recorded) as that call in DSPy's trace
    (``dspy.settings.trace``: what BootstrapFewShot makes demos of), as DSPy records a call. Only the predictor's
    output fields are recorded, and only when the answer fills them all: a demo that leaves a field out (a gate's
    label without the fields beside it) would teach the student to leave it out. Outside a teacher's call nothing
    is recorded, so an oracle evaluation runs as it did."""
    trace, fields = dspy.settings.trace, predictor.signature.output_fields
    if not _TEACHING.get() or trace is None or dspy.settings.max_trace_size <= 0 or any(
            outputs.get(key) is None for key in fields):
        return
    if len(trace) >= dspy.settings.max_trace_size:
        trace.pop(0)
    trace.append((predictor, dict(inputs() if callable(inputs) else inputs),
                  dspy.Prediction(**{key: outputs[key] for key in fields})))
