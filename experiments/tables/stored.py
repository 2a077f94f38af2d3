"""A table's runs as the repository keeps them, and the cost a program was measured at (for ``--estimate``).

``run`` keeps each finished cell in docs/results/tables/runs/NAME/ (one JSON Lines file a cell: its run's params,
summary, parent stamp and per-question records, without the benchmark's text or the trace), so ``render`` works from
any clone: an MLflow store is a machine's, and a table is measured in parts, often on several machines."""
from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

import mlflow

from evaluation import tracking
from experiments.suite import Cell, Result, plan
from experiments.tables.declared import Table
from runtime.paths import PROJECT_ROOT

STAMP = "table_stamp.json"  # the artifact of a table run's parent: what code ran (``run.stamp``)
COUNTS = ("n", "answered", "timed_idle", "failed_examples", "retryable_examples", "n_questions")  # question counts
DOCS = PROJECT_ROOT / "docs"
#: What a kept record leaves out: the benchmark's text (never committed) and the trace (its MLflow run holds it).
UNKEPT = ("question", "gold", "trace")


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


def kept(table: Table, cell: Cell, docs: Path | None = None) -> Path:
    """The file that keeps ``cell``'s newest finished run of ``table``."""
    name = re.sub(r"[^\w.@+-]", "_", f"{cell.label}@{cell.dataset}")
    return (docs or DOCS) / "results" / "tables" / "runs" / table.name / f"{name}.jsonl"


def rows(table: Table, docs: Path | None = None) -> list[Row]:
    """The kept run of each of ``table``'s cells, in table order (cells never run left out)."""
    cells, _ = planned(table)
    return [read_kept(cell, path) for cell in cells if (path := kept(table, cell, docs)).exists()]


def keep(table: Table, parent: str, docs: Path | None = None) -> list[Path]:
    """Keep the finished child runs of ``parent`` (a part of ``run``: one dataset) that are cells of ``table``,
    each replacing the run its file kept; returns the files written."""
    cells = {(c.label, c.dataset): c for c in planned(table)[0]}
    runs = search(f"tags.mlflow.parentRunId = '{parent}' and attributes.status = 'FINISHED'")
    stamp, written = read_json(parent, STAMP), []
    for _, run in runs.iterrows():
        cell = cells.get((run.get("tags.cell"), run.get("tags.dataset")))
        if cell is None:
            continue
        params = {k[len("params."):]: v for k, v in run.items() if k.startswith("params.") and isinstance(v, str)}
        split = params.get("split", "test")
        summary = {k[len(f"metrics.{split}_"):]: v for k, v in run.items()
                   if k.startswith(f"metrics.{split}_") and not (isinstance(v, float) and math.isnan(v))}
        summary |= {k: int(summary[k]) for k in COUNTS if k in summary}  # MLflow keeps every metric as a float
        shown = run.get("tags.effective_program") or ""
        head = {"run": run.run_id, "parent": parent, "commit": run.get("tags.git_commit") or "",
                "effective": shown if shown != cell.label else "", "params": params, "summary": summary,
                "stamp": stamp}
        records = [{k: v for k, v in r.items() if k not in UNKEPT}
                   for r in read_jsonl(run.run_id, f"predictions/{split}.jsonl")]
        path = kept(table, cell, docs)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(json.dumps(x, ensure_ascii=False, sort_keys=True) for x in [head, *records]) + "\n",
                        encoding="utf-8")
        written.append(path)
    return written


def read_kept(cell: Cell, path: Path) -> Row:
    """A kept cell: its first line the run (params, summary, parent stamp), then one record a question."""
    head, *records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return Row(Result(cell, head["run"], head["summary"], records, head["effective"]), head["params"],
               head["commit"], head["parent"], head["stamp"])


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


def measured(cell: Cell, lm: str, docs: Path | None = None) -> tuple[dict, str]:
    """The cost per question of ``cell``'s program in a run of it that metered one -- the same dataset and LM where
    there is one, else the same dataset, else any; kept runs (any table's) before the runs of this machine's MLflow
    store (newest first) -- and where it comes from; else :data:`DEFAULT_COST` and ``"default"``."""
    found = [(h["run"], h["params"].get("dataset"), h["params"].get("lm"), {k: h["summary"].get(k) for k in COST})
             for h in kept_heads(docs) if h["params"].get("program") == cell.program]
    runs = search(f"params.program = '{cell.program}' and attributes.status = 'FINISHED'")
    found += [(run.run_id, run.get("params.dataset"), run.get("params.lm"),
               {k: run.get(f"metrics.{run.get('params.split') or 'test'}_{k}") for k in COST})
              for _, run in runs.iterrows()]
    if not found:
        return DEFAULT_COST, "default (no stored run)"
    for same in (lambda d, m: d == cell.dataset and m == lm, lambda d, m: d == cell.dataset, lambda d, m: True):
        for run_id, dataset, model, cost in found:
            if same(dataset, model) and all(isinstance(v, (int, float)) and not math.isnan(v) for v in cost.values()):
                return cost, f"run {run_id[:8]} ({dataset}, {model})"
    return DEFAULT_COST, "default (no stored run metered it)"


def kept_heads(docs: Path | None = None) -> list[dict]:
    """The first line (run, params, summary) of every kept cell of every table, in the order of their paths."""
    heads = []
    for path in sorted(((docs or DOCS) / "results" / "tables" / "runs").glob("*/*.jsonl")):
        with path.open(encoding="utf-8") as fh:
            heads.append(json.loads(fh.readline()))
    return heads
