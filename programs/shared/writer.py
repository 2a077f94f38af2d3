"""Shared answer writing: short answers, with or without evidence, and robust multiple-choice letters."""
from __future__ import annotations

import re
from contextlib import contextmanager
from contextvars import ContextVar

import dspy

from decoding.choice import TOP_LOGPROBS, MCScoring, letter_logprobs, normalized, warn_no_logprobs
from programs.shared.oracle import labelling, taught
from programs.shared.text import IDK, mentions, normalize
from retrieval.corpus import Passage
from runtime.language import language_name
from signatures.writer import AnswerDirectly, AnswerFromPassages, ChooseOption, in_language, with_instruction


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


#: The writer oracle's reasoning (a chain of thought's), by whether the context shown supports an answer.
READ = {True: "The passages state every fact the question needs, so the answer can be read off them.",
        False: "The passages do not state every fact the question needs, so I cannot answer from them."}

_CHOICES: ContextVar[list | None] = ContextVar("choices", default=None)


@contextmanager
def recorded_choices():
    """Within the block, every multiple-choice writer call appends ``(writer, question, context, options)`` to the
    yielded list: what PriDe calibration re-asks with the options shifted (``optimizers.calibration``)."""
    calls: list = []
    token = _CHOICES.set(calls)
    try:
        yield calls
    finally:
        _CHOICES.reset(token)


def told_language(predictor: dspy.Module, lang: str | None) -> dict:
    """The call arguments that ask ``predictor`` (a Predict, or a chain of thought's own Predict) for its answer in
    ``lang``, the question's language where it is known; none otherwise."""
    if not lang:
        return {}
    signature = getattr(predictor, "predict", predictor).signature
    return {"signature": in_language(signature), "answer_language": language_name(lang)}


class Writer(dspy.Module):
    """Final answer from the question (+ passages, + options for multiple choice).

    ``mc`` says how a multiple-choice letter is picked (``decoding.choice``): from the written reply (the default),
    or from the option-letter probabilities of the LM, optionally debiased. A program passes its own ``mc`` (a
    constructor argument, :func:`programs.build`) to every writer it builds, so they all share it.

    ``oracle``: the program's oracle roles (:func:`oracle_writers` sets them); with ``writer`` among them the answer
    is a perfect reader's of the context shown (``Gold.writer``), no call."""

    oracle: frozenset[str] = frozenset()

    def __init__(self, use_passages: bool = True, reasoning: bool = False, max_chars: int | None = None,
                 mc: MCScoring | None = None):
        super().__init__()
        step = dspy.ChainOfThought if reasoning else dspy.Predict
        self.use_passages, self.max_chars = use_passages, max_chars
        self.short = step(AnswerFromPassages if use_passages else AnswerDirectly)
        self.choice = step(ChooseOption)
        self.mc = mc or MCScoring()

    def forward(self, question: str, passages: list[Passage] = (), options: dict[str, str] | None = None,
                lang: str | None = None, instruction: str | None = None):
        """The answer (and a chain of thought's reasoning); ``instruction``: the same writer answering again, told
        what to fix (:func:`~signatures.writer.with_instruction`; a multiple-choice letter is picked without it)."""
        if (read := self.perfect_reader()) is not None:
            answer = read(list(passages) if self.use_passages else [], options, self.max_chars)
            self.teach(question, passages, options, lang, answer)
            return dspy.Prediction(answer=answer, reasoning=None)
        context = [p.format(self.max_chars) for p in passages] if self.use_passages else []
        if options:
            return self.choose(question, context, options)
        kwargs = ({"passages": context} if self.use_passages else {}) | told_language(self.short, lang)
        if instruction is not None:
            signature = kwargs.get("signature") or getattr(self.short, "predict", self.short).signature
            kwargs |= {"signature": with_instruction(signature), "instruction": instruction}
        out = self.short(question=question, **kwargs)
        return dspy.Prediction(answer=out.answer.strip(), reasoning=getattr(out, "reasoning", None))

    def teach(self, question: str, passages, options: dict[str, str] | None, lang: str | None, answer: str) -> None:
        """The perfect reader's ``answer`` recorded as the call of the predictor it stands in for
        (:func:`~programs.shared.oracle.taught`), on the inputs that predictor would have read. A chain of thought's
        reasoning is the reader's own: the context states what the question needs (:data:`READ`), or it does
        not."""
        context = [p.format(self.max_chars) for p in passages] if self.use_passages else []
        step, inputs = self.short, {"question": question, **({"passages": context} if self.use_passages else {}),
                                    **({"answer_language": language_name(lang)} if lang else {})}
        if options:
            step, inputs = self.choice, {"passages": context, "question": question, "options": format_options(options)}
        predictor = getattr(step, "predict", step)
        reasoning = {"reasoning": READ[answer != IDK]} if "reasoning" in predictor.signature.output_fields else {}
        taught(predictor, inputs, answer=answer, **reasoning)

    def perfect_reader(self):
        """The writer oracle's answer (``Gold.writer``) when ``writer`` is among this writer's oracle roles, else
        None."""
        return labelling(self.oracle, "writer")

    def choose(self, question: str, context: list[str], options: dict[str, str]) -> dspy.Prediction:
        """The option letter: parsed from the reply, or the most probable letter at the answer's first token."""
        if (calls := _CHOICES.get()) is not None:
            calls.append((self, question, context, options))
        config = {"logprobs": True, "top_logprobs": TOP_LOGPROBS} if self.mc.reads_logprobs else {}
        out = self.choice(passages=context, question=question, options=format_options(options), config=config)
        answer = written = parse_choice(out.answer, options)
        probs = None
        if self.mc.reads_logprobs:
            logps = letter_logprobs(out.get("logprobs"), "".join(options))
            if logps is None:
                lm = self.choice_lm()
                if out.get("logprobs") is None:
                    warn_no_logprobs(getattr(lm, "model", str(lm)))
            else:
                probs = normalized(logps)
                answer = self.mc.pick(probs)
                if self.mc.observed is not None:
                    self.mc.observed.append({"written": written, "probs": probs, "answer": answer})
        return dspy.Prediction(answer=answer, raw_answer=out.answer, option_probs=probs,
                               reasoning=getattr(out, "reasoning", None))

    def choice_lm(self):
        predictor = getattr(self.choice, "predict", self.choice)
        return predictor.lm or dspy.settings.lm


def oracle_writers(program: dspy.Module, roles: frozenset[str]) -> dspy.Module:
    """``program`` with every :class:`Writer` in it answering under the oracle ``roles`` (the writer role: a perfect
    reader, no call); the program itself."""
    for _, writer in program.named_sub_modules(Writer):
        writer.oracle = roles
    return program


def mc_state(program: dspy.Module) -> list[dict]:
    """The scoring mode (and prior) of every writer in ``program``: what its multiple-choice answers depend on."""
    return [{"mode": w.mc.mode, "prior": w.mc.prior} for _, w in program.named_sub_modules(Writer)]


def writer_form(program: dspy.Module) -> list[tuple]:
    """What ``program``'s answer writer (its ``writer``) asks of the LM: per predictor its name, instructions and
    fields in prompt order (a chain of thought adds ``reasoning``). Programs of one form answer under one writer."""
    return [(name, p.signature.instructions, [(key, f.annotation, f.json_schema_extra)
                                              for key, f in p.signature.fields.items()])
            for name, p in program.writer.named_predictors()]
