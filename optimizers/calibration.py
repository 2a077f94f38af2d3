"""Calibration: PriDe's option-ID prior (``calibrate_pride``) and the gates of scored decisions
(``calibrate_decisions``).

PriDe calibration for ``--mc-scoring pride``: the option-ID prior of one program on a calibration slice.

The prior belongs to the writer that picks the letter. Each calibration question is run once through the program
(its own knowledge-corpus documents hidden, as in evaluation); the writer call that answered it is then asked again
with the same question and evidence at every cyclic shift of the options, in ``logprob`` mode, and those letter
distributions give the prior (``decoding.choice.estimate_prior``). Holding the evidence fixed isolates the option
order, and a pipeline's retrieval, planner and critic run once per question instead of once per shift. The slice
must not overlap the evaluated questions."""
from __future__ import annotations

from dataclasses import replace
from functools import partial
from pathlib import Path

import dspy
from dspy.utils.exceptions import AdapterParseError

import data as datasets
from decoding.choice import estimate_prior
from decoding.decisions import ANSWER_KINDS, fit_gate, gates, recorded_decisions
from evaluation import metrics
from evaluation.loop import Checkpoint, _run
from programs.shared.writer import mc_state, recorded_choices
from runtime.lm import TRANSIENT_ERRORS
from runtime.metering import metered


def calibrate_pride(program: dspy.Module, examples: list[dspy.Example], retries: int = 1) -> dict:
    """Estimate the option-ID prior on ``examples`` with ``program`` built with ``logprob`` scoring; a ``pride``
    program is then built with ``MCScoring("pride", prior=...)``. Returns what to log: the prior, the questions
    asked and those used (every shift read), and the calibration's LM cost."""
    if {state["mode"] for state in mc_state(program)} != {"logprob"}:
        raise ValueError("PriDe calibration reads letter probabilities: build the program with "
                         "mc=MCScoring('logprob')")
    samples, used = [], []
    with metered() as cost:
        for example in examples:
            with recorded_choices() as calls:
                _run(program, example, retries)
            if not calls:
                continue
            writer, question, context, _ = calls[-1]  # the call that answered
            try:
                shifts = [writer.choose(question, context, copy.options).option_probs
                          for copy in datasets.circular([example])]
            except AdapterParseError:  # an unreadable reply: the question gives no sample (it is not in ``used``)
                continue
            if all(shifts):
                samples.append(shifts)
                used.append(example.id)
    prior = estimate_prior(samples)
    return {"prior": prior, "asked": [ex.id for ex in examples], "used": used,
            **{f"cost_{k}": v for k, v in cost.as_dict().items()}}


def calibrate_decisions(program: dspy.Module, examples: list[dspy.Example], fused: bool, retries: int = 1,
                        correct=None, journal: Path | None = None) -> dict:
    """Fit every gate of ``program`` (``decoding.decisions.Gate``) on the decisions it makes on ``examples``
    (the dev split), labelled by the gate's kind with the oracle roles' labels (:func:`evaluation.metrics.gold_of`):
    a passage decision is gold when its passage is one of the example's gold passages (paragraph ids where the
    data has them -- MuSiQue's ``gold_ids``, XRAG's supporting article -- else ``gold_titles``), a sufficiency
    decision when its set holds every gold passage, a stop or acceptance when the answer it judged is correct and
    an error verdict when it is wrong (``correct(example, answer)``, default :func:`evaluation.metrics.correct`:
    the task metric). ``fused``: per-passage gates also fit fusion
    weights with the retriever's score, keeping the LM's probability only where it lowers the loss out of fold
    (folds by question). Returns, per gate, the fit (AUC, ROC curve, thresholds, weights) or why it
    was skipped; gates without labelled decisions keep their thresholds. ``journal`` (JSONL, keyed by the caller
    like a checkpoint, and written like one: :class:`~evaluation.loop.Checkpoint`, one writer, each line synced):
    each question's labelled decisions are appended as it finishes and read back instead of asked again, so an
    interrupted fit resumes; a question that ended on a transient error is not kept."""
    correct = correct or metrics.correct
    found = gates(program)
    names = {id(gate): name for name, gate in found.items()}
    by_answer = any(gate.kind in ANSWER_KINDS for gate in found.values())
    rows: dict[str, list[tuple[float, float | None, bool, str]]] = {name: [] for name in found}
    sink = Checkpoint(journal) if journal else None
    done = sink.done if sink else {}
    try:
        for example in examples:
            gold = replace(metrics.gold_of(example), correct=partial(correct, example))
            if not gold.keys and not by_answer:  # no gold passages (see Recorded.gold)
                continue
            decided = done.get(str(example.id), {}).get("decisions")
            if decided is None:
                with recorded_decisions() as calls:
                    error = _run(program, example, retries)[1]
                decided = [[names[id(c.gate)], float(c.prob), None if c.score is None else float(c.score), label]
                           for c in calls if id(c.gate) in names and (label := c.gold(gold)) is not None]
                if sink and not isinstance(error, TRANSIENT_ERRORS):
                    sink.append({"id": str(example.id), "decisions": decided})
            for name, prob, score, label in decided:
                rows[name].append((prob, score, label, str(example.id)))
    finally:
        if sink:
            sink.close()
    info = {}
    for name, made in rows.items():
        probs, scores, labels, questions = (list(c) for c in zip(*made)) if made else ([], [], [], [])
        with_scores = fused and bool(scores) and None not in scores
        try:
            info[name] = fit_gate(found[name], probs, scores if with_scores else None, labels, questions)
        except ValueError as err:
            info[name] = {"skipped": str(err), "n": len(labels)}
    return info
