"""Evidence-loop pieces shared by SEAL-RAG and the baselines it is compared with (self_rag, crag, rag with
``cite=True``): the one cited, abstaining answer writer, LM steps whose malformed output is tolerated, the
merge of a new search into held passages at fixed k, and the cut of a ranked context to a token budget (PAR2's
writer and IRCoT's reader)."""
from __future__ import annotations

import re

import dspy
from dspy.utils.exceptions import AdapterParseError

from decoding.choice import MCScoring
from programs.shared.oracle import taught
from programs.shared.text import IDK, abstained, approx_tokens, mentions
from programs.shared.writer import Writer
from retrieval.corpus import Passage
from retrieval.retriever import Retriever
from runtime.language import language_name
from signatures.writer import AnswerWithCitations, AnswerWithCitationsAndFacts, in_language


def lenient(predictor: dspy.Module, **inputs) -> dspy.Prediction | None:
    """Call ``predictor``; output that cannot be parsed (even after DSPy's JSON fallback) gives None."""
    try:
        return predictor(**inputs)
    except AdapterParseError:
        return None


def with_citations(answer: str, passages: list[Passage]) -> str:
    """``answer`` as the cited writer writes it: with the numbers of the ``passages`` that state it ("Lansing [2]");
    an abstention, or an answer no passage states, as it is."""
    numbers = [str(i) for i, p in enumerate(passages, 1) if answer != IDK and mentions(p.text, answer)]
    return f"{answer} [{', '.join(numbers)}]" if numbers else answer


def numbered(passages: list[Passage], max_chars: int | None) -> list[str]:
    """Prompt rendering with citation numbers: ``[1] [title] text``."""
    return [f"[{i}] {p.format(max_chars)}" for i, p in enumerate(passages, 1)]


_SOURCE = r"(?:passages?|docs?|documents?|sources?|refs?)\s*"
# a bracketed group of numbers, optionally named ("[2]", "[1, 3]", "[1 and 2]", "[Passage 2]", "[passages 1; 3]")
CITATION = re.compile(rf"\[\s*({_SOURCE})?(\d+(?:\s*(?:,|;|and|&)\s*(?:{_SOURCE})?\d+)*)\s*\]", re.IGNORECASE)


def _citation_marks(answer: str, n: int) -> list[tuple[re.Match, list[int]]]:
    """The citation marks of ``answer`` and their numbers: a bracketed group whose numbers all name one of the
    ``n`` passages, or one that says "passage" (its out-of-range numbers dropped). Other bracketed numbers
    ("[1990]" with 5 passages) are part of the answer."""
    marks = []
    for match in CITATION.finditer(answer or ""):
        numbers = [int(d) for d in re.findall(r"\d+", match.group(2))]
        if match.group(1) or all(1 <= k <= n for k in numbers):
            marks.append((match, [k for k in numbers if 1 <= k <= n]))
    return marks


def cited_passages(answer: str, passages: list[Passage]) -> list[Passage]:
    """The passages whose numbers (1-based) the answer cites ("Lansing [2]", "[1, 3]", "[2][3]", "[Passage 2]"), in
    order, without repeats."""
    numbers = dict.fromkeys(k for _, ks in _citation_marks(answer, len(passages)) for k in ks)
    return [passages[k - 1] for k in numbers]


def clean_answer(answer: str, n: int) -> str:
    """The answer without its citation marks for ``n`` passages ("Lansing [2]") and surrounding punctuation;
    refusals become exactly "I don't know"."""
    text = answer or ""
    for match, _ in reversed(_citation_marks(text, n)):
        text = text[:match.start()] + " " + text[match.end():]
    text = " ".join(text.split()).strip(" .;,")
    return IDK if abstained(text) else text


class EvidenceWriter(Writer):
    """The one final generation of every evidence-loop arm: 2-4 words with the numbers of the supporting passages
    in brackets, or "I don't know". The bracketed numbers are parsed in Python into cited passage ids
    (``citations``; empty for a refusal or an answer that cites nothing) and cut from the answer.

    ``facts=True`` adds verified ledger facts as an input (SEAL's ``ledger_to_writer`` option). Multiple-choice
    questions keep the shared :class:`Writer` path (letter out, no citations)."""

    def __init__(self, max_chars: int | None = None, facts: bool = False, mc: MCScoring | None = None):
        super().__init__(use_passages=True, max_chars=max_chars, mc=mc)
        self.with_facts = facts
        self.short = dspy.Predict(AnswerWithCitationsAndFacts if facts else AnswerWithCitations)

    def forward(self, question: str, passages: list[Passage] = (), options: dict[str, str] | None = None,
                facts: list[str] = (), lang: str | None = None):
        if not options and (read := self.perfect_reader()) is not None:  # the writer oracle cites nothing
            answer = read(list(passages), None, self.max_chars)
            shown = {"passages": numbered(list(passages), self.max_chars), "question": question,
                     **({"facts": list(facts)} if self.with_facts else {}),
                     **({"answer_language": language_name(lang)} if lang else {})}
            taught(self.short, shown, answer=with_citations(answer, list(passages)))
            return dspy.Prediction(answer=answer, citations=[], cited_titles=[])
        if options:
            return super().forward(question, passages, options)
        passages = list(passages)
        extra = {"facts": list(facts)} if self.with_facts else {}
        if lang:  # the question's language is known: ask for the answer in it
            extra.update(signature=in_language(self.short.signature), answer_language=language_name(lang))
        out = self.short(passages=numbered(passages, self.max_chars), question=question, **extra)
        answer = clean_answer(out.answer, len(passages))
        cited = [] if answer == IDK else cited_passages(out.answer, passages)
        return dspy.Prediction(answer=answer, citations=[p.id for p in cited], cited_titles=[p.title for p in cited])


def search_excluding(search: Retriever, query: str, k: int, blocked: set[str]) -> list[Passage]:
    """The top ``k`` hits for ``query`` that are not in ``blocked`` (passage ids): over-fetch by the blocked
    count, then filter, so a repeat search cannot return only passages already held."""
    hits = search.search(query, k + len(blocked))
    return [p for p in hits if p.id not in blocked][:k]


def retried(predictor: dspy.Module, parse, tries: int = 2, **inputs):
    """Call ``predictor`` until ``parse(prediction)`` gives a value other than None, at most ``tries`` times; later
    tries sample (temperature 0.7, their own cache entries). Returns (value or None, failed attempts)."""
    for attempt in range(tries):
        config = {"rollout_id": attempt, "temperature": 0.7} if attempt else {}
        out = lenient(predictor, **inputs, config=config)
        value = parse(out) if out is not None else None
        if value is not None:
            return value, attempt
    return None, tries


def within_budget(ranked: list[Passage], budget: int, max_chars: int | None) -> list[Passage]:
    """The leading passages of ``ranked`` whose prompt text fits ``budget`` tokens (estimated, see
    :func:`~programs.shared.text.approx_tokens`); the first passage always."""
    shown, used = [], 0
    for p in ranked:
        used += approx_tokens(p.format(max_chars))
        if shown and used > budget:
            break
        shown.append(p)
    return shown
