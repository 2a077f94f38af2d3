"""DummyLM helpers shared by the program tests: per-signature answer queues and a routed, metered DummyLM."""
from __future__ import annotations

import dspy
from dspy.utils.dummies import DummyLM
from dspy.utils.exceptions import AdapterParseError

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
