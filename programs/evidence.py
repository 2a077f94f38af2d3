"""Evidence-loop helpers shared by SEAL-RAG and its Self-RAG baseline: the abstaining answer profile and
LM steps whose malformed output is tolerated."""
from __future__ import annotations

import dspy
from dspy.utils.exceptions import AdapterParseError

from programs.retrieval import Passage
from programs.writer import Writer
from signatures.writer import AnswerOrAbstain


def lenient(predictor: dspy.Module, **inputs) -> dspy.Prediction | None:
    """Call ``predictor``; output that cannot be parsed (even after DSPy's JSON fallback) gives None."""
    try:
        return predictor(**inputs)
    except AdapterParseError:
        return None


class EvidenceWriter(Writer):
    """One final generation: 2-4 words from verified facts and passages, or "I don't know".

    Multiple-choice questions keep the shared :class:`Writer` path (letter out)."""

    def __init__(self, max_chars: int = 600):
        super().__init__(use_passages=True, max_chars=max_chars)
        self.short = dspy.Predict(AnswerOrAbstain)

    def forward(self, question: str, passages: list[Passage] = (), options: dict[str, str] | None = None,
                facts: list[str] = ()):
        if options:
            return super().forward(question, passages, options)
        out = self.short(facts=list(facts), passages=[p.format(self.max_chars) for p in passages], question=question)
        return dspy.Prediction(answer=out.answer.strip())


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
