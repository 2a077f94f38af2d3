"""CORAL: an adaptive retrieval loop over per-language corpora for culturally grounded questions.

Each round: (1) the planner picks at most ``max_corpora`` language corpora (the paper's planner prompt: always the
corpus in the question's language, plus those of a culture or region the question is about; a first plan without it
gets it, traced in ``own_added``; a re-plan leaves it out only when none of its documents is kept and with a reason
stated in its ``dropped_because``, traced in ``own_dropped``, else it is put back, traced in ``own_added``), (2)
top-``k`` per chosen corpus, (3) the critic rates every new candidate 0-5 on relevance, usefulness,
clarity/specificity and compatibility and the keep gate keeps some (``programs.coral.critics``); kept documents
accumulate over rounds, (4) the sufficiency gate decides whether the kept documents suffice, (5) if not, the planner
gets the original question, the previous query and corpora and the reason, and must change the corpora and/or rewrite
the query. After at most ``loops`` rounds the writer answers from the ``writer_docs`` kept documents with the highest
``s_tot``, and from no passages when nothing was kept. Its prediction's ``passages`` are the writer's, its
``retrieved`` every candidate in order of first retrieval (what retrieval is scored on, as for every method), and its
trace's ``kept`` the ids of the documents kept. Oracle roles (``programs.shared.oracle``, no call): ``relevance``
keeps exactly the gold candidates, ``sufficiency`` stops once every gold passage is kept, ``planner`` searches the
corpora holding a gold passage not yet kept (else the culture's own corpus; the replanner then only rewrites the
query), ``query`` rewrites the query as the oracle query from the kept documents (with ``planner``, or a fixed scope,
the replanner is not asked), ``writer`` answers as the perfect reader.

Variants (registry): ``coral_select`` keeps the original query and only re-selects corpora (``rewrite=False``);
``coral_fixed_{own,all,own_en}`` replace corpus selection by a fixed scope (C_own: the corpus of the culture's
language, ``programs.coral.mrag``; ``all`` pools the top ``k * max_corpora``) and keep the critic, sufficiency check
and query rewriting. LM calls per question and the
measurements behind the defaults: docs/methods/coral.md.
"""
from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from typing import NamedTuple

import dspy

from decoding.choice import MCScoring
from decoding.constrained import BOOL, constrained_config, name_list
from decoding.decisions import PARSE_ERRORS, REST, rest_note
from programs.coral.critics import BatchCritic, EachCritic, KeepGate, Rated
from programs.coral.mrag import (DEFAULT_LANG, SCOPES, answer_writer, corpus_of, language_label, scope_corpora,
                                 with_options)
from programs.shared.gates import LabelGate, Ruling
from programs.shared.oracle import check_roles, own_language, taught
from programs.shared.steps import RoleStep
from programs.shared.text import content_words, negated, query_text, unechoed
from retrieval.corpus import Passage, dedup
from retrieval.retriever import Retriever
from runtime.language import LANGUAGE_NAMES
from runtime.lm import ATTEMPT
from signatures.critic import NOTHING_KEPT, CheckSufficiency, RateDocument, RateDocuments
from signatures.planner import ELSEWHERE, KEPT, ReplanSearch, ReselectCorpora, RewriteQuery, SelectCorpora

#: The replanning reason when the sufficiency verdict could not be read (counted as "not enough").
UNREADABLE_VERDICT = "The sufficiency check gave no readable verdict; search again."
#: The replanning reason of an oracle "not enough" (it names no gold passage).
ORACLE_NOT_ENOUGH = "Evidence for part of the question is still missing; search again."


def accumulate(kept: dict[str, Rated], new: list[Rated]) -> dict[str, Rated]:
    """Kept documents across rounds, one per passage id with its best score (first-kept order)."""
    merged = dict(kept)
    for r in new:
        if r.passage.id not in merged or r.total > merged[r.passage.id].total:
            merged[r.passage.id] = r
    return merged


def best(rated: list[Rated], n: int) -> list[Rated]:
    """The ``n`` highest ``s_tot`` (ties keep their order)."""
    return sorted(rated, key=lambda r: -r.total)[:n]


QUOTES = "\"'`“”‘’„«»"


def query_key(query: str) -> tuple[str, ...]:
    """A query's words, lower-cased, without quotes, each once in first-seen order: a query that only adds
    quotes or repeats itself ("seaweed soup seaweed soup") asks for the same thing."""
    return tuple(dict.fromkeys(query.lower().translate(str.maketrans("", "", QUOTES)).split()))


#: Words that state no reason to leave a corpus out: "none", "n/a", "kept", DSPy's "Not supplied for this particular
#: example" (its text for a demo's missing field), ...
NO_REASON = frozenset("none n a na nothing null nil kept keep keeps keeping applicable reason reasons supplied "
                      "particular example corpus".split())
#: A reason that calls the documents relevant (not negated) is no reason to leave them out.
RELEVANT = re.compile(r"\b(?:relevant|useful|helpful|on[- ]topic)\b")


def stated(reason: str | None) -> bool:
    """Whether a re-planner's ``dropped_because`` states a reason to leave out the corpus in the question's language:
    some content word beyond :data:`NO_REASON`, and not calling its documents relevant ("they were relevant" is no
    reason; "not relevant", "irrelevant", "about Spain, not Korea" are)."""
    text = unechoed(reason or "").lower()
    if not content_words(text) - NO_REASON:
        return False
    return not any(not negated(text[:m.start()]) for m in RELEVANT.finditer(text))


def same_plan(corpora: list[str], query: str, previous_corpora: list[str], previous_query: str) -> bool:
    return set(corpora) == set(previous_corpora) and query_key(query) == query_key(previous_query)


def validate_corpora(names: list[str], languages: dict[str, str], max_corpora: int) -> tuple[list[str], int]:
    """Planner output -> known corpus names (by name, language code or language name), deduplicated, in the
    planner's order, at most ``max_corpora``; returns (corpora, number of unknown names).

    Nothing is added: when no valid name was given the list is empty, and the caller decides what that means."""
    lookup: dict[str, str] = {}
    for name, code in languages.items():
        for key in (LANGUAGE_NAMES.get(code, ""), code, name):
            if key:
                lookup[key.lower()] = name
    chosen, unknown = [], 0
    for raw in names or []:
        key = str(raw).strip().strip("'\"`").lower()
        name = lookup.get(key) or lookup.get(re.split(r"[:(\s]", key, maxsplit=1)[0])
        if name is None:
            unknown += 1
        elif name not in chosen:
            chosen.append(name)
    return chosen[:max_corpora], unknown


class Verdict(NamedTuple):
    """The sufficiency decision (``parsed=False``: the critic's output could not be read; ``decided``: a fit decided
    it whatever the probability, :attr:`~programs.shared.gates.DecisionGate.decided`)."""

    enough: bool
    reason: str
    parsed: bool = True
    decided: str | None = None


@dataclass
class Trace:
    """What happened in one ``forward()``, JSON-serialisable via ``as_dict()``."""

    question_corpus: str | None = None  # the corpus in the question's language
    presented: list[str] = field(default_factory=list)  # candidate corpora in the order the planner saw them
    queries: list[str] = field(default_factory=list)
    corpora: list[list[str]] = field(default_factory=list)
    selected_langs: list[list[str]] = field(default_factory=list)
    scores: list[list[dict]] = field(default_factory=list)
    critiques: list[list[str]] = field(default_factory=list)
    sufficiency: list[dict] = field(default_factory=list)
    stop_reason: str = ""
    evidence: list[dict] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # ids of every document kept, in first-kept order
    evidence_langs: list[str] = field(default_factory=list)
    unknown_corpora: int = 0
    replan_retries: int = 0
    repeated_plans: int = 0  # the replanner repeated the previous plan twice: the loop stopped there
    critic_fallbacks: int = 0  # batched critic outputs that could not be used at all
    critic_missing: int = 0  # candidates a usable batch left out (scored one by one)
    parse_failures: int = 0  # planner / per-document critic / sufficiency outputs that could not be parsed
    planner_fallbacks: int = 0  # planner outputs with no valid corpus name (see ``select`` / ``replan``)
    own_added: list[str] = field(default_factory=list)  # plans the question's language corpus was added to, why
    own_dropped: list[str] = field(default_factory=list)  # the reasons re-plans stated for leaving it out
    unrated: int = 0  # candidates kept or dropped by the fused keep gate without a critic call (``KeepGate.rate``)
    keep_decided: str | None = None  # the keep gate decides every candidate whatever the probability (``decided``)
    sure_sufficiency: int = 0  # "enough" verdicts of a sufficiency gate at rest, without a call (``check``)
    calls: Counter = field(default_factory=Counter)

    def round(self, query: str, corpora: list[str], languages: dict[str, str], rated: list[Rated],
              kept: dict[str, Rated]) -> None:
        self.queries.append(query)
        self.corpora.append(list(corpora))
        self.selected_langs.append([languages[c] for c in corpora])
        self.scores.append([{"id": r.passage.id, "scores": list(r.scores), "total": r.total,
                             "kept": r.passage.id in kept} for r in rated])
        self.critiques.append([r.critique for r in rated])

    def as_dict(self) -> dict:
        out = {k: v for k, v in self.__dict__.items() if k != "calls"}
        return {"iterations": len(self.queries), **out, "calls": dict(self.calls)}


@dataclass(frozen=True)
class CORALConfig:
    """CORAL's settings. ``k`` passages per chosen corpus, ``loops`` rounds at most, ``max_corpora`` per round; keep
    thresholds ``min_each`` / ``min_total``; the writer reads the best ``writer_docs`` kept documents
    (``max_chars`` each); the critic sees ``critic_chars`` of each candidate (None: what the writer sees) in one
    call per candidate, or ``critic_chunk`` candidates per call with ``critic_batch``. ``scope``: ``dynamic``
    (planner) or a fixed ``own`` / ``all`` / ``own_en``; ``rewrite=False`` keeps the original query. Planner and
    critic sample at ``agent_temperature``, the writer at ``writer_temperature``. The planner sees the candidate
    corpora shuffled per question (``shuffle_corpora``, seeded by ``seed`` and the question); ``probe`` adds each
    corpus's top passage title and score for the question."""

    k: int = 5
    loops: int = 3
    max_corpora: int = 3
    min_each: int = 2
    min_total: float = 6.0
    writer_docs: int = 5
    scope: str = "dynamic"
    rewrite: bool = True
    critic_batch: bool = False
    critic_chunk: int = 15
    critic_chars: int | None = None
    max_chars: int | None = None
    agent_temperature: float = 0.6
    writer_temperature: float = 0.0
    shuffle_corpora: bool = True
    probe: bool = False
    seed: int = 13

    def __post_init__(self):
        if self.scope not in ("dynamic", *SCOPES):
            raise ValueError(f"unknown scope '{self.scope}'; choose one of: dynamic, {', '.join(SCOPES)}")
        if self.loops < 1 or self.max_corpora < 1 or self.critic_chunk < 1:
            raise ValueError("loops, max_corpora and critic_chunk must be at least 1")


def named_corpora(search: Retriever, names, limit: int) -> list[str]:
    """The planner oracle's corpora (``Gold.planner``: those holding a gold passage not among the ones held, else the
    culture's), at most ``limit``; each of ``names`` a corpus of the pool or a language one holds."""
    languages, chosen = search.languages(), []
    for name in names:
        if (corpus := name if name in languages else corpus_of(search, name)) is None:
            raise ValueError(f"--oracle planner: no corpus named or in the language '{name}' in the pool "
                             f"({', '.join(languages)})")
        chosen.append(corpus)
    return list(dict.fromkeys(chosen))[:limit]


class CORAL(dspy.Module):
    """Planner-critic retrieval loop over language corpora (see the module docstring and :class:`CORALConfig`).
    After two identical plans in a row the loop stops with the evidence kept (``repeated_plans``). On the
    embedded llama.cpp server its corpus names and the sufficiency verdict are decoded under a grammar
    (``decoding.constrained``)."""

    DEFAULT_DATASET = "demo_culture"
    Config = CORALConfig
    ROLES = {"planner": "planner", "replanner": "planner", "critic": "critic", "critic_each": "critic",
             "sufficiency": "critic"}
    ORACLE_ROLES = ("relevance", "sufficiency", "planner", "query", "writer")

    def __init__(self, search: Retriever, config: CORALConfig = CORALConfig(), decisions: str = "generate",
                 oracle: str = "", mc: MCScoring | None = None):
        super().__init__()
        c = config
        self.oracle = check_roles(oracle, self.oracle_roles(c.scope, c.rewrite), f"coral (scope {c.scope})")
        self.search, self.k, self.loops, self.max_corpora = search, c.k, c.loops, c.max_corpora
        self.writer_docs, self.scope, self.rewrite = c.writer_docs, c.scope, c.rewrite
        self.critic_chars = c.max_chars if c.critic_chars is None else c.critic_chars  # a shorter cut drops gold
        self.shuffle_corpora, self.probe, self.seed = c.shuffle_corpora, c.probe, c.seed
        t = c.agent_temperature
        self.planner = dspy.Predict(SelectCorpora, temperature=t) if c.scope == "dynamic" else None
        replan = {(True, True): ReplanSearch, (True, False): ReselectCorpora, (False, True): RewriteQuery}
        step = replan.get((c.scope == "dynamic", c.rewrite))
        self.replanner = dspy.Predict(step, temperature=t) if step else None
        named = partial(named_corpora, search, limit=c.max_corpora)  # the planner oracle's corpora
        self.planner_step = RoleStep(self.planner, "planner", self.oracle, field="corpora", given=named)
        self.replanner_step = RoleStep(self.replanner, "planner", self.oracle, field="corpora", given=named)
        self.query_step = RoleStep(self.replanner, "query", self.oracle)
        self.critic = dspy.Predict(RateDocuments, temperature=t)
        self.critic_each = dspy.Predict(RateDocument, temperature=t)
        self.sufficiency = dspy.Predict(CheckSufficiency, temperature=t)
        self.writer = answer_writer(c.max_chars, c.writer_temperature, mc)
        each = EachCritic(self.critic_each, decisions, self.critic_chars)
        critic = BatchCritic(self.critic, each, self.critic_chars, c.critic_chunk) if c.critic_batch else each
        self.keep_gate = KeepGate(critic, c.min_each, c.min_total, mode=decisions, roles=self.oracle)
        self.sufficiency_gate = LabelGate(self.sufficiency, "enough", ("True", "False"), kind="set",
                                          mode=decisions, roles=self.oracle, role="sufficiency",
                                          grammar={"enough": BOOL})

    @classmethod
    def oracle_roles(cls, scope: str = "dynamic", rewrite: bool = True, **_) -> tuple[str, ...]:
        """The oracle roles of a CORAL variant: a fixed scope has no planner, no rewriting no query."""
        return tuple(r for r in cls.ORACLE_ROLES
                     if (r != "planner" or scope == "dynamic") and (r != "query" or rewrite))

    def resting(self) -> str | None:
        """What CORAL runs as while its sufficiency or keep gate decides whatever the probability (see
        :func:`decoding.decisions.rest_note`)."""
        notes = [rest_note("sufficiency", self.sufficiency_gate, "one round, no replanning"),
                 rest_note("keep", self.keep_gate, "every rated candidate kept")]
        return "; ".join(n for n in notes if n) or None

    def forward(self, question: str, options: dict[str, str] | None = None,
                lang: str | None = None) -> dspy.Prediction:
        lang = lang or DEFAULT_LANG
        languages, trace = self.search.languages(), Trace()
        trace.question_corpus, trace.keep_decided = corpus_of(self.search, lang), self.keep_gate.decided
        asked = with_options(question, options)  # what the critic judges against
        kept: dict[str, Rated] = {}
        rated: dict[str, Rated] = {}  # every candidate scored so far; never scored twice
        retrieved: list[Passage] = []  # every candidate, in order of first retrieval
        query, corpora = question, self.select(question, lang, trace, options)  # (1) corpus selection
        trace.stop_reason = "max_rounds" if corpora else "no_corpus_for_language"
        for round_no in range(1, self.loops + 1):
            if not corpora:
                break
            candidates = self.retrieve(query, corpora)                              # (2) retrieval
            retrieved = dedup([*retrieved, *candidates])
            new, keeps = self.keep_gate([p for p in candidates if p.id not in rated], candidates, asked, trace)  # (3)
            rated.update((r.passage.id, r) for r in new)
            kept = accumulate(kept, keeps)
            trace.round(query, corpora, languages, [rated[p.id] for p in candidates], kept)
            if round_no == self.loops:
                break
            verdict = self.check(asked, list(kept.values()), new, trace)             # (4) sufficiency
            if verdict.enough:
                trace.stop_reason = "sufficient_at_rest" if verdict.reason == REST else "sufficient"
                break
            plan = self.replan(question, query, corpora, verdict.reason, trace, options,  # (5)
                               held=[r.passage for r in kept.values()])
            if plan is None:
                trace.stop_reason = "repeated_plan" if trace.repeated_plans else "no_change_possible"
                break
            query, corpora = plan
        evidence = [r.passage for r in best(list(kept.values()), self.writer_docs)]
        out = self.writer(question=question, passages=evidence, options=options, lang=lang)
        trace.calls["writer"] += 1
        trace.evidence = [{"id": p.id, "total": kept[p.id].total} for p in evidence]
        trace.evidence_langs = [languages[p.corpus] for p in evidence]
        trace.kept = list(kept)
        return dspy.Prediction(answer=out.answer, passages=evidence, retrieved=retrieved, trace=trace.as_dict())

    # -- (1) and (5): planner -------------------------------------------------------------------------------
    def select(self, question: str, lang: str, trace: Trace, options: dict[str, str] | None = None) -> list[str]:
        """First-round corpora: the fixed scope (C_own: the culture's language, :func:`own_language`), or the
        planner's choice (it reads the question with its options) validated against the pool."""
        if self.scope != "dynamic":
            return scope_corpora(self.scope, self.search, own_language(lang))
        return self.planner_step(lambda: {"question": with_options(question, options),
                                          "question_language": language_label(lang),
                                          "available": self.available(question, self.presented(question))}, [],
                                 ask=lambda: self.ask_planner(question, lang, trace, options)).value

    def ask_planner(self, question: str, lang: str, trace: Trace, options: dict[str, str] | None) -> list[str]:
        """The planner's first-round corpora (the only corpus of a one-corpus pool without a call)."""
        languages = self.search.languages()
        if len(languages) == 1:
            return list(languages)
        trace.calls["planner"] += 1
        trace.presented = self.presented(question)
        try:
            names = self.planner(question=with_options(question, options), question_language=language_label(lang),
                                 available=self.available(question, trace.presented),
                                 config=self.names_config(self.planner)).corpora
        except PARSE_ERRORS:
            trace.parse_failures += 1
            names = []
        corpora, unknown = validate_corpora(names, languages, self.max_corpora)
        trace.unknown_corpora += unknown
        if not corpora:  # no valid name: the corpus of the question's language (else English), and say so
            trace.planner_fallbacks += 1
            return [trace.question_corpus] if trace.question_corpus else scope_corpora("en", self.search, "en")
        return self.with_own(corpora, trace, "first plan: the question's language corpus is always searched")

    def with_own(self, corpora: list[str], trace: Trace, why: str) -> list[str]:
        """``corpora`` with the corpus in the question's language first where the planner left it out (the paper's
        prompt: always include it), at most ``max_corpora``; each addition traced in ``own_added`` with ``why``."""
        own = trace.question_corpus
        if own is None or own in corpora:
            return corpora
        trace.own_added.append(why)
        return [own, *corpora][:self.max_corpora]

    def replan(self, question: str, query: str, corpora: list[str], reason: str, trace: Trace,
               options: dict[str, str] | None = None, held: list[Passage] = ()) -> tuple[str, list[str]] | None:
        """Next (query, corpora), different from the previous ones (:func:`same_plan`): the planner's plan, asked
        once more (sampled anew) when it repeats itself; None when it repeats itself again (counted in
        ``repeated_plans``: the loop stops with the evidence kept -- no corpus is added "just in case") or when
        nothing can change. The query oracle rewrites from the ``held`` (kept) documents."""
        languages = self.search.languages()
        choose_corpora = self.scope == "dynamic" and len(languages) > 1
        if self.replanner is None or not (choose_corpora or self.rewrite):
            return None
        held = list(held)
        if (self.query_step.from_gold or not self.rewrite) and (self.replanner_step.from_gold or not choose_corpora):
            new_corpora = self.replanner_step.over(lambda: corpora, held)  # no call: the oracle's plan
            new_query = self.query_step.over(lambda: query, held)
            if same_plan(new_corpora, new_query, corpora, query):
                return None
            dropped = trace.question_corpus in corpora and trace.question_corpus not in new_corpora
            taught(self.replanner, lambda: self.replan_inputs(question, query, corpora, reason, options),
                   corpora=new_corpora, query=new_query, dropped_because=ELSEWHERE if dropped else KEPT)
            return new_query, new_corpora
        for attempt in range(2):
            config = {"rollout_id": 1000 + ATTEMPT.get()} if attempt else {}  # a retry must not hit the cache
            trace.calls["planner"] += 1
            try:
                out = self.replanner(**self.replan_inputs(question, query, corpora, reason, options),
                                     config=config | self.names_config(self.replanner))
            except PARSE_ERRORS:
                trace.parse_failures += 1
                continue
            new_query = self.query_step.over(lambda: query_text(getattr(out, "query", "")) if self.rewrite else "",
                                             held)
            new_corpora = self.replanner_step.over(
                lambda: self.read_corpora(out, corpora, trace, held) if choose_corpora else corpora, held)
            if not same_plan(new_corpora, new_query or query, corpora, query):
                return new_query or query, new_corpora
            if attempt == 0:
                trace.replan_retries += 1
            else:
                trace.repeated_plans += 1
        return None

    def read_corpora(self, out: dspy.Prediction, corpora: list[str], trace: Trace,
                     held: list[Passage]) -> list[str]:
        """The replanner's corpora, validated against the pool; ``corpora`` when it names no valid one (only the
        query may change). The corpus in the question's language, searched last round, leaves only when the critic
        has kept none of its documents (``held``: the paper's "consistently low-relevance" as the system found it,
        not as the re-planner says) and with a reason :func:`stated` in ``dropped_because`` (traced in
        ``own_dropped``); else it is put back (:meth:`with_own`)."""
        new_corpora, unknown = validate_corpora(out.corpora, self.search.languages(), self.max_corpora)
        trace.unknown_corpora += unknown
        if not new_corpora:
            trace.planner_fallbacks += 1
            return corpora
        own, reason = trace.question_corpus, unechoed(out.get("dropped_because") or "")
        if own not in corpora or own in new_corpora:
            return new_corpora
        if any(p.corpus == own for p in held):
            return self.with_own(new_corpora, trace, "re-plan dropped it while the critic keeps its documents")
        if stated(reason):
            trace.own_dropped.append(reason)
            return new_corpora
        return self.with_own(new_corpora, trace, "re-plan dropped it without a stated reason")

    def replan_inputs(self, question: str, query: str, corpora: list[str], reason: str,
                      options: dict[str, str] | None = None) -> dict:
        inputs = {"question": with_options(question, options), "reason": reason, "previous_query": query,
                  "previous_corpora": corpora}
        if "available" in self.replanner.signature.input_fields:
            inputs["available"] = self.available(question, self.presented(question))
        return {k: v for k, v in inputs.items() if k in self.replanner.signature.input_fields}

    def presented(self, question: str) -> list[str]:
        """The candidate corpora in the order the planner sees them: shuffled per question (seeded), so a list
        position carries no meaning, or in pool order with ``shuffle_corpora=False``."""
        names = list(self.search.languages())
        if self.shuffle_corpora:
            random.Random(f"{self.seed}:{question}").shuffle(names)
        return names

    def available(self, question: str, order: list[str]) -> list[str]:
        """One line per candidate corpus: ``name: Language``, and with ``probe`` the title and score of its top
        passage for the question (one search per corpus, no LM call)."""
        languages = self.search.languages()
        tops = self.search.search_each(question, 1, order) if self.probe else {}
        lines = []
        for name in order:
            line = f"{name}: {LANGUAGE_NAMES.get(languages[name], languages[name])}"
            if hit := (tops.get(name) or [None])[0]:
                line += f" -- top match: {hit.title[:60]!r} (score {hit.score:.2f})"
            lines.append(line)
        return lines

    def names_config(self, predictor: dspy.Predict) -> dict:
        """Grammar-constrained corpus names (at most ``max_corpora``) where the endpoint supports it."""
        return constrained_config(predictor, {"corpora": name_list(list(self.search.languages()), self.max_corpora)})

    # -- (2) retrieval ---------------------------------------------------------------------------------------
    def retrieve(self, query: str, corpora: list[str]) -> list[Passage]:
        """Top-``k`` from each corpus (the ``all`` scope pools the top ``k * max_corpora`` instead)."""
        if self.scope == "all":
            return self.search.search(query, self.k * self.max_corpora, corpora)
        hits = self.search.search_each(query, self.k, corpora)
        return dedup([p for c in corpora for p in hits[c]])

    # -- (4) sufficiency -------------------------------------------------------------------------------------
    def check(self, asked: str, kept: list[Rated], new: list[Rated], trace: Trace) -> Verdict:
        """Whether the best kept documents suffice (:attr:`sufficiency_gate`). Nothing kept is "not enough"
        without a call (the reason carries the critiques of this round's best candidates); an unreadable verdict
        is "not enough" too, so the loop goes on within its round budget."""
        if not kept and not self.sufficiency_gate.from_gold:
            notes = "; ".join(r.critique for r in best(new, 3) if r.critique)
            verdict = Verdict(False, NOTHING_KEPT + (notes or "none"))
        else:
            shown = best(kept, self.writer_docs)
            evidence = [r.passage.format(self.critic_chars)
                        + (f" (critic: {r.critique}; score {r.total:g})" if r.rated else "") for r in shown]
            verdict = self.verdict(self.sufficiency_gate({"question": asked, "evidence": evidence},
                                                         gold=[r.passage for r in kept],
                                                         passages=[r.passage for r in shown]), trace)
        trace.sufficiency.append({k: v for k, v in verdict._asdict().items() if v is not None})
        return verdict

    @staticmethod
    def verdict(ruling: Ruling, trace: Trace) -> Verdict:
        if ruling.called:
            trace.calls["sufficiency"] += 1
        if ruling.oracle:
            return Verdict(ruling.label == "True", "" if ruling.label == "True" else ORACLE_NOT_ENOUGH)
        if ruling.decided == REST:
            trace.sure_sufficiency += 1  # fitted on dev to say "enough" to any probability
            return Verdict(True, REST, decided=REST)
        if ruling.label is None:
            trace.parse_failures += 1
            return Verdict(False, UNREADABLE_VERDICT, parsed=False)
        return Verdict(ruling.label == "True", (ruling.output.reason or "").strip(), decided=ruling.decided)
