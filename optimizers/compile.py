"""Teleprompter registry: compile a program's few-shot demos (and, for MIPROv2/GEPA, instructions)."""
from __future__ import annotations

import dspy

OPTIMIZERS = ("bootstrap", "random_search", "mipro", "gepa")


def never_raises(metric):
    """A metric failing on odd model output scores the example as wrong instead of aborting compilation."""
    def wrapped(example, pred, trace=None):
        try:
            return metric(example, pred, trace)
        except Exception:
            return False if trace is not None else 0.0
    return wrapped


def with_feedback(metric):
    """GEPA's metric shape: a score plus textual feedback for the reflection LM."""
    def gepa_metric(gold, pred, trace=None, pred_name=None, pred_trace=None):
        score = float(metric(gold, pred))
        feedback = f"Expected answer: {gold.answer!r}. Predicted: {getattr(pred, 'answer', None)!r}. Score {score:.2f}."
        return dspy.Prediction(score=score, feedback=feedback)
    return gepa_metric


def compile_program(program: dspy.Module, optimizer: str, trainset: list, devset: list, metric, *,
                    max_demos: int = 2, candidates: int = 4, budget: int | None = None, seed: int = 0,
                    reflection_lm: dspy.LM | None = None) -> dspy.Module:
    """Compile ``program`` on ``trainset``; optimizers that search (all but ``bootstrap``) select on ``devset``.

    ``budget`` is MIPROv2's trial count or GEPA's metric-call budget; GEPA reflects with ``reflection_lm``. Threads are 1: the embedded server
    serves one request at a time on 2 cores."""
    metric = never_raises(metric)
    demos = {"max_bootstrapped_demos": max_demos, "max_labeled_demos": max_demos}
    if optimizer == "bootstrap":
        return dspy.BootstrapFewShot(metric=metric, **demos).compile(program, trainset=trainset)
    if optimizer == "random_search":
        tp = dspy.BootstrapFewShotWithRandomSearch(metric=metric, num_candidate_programs=candidates, num_threads=1,
                                                   **demos)
        return tp.compile(program, trainset=trainset, valset=devset)
    if optimizer == "mipro":
        tp = dspy.MIPROv2(metric=metric, auto=None, num_candidates=candidates, num_threads=1, seed=seed, **demos)
        return tp.compile(program, trainset=trainset, valset=devset, num_trials=budget or 2 * candidates,
                          minibatch=len(devset) > 35, minibatch_size=min(35, len(devset)))
    if optimizer == "gepa":
        tp = dspy.GEPA(metric=with_feedback(metric), reflection_lm=reflection_lm, max_metric_calls=budget or 60,
                       num_threads=1, seed=seed)
        return tp.compile(program, trainset=trainset, valset=devset)
    raise ValueError(f"unknown optimizer '{optimizer}'; choose one of: {', '.join(OPTIMIZERS)}")
