"""Shared answer writing: short answers, with or without evidence, and robust multiple-choice letters."""
from __future__ import annotations

import re

import dspy

from programs.retrieval import Passage
from programs.text import mentions, normalize
from signatures.writer import AnswerDirectly, AnswerFromPassages, ChooseOption


def format_options(options: dict[str, str]) -> str:
    return "\n".join(f"{letter}. {text}" for letter, text in options.items())


def _quoted_options(raw: str, options: dict[str, str]) -> list[str]:
    """Letters whose option text occurs in ``raw`` as whole words (case, punctuation and apostrophes ignored),
    leaving out options whose text is only part of another quoted option's text ("tea" inside "A cup of tea")."""
    quoted = {letter: normalize(text) for letter, text in options.items() if mentions(raw, text)}
    return [letter for letter, text in quoted.items()
            if not any(text != other and f" {text} " in f" {other} " for other in quoted.values())]


def parse_choice(raw: str, options: dict[str, str]) -> str:
    """Map model output to an option letter: the option whose text the reply quotes first, then an explicit
    letter ("B", "(B) ...", "the answer is B"), then a lone letter anywhere.

    Text goes first because a reply such as "A cup of tea" starts like the letter A while naming another option.
    Returns "" when nothing matches, which scores as wrong rather than being guessed."""
    raw = (raw or "").strip()
    quoted = _quoted_options(raw, options)
    if len(quoted) == 1:
        return quoted[0]
    letters = "".join(options)
    for pattern in (rf"^\(?([{letters}])\)?(?:[.):\s]|$)",                        # "B", "B.", "(B) text"
                    rf"(?i:answer|option|choice)\s*(?:is|:)?\s*\(?([{letters}])\b",  # "the answer is B"
                    rf"\b([{letters}])\b"):                                       # a lone letter anywhere
        if m := re.search(pattern, raw):
            return m.group(1)
    return ""


class Writer(dspy.Module):
    """Final answer from the question (+ passages, + options for multiple choice)."""

    def __init__(self, use_passages: bool = True, reasoning: bool = False, max_chars: int = 600):
        super().__init__()
        step = dspy.ChainOfThought if reasoning else dspy.Predict
        self.use_passages, self.max_chars = use_passages, max_chars
        self.short = step(AnswerFromPassages if use_passages else AnswerDirectly)
        self.choice = step(ChooseOption)

    def forward(self, question: str, passages: list[Passage] = (), options: dict[str, str] | None = None):
        context = [p.format(self.max_chars) for p in passages] if self.use_passages else []
        if options:
            out = self.choice(passages=context, question=question, options=format_options(options))
            return dspy.Prediction(answer=parse_choice(out.answer, options), raw_answer=out.answer,
                                   reasoning=getattr(out, "reasoning", None))
        kwargs = {"passages": context} if self.use_passages else {}
        out = self.short(question=question, **kwargs)
        return dspy.Prediction(answer=out.answer.strip(), reasoning=getattr(out, "reasoning", None))
