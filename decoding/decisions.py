"""Scored decisions (``--decisions``): every closed-set LM decision of a gate or filter, read as a probability.

A decision is a DSPy Signature whose output fields hold labels from a closed set (labels differing at their first
token: ``yes``/``no``, ``True``/``False``, ``correct``/``ambiguous``/``incorrect``, the digits of a 0-5 scale).
Decision modes (a program's ``decisions`` setting, set when it is built):

- ``generate``: the written label, parsed;
- ``logprob``: the distribution over the labels at the field's first token, from the endpoint's token logprobs
  (``decoding.choice.label_logprobs``), renormalised over the labels; graded scales read as expected values
  ``sum p(s) s``. The reply is written freely (no grammar), so the same call also gives the written label;
- ``fused``: ``logprob``, and a decision about one passage also weighs the retriever's score for it (:class:`Gate`).

An endpoint that returns no logprobs gets the written label read as probability 1 (as ``generate`` reads it), with
one warning line per LM. Thresholds and fusion weights are program state (:class:`Gate`, saved in the compiled
JSON); uncompiled programs use each paper's fixed thresholds; ``fit_gate`` fits them on labelled dev decisions.
A program asks its decisions through the gates of ``programs.shared.gates``, which own the mode
(``DecisionMode``).
"""
from __future__ import annotations

import logging
import math
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import NamedTuple, Sequence

import dspy
from dspy.predict.parameter import Parameter

from decoding.choice import TOP_LOGPROBS, label_logprobs, normalized, warn_no_logprobs
from runtime.lm import UNREADABLE_ERRORS

MODES = ("generate", "logprob", "fused")
YES_NO = ("yes", "no")
SCALE = tuple("012345")


#: An unreadable reply, read as an unreadable decision: DSPy's and pydantic's parse errors. Nothing else is (a
#: context overflow, an endpoint error, a bug propagate).
PARSE_ERRORS = UNREADABLE_ERRORS
LABEL_TOKENS = 1  # a bare label decision's reply: its first token decides it
#: What a gate's decisions are about, and their gold label in calibration: ``passage`` (it is a gold passage),
#: ``set`` (the set holds every gold passage), ``correct`` / ``error`` (the answer judged is right / wrong by the task
#: metric: a stop or acceptance, and an error verdict).
KINDS = ("passage", "set", "correct", "error")
ANSWER_KINDS = ("correct", "error")
NEVER = math.nextafter(1.0, 2.0)  # a threshold no probability reaches: the gate decides every decision negative
RETRIEVER = "the retriever's score"
#: The label under which a program acts no further -- keep the passage, the set is enough, the answer stands, no
#: error to correct: what a gate decides when its LM probability told nothing on dev and no retriever score is
#: fused (:func:`fit_gate`).
AT_REST = {"passage": True, "set": True, "correct": True, "error": False}
#: How a trace names a decision its gate made whatever the probability: at rest (the :data:`AT_REST` label, asked of
#: no LM where the program can skip the call), or one-class (the other label, as a fit on one-class dev decisions sets).
REST, ONE_CLASS = "at rest (no call)", "one-class"
#: A decision at rest whose LM is still asked: the program reads the reply's other fields (SEAL's criteria, Self-RAG's
#: usefulness, CORAL's critic scores), but the fit decides the label whatever the probability.
RESTING = "at rest (asked)"


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise ValueError(f"unknown --decisions '{mode}'; choose one of: {', '.join(MODES)}")
    return mode


def written_label(text, labels: Sequence[str]) -> str | None:
    """The label a written value starts with (case, spaces and punctuation around it ignored), else None."""
    word = str(text if text is not None else "").strip().strip("()[]*\"'.:").split()
    word = word[0].strip("()[]*\"'.:,").casefold() if word else ""
    return next((label for label in labels if label.casefold() == word), None)


class LabelAdapter(dspy.Adapter):
    """A one-field closed-set decision as a bare prompt: the signature's instructions as the system message, the
    inputs as ``Name: value`` lines, and a last line naming the labels; the reply is the label itself (so one
    output token decides it) -- no field headers for a small model to copy, miss or spend tokens on. Demos
    (compiled) are user/assistant turns in the same form."""

    def __init__(self, labels: Sequence[str]):
        super().__init__()
        self.labels = tuple(labels)

    def _output(self, signature) -> str:
        if len(signature.output_fields) != 1:
            raise ValueError(f"LabelAdapter needs one output field, {signature.__name__} has "
                             f"{len(signature.output_fields)}")
        return next(iter(signature.output_fields))

    def format_system_message(self, signature) -> str:
        return signature.instructions

    def format_user_message_content(self, signature, inputs, prefix="", suffix="", main_request=False) -> str:
        self._output(signature)
        lines = [f"{field.json_schema_extra['prefix']} {inputs[name]}"  # DSPy's "Question:" for ``question``
                 for name, field in signature.input_fields.items() if name in inputs]
        return "\n\n".join([prefix, *lines, f"Answer with one word: {' or '.join(self.labels)}.", suffix]).strip()

    def format_assistant_message_content(self, signature, outputs, missing_field_message=None) -> str:
        return str(outputs.get(self._output(signature), missing_field_message or ""))

    def parse(self, signature, completion: str) -> dict:
        return {self._output(signature): completion.strip()}


@dataclass
class Decision:
    """One call's reading: the parsed output (None when unreadable) and, per field, the label distribution read
    from logprobs (None when the endpoint gave none: the written label then counts with probability 1)."""

    output: dspy.Prediction | None
    labels: dict[str, Sequence[str]]
    probs: dict[str, dict[str, float] | None] = field(default_factory=dict)

    def distribution(self, name: str) -> dict[str, float] | None:
        """Label probabilities of field ``name``: from logprobs, else 1 on the written label; None if neither."""
        if self.probs.get(name):
            return self.probs[name]
        written = written_label(self.output.get(name) if self.output is not None else None, self.labels[name])
        return {label: float(label == written) for label in self.labels[name]} if written else None

    def prob(self, name: str, label: str) -> float | None:
        dist = self.distribution(name)
        return dist[label] if dist else None

    def expected(self, name: str) -> float | None:
        """``sum p(s) s`` over a numeric scale's labels."""
        dist = self.distribution(name)
        return sum(p * float(s) for s, p in dist.items()) if dist else None


_BARE: ContextVar[bool] = ContextVar("bare_label_call", default=False)


class _CapIsNotTruncation(logging.Filter):
    """DSPy warns when a reply stops at ``max_tokens``; for a bare label decision that is the design."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (_BARE.get() and "truncated" in record.getMessage())


logging.getLogger("dspy.clients.lm").addFilter(_CapIsNotTruncation())


def decide(predictor: dspy.Predict, labels: dict[str, Sequence[str]], config: dict | None = None,
           chat: bool = False, **inputs) -> Decision:
    """Ask ``predictor`` once with token logprobs requested and read each field of ``labels`` as a distribution.
    Fields not in ``labels`` stay free text. A signature whose one output is the label is asked through
    :class:`LabelAdapter` (the reply is the label: 170 prompt tokens and 1 output token where the ChatAdapter
    spends 298 and 6.5 on the 0.5B, the same AUC within noise, docs/decision_quality.md) unless ``chat`` asks for
    the configured adapter. Unparseable output gives ``Decision(output=None)``."""
    lm = predictor.lm or dspy.settings.lm
    config = {**(config or {}), "logprobs": True, "top_logprobs": TOP_LOGPROBS}
    bare = not chat and len(labels) == 1 and list(predictor.signature.output_fields) == list(labels)
    if bare:
        config["max_tokens"] = LABEL_TOKENS
    token = _BARE.set(bare)
    try:
        with dspy.context(adapter=LabelAdapter(*labels.values())) if bare else nullcontext():
            out = predictor(**inputs, config=config)
    except PARSE_ERRORS:
        return Decision(None, labels)
    finally:
        _BARE.reset(token)
    logprobs = out.get("logprobs")
    if logprobs is None:
        warn_no_logprobs(getattr(lm, "model", str(lm)), "decisions fall back to --decisions generate")
    probs = {}
    for name, values in labels.items():
        logps = label_logprobs(logprobs, list(values), name)
        probs[name] = normalized(logps) if logps else None
    return Decision(out, labels, probs)


def _logit(p: float) -> float:
    p = min(max(p, 1e-4), 1 - 1e-4)
    return math.log(p / (1 - p))


def _sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x)) if x >= 0 else math.exp(x) / (1 + math.exp(x))


def features(p_lm: float, retrieval: float) -> list[float]:
    """The fusion model's two features: the LM probability's logit and the retriever's (:func:`relative`) score."""
    return [_logit(p_lm), float(retrieval)]


def relative(scores: Sequence[float]) -> list[float]:
    """Retriever scores as the fusion reads them: each minus the best of the passages judged together. Scores
    compare within one search, not across questions (a question with close cosines is not a question with
    relevant passages): among the retriever's top-5 this separates gold at AUC 0.787 where the raw cosine gives
    0.742 (MuSiQue; HotpotQA 0.813 vs 0.798; docs/decision_quality.md)."""
    top = max(scores, default=0.0)
    return [s - top for s in scores]


class Gate(Parameter):
    """Thresholds and fusion weights of one decision type: program state, saved with the demos.

    ``thresholds`` start at the paper's fixed values (``unfit`` restores them). ``weights`` (bias, w_lm,
    w_retrieval) of a logistic model over :func:`features` are fitted by :func:`fit_gate`; while unfitted, a fused
    decision is the even mix of the LM probability and the retriever's score min-max scaled over the passages
    judged together. ``kind`` says what a decision is about, and so how calibration labels it (:data:`KINDS`).
    A fitted weight of 0 on the LM feature (:func:`fit_gate` found it adds nothing on dev) means the gate decides by
    the retriever's score alone, and a program need not ask the LM (:attr:`reads_lm`)."""

    def __init__(self, kind: str = "passage", **thresholds: float):
        if kind not in KINDS:
            raise ValueError(f"unknown gate kind '{kind}'; choose one of: {', '.join(KINDS)}")
        self.kind, self.defaults = kind, dict(thresholds)
        self.unfit()

    def unfit(self):
        self.thresholds, self.weights = dict(self.defaults), None

    def reset(self):
        """Nothing: DSPy's optimizers start from ``reset_copy()``, which resets every parameter to forget what an
        earlier compile learned (demos); a gate's fit comes from calibration on dev, not from the optimizer, and the
        compile must run the program through it (``optimizers.fitting.compile_fitted``)."""

    def dump_state(self, json_mode=True) -> dict:
        return {"thresholds": dict(self.thresholds), "weights": self.weights}

    def load_state(self, state: dict) -> "Gate":
        thresholds, weights = state["thresholds"], state.get("weights")
        if set(thresholds) != set(self.defaults) or not all(isinstance(v, (int, float)) for v in thresholds.values()):
            raise ValueError(f"gate thresholds {thresholds!r} do not fit {sorted(self.defaults)}")
        if weights is not None and (len(weights) != 3 or not all(isinstance(w, (int, float)) for w in weights)):
            raise ValueError(f"gate weights {weights!r} are not three numbers")
        self.thresholds, self.weights = {k: float(v) for k, v in thresholds.items()}, weights
        return self

    @property
    def reads_lm(self) -> bool:
        """Whether a fused decision depends on the LM probability (unfitted, or fitted with an LM weight)."""
        return self.weights is None or self.weights[1] != 0

    @property
    def fixed(self) -> bool | None:
        """The label every decision gets whatever its probability (True: every threshold is 0, False: every one is
        :data:`NEVER`, as :func:`decide_all` sets them), None while a probability decides."""
        values = self.thresholds.values()
        return True if all(t <= 0 for t in values) else False if all(t >= NEVER for t in values) else None

    @property
    def at_rest(self) -> bool:
        """Whether every decision is :data:`AT_REST` whatever its probability (a one-class fit or an LM dropped by
        :func:`fit_gate`): the program acts no further and needs no call to know it."""
        return self.fixed == AT_REST[self.kind]

    @property
    def state(self) -> str | None:
        """:data:`REST` or :data:`ONE_CLASS` when :attr:`fixed` decides, else None."""
        return None if self.fixed is None else REST if self.at_rest else ONE_CLASS

    def fuse(self, probs: list[float], scores: list[float]) -> list[float]:
        """Fused probabilities of the passages judged together (LM probabilities and retriever scores)."""
        if self.weights is not None:
            b, w_lm, w_ret = self.weights
            return [_sigmoid(b + w_lm * x + w_ret * r) for x, r in (features(p, s) for p, s in zip(probs, scores))]
        low, high = min(scores, default=0.0), max(scores, default=0.0)
        scaled = [(s - low) / (high - low) if high > low else 1.0 for s in scores]
        return [0.5 * p + 0.5 * r for p, r in zip(probs, scaled)]


def fit_fusion(rows: list[tuple[float, float]], gold: list[bool], lm: bool = True) -> list[float]:
    """Logistic-regression weights (bias, w_lm, w_retrieval) on (LM probability, retriever score) pairs, in the
    features' own units; ``lm=False`` fits the retriever's score alone (w_lm = 0). Fitted on standardised features:
    the L2 penalty must weigh both alike, or a retriever whose cosines span a few hundredths loses to LM logits
    spanning +-9 whatever they are worth."""
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    if len(set(gold)) < 2:
        raise ValueError("fusion needs both relevant and irrelevant labelled passages")
    columns = [0, 1] if lm else [1]
    x = np.array([features(p, r) for p, r in rows])[:, columns]
    mean, sd = x.mean(axis=0), x.std(axis=0)
    sd[sd == 0] = 1.0
    model = LogisticRegression(C=1.0).fit((x - mean) / sd, gold)
    fitted = model.coef_[0] / sd
    weights = [float(model.intercept_[0] - fitted @ mean), 0.0, 0.0]
    for column, weight in zip(columns, fitted):
        weights[1 + column] = float(weight)
    return weights


def lm_adds(rows: list[tuple[float, float]], gold: list[bool], groups: list, folds: int = 5) -> dict:
    """Does the LM probability add to the retriever's score? Out-of-fold log-loss of the fusion with and without
    it, folds grouped by question (``groups``), compared question by question: the LM feature is ``kept`` only when
    it lowers the loss by more than one standard error of that per-question gain (the one-standard-error rule: the
    simpler model unless the richer one is clearly better: on 40 simulated dev sets of 12 questions x 5 candidates,
    ``tests.test_decisions.candidates``, it kept a chance-level LM in 1 where plain "lower loss" kept it in 9, and
    an informative one in 40). Returns ``{"kept", "oof_log_loss": {"fused", "retriever"}, "gain", "gain_se"}``, or
    ``{"kept": True, "why"}`` when the decisions cannot be cross-validated (fewer than three questions, or a
    training fold with one label)."""
    import numpy as np
    from sklearn.model_selection import GroupKFold

    questions = sorted(set(groups), key=str)
    if len(questions) < 3:
        return {"kept": True, "why": "fewer than three questions: not cross-validated"}
    y = np.array(gold, dtype=float)
    losses = {}
    for name, lm in (("fused", True), ("retriever", False)):
        predicted = np.zeros(len(rows))
        for train, test in GroupKFold(n_splits=min(folds, len(questions))).split(rows, groups=groups):
            if len({gold[i] for i in train}) < 2:
                return {"kept": True, "why": "a cross-validation fold holds one label only: not cross-validated"}
            gate = Gate()
            gate.weights = fit_fusion([rows[i] for i in train], [gold[i] for i in train], lm)
            predicted[test] = gate.fuse([rows[i][0] for i in test], [rows[i][1] for i in test])
        predicted = np.clip(predicted, 1e-12, 1 - 1e-12)
        losses[name] = -(y * np.log(predicted) + (1 - y) * np.log(1 - predicted))
    index = {q: i for i, q in enumerate(questions)}
    gain = np.zeros(len(questions))  # per question: the retriever-only loss minus the fused loss
    np.add.at(gain, [index[q] for q in groups], losses["retriever"] - losses["fused"])
    mean, se = float(gain.mean()), float(gain.std(ddof=1) / np.sqrt(len(gain)))
    return {"kept": mean > se, "oof_log_loss": {k: float(v.mean()) for k, v in losses.items()}, "gain": mean,
            "gain_se": se}


def youden_threshold(scores: list[float], gold: list[bool]) -> float:
    """The operating point maximising TPR - FPR (Youden's J) on the ROC curve of ``scores`` against ``gold``."""
    from sklearn.metrics import roc_curve

    if len(set(gold)) < 2:
        raise ValueError("a threshold needs both positive and negative labelled decisions")
    fpr, tpr, cuts = roc_curve(gold, scores)
    best = max(range(1, len(cuts)), key=lambda i: (tpr[i] - fpr[i], -i))
    return float(min(cuts[best], 1.0))


def recall_threshold(scores: list[float], gold: list[bool], recall: float) -> float:
    """The highest threshold that keeps at least ``recall`` of the positives (scores >= threshold)."""
    positives = sorted((s for s, g in zip(scores, gold) if g), reverse=True)
    if not positives:
        raise ValueError("a recall threshold needs positive labelled decisions")
    return float(positives[max(0, math.ceil(recall * len(positives)) - 1)])


def fit_gate(gate: Gate, probs: list[float], scores: list[float] | None, gold: list[bool],
             groups: list | None = None, lower_recall: float = 0.95) -> dict:
    """Fit ``gate`` on labelled decisions: fusion weights when retriever ``scores`` are given (the LM feature only
    where :func:`lm_adds` says it lowers the out-of-fold loss, given each decision's question in ``groups``), then
    its thresholds on the (fused) probabilities -- ``threshold`` (and ``upper``) at Youden's J, ``lower`` where
    ``lower_recall`` of the positives stay above it. Without scores the LM's probability must beat the dev base rate
    by the same rule, or the gate decides every decision :data:`AT_REST` (an operating point on noise decides by
    chance: PAR2's P(STOP) had dev AUC 0.45; RAG-Critic's P(Error), 0.73 on 30 dev decisions, was 0.45 on test).
    Returns what to log: the ROC curve and operating points, the LM feature's selection, and the decisions
    themselves (so a fit can be redone without the LM)."""
    from sklearn.metrics import roc_auc_score, roc_curve

    decisions = {"probs": list(probs), "scores": scores and list(scores), "gold": list(gold),
                 "groups": groups and list(groups)}
    if gold and len(set(gold)) == 1:
        return fit_one_class(gate, gold) | {"decisions": decisions}
    selection = None
    if scores is not None:
        rows = list(zip(probs, scores))
        selection = ({**lm_adds(rows, gold, groups), "against": RETRIEVER} if groups
                     else {"kept": True, "why": "no question ids"})
        gate.weights = fit_fusion(rows, gold, selection["kept"])
        probs = gate.fuse(probs, scores)
    elif groups:
        # a constant retriever score: the fusion without the LM is the base rate
        selection = {**lm_adds([(p, 0.0) for p in probs], gold, groups), "against": "the base rate"}
        if not selection["kept"]:
            label = decide_all(gate, AT_REST[gate.kind])
            return {"auc": float(roc_auc_score(gold, probs)), "at_rest": label, "n": len(gold),
                    "positives": int(sum(gold)), "thresholds": dict(gate.thresholds), "weights": None,
                    "lm_feature": selection, "decisions": decisions}
    point = youden_threshold(probs, gold)
    for name in gate.thresholds:
        gate.thresholds[name] = recall_threshold(probs, gold, lower_recall) if name == "lower" else point
    if "lower" in gate.thresholds and "upper" in gate.thresholds:
        gate.thresholds["lower"] = min(gate.thresholds["lower"], gate.thresholds["upper"])
    fpr, tpr, cuts = roc_curve(gold, probs)
    return {"auc": float(roc_auc_score(gold, probs)), "n": len(gold), "positives": int(sum(gold)),
            "thresholds": dict(gate.thresholds), "weights": gate.weights, "lm_feature": selection,
            "roc": {"fpr": fpr.tolist(), "tpr": tpr.tolist(), "cuts": [min(float(c), 1.0) for c in cuts]},
            "decisions": decisions}


def decide_all(gate: Gate, positive: bool) -> str:
    """Set every threshold of ``gate`` so that it decides every decision ``positive`` (0: any probability passes)
    or negative (:data:`NEVER`), with no fusion; returns the label's name."""
    gate.thresholds, gate.weights = dict.fromkeys(gate.thresholds, 0.0 if positive else NEVER), None
    return "positive" if positive else "negative"


def fit_one_class(gate: Gate, gold: list[bool]) -> dict:
    """Fit ``gate`` on decisions that all carry one label (no ROC curve exists): every threshold is set to decide
    every decision that way -- 0 when all were positive, :data:`NEVER` when all were negative -- as the dev split's
    base rate says. The paper's fixed threshold would instead decide by a probability the dev split cannot check
    (CORAL's sufficiency on XRAG full: every dev set held the supporting article, while the 0.5B's P(True) < 0.5
    on each test verdict sent every question round the loop again)."""
    label = decide_all(gate, gold[0])
    return {"auc": None, "one_class": label, "n": len(gold), "positives": int(sum(gold)),
            "thresholds": dict(gate.thresholds), "weights": None}


def describe(fit: dict) -> str:
    """One line for a gate's fit from :func:`fit_gate` (or why it was skipped)."""
    if "thresholds" not in fit:
        return f"kept its thresholds ({fit['skipped']})"
    if fit.get("one_class"):
        return (f"all {fit['n']} dev decisions {fit['one_class']}: decides every one {fit['one_class']} "
                f"(thresholds {fit['thresholds']})")
    selection = fit.get("lm_feature")
    if fit.get("at_rest"):
        line = (f"dev AUC {fit['auc']:.3f} on {fit['n']} decisions: decides every one {fit['at_rest']}, the program "
                f"acts no further (thresholds {fit['thresholds']})")
    else:
        line = (f"dev AUC {fit['auc']:.3f} on {fit['n']} decisions, thresholds {fit['thresholds']}, "
                f"fusion weights {fit['weights']}")
    if selection and "oof_log_loss" in selection:
        loss, against = selection["oof_log_loss"], selection["against"]
        dropped = "dropped" + (": the gate decides by retrieval alone" if against == RETRIEVER else "")
        line += (f"; LM feature {'kept' if selection['kept'] else dropped} (out-of-fold log-loss {loss['fused']:.3f} "
                 f"with it, {loss['retriever']:.3f} with {against} alone; gain per question "
                 f"{selection['gain']:+.4f}, one standard error {selection['gain_se']:.4f})")
    elif selection:
        line += f"; LM feature kept ({selection['why']})"
    return line


def rest_note(role: str, gate: Gate, runs_as: str) -> str | None:
    """How a program names what it runs as while ``gate`` (its ``role``'s decision) decides whatever the probability:
    "controller at rest = par2_anchor" (``runs_as``), "controller one-class"; None while a probability decides."""
    state = gate.state
    return None if state is None else f"{role} at rest = {runs_as}" if state == REST else f"{role} {ONE_CLASS}"


def gates(program: dspy.Module) -> dict[str, Gate]:
    """Every :class:`Gate` of ``program`` by its state key."""
    return {name: p for name, p in program.named_parameters() if isinstance(p, Gate)}


class Recorded(NamedTuple):
    """One gated decision as calibration sees it: its gate, the LM probability, the retriever's score (None for a
    decision about a set or an answer), the passages it concerns and the answer it judged (answer-level gates)."""

    gate: Gate
    prob: float
    score: float | None
    passages: tuple = ()
    answer: str | None = None

    def gold(self, gold) -> bool | None:
        """The decision's gold label (see :data:`KINDS`) from one question's ``programs.shared.oracle.Gold`` -- the
        labels the oracle roles use: a passage is gold by paragraph id where the data has ids (MuSiQue, XRAG),
        else by title; a set when it holds every gold passage; an answer by the task metric. None when the question
        has no gold passages: the oracle's answer-span labels there (``Gold.by_span``: BLEnD, CLIcK) are a loose
        bound for a ceiling, never a label a gate is fitted on."""
        if self.gate.kind in ANSWER_KINDS:
            return gold.verdict(self.answer or "") == (self.gate.kind == "correct")
        if not gold.keys:
            return None
        return gold.relevance(self.passages[0]) if self.gate.kind == "passage" else gold.sufficiency(self.passages)


_RECORDED: ContextVar[list | None] = ContextVar("recorded_decisions", default=None)


@contextmanager
def recorded_decisions():
    """Within the block, every gated decision appends a :class:`Recorded` to the yielded list."""
    calls: list[Recorded] = []
    token = _RECORDED.set(calls)
    try:
        yield calls
    finally:
        _RECORDED.reset(token)


def record(gate: Gate, prob: float, score: float | None = None, passages=(), answer: str | None = None) -> None:
    """Note a decision of ``gate`` for calibration (nothing happens outside :func:`recorded_decisions`)."""
    if (calls := _RECORDED.get()) is not None:
        calls.append(Recorded(gate, prob, score, tuple(passages), answer))
