"""A stage: one program evaluated on one set of questions as the run's settings say, checkpointed per question and
logged to its MLflow run: evaluate.py's run, each of optimize.py's four and each suite cell (or Ray cell) are one."""
from __future__ import annotations

import dspy

from evaluation import tracking
from evaluation.loop import Collected, evaluate
from experiments.sessions import Session


def run_stage(s: Session, program: dspy.Module, examples: list[dspy.Example], label: str, stage: str, *,
              split: str | None = None, key: str | Collected | None = None, desc: str | None = None,
              run_id: str | None = None) -> tuple[list[dict], dict]:
    """Evaluate ``program`` (run as ``label``) on ``examples`` with the session's metrics and settings (k, retries,
    threads, resuming, waiting for the checkpoint), checkpointed under ``key`` (default: ``stage``; a
    :class:`~evaluation.loop.Collected` collects the records instead). With ``run_id``, each question is traced
    into that run and the records and summary are logged to the active run as ``stage``, with the questions as
    ``split`` (default: ``stage`` up to its first ``_``: ``dev`` of ``dev_before``). Returns the records and the
    summary."""
    a = s.args
    key = stage if key is None else key
    records, summary = evaluate(program, examples, s.metrics, k=a.k if s.retriever else None, retries=a.retries,
                                checkpoint=key if isinstance(key, Collected) else s.checkpoint(key, label, program),
                                desc=desc or stage, groups=s.groups, threads=a.threads, retry_failed=a.retry_failed,
                                wait=a.wait_for_checkpoint,
                                traces=tracking.question_traces(run_id, s.metrics, a.trace) if run_id else None)
    if run_id:
        split = split or stage.split("_")[0]
        tracking.log_evaluation(stage, records, summary, s.metrics, s.eval_data(split, examples))
    return records, summary
