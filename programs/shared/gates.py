"""Gates that own a decision: how it is asked (its decision mode, ``--decisions``), its fitted thresholds, its oracle
answer, its rest state and its trace entry. A method calls its gate and reads the :class:`Ruling`; it never looks at
the mode.

- :class:`DecisionMode` is the decision mode (a program's ``decisions`` setting, ``--decisions``) by its ``name``:
  the written label parsed (``generate``), the label probability read from token logprobs (``logprob``), and for a
  decision about one passage the probability fused with the retriever's score (``fused``). It is the one place that
  knows the modes; a gate's ``path`` is which of its methods (``written``, ``scored``, ``fused``) its mode takes.
- :class:`DecisionGate` is a :class:`~decoding.decisions.Gate` (thresholds and weights, fitted on dev by
  ``optimizers.calibration``, saved with the program) that also knows its :class:`DecisionMode` and its oracle role.
- :class:`LabelGate` is the two-label decision on one output field (a sufficiency verdict, a stop, an error
  verdict).

Inside an MLflow trace each decision is a ``GATE`` span (:meth:`DecisionGate.span`) saying how it was asked, the
gate's thresholds and whether it is at rest, for a label gate the probability read and the label decided, and for a
decision over passages the ids it kept and dropped (:func:`sorted_passages`).
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator, NamedTuple, Sequence

import dspy
import mlflow

from decoding.constrained import constrained_config
from decoding.decisions import (AT_REST, ONE_CLASS, PARSE_ERRORS, REST, RESTING, Gate, check_mode, decide, record,
                                written_label)
from programs.shared.oracle import labelling, taught

#: The span type of a gate's decision in a trace (MLflow takes a type of one's own beside its ``SpanType``s).
GATE_SPAN = "GATE"


class DecisionMode:
    """The decision mode, how a program's decisions are asked (``--decisions``), by ``name``: ``generate``,
    ``logprob`` or ``fused`` (``decoding.decisions.MODES``).
    A scored decision goes through :func:`decoding.decisions.decide` (a one-label one through its adapter,
    ``LabelAdapter``)."""

    def __init__(self, name: str = "generate"):
        self.name = check_mode(name)

    @property
    def scored(self) -> bool:
        """Labels are read as probabilities from token logprobs."""
        return self.name != "generate"

    @property
    def fuses(self) -> bool:
        """A decision about one passage also weighs the retriever's score for it."""
        return self.name == "fused"

    def predictor(self, signature) -> dspy.Predict | None:
        """A predictor that only scored decisions ask (None when they are written)."""
        return dspy.Predict(signature) if self.scored else None

    def scales(self, predictor: dspy.Predict, names: Sequence[str], labels: Sequence[str], config: dict,
               **inputs) -> tuple[dspy.Prediction | None, list[float] | None]:
        """Numeric scales (``labels``: its digits) on output fields ``names``: the written numbers clamped to the
        scale (an unreadable one is its lowest value), or each scale's expected value over its label
        probabilities. (None, None) when the reply is unreadable; (output, None) when a scale could not be read."""
        if self.scored:
            decision = decide(predictor, dict.fromkeys(names, labels), config, **inputs)
            values = [decision.expected(n) for n in names]
            return decision.output, None if None in values else values
        try:
            out = predictor(**inputs, config=config)
        except PARSE_ERRORS:
            return None, None
        low, high = float(labels[0]), float(labels[-1])

        def clamp(value) -> int:
            try:
                return int(max(low, min(high, int(round(float(value))))))
            except (TypeError, ValueError):
                return int(low)
        return out, [clamp(out.get(n)) for n in names]


class DecisionGate(Gate):
    """A :class:`~decoding.decisions.Gate` asked in decision ``mode`` (a mode's name or its :class:`DecisionMode`),
    answered by the gold labels of its oracle ``role`` when that role is among the program's oracle ``roles``. A
    subclass asks through :meth:`asked`, which takes its ``written``, ``scored`` or ``fused`` path by the mode."""

    def __init__(self, kind: str, mode: str | DecisionMode = "generate", roles: frozenset[str] = frozenset(),
                 role: str | None = None, **thresholds: float):
        super().__init__(kind, **thresholds)
        self.mode = mode if isinstance(mode, DecisionMode) else DecisionMode(mode)
        self.roles, self.role = frozenset(roles), role

    @property
    def path(self) -> str:
        """The method the mode takes (a subclass without a ``fused`` path takes ``scored`` for it)."""
        return "fused" if self.mode.fuses and hasattr(self, "fused") else "scored" if self.mode.scored else "written"

    def asked(self, *args, **kwargs):
        """The decision taken by the mode's :attr:`path`, in a :meth:`span` whose outputs are what the path
        returned."""
        with self.span(type(self).__name__) as span:
            result = getattr(self, self.path)(*args, **kwargs)
            if span is not None:
                span.set_outputs(result)
            return result

    @contextmanager
    def span(self, name: str) -> Iterator:
        """Inside a trace, a :data:`GATE_SPAN` around one decision, its attributes how it is asked (``asked``: the
        oracle, or the mode and its ``path``), the gate's ``kind``, thresholds and ``at_rest``; None outside a
        trace (nothing is built)."""
        if mlflow.get_current_active_span() is None:
            yield None
            return
        asked = {"asked": "oracle"} if self.from_gold else {"asked": self.mode.name, "path": self.path}
        with mlflow.start_span(name, span_type=GATE_SPAN, attributes={
                **asked, "kind": self.kind, **self.thresholds, "at_rest": self.at_rest}) as span:
            yield span

    @property
    def from_gold(self) -> bool:
        """The oracle answers this decision (gold labels, no call)."""
        return self.role is not None and self.role in self.roles

    @property
    def decided(self) -> str | None:
        """How a decision's trace entry names a fit that decides it whatever the probability: :data:`ONE_CLASS`,
        :data:`~decoding.decisions.REST` where the LM is not asked (a fused gate whose fit gave it no weight),
        :data:`~decoding.decisions.RESTING` where it still is; None while a probability decides, under the oracle,
        or when the mode reads written labels (a fit decides none of those)."""
        if self.state is None or self.from_gold or not self.mode.scored:
            return None
        if self.state == ONE_CLASS:
            return ONE_CLASS
        return REST if self.mode.fuses and not self.reads_lm else RESTING

    def gold(self, *about) -> bool | None:
        """The oracle's answer about ``about`` (the passages held, the answer judged), None without the oracle."""
        label = labelling(self.roles, self.role) if self.role else None
        return None if label is None else bool(label(*about))


def sorted_passages(span, passages: Sequence, kept: set[str]) -> None:
    """On the span of a decision over ``passages``, attributes ``kept`` (the ids in ``kept``) and ``dropped`` (the
    others), in the passages' order."""
    span.set_attributes({"kept": [p.id for p in passages if p.id in kept],
                         "dropped": [p.id for p in passages if p.id not in kept]})


class Ruling(NamedTuple):
    """One decision as a gate made it: the ``label`` (None: unreadable), the reply (None: no call, or unreadable),
    the probability of the gate's first label when one was read, how a probability could not change it
    (``decided``: :data:`~decoding.decisions.REST`, :data:`~decoding.decisions.RESTING` or
    :data:`~decoding.decisions.ONE_CLASS`, :attr:`DecisionGate.decided`), the unreadable
    replies on the way, and whether the oracle decided it."""

    label: str | None
    output: dspy.Prediction | None = None
    prob: float | None = None
    decided: str | None = None
    failures: int = 0
    oracle: bool = False

    @property
    def called(self) -> bool:
        """The LM was asked."""
        return not self.oracle and self.decided != REST

    def trace(self, name: str) -> dict:
        """The trace entry: ``{name: probability}`` when one was read, ``{"decided": ...}`` when a fit fixed it."""
        return {**({name: self.prob} if self.prob is not None else {}),
                **({"decided": self.decided} if self.decided else {})}

    def attributes(self) -> dict:
        """What a decision's span shows of the ruling: the ``label`` (``unreadable`` when none), the ``probability``
        read, what ``decided`` it without a probability, whether the LM was ``called`` and its unreadable replies."""
        return {"label": self.label or "unreadable", "called": self.called, "failures": self.failures,
                **({"probability": self.prob} if self.prob is not None else {}),
                **({"decided": self.decided} if self.decided else {})}


class LabelGate(DecisionGate):
    """A decision between ``labels`` (the first one positive) on output field ``field`` of ``predictor``.

    Asked as written, the reply is read by ``parse``; asked as scored, the probability of ``labels[0]`` is read
    from logprobs and decided against ``threshold`` (without logprobs a custom ``parse`` reads the written reply,
    else the written label counts as probability 1). Every probability read is recorded for calibration
    (:func:`decoding.decisions.record`). At rest (a fit that decides every probability
    :data:`~decoding.decisions.AT_REST`) the gate answers that label without a call. The oracle's "act no further"
    is the at-rest label without a call; its other answer overrides the label read.

    Args:
        predictor, field: the predictor asked, and its output field that holds the label.
        labels: the two labels, the positive one first.
        kind: what the decision is about, as calibration labels it (``decoding.decisions.KINDS``).
        mode: the decision mode, how it is asked (``--decisions``: a mode's name or its :class:`DecisionMode`).
        roles, role: the program's oracle roles, and the one that answers this decision from gold.
        parse: ``parse(output, label=None)`` reads a written reply (default: the label the field starts with); it
            may refuse a label whose other fields are unusable.
        tries: attempts of the written path (later ones sample anew); with more than one, an unreadable scored
            reply is asked again as written.
        rests: answer the at-rest label without a call (False: the method reads other fields of the reply).
        oracle_asks: the oracle's other answer asks the LM too, for the reply's other fields.
        grammar: output field -> GBNF rule, the reply decoded under it where the endpoint supports it.
        threshold: the probability of ``labels[0]`` that decides it, until a fit on dev replaces it.
    """

    def __init__(self, predictor: dspy.Predict, field: str, labels: tuple[str, str], *, kind: str,
                 mode: str | DecisionMode = "generate", roles: frozenset[str] = frozenset(), role: str | None = None,
                 parse: Callable | None = None, tries: int = 1, rests: bool = True, oracle_asks: bool = False,
                 grammar: dict[str, str] | None = None, threshold: float = 0.5):
        super().__init__(kind, mode, roles, role, threshold=threshold)
        self.predictor, self.field, self.labels, self.grammar = predictor, field, tuple(labels), grammar
        self.parse, self.tries, self.rests, self.oracle_asks = parse, tries, rests, oracle_asks

    @property
    def rest_label(self) -> str:
        return self.labels[0] if AT_REST[self.kind] else self.labels[1]

    def __call__(self, inputs: dict, gold=None, passages=(), answer: str | None = None) -> Ruling:
        """Decide on the predictor's ``inputs``: ``gold`` is what the oracle judges, ``passages`` / ``answer`` what
        a recorded probability is about. Inside a trace the decision is a span ``LabelGate.<field>``
        (:meth:`~DecisionGate.span`) with the ruling's :meth:`~Ruling.attributes`."""
        with self.span(f"{type(self).__name__}.{self.field}") as span:
            ruling = self.rule(inputs, gold, passages, answer)
            if span is not None:
                span.set_attributes(ruling.attributes())
            return ruling

    def rule(self, inputs: dict, gold, passages, answer: str | None) -> Ruling:
        truth = self.gold(gold) if self.from_gold else None
        if truth is not None:
            label = self.rest_label if truth else next(x for x in self.labels if x != self.rest_label)
            if truth or not self.oracle_asks:
                taught(self.predictor, inputs, **{self.field: label})  # a label alone: only a one-field decision
                return Ruling(label, oracle=True)
            ruling = self.ask(passages, answer, inputs)
            return ruling._replace(label=label if ruling.output is not None else None, decided=None)
        return self.ask(passages, answer, inputs)

    def ask(self, passages, answer, inputs: dict) -> Ruling:
        if self.rests and self.at_rest:
            return Ruling(self.rest_label, dspy.Prediction(**{self.field: self.rest_label}), decided=REST)
        return getattr(self, self.path)(inputs, passages=passages, answer=answer)

    def read(self, out: dspy.Prediction, label: str | None = None) -> str | None:
        if self.parse is not None:
            return self.parse(out, label)
        return label if label is not None else written_label(out.get(self.field), self.labels)

    def config(self) -> dict:
        return constrained_config(self.predictor, self.grammar) if self.grammar else {}

    def written(self, inputs: dict, label: str | None = None, **_) -> Ruling:
        """The written path: at most ``tries`` calls until the reply reads (``label``: the label is given, the
        reply must only be usable)."""
        out, config = None, self.config()
        for attempt in range(self.tries):
            again = {"rollout_id": attempt, "temperature": 0.7} if attempt else {}
            try:
                out = self.predictor(**inputs, config={**config, **again})
            except PARSE_ERRORS:
                out = None
                continue
            if (read := self.read(out, label)) is not None:
                return Ruling(read, out, failures=attempt)
        return Ruling(None, out, failures=self.tries)

    def scored(self, inputs: dict, passages=(), answer: str | None = None) -> Ruling:
        """The scored path; with more than one of ``tries`` an unreadable reply is asked again as written."""
        ruling = self.probability(inputs, passages, answer)
        if ruling.label is None and self.tries > 1:
            again = self.written(inputs)
            return again._replace(prob=ruling.prob, decided=ruling.decided, failures=1 + again.failures)
        return ruling

    def probability(self, inputs: dict, passages, answer) -> Ruling:
        decision = decide(self.predictor, {self.field: self.labels}, self.config(), **inputs)
        out = decision.output
        if out is None:
            return Ruling(None, failures=1)
        if self.parse is not None:
            prob = (decision.probs.get(self.field) or {}).get(self.labels[0])
        else:
            prob = decision.prob(self.field, self.labels[0])
        if prob is None:
            label = self.read(out)
            return Ruling(label, out, failures=int(label is None))
        record(self, prob, None, passages, answer)
        label = self.read(out, self.labels[0] if prob >= self.thresholds["threshold"] else self.labels[1])
        return Ruling(label, out, prob, self.decided, int(label is None))
