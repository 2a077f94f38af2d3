"""RAG-Critic's error critic: judges a predicted answer from the question and its passages (no gold answer) and
labels errors with the three-tier taxonomy, keeping only valid labels (a closed set).

Labels are written as plain lines and parsed here (small models follow that better than typed lists). A label
not in the taxonomy is snapped to the most similar valid one or dropped; both are counted. Tier-1 categories
implied by the chosen tier-2 types (and tier-2 types implied by tier-3 labels) are added.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

import dspy

from programs.evidence import lenient
from programs.retrieval import Passage
from programs.taxonomy import Taxonomy, load_taxonomy, snap, split_labels
from programs.text import APOSTROPHES
from signatures.critic import CritiqueAnswer

CORRECT, ERROR = "Correct", "Error"


def parse_verdict(text: str | None) -> str | None:
    """"Correct" only when the reply clearly says so: a correct-word ("Correct", "The answer is accurate", "no
    errors") and no error-word, negation or hedge anywhere ("not entirely correct", "isn't fully correct",
    "Partially correct", "Yes, there is an error", "the passages are correct but the answer is wrong" are Error);
    "Error" for any other reply with a verdict word; None when there is none (callers treat None as Error).
    The critic's and Self-Refine's one Correct/Error decision."""
    text = _NO_ERRORS.sub(" correct ", (text or "").translate(APOSTROPHES).lower())
    ws = set(re.findall(r"[a-z]+", text.replace("n't", " not ")))
    if ws & _ERROR_WORDS or (ws & _CORRECT_WORDS and ws & _HEDGES):
        return ERROR
    return CORRECT if ws & _CORRECT_WORDS else None


_NO_ERRORS = re.compile(r"\b(?:no|without|free of)\s+(?:errors?|mistakes?|issues?|problems?)\b")
_CORRECT_WORDS = frozenset({"correct", "right", "accurate", "true"})
_ERROR_WORDS = frozenset({"error", "errors", "incorrect", "wrong", "false", "inaccurate", "mistake", "mistakes",
                          "incomplete", "unsupported", "partially", "partly", "partial"})
_HEDGES = frozenset({"not", "no", "never", "nor", "but", "however", "although", "though", "except", "mostly",
                     "largely", "somewhat", "almost", "nearly", "half", "may", "might", "unclear", "uncertain"})


@dataclass
class Critique:
    verdict: str | None  # Correct | Error | None (unparsed: treated as Error by callers that must act)
    analysis: str = ""
    tier1: list[str] = field(default_factory=list)
    tier2: list[str] = field(default_factory=list)
    tier3: list[str] = field(default_factory=list)
    snapped: int = 0  # written labels replaced by their nearest valid label
    dropped: int = 0  # written labels with no valid label close enough

    @property
    def flagged(self) -> bool:
        return self.verdict != CORRECT

    def text(self) -> str:
        """The critique as the planner reads it."""
        labels = "; ".join(self.tier1 + self.tier2 + self.tier3) or "none"
        return f"{self.analysis.strip() or 'no analysis'} (labels: {labels})"

    def as_dict(self) -> dict:
        return asdict(self)


class ErrorCritic(dspy.Module):
    """question + passages + prediction -> :class:`Critique` (one LM call)."""

    def __init__(self, taxonomy: Taxonomy | None = None, max_chars: int = 600):
        super().__init__()
        self.taxonomy = taxonomy or load_taxonomy()
        self.max_chars = max_chars
        self.judge = dspy.Predict(CritiqueAnswer)

    def forward(self, question: str, passages: list[Passage], prediction: str) -> Critique:
        out = lenient(self.judge, question=question,
                      passages=[f"[{i}] {p.format(self.max_chars)}" for i, p in enumerate(passages)],
                      prediction=prediction or "(no answer)", error_menu=self.taxonomy.tier2_lines())
        if out is None:
            return Critique(verdict=None, analysis="critic output not parsed")
        critique = Critique(verdict=parse_verdict(out.judgement), analysis=(out.analysis or "").strip())
        if critique.verdict == CORRECT:
            return critique
        tax = self.taxonomy
        critique.tier3 = self._snap(out.specifics, tax.tier3, critique)
        critique.tier2 = self._snap(out.error_types, tax.tier2, critique)
        critique.tier2 += [t for t in dict.fromkeys(tax.tier3_parent[t] for t in critique.tier3)
                           if t not in critique.tier2]
        critique.tier1 = self._snap(out.categories, tax.tier1, critique)
        critique.tier1 += [t for t in dict.fromkeys(tax.parent[t] for t in critique.tier2)
                           if t not in critique.tier1]
        return critique

    @staticmethod
    def _snap(text: str, choices: tuple[str, ...], critique: Critique) -> list[str]:
        kept = []
        for label in split_labels(text):
            valid = snap(label, choices)
            if valid is None:
                critique.dropped += 1
                continue
            critique.snapped += valid.lower() != label.lower()
            if valid not in kept:
                kept.append(valid)
        return kept
