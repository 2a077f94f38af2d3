"""What the MLflow store holds of a table: its cells' newest finished child runs (rows, records, parents' stamps), and
the cost a program was measured at (for ``--estimate``)."""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import mlflow

from evaluation import tracking
from experiments.suite import Cell, Result, plan
from experiments.tables.declared import Table

STAMP = "table_stamp.json"  # the artifact of a table run's parent: what code ran (``run.stamp``)
COUNTS = ("n", "answered", "timed_idle", "failed_examples", "retryable_examples", "n_questions")  # question counts


def suite_tag(table: Table) -> str:
    """The ``suite`` tag of a table's runs (their parent's name is ``suite-<it>``)."""
    return f"table:{table.name}"


@dataclass
class Row:
    """A cell's newest finished run: the leaderboard's :class:`Result` and where it came from."""
    result: Result
    params: dict
    commit: str
    parent: str
    stamp: dict  # its parent's STAMP


def search(filter_string: str):
    tracking.setup("Default")
    return mlflow.search_runs(search_all_experiments=True, filter_string=filter_string,
                              order_by=["attributes.start_time DESC"])


def planned(table: Table) -> tuple[list[Cell], list[tuple]]:
    """``table``'s cells and pairs as ``run`` plans them: at its declared k (an arm whose own k differs is labelled
    as at the table's k), else each entry's method's own."""
    return plan(table.entries, k=table.settings.get("k"))


def rows(table: Table) -> list[Row]:
    """The newest finished child run of each of ``table``'s cells, in table order (cells never run left out)."""
    cells, _ = planned(table)
    runs = search(f"tags.suite = '{suite_tag(table)}' and attributes.status = 'FINISHED'")
    out, stamps = [], {}
    for cell in cells:
        match = runs[(runs.get("tags.cell") == cell.label) & (runs.get("tags.dataset") == cell.dataset)] \
            if len(runs) else runs
        if not len(match):
            continue
        run = match.iloc[0]
        parent = run.get("tags.mlflow.parentRunId") or ""
        if parent and parent not in stamps:
            stamps[parent] = read_json(parent, STAMP)
        params = {k[len("params."):]: v for k, v in run.items() if k.startswith("params.") and isinstance(v, str)}
        split = params.get("split", "test")
        summary = {k[len(f"metrics.{split}_"):]: v for k, v in run.items()
                   if k.startswith(f"metrics.{split}_") and not (isinstance(v, float) and math.isnan(v))}
        summary |= {k: int(summary[k]) for k in COUNTS if k in summary}  # MLflow keeps every metric as a float
        records = read_jsonl(run.run_id, f"predictions/{split}.jsonl")
        shown = run.get("tags.effective_program") or ""
        out.append(Row(Result(cell, run.run_id, summary, records, shown if shown != cell.label else ""), params,
                       run.get("tags.git_commit") or "", parent, stamps.get(parent, {})))
    return out


def _download(run_id: str, name: str) -> Path | None:
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    try:
        return Path(mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=name))
    except (OSError, mlflow.exceptions.MlflowException):
        return None


def read_json(run_id: str, name: str) -> dict:
    path = _download(run_id, name)
    return json.loads(path.read_text(encoding="utf-8")) if path else {}


def read_jsonl(run_id: str, name: str) -> list[dict]:
    path = _download(run_id, name)
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()] if path else []


#: Cost keys an estimate reads from a stored run (per question).
COST = ("lm_calls", "prompt_tokens", "completion_tokens")
#: Per question, where no run of a program is stored: said in the estimate.
DEFAULT_COST = {"lm_calls": 4.0, "prompt_tokens": 3000.0, "completion_tokens": 150.0}
#: Per question, the LLM judge's call (a short prompt: question, references, answer).
JUDGE_COST = {"lm_calls": 1.0, "prompt_tokens": 250.0, "completion_tokens": 10.0}


def measured(cell: Cell, lm: str) -> tuple[dict, str]:
    """The cost per question of ``cell``'s program in the newest stored run of it that metered one -- the same
    dataset and LM where there is one, else the same dataset, else any -- and where it comes from; else
    :data:`DEFAULT_COST` and ``"default"``."""
    runs = search(f"params.program = '{cell.program}' and attributes.status = 'FINISHED'")
    if not len(runs):
        return DEFAULT_COST, "default (no stored run)"
    for same in ((runs.get("params.dataset") == cell.dataset) & (runs.get("params.lm") == lm),
                 runs.get("params.dataset") == cell.dataset, runs["run_id"].notna()):
        for _, run in runs[same].iterrows():
            cost = {k: run.get(f"metrics.{run.get('params.split') or 'test'}_{k}") for k in COST}
            if all(isinstance(v, float) and not math.isnan(v) for v in cost.values()):
                return cost, f"run {run.run_id[:8]} ({run.get('params.dataset')}, {run.get('params.lm')})"
    return DEFAULT_COST, "default (no stored run metered it)"
