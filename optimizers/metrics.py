"""Answer and retrieval metrics. Answer metrics follow the DSPy convention ``metric(example, pred, trace=None)``:
a float when evaluating, a bool when ``trace`` is set (bootstrapping a demo)."""
from __future__ import annotations

import math
import threading

import dspy
from dspy.evaluate.metrics import EM, F1

from programs.text import abstained
from runtime.lm import ENDPOINT_ERRORS, ServerError
from signatures.judge import JudgeAnswer, JudgeAnswerToQuestion

F1_PASS = 0.5  # an F1 at or above this accepts a bootstrapped demo


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


class Judge:
    """LLM-judge correctness (its own LM, see ``--judge-lm``). Without a call: "I don't know" and empty answers
    are wrong, an exact match after DSPy normalisation is right (small judges reject even those). The judge
    compares against the references only: shown the question, small judges accept plausible but wrong answers.
    A judge output that cannot be parsed counts as wrong and is tallied in ``failures``; an LM endpoint error is
    raised (no verdict), and so is a dead judge server (``ServerError``), which stops the run. ``with_question``
    shows the judge the question too (XRAG's protocol)."""

    def __init__(self, lm: dspy.LM | None = None, with_question: bool = False):
        self.with_question = with_question
        self.predict = dspy.Predict(JudgeAnswerToQuestion if with_question else JudgeAnswer)
        self.predict.lm = lm
        self.failures = 0
        self._lock = threading.Lock()

    def __call__(self, example, pred, trace=None):
        answer = (pred.answer or "").strip()
        if abstained(answer):
            ok = False
        elif EM(answer, example.answers):
            ok = True
        else:
            try:
                asked = {"question": example.question} if self.with_question else {}
                ok = bool(self.predict(**asked, reference_answers=list(example.answers), predicted_answer=answer).same)
            except ServerError:
                raise  # the embedded judge server is gone for good: the run stops, as for the program's own
            except ENDPOINT_ERRORS:
                raise  # no verdict: the evaluation records the example as retryable, not as wrong
            except Exception:
                with self._lock:
                    self.failures += 1
                ok = False
        return ok if trace is not None else float(ok)


def retrieval_scores(gold_titles, passages, k: int | None = None) -> dict[str, float]:
    """Gold-title metrics over the first ``k`` distinct titles of ``passages`` (binary relevance).

    title_precision/recall/f1 = overlap with the gold titles; recall_any = at least one gold title retrieved;
    all_pass = every gold title retrieved; ndcg = binary-relevance NDCG@k, whose ideal ranking puts
    min(|gold|, k) gold titles first (fewer than k retrieved titles do not shrink the ideal)."""
    gold = set(gold_titles)
    titles = list(dict.fromkeys(p.title for p in passages))[:k]
    hits = [t in gold for t in titles]
    n_hit = sum(hits)
    precision = n_hit / len(titles) if titles else 0.0
    recall = n_hit / len(gold) if gold else 0.0
    ideal = sum(1 / math.log2(i + 2) for i in range(min(len(gold), len(titles) if k is None else k)))
    dcg = sum(1 / math.log2(i + 2) for i, hit in enumerate(hits) if hit)
    return {
        "title_precision": precision,
        "title_recall": recall,
        "title_f1": 2 * precision * recall / (precision + recall) if n_hit else 0.0,
        "recall_any": float(n_hit > 0),
        "all_pass": float(bool(gold) and gold <= set(titles)),
        "ndcg": dcg / ideal if ideal else 0.0,
    }


def citation_precision(gold_titles, cited_titles) -> float | None:
    """Share of the cited passages whose title is a gold title; None when nothing is cited (a refusal or an
    uncited answer), so averages run over answers that cite."""
    cited = list(cited_titles)
    return sum(t in set(gold_titles) for t in cited) / len(cited) if cited else None


ANSWER_METRICS = {"em": exact_match, "f1": f1, "accuracy": accuracy}
METRIC_NAMES = (*ANSWER_METRICS, "judge")


def answer_metrics(task: str, judge: Judge | None = None) -> dict:
    """The metrics reported for a task: EM/F1 (+ judge) for short answers, accuracy for multiple choice."""
    if task == "xrag":
        from optimizers.xlingual import xrag_metrics

        return xrag_metrics(judge)
    metrics = {"accuracy": accuracy} if task == "mcq" else {"em": exact_match, "f1": f1}
    if judge is not None and task != "mcq":
        metrics["judge"] = judge
    return metrics
