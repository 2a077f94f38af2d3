"""Steps that own a generative role, as gates (``programs.shared.gates``) own a decision: a method's query writer,
planner, gap specification or correction plan asks its predictor, or -- its oracle role among the program's oracle
roles -- answers from the question's gold labels without a call and records that answer as the predictor's call (the
demo a teacher gives, :func:`~programs.shared.oracle.taught`). A method calls its step and reads the :class:`Reply`;
it never looks at the oracle roles. The reader is the shared writer (``programs.shared.writer.Writer``: the perfect
reader under ``writer``).

- :class:`Role` is one oracle role of a program: whether the oracle answers it and the gold answer (a decision a
  method reads without a gate of its own: SEAL's relevance ranking, MetaRAG's monitor, the step programs' stop).
- :class:`RoleStep` is a generative role on one predictor.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

import dspy

from programs.shared.evidence import retried
from programs.shared.oracle import labelling, taught


class Role:
    """Oracle role ``role`` of a program built with the oracle ``roles``."""

    def __init__(self, role: str, roles: frozenset[str] = frozenset()):
        self.role, self.roles = role, frozenset(roles)

    @property
    def from_gold(self) -> bool:
        """The oracle answers this role (gold labels, no call)."""
        return self.role in self.roles

    def gold(self, *about):
        """The oracle's answer about ``about`` (the passages held, the answer judged); None without the oracle.
        Each answer is metered as one ``oracle_calls`` (:func:`~programs.shared.oracle.labelling`)."""
        label = labelling(self.roles, self.role)
        return None if label is None else label(*about)

    def answer(self, *about):
        """The oracle's answer about ``about`` as the method reads it (a role's: the gold answer itself)."""
        return self.gold(*about)

    def over(self, asked: Callable[[], Any], *about):
        """The oracle's :meth:`answer` about ``about`` in place of ``asked()`` (not called under the oracle). No demo
        is recorded: the reply it overrides is in DSPy's trace, or the call it stands in for answers another thing."""
        return self.answer(*about) if self.from_gold else asked()


class Reply(NamedTuple):
    """What a step gave: its ``value`` (read from the LM's reply, or the gold answer; None when unreadable), the
    unreadable replies on the way, and whether the oracle gave it."""

    value: Any = None
    failures: int = 0
    oracle: bool = False


class RoleStep(Role):
    """Generative role ``role`` of ``predictor``. Asked, the predictor's reply is read by ``read`` (default: its
    ``field``), at most ``tries`` times while it reads as None (later tries sample anew, ``evidence.retried``).
    Under the oracle, ``given`` turns the gold answer about what is held into the step's value (default: as is)
    and ``demo`` into the predictor's output fields (default: ``{field: value}``; None: no demo), recorded as
    its call on the same inputs (:func:`~programs.shared.oracle.taught`).

    Args:
        predictor: asks the step (None: a step only the oracle answers).
        role, roles: the step's oracle role, and the program's oracle roles.
        field: the output field read, and the demo's.
        read: ``read(output)``, the step's value from a reply (returning None: unusable).
        given: ``given(gold)``, the oracle's answer as the step's value.
        demo: ``demo(value)``, the output fields of the oracle's demo (returning None: no demo).
        tries: attempts while the reply reads as None.
    """

    def __init__(self, predictor: dspy.Predict | None, role: str, roles: frozenset[str], *, field: str = "query",
                 read: Callable | None = None, given: Callable | None = None, demo: Callable | None = None,
                 tries: int = 1):
        super().__init__(role, roles)
        self.predictor, self.field, self.tries = predictor, field, tries
        self.read = read or (lambda out: out.get(field))
        self.given = given or (lambda value: value)
        self.demo = demo or (lambda value: {field: value})

    def answer(self, *about):
        """The oracle's answer about ``about`` as the step's value (``given``)."""
        return self.given(self.gold(*about))

    def __call__(self, inputs: dict | Callable[[], dict], held=(), fresh: bool = True,
                 ask: Callable[[], Any] | None = None) -> Reply | None:
        """The step on the predictor's ``inputs`` (a dict, or what makes it: read only when used) with the
        passages ``held``: the oracle's answer about them, or the LM's reply (``ask()`` when given: the method's
        own way of asking, which counts its own failures). ``fresh=False``: the inputs are those of an earlier call,
        which would get the same reply: None (no call), while the oracle, which reads what is held, answers anew."""
        if self.from_gold:
            value = self.answer(held)
            if (outputs := self.demo(value)) is not None:
                taught(self.predictor, inputs, **outputs)
            return Reply(value, oracle=True)
        if not fresh:
            return None
        if ask is not None:
            return Reply(ask())
        value, failures = retried(self.predictor, self.read, self.tries, **(inputs() if callable(inputs) else inputs))
        return Reply(value, failures)
