"""SEAL-RAG: Search -> Extract -> Assess -> Loop at a fixed retrieval depth k, with at most L gap repairs.

Every search returns k passages. Verified (head, relation, tail) facts go into an entity ledger; a sufficiency
gate decides stop vs. repair; a repair turns the gap (missing entities/relations) into exactly one micro-query
whose hits (passages already fetched are blocked from the search) are merged by gap-first ranking, which replaces
distractors and never grows the context: the hits' facts are extracted and verified first, and a passage ranks by
the gap entities and relations its verified facts support. The gap specification and the micro-query see the
blocked/seen terms (queries issued, titles fetched). One final generation answers in 2-4 words with cited passages, or
abstains; it sees the final k passages, like every baseline's writer, plus the ledger only with
``ledger_to_writer``. The sufficiency verdict is ``assess_gate`` (``programs.shared.gates``): as written or
P(sufficient) against its threshold (``decisions``); the other criteria stay as written. With
``oracle="sufficiency"`` the gate says sufficient exactly when the k passages held include every gold passage,
without a call, at every loop; with
``oracle="gap"`` the gap is the missing gold titles that the question or a held passage names (no call), which
tests micro-query and ranking apart from the gap specification; ``query``: the micro-query is the oracle query from
the passages held; ``relevance`` stands in for fact extraction (no call, an empty ledger): a passage's facts fill
the gap exactly when it is a gold passage, so ranking puts retrieved gold passages first; ``writer``: the perfect
reader. ``all``: no call. The deterministic parts (verbatim filtering, blocklist, stuck
detection and pivots, ranking, the gate) are plain functions here, testable without an LM.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

import dspy

from decoding.choice import MCScoring
from decoding.decisions import rest_note
from programs.shared.evidence import EvidenceWriter, lenient, search_excluding
from programs.shared.gates import LabelGate
from programs.shared.oracle import check_roles
from programs.shared.steps import Role, RoleStep
from programs.shared.text import clip, content_words, mentions, normalize, repeats, sentences, words
from retrieval.corpus import Passage, dedup
from retrieval.retriever import Retriever
from signatures.esc import AssessSufficiency
from signatures.extract import ExtractFacts
from signatures.gap import SpecifyGap
from signatures.query import WriteMicroQuery


@dataclass(frozen=True)
class Fact:
    """A verified (head, relation, tail) triple and the sentence that supports it."""

    head: str
    relation: str
    tail: str
    title: str  # the passage it was read from
    span: str = ""  # the sentence of the passage (as the extractor saw it) holding head, relation and tail

    def render(self) -> str:
        return f"[{self.title}] {self.head} | {self.relation} | {self.tail}"


def occurs_verbatim(span: str, text: str) -> bool:
    """``span`` occurs in ``text`` as written (letter case and runs of whitespace aside), on word boundaries."""
    span, text = (" ".join(s.split()).casefold() for s in (span, text))
    return bool(span) and re.search(rf"(?<!\w){re.escape(span)}(?!\w)", text) is not None


def triple_lines(text: str) -> list[str]:
    """The lines of the extractor's output, with bullets, numbering and JSON-list punctuation stripped.

    The output is plain text, not a typed list: asked for ``list[str]``, the 0.5B model put head, relation and tail
    in separate list items (every triple of 3 probe questions was malformed)."""
    lines = (re.sub(r"^(?:[-*\u2022]|\d+[.)])\s+", "", line.strip().strip('[],"\'').strip())
             for line in re.split(r'\n|",\s*"', text or ""))
    return [line for line in lines if line]


def stem_match(word: str, vocabulary: set[str]) -> bool:
    """``word`` or a word sharing its first 4 letters (both at least 4 long: 'directed'/'director') is in
    ``vocabulary``."""
    return word in vocabulary or (len(word) >= 4 and any(len(v) >= 4 and v[:4] == word[:4] for v in vocabulary))


def support(head: str, relation: str, tail: str, title: str, text: str) -> str | None:
    """The first sentence of ``text`` that grounds the triple, or None: head and tail occur verbatim in it (the
    passage title stands for its subject, so one of them may be the title, not both), and the relation, if it has
    content words, shares a word stem with the sentence ("Ann Arbor | capital of | Michigan" is not grounded by
    "Ann Arbor is a city in Michigan.")."""
    relation_words = content_words(relation)
    for sentence in sentences(text):
        in_sentence = [occurs_verbatim(x, sentence) for x in (head, tail)]
        if not all(ok or occurs_verbatim(x, title) for ok, x in zip(in_sentence, (head, tail))) or not any(in_sentence):
            continue
        vocabulary = set(words(sentence))
        if not relation_words or any(stem_match(w, vocabulary) for w in relation_words):
            return sentence
    return None


def verbatim_facts(lines: list[str], passage: Passage, cap: int,
                   max_chars: int | None = None) -> tuple[list[Fact], int]:
    """The first ``cap`` distinct facts of ``lines`` ('head | relation | tail') grounded in one sentence of the
    text the extractor saw (``passage.format(max_chars)``), each with that sentence, and the number of lines
    rejected: malformed, a head or tail with no content word, or no sentence that grounds it (see :func:`support`)."""
    shown = passage.clip(max_chars).removesuffix(" …")
    kept: list[Fact] = []
    rejected = 0
    for line in lines:
        parts = [part.strip().strip("()[]{}<>\"'").strip() for part in str(line).split("|")]
        head, relation, tail = parts if len(parts) == 3 and parts[1] else ("", "", "")
        span = support(head, relation, tail, passage.title, shown) if content_words(head) and content_words(tail) \
            else None
        if span is None:
            rejected += 1
            continue
        fact = Fact(head, relation, tail, passage.title, span)
        if fact not in kept:
            kept.append(fact)
    return kept[:cap], rejected


@dataclass
class Ledger:
    """Verified facts from every passage read so far; facts outlive passages that ranking later replaces."""

    facts: list[Fact] = field(default_factory=list)
    read: set[str] = field(default_factory=set)  # ids of passages already extracted
    by_passage: dict[str, list[Fact]] = field(default_factory=dict)  # passage id -> the facts verified in it

    def add(self, facts: list[Fact], passage_id: str | None = None) -> None:
        self.facts += [f for f in facts if f not in self.facts]
        if passage_id is not None:
            self.by_passage[passage_id] = list(facts)

    def linked(self, question: str) -> list[str]:
        """Entities the question names, plus those one fact away from them (ledger order, no repeats)."""
        seeds = {normalize(e) for f in self.facts for e in (f.head, f.tail) if mentions(question, e)}
        out: dict[str, str] = {}
        for f in self.facts:
            if normalize(f.head) in seeds or normalize(f.tail) in seeds:
                out.setdefault(normalize(f.head), f.head)
                out.setdefault(normalize(f.tail), f.tail)
        return list(out.values())

    def shown(self, question: str, titles: list[str], limit: int) -> list[str]:
        """Facts for a prompt: those of the current passages (in their rank order), then question-linked facts
        from replaced passages; at most ``limit``."""
        linked = {normalize(e) for e in self.linked(question)}
        current = sorted((f for f in self.facts if f.title in titles), key=lambda f: titles.index(f.title))
        replaced = [f for f in self.facts if f.title not in titles
                    and {normalize(f.head), normalize(f.tail)} & linked]
        return [f.render() for f in (current + replaced)[:limit]]


@dataclass(frozen=True)
class Gap:
    """What the evidence still lacks: entities with no facts yet and the relations to look up."""

    entities: tuple[str, ...] = ()
    relations: tuple[str, ...] = ()


def failed_criteria(verdict, min_coverage: float, min_answerability: float,
                    sufficient: bool | None = None) -> list[str]:
    """The sufficiency criteria an assessment fails; empty means sufficient (every criterion must hold, as in the
    paper, whose gate counts corroborating sources against a threshold and flags contradictions: key facts stated by
    a single source fail ``corroboration``, conflicting ones ``contradiction``). ``sufficient``: the verdict as
    decided from its probability (default: as written)."""
    checks = {"coverage": verdict.coverage >= min_coverage,
              "bridge": verdict.bridge != "missing",
              "corroboration": verdict.corroboration != "single_source",
              "contradiction": verdict.corroboration != "contradicted",
              "answerability": verdict.answerability >= min_answerability,
              "verdict": bool(verdict.sufficient) if sufficient is None else sufficient}
    return [name for name, ok in checks.items() if not ok]


def pivots(gap: Gap, linked: list[str], seen_titles: set[str], question: str) -> list[str]:
    """Fallback queries when the proposed one is stuck: each missing entity with the missing relations, then each
    bridge entity (linked to the question through a fact, not named in it) whose own page has not been seen."""
    relations = " ".join(gap.relations)
    bridges = [e for e in linked if not mentions(question, e) and not any(mentions(t, e) for t in seen_titles)]
    return [f"{e} {relations}".strip() for e in gap.entities] + bridges


def states(fact: Fact, relations: tuple[str, ...]) -> bool:
    """Whether the fact's relation shares a content word with one of the gap's ``relations``."""
    return any(content_words(fact.relation) & content_words(r) for r in relations)


def supported(facts: list[Fact], gap: Gap) -> tuple[int, int]:
    """How much of the gap verified ``facts`` fill: (missing entities plus missing relations they supply; the
    entity count alone). A fact supplies a missing entity when it is about it (its head) or links it by a missing
    relation ("Lansing | capital of | Michigan" for Michigan's state capital); naming it in passing
    ("Blue Fox | directed by | Ana Berg" when Ana Berg's birthplace is missing) supplies nothing."""
    def about(f: Fact, g: str) -> bool:
        return normalize(f.head) == normalize(g) or (normalize(f.tail) == normalize(g) and states(f, gap.relations))
    entities = sum(any(about(f, g) for f in facts) for g in gap.entities)
    relations = sum(any(states(f, (r,)) for f in facts) for r in gap.relations)
    return entities + relations, entities


def entity_first_rank(evidence: list[Passage], candidates: list[Passage], facts: dict[str, list[Fact]],
                      anchors: list[str], gap: Gap, k: int) -> list[Passage]:
    """Merge micro-query hits into the evidence and keep the best ``k``; the context never grows.

    A passage ranks by its verified facts (``facts``: passage id -> facts that passed the verbatim check): first
    the gap entities and relations they support (:func:`supported`), then the ledger anchors they name, and only
    then incumbency (held passages win the remaining ties), then retrieval score. Names the text merely mentions
    count for nothing: a held passage whose facts fill none of the gap loses its place to a newcomer whose facts
    fill some -- the paper's case where the state-capital page replaces a distractor."""
    incumbents = {p.id for p in evidence}

    def key(p: Passage):
        own = facts.get(p.id, [])
        ends = [x for f in own for x in (f.head, f.tail)]
        return (*supported(own, gap), sum(any(mentions(x, a) for x in ends) for a in anchors), p.id in incumbents,
                p.score)

    return sorted(dedup([*evidence, *candidates]), key=key, reverse=True)[:k]


def gold_first_rank(evidence: list[Passage], candidates: list[Passage], is_gold, k: int) -> list[Passage]:
    """:func:`entity_first_rank` under the relevance oracle: gold passages (``is_gold``) first, then incumbency, then
    retrieval score; the context never grows."""
    incumbents = {p.id for p in evidence}
    return sorted(dedup([*evidence, *candidates]), key=lambda p: (is_gold(p), p.id in incumbents, p.score),
                  reverse=True)[:k]


def _clean(items) -> tuple[str, ...]:
    """Stripped, non-empty, distinct strings of an LM list output."""
    return tuple(dict.fromkeys(s for s in (str(i).strip() for i in items or ()) if s))


def gap_demo(gap: Gap) -> dict | None:
    """The gap oracle's answer as the gap specification's output (None for an empty gap: it specifies nothing)."""
    return {"missing_entities": list(gap.entities), "missing_relations": []} if gap.entities else None


@dataclass
class _Run:
    """One question's bookkeeping: the ledger, queries issued, titles seen, and what the trace reports."""

    ledger: Ledger = field(default_factory=Ledger)
    queries: list[str] = field(default_factory=list)
    seen_titles: set[str] = field(default_factory=set)
    assessments: list[dict] = field(default_factory=list)
    gaps: list[dict] = field(default_factory=list)
    loops_used: int = 0
    pivots: int = 0
    parse_failures: int = 0
    rejected_triples: int = 0
    fetched: set[str] = field(default_factory=set)  # ids of every passage a search returned: the blocklist
    replaced: list[int] = field(default_factory=list)  # per repair, how many held passages ranking replaced

    def blocked(self) -> list[str]:
        """The blocked/seen terms the gap and micro-query prompts see: queries issued, then titles fetched."""
        return [*self.queries, *sorted(self.seen_titles - set(self.queries))]

    def trace(self, stop_reason: str) -> dict:
        return {"iterations": self.loops_used, "queries": list(self.queries), "stop_reason": stop_reason,
                "ledger": [asdict(f) for f in self.ledger.facts], "assessments": self.assessments, "gaps": self.gaps,
                "pivots": self.pivots, "parse_failures": self.parse_failures,
                "rejected_triples": self.rejected_triples, "replaced": list(self.replaced)}


class SEAL(dspy.Module):
    """SEAL-RAG: search at fixed depth, extract verified facts, assess sufficiency, repair the gap with one
    micro-query per loop. ``lang`` (the question's language, passed by multilingual datasets) asks the writer for
    the answer in it, as ``rag`` does.

    Args:
        search: the retriever.
        k: passages per search, and the fixed number held.
        loops: gap repairs at most (0: one pass, no repair).
        max_chars: each passage shown to the LM cut after this many characters (None: whole).
        max_triples: facts kept per passage read.
        max_facts: facts shown to the assessment, gap and (``ledger_to_writer``) the writer.
        min_coverage, min_answerability: the assessment's criteria (:func:`failed_criteria`).
        stuck_jaccard: a query this close (content-word Jaccard) to an earlier one is stuck: a pivot replaces it.
        max_query_words: a micro-query's words at most.
        ledger_to_writer: also show the final writer the verified facts (off: the writer sees what every
            baseline's writer sees, the final k passages; passages only the writer would read are not extracted,
            and ``loops=0`` is exactly ``rag_cited``).
        decisions: the decision mode of the sufficiency gate (``--decisions``).
        oracle: the oracle roles (``--oracle``; see the module).
        mc: how the writer picks multiple-choice letters.
    """

    ROLES = {"extract": "critic", "assess": "critic", "gap": "planner", "micro_query": "planner"}
    ORACLE_ROLES = ("relevance", "sufficiency", "gap", "query", "writer")

    def __init__(self, search: Retriever, *, k: int = 3, loops: int = 3, max_chars: int | None = None,
                 max_triples: int = 10, max_facts: int = 30, min_coverage: float = 0.75, min_answerability: float = 0.7,
                 stuck_jaccard: float = 0.7, max_query_words: int = 12, ledger_to_writer: bool = False,
                 decisions: str = "generate", oracle: str = "", mc: MCScoring | None = None):
        super().__init__()
        self.oracle = check_roles(oracle, self.ORACLE_ROLES, "seal")
        self.search, self.k, self.loops, self.max_chars = search, k, loops, max_chars
        self.max_triples, self.max_facts = max_triples, max_facts
        self.min_coverage, self.min_answerability = min_coverage, min_answerability
        self.stuck_jaccard, self.max_query_words = stuck_jaccard, max_query_words
        self.extract = dspy.Predict(ExtractFacts)
        self.assess = dspy.Predict(AssessSufficiency)
        self.assess_gate = LabelGate(self.assess, "sufficient", ("True", "False"), kind="set", mode=decisions,
                                     roles=self.oracle, role="sufficiency", rests=False)
        self.gap = dspy.Predict(SpecifyGap)
        self.gap_step = RoleStep(self.gap, "gap", self.oracle, given=Gap, demo=gap_demo,
                                 read=lambda out: Gap(_clean(out.missing_entities), _clean(out.missing_relations)))
        self.micro_query = dspy.Predict(WriteMicroQuery)
        self.query_step = RoleStep(self.micro_query, "query", self.oracle,
                                   demo=lambda query: {"query": clip(query, max_query_words)})
        self.relevance = Role("relevance", self.oracle)  # the relevance oracle reads no facts: it ranks
        self.ledger_to_writer = ledger_to_writer
        self.writer = EvidenceWriter(max_chars, facts=ledger_to_writer, mc=mc)

    def resting(self) -> str | None:
        """What SEAL runs as while its sufficiency gate decides whatever the probability (see
        :func:`decoding.decisions.rest_note`): at rest its verdict passes every assessment."""
        return rest_note("sufficiency", self.assess_gate, "the other criteria decide")

    def forward(self, question: str, options: dict[str, str] | None = None,
                lang: str | None = None) -> dspy.Prediction:
        run = _Run(queries=[question])
        evidence = self._search(question, run)                                  # Search at fixed k
        stop, gap, assessed = "loop_budget", Gap(), None
        for loop in range(self.loops + 1):
            if loop == self.loops:  # budget spent: only a writer that sees the ledger needs the last facts
                if self.ledger_to_writer:
                    self._extract(question, evidence, run)
                break
            self._extract(question, evidence, run)                              # Extract (unread passages)
            facts = run.ledger.shown(question, [p.title for p in evidence], self.max_facts)
            fresh = facts != assessed  # unchanged facts would get the same verdict and gap: skip those calls
            if self.assess_gate.from_gold:                                      # Assess: the held passages
                run.assessments.append({"oracle": self.assess_gate.gold(evidence)})
                if self.assess_gate.gold(evidence):
                    stop = "sufficient"
                    break
            if fresh:
                assessed = facts
                if not self.assess_gate.from_gold and self._sufficient(question, facts, evidence, run):  # Assess
                    stop = "sufficient"
                    break
            gap = self._gap(question, facts, evidence, run, fresh, gap)         # gap specification
            query = self._micro_query(question, gap, run, fresh, evidence)
            if query is None:
                stop = "stuck"
                break
            run.queries.append(query)                                           # exactly one micro-query
            held, hits = {p.id for p in evidence}, self._search(query, run)
            self._extract(question, hits, run)                                  # verify the hits' facts first
            if self.relevance.from_gold:  # gold passages fill the gap
                evidence = gold_first_rank(evidence, hits, self.relevance.gold, self.k)
            else:
                evidence = entity_first_rank(evidence, hits, run.ledger.by_passage, run.ledger.linked(question),
                                             gap, self.k)                       # replace, don't grow
            run.replaced.append(sum(p.id not in held for p in evidence))
            run.loops_used += 1
        facts = run.ledger.shown(question, [p.title for p in evidence], self.max_facts) if self.ledger_to_writer \
            else ()
        out = self.writer(question=question, passages=evidence, options=options, facts=facts, lang=lang)
        trace = run.trace(stop)
        return dspy.Prediction(answer=out.answer, passages=evidence, trace=trace, ledger=trace["ledger"],
                               queries=trace["queries"], loops_used=run.loops_used, stop_reason=stop,
                               citations=out.get("citations", []))

    def _search(self, query: str, run: _Run) -> list[Passage]:
        """k hits for ``query``, none of them a passage already fetched (the blocklist)."""
        hits = search_excluding(self.search, query, self.k, run.fetched)
        run.fetched.update(p.id for p in hits)
        run.seen_titles.update(p.title for p in hits)
        return hits

    def _extract(self, question: str, evidence: list[Passage], run: _Run) -> None:
        if self.relevance.from_gold:
            return
        for p in evidence:
            if p.id in run.ledger.read:
                continue
            run.ledger.read.add(p.id)
            out = lenient(self.extract, question=question, passage=p.format(self.max_chars))
            if out is None:
                run.parse_failures += 1
                continue
            facts, rejected = verbatim_facts(triple_lines(out.triples), p, self.max_triples, self.max_chars)
            run.ledger.add(facts, p.id)
            run.rejected_triples += rejected

    def _sufficient(self, question: str, facts: list[str], evidence: list[Passage], run: _Run) -> bool:
        """The assessment of ``facts``; calibration labels it by whether ``evidence`` (the passages held)
        has every gold passage, as the sufficiency oracle decides."""
        if not facts:  # nothing verified yet: insufficient without asking
            run.assessments.append({"failed": ["no_facts"]})
            return False
        ruling = self.assess_gate({"question": question, "facts": facts}, passages=evidence)
        out = ruling.output
        if out is None:
            run.parse_failures += 1
            run.assessments.append({"failed": ["parse_failure"]})
            return False
        failed = failed_criteria(out, self.min_coverage, self.min_answerability,
                                 None if ruling.label is None else ruling.label == "True")
        run.assessments.append({name: out[name] for name in AssessSufficiency.output_fields} | {"failed": failed}
                               | ruling.trace("p_sufficient"))
        return not failed

    def _gap(self, question: str, facts: list[str], evidence: list[Passage], run: _Run, fresh: bool,
             gap: Gap) -> Gap:
        """The gap of ``facts`` (the gap oracle's: the gold titles the ``evidence`` held lacks); ``gap`` as it was
        when the facts did not change (``fresh``), unless the oracle's, which reads the held passages."""
        reply = self.gap_step({"question": question, "facts": list(facts), "blocked": run.blocked()}, evidence, fresh)
        if reply is None:
            return gap
        run.parse_failures += reply.failures
        gap = reply.value or Gap()
        run.gaps.append({"entities": list(gap.entities), "relations": list(gap.relations)})
        return gap

    def _micro_query(self, question: str, gap: Gap, run: _Run, fresh: bool, held: list[Passage]) -> str | None:
        """This loop's one query: the LM's proposal when the facts changed (``fresh``; the query oracle's from the
        ``held`` passages at every loop), cut to ``max_query_words``; when there is none or it is empty or repeats an
        earlier query (stuck), the first pivot that does not. None when every option is stuck."""
        reply = self.query_step({"question": question, "missing_entities": list(gap.entities),
                                 "missing_relations": list(gap.relations), "blocked": run.blocked()}, held, fresh)
        run.parse_failures += reply.failures if reply else 0
        proposals = [reply.value] if reply and reply.value is not None else []
        options = proposals + pivots(gap, run.ledger.linked(question), run.seen_titles, question)
        for i, option in enumerate(options):
            query = clip(option, self.max_query_words)
            if not repeats(query, run.queries, self.stuck_jaccard):
                run.pivots += i >= len(proposals)
                return query
        return None
