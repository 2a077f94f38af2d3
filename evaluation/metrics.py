"""Answer and retrieval metrics. Answer metrics follow the DSPy convention ``metric(example, pred, trace=None)``:
a float when evaluating, a bool when ``trace`` is set (bootstrapping a demo)."""
from __future__ import annotations

import math
import re
from contextlib import contextmanager
from contextvars import ContextVar
from operator import attrgetter
from typing import Callable, Iterator

import dspy
from dspy.evaluate.metrics import EM, F1

from programs.shared.oracle import Gold, Hop
from programs.shared.text import abstained
from runtime.lm import ATTEMPT, UNREADABLE_ERRORS, describe
from signatures.judge import JudgeAnswer, JudgeAnswerToQuestion

F1_PASS = 0.5  # an F1 at or above this accepts a bootstrapped demo
READ_TRIES = 2  # calls for a judge's verdict: the first as configured, then sampled past the cache
_NOTES: ContextVar[dict | None] = ContextVar("metric_notes", default=None)


def note(**fields: str) -> None:
    """Say how a metric decided the answer it is scoring (e.g. XRAG's ``verdict_by="exact"``): inside :func:`noted`,
    the fields go into that answer's record, so a run counts them from its records (a resumed run too)."""
    if (notes := _NOTES.get()) is not None:
        notes.update(fields)


@contextmanager
def noted() -> Iterator[dict]:
    """The fields the metrics scored inside the block :func:`note`."""
    token = _NOTES.set(notes := {})
    try:
        yield notes
    finally:
        _NOTES.reset(token)


def exact_match(example, pred, trace=None):
    score = float(EM(pred.answer or "", example.answers))
    return score == 1.0 if trace is not None else score


def f1(example, pred, trace=None):
    score = float(F1(pred.answer or "", example.answers))
    return score >= F1_PASS if trace is not None else score


def accuracy(example, pred, trace=None):
    """Multiple choice: the predicted letter equals the gold letter."""
    ok = (pred.answer or "").strip().upper() == example.answer.strip().upper()
    return ok if trace is not None else float(ok)


def correct(example, answer: str) -> bool:
    """Whether ``answer`` is right by the task metric (the gold of answer-level decisions: stops, acceptances,
    error verdicts): the gold letter for multiple choice, else F1 >= :data:`F1_PASS`."""
    return bool((accuracy if example.get("options") else f1)(example, dspy.Prediction(answer=answer), trace=True))


class UnreadableVerdict(Exception):
    """A judge's replies could not be read, :data:`READ_TRIES` times: the metric has no value for this answer."""


def read(predict: dspy.Predict, **inputs) -> dspy.Prediction:
    """``predict(**inputs)``; a reply that cannot be read is asked again with cache-bypassing sampling (``ATTEMPT``),
    up to :data:`READ_TRIES` calls, then :class:`UnreadableVerdict`. Any other error (an endpoint's, a bug) is
    raised as it is: it is no verdict."""
    for attempt in range(READ_TRIES):
        token = ATTEMPT.set(ATTEMPT.get() + attempt)
        try:
            return predict(**inputs)
        except UNREADABLE_ERRORS as err:
            error = err
        finally:
            ATTEMPT.reset(token)
    raise UnreadableVerdict(f"{READ_TRIES} unreadable replies, the last: {describe(error)}") from error


class Judge:
    """LLM-judge correctness (its own LM, see ``--judge-lm``). Without a call: "I don't know" and empty answers
    are wrong, an exact match after DSPy normalisation is right (small judges reject even those). The judge
    compares against the references only: shown the question, small judges accept plausible but wrong answers.
    A verdict is :func:`read`: an unreadable one raises :class:`UnreadableVerdict`, an LM endpoint error or a dead
    judge server (``ServerError``) is raised as it is; none is a score. ``with_question`` shows the judge the
    question too (XRAG's protocol)."""

    def __init__(self, lm: dspy.LM | None = None, with_question: bool = False):
        self.with_question = with_question
        self.predict = dspy.Predict(JudgeAnswerToQuestion if with_question else JudgeAnswer)
        self.predict.lm = lm

    def __call__(self, example, pred, trace=None):
        answer = (pred.answer or "").strip()
        if abstained(answer):
            ok = False
        elif EM(answer, example.answers):
            ok = True
        else:
            asked = {"question": example.question} if self.with_question else {}
            ok = bool(read(self.predict, **asked, reference_answers=list(example.answers),
                           predicted_answer=answer).same)
        return ok if trace is not None else float(ok)


def retrieval_scores(gold, passages, k: int | None = None, key=lambda p: p.title) -> dict[str, float]:
    """Gold metrics over the first ``k`` distinct ``key``s of ``passages`` (binary relevance); ``gold`` holds keys
    (titles by default, or paragraph ids with ``key=lambda p: paragraph_id(p.id)``).

    title_precision/recall/f1 = overlap with the gold keys; recall_any = at least one gold key retrieved;
    all_pass = every gold key retrieved; ndcg = binary-relevance NDCG@k, whose ideal ranking puts
    min(|gold|, k) gold keys first (fewer than k retrieved keys do not shrink the ideal)."""
    gold = set(gold)
    keys = list(dict.fromkeys(key(p) for p in passages))[:k]
    hits = [t in gold for t in keys]
    n_hit = sum(hits)
    precision = n_hit / len(keys) if keys else 0.0
    recall = n_hit / len(gold) if gold else 0.0
    ideal = sum(1 / math.log2(i + 2) for i in range(min(len(gold), len(keys) if k is None else k)))
    dcg = sum(1 / math.log2(i + 2) for i, hit in enumerate(hits) if hit)
    return {
        "title_precision": precision,
        "title_recall": recall,
        "title_f1": 2 * precision * recall / (precision + recall) if n_hit else 0.0,
        "recall_any": float(n_hit > 0),
        "all_pass": float(bool(gold) and gold <= set(keys)),
        "ndcg": dcg / ideal if ideal else 0.0,
    }


#: The ``_all`` measures :func:`retrieval_record` adds: over everything retrieved, not the first k.
ALL_RETRIEVED = ("recall_all", "recall_any_all", "all_pass_all", "ndcg_all")


def paragraph_id(passage_id: str) -> str:
    """The source paragraph of a passage id: a sentence window (``#w<n>``) is its paragraph, and a multihop-pool id
    (``pool_en:<source>/<id>``) is its source corpus's id (``<source>:<id>``)."""
    base = re.sub(r"#w\d+$", "", passage_id)
    corpus, _, rest = base.partition(":")
    return rest.replace("/", ":", 1) if corpus == "pool_en" else base


#: The key of a passage where the data has gold titles only.
TITLE = attrgetter("title")


def gold_passages(example) -> tuple[list[str], Callable]:
    """An example's gold passages as keys, and the key of a passage: paragraph ids where the example has them
    (``gold_ids``: MuSiQue, where several paragraphs share a title; XRAG's ``supporting`` article), else titles."""
    ids = example.get("gold_ids") or example.get("supporting")
    return (list(ids), lambda p: paragraph_id(p.id)) if ids else (list(example.get("gold_titles") or ()), TITLE)


def gold_of(example) -> Gold:
    """An example's gold labels for the oracle roles (``programs.shared.oracle``): its gold passages, the task metric's
    verdict on an answer (:func:`correct`), the language of its culture (BLEnD, CLIcK: ``source_lang``) or of its
    supporting article (XRAG: ``support_lang``), its gold titles, its culture's language alone (``own``: the
    own-corpus scope's), its question and answers, and its gold decomposition (``hops``: MuSiQue's). A perfect
    reader needs every gold passage where the data lists them for a multi-hop question (``gold_ids``,
    ``gold_titles``), else an answer span (``span``), which also labels passages where the example has no gold
    passages (BLEnD, CLIcK: a multiple-choice example's ``options`` give the gold option's text). Gold paragraph ids
    (``ids``) name the corpora the planner oracle reads."""
    keys, key = gold_passages(example)
    return Gold(frozenset(keys), key, lambda answer: correct(example, answer),
                example.get("support_lang") or example.get("source_lang"), frozenset(example.get("gold_titles") or ()),
                example.get("source_lang"), example.get("question") or "",
                tuple(str(a) for a in example.get("answers") or [example.get("answer")] if a),
                tuple(Hop(h["question"], h["answer"], h.get("key")) for h in example.get("hops") or ()),
                not (example.get("gold_ids") or example.get("gold_titles")), key is not TITLE, example.get("options"))


def retrieval_record(example, retrieved, k: int) -> dict[str, float]:
    """Retrieval measures of one prediction over ``retrieved``, everything the program retrieved in order of
    first retrieval, against :func:`gold_passages`. The @k measures (:func:`retrieval_scores`) take the first ``k``
    distinct paragraphs; the ``_all`` ones (:data:`ALL_RETRIEVED`) all of them, as the PAR2 paper scores;
    ``retrieved_n`` counts them."""
    gold, key = gold_passages(example)
    every = retrieval_scores(gold, retrieved, None, key)
    return {**retrieval_scores(gold, retrieved, k, key), "recall_all": every["title_recall"],
            "recall_any_all": every["recall_any"], "all_pass_all": every["all_pass"], "ndcg_all": every["ndcg"],
            "retrieved_n": len({key(p) for p in retrieved})}


def citation_precision(gold, cited) -> float | None:
    """Share of the ``cited`` passages that are ``gold`` passages (by paragraph key, or by title where the data has
    only titles); None when nothing is cited (a refusal or an uncited answer), so averages run over answers that
    cite."""
    cited = list(cited)
    return sum(key in set(gold) for key in cited) / len(cited) if cited else None


ANSWER_METRICS = {"em": exact_match, "f1": f1, "accuracy": accuracy}
METRIC_NAMES = (*ANSWER_METRICS, "judge")
