"""CORAL's critic: how new candidates are rated (one call per candidate, or batches of them; the relevance oracle;
no call when a fused keep gate decides by retrieval alone) and the keep decision over the ratings."""
from __future__ import annotations

import re
from dataclasses import dataclass

import dspy

from decoding.constrained import constrained_config, one_of
from decoding.decisions import PARSE_ERRORS, SCALE, record, relative
from programs.shared.gates import DecisionGate, DecisionMode, sorted_passages
from retrieval.corpus import Passage
from runtime.caps import field_cap
from signatures.critic import RateDocument

SCALES = ("relevance", "usefulness", "specificity", "compatibility")
SCORE = one_of(list("012345"))  # one critic scale under a grammar
#: The critique under a grammar: one line of at most as many characters as its field's token cap, so a reply under
#: the grammar fits the call's cap (the signature's: ``runtime.caps``) however its text tokenises. The 0.5B used to
#: fill the general 160-character line and ran into a 96-token cap of this call.
CRITIQUE = r"[^\n]{1,%d}" % field_cap("critique", RateDocument.output_fields["critique"])
MAX_TOTAL = 12.5  # s_tot of a candidate scoring 5 on every scale


@dataclass(frozen=True)
class Rated:
    """A candidate passage with its four critic scores (0-5; expected values, not integers, when read from token
    probabilities) and critique; ``rated=False`` (scores 0) when the critic was not asked."""

    passage: Passage
    relevance: float
    usefulness: float
    specificity: float
    compatibility: float
    critique: str = ""
    rated: bool = True

    @property
    def scores(self) -> tuple[float, float, float, float]:
        return self.relevance, self.usefulness, self.specificity, self.compatibility

    @property
    def total(self) -> float:
        """``s_tot = rel + 0.5 (use + spec + comp)`` (at most 12.5)."""
        return self.relevance + 0.5 * (self.usefulness + self.specificity + self.compatibility)

    @classmethod
    def of(cls, passage: Passage, values, critique: str = "") -> "Rated":
        """Scores clamped to 0-5 (anything unparseable as a number scores 0)."""
        def clamp(v) -> int:
            try:
                return max(0, min(5, int(round(float(v)))))
            except (TypeError, ValueError):
                return 0
        return cls(passage, *(clamp(v) for v in values), critique=str(critique or "").strip())


RATING_LINE = re.compile(r"^\W*(\d+)\W*?\|\s*(\d)\s*\|\s*(\d)\s*\|\s*(\d)\s*\|\s*(\d)\s*(?:\|\s*(.*))?$")


def parse_ratings(text: str) -> list[tuple[int, list[int], str]]:
    """The critic's ``n | rel | use | spec | comp [| critique]`` lines as (n, scores, critique); other lines skipped."""
    rows = []
    for line in (text or "").splitlines():
        if m := RATING_LINE.match(line.strip()):
            rows.append((int(m[1]), [int(m[i]) for i in range(2, 6)], (m[6] or "").strip()))
    return rows


def passes(rated: Rated, min_each: int = 2, min_total: float = 6.0) -> bool:
    """The paper's keep rule: every score >= ``min_each`` and ``s_tot >= min_total``."""
    return min(rated.scores) >= min_each and rated.total >= min_total


class EachCritic:
    """One call per candidate: its four scales as written, or as expected values over the score tokens (the
    decision ``mode``, :class:`~programs.shared.gates.DecisionMode`), with a short critique; an unreadable reply
    scores 0."""

    def __init__(self, predictor: dspy.Predict, mode: str | DecisionMode, chars: int | None):
        self.predictor, self.chars = predictor, chars
        self.mode = mode if isinstance(mode, DecisionMode) else DecisionMode(mode)

    def rate_one(self, passage: Passage, asked: str, trace) -> Rated:
        trace.calls["critic"] += 1
        config = constrained_config(self.predictor, {**dict.fromkeys(SCALES, SCORE), "critique": CRITIQUE})
        out, values = self.mode.scales(self.predictor, SCALES, SCALE, config, question=asked,
                                       document=passage.format(self.chars))
        if values is None:
            trace.parse_failures += 1
            return Rated.of(passage, [0, 0, 0, 0], "unparsed critic output")
        return Rated(passage, *values, critique=str(out.critique or "").strip())

    def rate(self, passages: list[Passage], asked: str, trace) -> list[Rated]:
        return [self.rate_one(p, asked, trace) for p in passages]


class BatchCritic:
    """``chunk`` candidates per call, one ``n | rel | use | spec | comp`` line each (numbers only: small models
    paste the document back as a critique); what a reply leaves unusable is rated by ``each``."""

    def __init__(self, predictor: dspy.Predict, each: EachCritic, chars: int | None, chunk: int):
        self.predictor, self.each, self.chars, self.chunk = predictor, each, chars, chunk

    def rate(self, passages: list[Passage], asked: str, trace) -> list[Rated]:
        rated = []
        for start in range(0, len(passages), self.chunk):
            chunk = passages[start:start + self.chunk]
            by_position = self.rate_batch(chunk, asked, trace)
            rated += [by_position.get(i) or self.each.rate_one(p, asked, trace) for i, p in enumerate(chunk, 1)]
        return rated

    def rate_batch(self, chunk: list[Passage], asked: str, trace) -> dict[int, Rated]:
        """One call for the whole chunk -> {position (1-based): Rated}; positions it misses are counted."""
        trace.calls["critic"] += 1
        numbered = [f"[{i}] {p.format(self.chars)}" for i, p in enumerate(chunk, 1)]
        try:
            text = self.predictor(question=asked, candidates=numbered,
                                  config={"max_tokens": 16 * len(chunk) + 32}).ratings
        except PARSE_ERRORS:
            text = ""
        ratings = parse_ratings(text)
        numbers = [doc for doc, _, _ in ratings]
        # each line goes to the document its number names, never by line order (a missing line would shift every
        # later score); a reply counting from 0 (a 0 and no number n) names document i + 1 by i
        shift = 1 if 0 in numbers and len(chunk) not in numbers else 0
        out: dict[int, Rated] = {}
        for number, scores, critique in ratings:
            pos = number + shift
            if 1 <= pos <= len(chunk) and pos not in out:
                out[pos] = Rated.of(chunk[pos - 1], scores, critique)
        if not out:
            trace.critic_fallbacks += 1
        else:
            trace.critic_missing += len(chunk) - len(out)
        return out


class KeepGate(DecisionGate):
    """Which new candidates CORAL keeps. Rating: the relevance oracle scores a gold candidate 5 on every scale and
    any other 0 (no call); a fused gate whose fit gave the critic no weight rates none (it keeps by retrieval
    alone); else ``critic`` rates them. Keeping: the paper's rule (:func:`passes`), or with fused decisions (not
    under the oracle) the gate over the critic's ``s_tot / 12.5`` fused with the candidate's retrieval score
    relative to the best candidate of its corpus this round.

    Args:
        critic: rates the candidates.
        min_each, min_total: the paper's keep rule (:func:`passes`).
        mode: the decision mode (``--decisions``: a mode's name or its :class:`~programs.shared.gates.DecisionMode`).
        roles: the program's oracle roles (``relevance`` answers it from gold).
        threshold: the fused probability that keeps a candidate, until a fit on dev replaces it.
    """

    def __init__(self, critic: EachCritic | BatchCritic, min_each: int, min_total: float, *,
                 mode: str | DecisionMode = "generate", roles: frozenset[str] = frozenset(),
                 threshold: float = 0.5):
        super().__init__("passage", mode, roles, "relevance", threshold=threshold)
        self.critic, self.min_each, self.min_total = critic, min_each, min_total

    def __call__(self, passages: list[Passage], candidates: list[Passage], asked: str,
                 trace) -> tuple[list[Rated], list[Rated]]:
        """``passages`` (new among this round's ``candidates``) rated and the ones kept: (rated, kept). Inside a
        trace one ``KeepGate`` span, its outputs each passage's scores, its ``kept`` and ``dropped`` the ids."""
        with self.span(type(self).__name__) as span:
            rated = self.rate(passages, asked, trace)
            kept = self.keep(rated, candidates)
            if span is not None:
                span.set_outputs({r.passage.id: dict(zip(SCALES, r.scores), total=r.total) for r in rated})
                sorted_passages(span, passages, {r.passage.id for r in kept})
            return rated, kept

    @property
    def weighs_retrieval(self) -> bool:
        """The fused keep decision (not under the oracle)."""
        return self.mode.fuses and not self.from_gold

    @property
    def decided(self) -> str | None:
        """:attr:`DecisionGate.decided` of the fused keep decision, the only one a fit decides (else None)."""
        return super().decided if self.weighs_retrieval else None

    def rate(self, passages: list[Passage], asked: str, trace) -> list[Rated]:
        if self.from_gold:
            return [Rated.of(p, [5 if self.gold(p) else 0] * 4) for p in passages]
        if self.weighs_retrieval and not self.reads_lm:
            trace.unrated += len(passages)
            return [Rated(p, 0, 0, 0, 0, rated=False) for p in passages]
        return self.critic.rate(passages, asked, trace)

    def keep(self, new: list[Rated], candidates: list[Passage]) -> list[Rated]:
        if not self.weighs_retrieval:
            return [r for r in new if passes(r, self.min_each, self.min_total)]
        by_corpus: dict[str, list[Passage]] = {}
        for p in candidates:
            by_corpus.setdefault(p.corpus, []).append(p)
        score = {p.id: s for group in by_corpus.values() for p, s in zip(group, relative([q.score for q in group]))}
        probs, scores = [r.total / MAX_TOTAL for r in new], [score[r.passage.id] for r in new]
        for r, prob, s in zip(new, probs, scores):
            record(self, prob, s, [r.passage])
        fused = self.fuse(probs, scores)
        return [r for r, f in zip(new, fused) if f >= self.thresholds["threshold"]]
