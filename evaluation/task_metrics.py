"""The answer metrics an evaluation reports for each task (short answers, multiple choice, XRAG)."""
from __future__ import annotations

from evaluation.metrics import Judge, accuracy, exact_match
from evaluation.official import f1_metric
from evaluation.xlingual import xrag_metrics


def answer_metrics(task: str, judge: Judge | None = None, dataset: str | None = None) -> dict:
    """The metrics reported for a task: EM/F1 (+ judge) for short answers, F1 by ``dataset``'s official scorer's
    rules (:mod:`evaluation.official`), accuracy for multiple choice, XRAG's
    (:func:`evaluation.xlingual.xrag_metrics`) for ``xrag``."""
    if task == "xrag":
        return xrag_metrics(judge)
    metrics = {"accuracy": accuracy} if task == "mcq" else {"em": exact_match, "f1": f1_metric(dataset)}
    if judge is not None and task != "mcq":
        metrics["judge"] = judge
    return metrics
