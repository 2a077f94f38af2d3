"""DummyLM helpers shared by the program tests: per-signature answer queues and a routed, metered DummyLM."""
from __future__ import annotations

import dspy
from dspy.utils.dummies import DummyLM
from dspy.utils.exceptions import AdapterParseError

from runtime.lm import ContextOverflow
from runtime.roles import init_dspy


class Queue:
    """Answers for one DummyLM dict-mode route, used in order (the last one repeats)."""

    def __init__(self, *answers):
        self.answers = list(answers)

    def items(self):
        return (self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]).items()


def routed(routes: dict) -> DummyLM:
    """A DummyLM answering each signature by a marker in its final message (first match wins), with metering."""
    lm = DummyLM({key: value if isinstance(value, Queue) else Queue(value) for key, value in routes.items()})
    init_dspy(lm, cache=False)
    return lm


def unreadable(reply: str = "no fields here") -> AdapterParseError:
    """What DSPy raises when a model's ``reply`` has none of the ``question -> answer`` output fields."""
    return AdapterParseError("ChatAdapter", dspy.Signature("question -> answer"), reply)


class Overflowing(DummyLM):
    """A DummyLM that raises ``runtime.lm.ContextOverflow`` (as the project's LM client does for a prompt past the
    context window) on a prompt holding ``marker``, and answers the others."""

    def __init__(self, answers, marker: str):
        super().__init__(answers)
        self.marker = marker

    def __call__(self, prompt=None, messages=None, **kwargs):
        if self.marker in str(messages or prompt):
            raise ContextOverflow("the prompt does not fit x's context window: 5000 tokens > 4096")
        return super().__call__(prompt=prompt, messages=messages, **kwargs)
