"""Scores of an error critic against gold correctness (identification) and against another labeller's tier-1
labels (agreement)."""
from __future__ import annotations

from statistics import mean

from dspy.evaluate.metrics import F1
from sklearn.metrics import balanced_accuracy_score

from evaluation.metrics import F1_PASS


def answer_is_wrong(answer: str | None, gold) -> bool:
    """Gold correctness without a judge: F1 below 0.5 against the reference answer(s) (``metrics.F1_PASS``)."""
    golds = gold if isinstance(gold, list) else [gold]
    return F1(answer or "", [str(g) for g in golds]) < F1_PASS


def identification(flagged: list[bool], wrong: list[bool]) -> dict:
    """How well "Error" verdicts find the wrong answers: recall on each class and their mean (balanced accuracy)."""
    n_wrong, n_right = sum(wrong), len(wrong) - sum(wrong)
    out = {"n": len(wrong), "n_wrong": n_wrong, "flagged_share": float(mean(flagged)) if flagged else 0.0,
           "error_recall": sum(f and w for f, w in zip(flagged, wrong)) / n_wrong if n_wrong else float("nan"),
           "correct_recall": sum(not f and not w for f, w in zip(flagged, wrong)) / n_right if n_right
           else float("nan"),
           "accuracy": float(mean(f == w for f, w in zip(flagged, wrong))) if wrong else float("nan")}
    out["balanced_accuracy"] = (float(balanced_accuracy_score(wrong, flagged)) if n_wrong and n_right
                                else float("nan"))
    return out


def tier1_agreement(labels: list[list[str]], reference: list[list[str]]) -> dict:
    """Agreement of tier-1 label sets with reference sets, over the items both labelled: share with at least one
    label in common, share with the same first label, and mean Jaccard."""
    pairs = [(set(a), set(b), a[0] == b[0]) for a, b in zip(labels, reference) if a and b]
    if not pairs:
        return {"n_both_labelled": 0}
    return {"n_both_labelled": len(pairs), "overlap": float(mean(bool(a & b) for a, b, _ in pairs)),
            "same_first": float(mean(first for *_, first in pairs)),
            "jaccard": mean(len(a & b) / len(a | b) for a, b, _ in pairs)}
