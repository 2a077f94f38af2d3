"""The answer metrics an evaluation reports for each task (short answers, multiple choice, XRAG)."""
from __future__ import annotations

from evaluation.metrics import Judge, accuracy, exact_match, f1
from evaluation.xlingual import xrag_metrics


def answer_metrics(task: str, judge: Judge | None = None) -> dict:
    """The metrics reported for a task: EM/F1 (+ judge) for short answers, accuracy for multiple choice, XRAG's
    (:func:`evaluation.xlingual.xrag_metrics`) for ``xrag``."""
    if task == "xrag":
        return xrag_metrics(judge)
    metrics = {"accuracy": accuracy} if task == "mcq" else {"em": exact_match, "f1": f1}
    if judge is not None and task != "mcq":
        metrics["judge"] = judge
    return metrics
