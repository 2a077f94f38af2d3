"""Shared answer writing: short answers, with or without evidence, and robust multiple-choice letters."""
from __future__ import annotations

import re

import dspy

from programs.retrieval import Passage
from signatures.writer import AnswerDirectly, AnswerFromPassages, ChooseOption, in_language


def format_options(options: dict[str, str]) -> str:
    return "\n".join(f"{letter}. {text}" for letter, text in options.items())


def parse_choice(raw: str, options: dict[str, str]) -> str:
    """Map model output to an option letter: an explicit letter first, else the option whose text it quotes.

    Returns "" when nothing matches, which scores as wrong rather than being guessed."""
    raw = (raw or "").strip()
    letters = "".join(options)
    explicit = (rf"^\(?([{letters}])\)?(?:[.):\s]|$)",                          # "B", "B.", "(B) text"
                rf"(?i:answer|option|choice)\s*(?:is|:)?\s*\(?([{letters}])\b")  # "the answer is B"
    for pattern in explicit:
        if m := re.search(pattern, raw):
            return m.group(1)
    lowered = raw.lower()
    quoted = [letter for letter, text in options.items() if text.strip() and text.strip().lower() in lowered]
    if len(quoted) == 1:
        return quoted[0]
    m = re.search(rf"\b([{letters}])\b", raw)                                    # a lone letter anywhere
    return m.group(1) if m else ""


def language_name(code: str) -> str:
    """The name of a language code, as the writer is told it."""
    from programs.mrag import LANGUAGE_NAMES  # mrag builds on this module

    return LANGUAGE_NAMES.get(code, code)


class Writer(dspy.Module):
    """Final answer from the question (+ passages, + options for multiple choice)."""

    def __init__(self, use_passages: bool = True, reasoning: bool = False, max_chars: int = 600):
        super().__init__()
        step = dspy.ChainOfThought if reasoning else dspy.Predict
        self.use_passages, self.max_chars = use_passages, max_chars
        self.short = step(AnswerFromPassages if use_passages else AnswerDirectly)
        self.choice = step(ChooseOption)

    def forward(self, question: str, passages: list[Passage] = (), options: dict[str, str] | None = None,
                lang: str | None = None):
        context = [p.format(self.max_chars) for p in passages] if self.use_passages else []
        if options:
            out = self.choice(passages=context, question=question, options=format_options(options))
            return dspy.Prediction(answer=parse_choice(out.answer, options), raw_answer=out.answer,
                                   reasoning=getattr(out, "reasoning", None))
        kwargs = {"passages": context} if self.use_passages else {}
        if lang:  # the question's language is known: ask for the answer in it
            kwargs.update(signature=in_language(self.short.signature), answer_language=language_name(lang))
        out = self.short(question=question, **kwargs)
        return dspy.Prediction(answer=out.answer.strip(), reasoning=getattr(out, "reasoning", None))
