"""The algorithm's ceiling per method: each method with every role oracle (``--oracle all``: no LM call) against
``rag`` with the oracle writer at the method's own k, on every question of each dataset's shared data. Bounds, never
results (docs/results/archive/headroom.md).

``RAG_DATA_DIR=/work/shared/data python -m scripts.ceiling --datasets hotpotqa musique``

A thin use of the suite machinery (``experiments/suite.py``): one parent MLflow run, one child run per (program,
dataset) cell, checkpointed per question, the leaderboard logged; the split is ``--train 0 --dev 0`` and every
question in ``--split test`` (the whole shared dev+test data; ``--test N``: a seeded slice of N). The report
(report.md, printed) is one row per method x dataset: its evidence (Recall@k, All-Pass@k, P@k over its first k
distinct paragraphs; Recall, All-Pass over everything it retrieved), its answer under the oracle writer (EM, F1)
and its cost per question (searches, distinct passages retrieved, oracle calls: the LM calls the method would
make), beside rag's at the same k.
"""
from __future__ import annotations


import mlflow

import data as datasets
import programs
from evaluation import tracking
from evaluation.leaderboard import answered, fmt
from evaluation.metrics import gold_of
from experiments import cli, suite
from experiments.sessions import session

METHODS = ("coral", "par2", "seal", "rag_critic", "crag", "self_rag", "ircot", "react", "flare", "metarag")
BASELINE = "rag"
DATASETS = ("hotpotqa", "musique")
ENTRY = "scripts/ceiling.py"
#: (summary key, column) of the report, each shown for the method and for rag at its k.
COLUMNS = (("title_recall", "R@k"), ("all_pass", "All-Pass@k"), ("title_precision", "P@k"),
           ("recall_all", "R all"), ("all_pass_all", "All-Pass all"), ("em", "EM"), ("f1", "F1"),
           ("searches", "searches/q"), ("retrieved_n", "passages/q"), ("oracle_calls", "oracle calls/q"))


def report(results: list[suite.Result], pairs: list[tuple]) -> str:
    """One row per (method, dataset): each column as ``method / rag`` at the method's k."""
    by_cell = {r.cell: r for r in results}
    lines = ["| method | dataset | k | answered | " + " | ".join(h for _, h in COLUMNS) + " |",
             "|---" * (len(COLUMNS) + 4) + "|"]
    for dataset, method, base in pairs:
        m, b = by_cell[method].summary, by_cell[base].summary
        k = programs.run_k(method.program, None)
        cells = [f"{fmt(m.get(key))} / {fmt(b.get(key))}" for key, _ in COLUMNS]
        lines.append(f"| {method.program} | {dataset} | {k} | {answered(m)} | " + " | ".join(cells) + " |")
    return ("Each cell: method (`--oracle all`) / rag (oracle writer) at the method's k. Bounds, never results.\n\n"
            + "\n".join(lines))


def runs_on(program: str, examples: list) -> bool:
    """Whether every question gives ``program``'s every oracle role its label (CORAL's planner needs a culture's
    language: not on HotpotQA)."""
    roles = programs.oracle_roles(program)
    return all(not gold_of(ex).missing(role) for ex in examples for role in roles)


def main(argv=None) -> dict:
    p = suite.parser(__doc__.splitlines()[0])
    p.set_defaults(oracle="all", split="test", train=0, dev=0, datasets=list(DATASETS))
    p.add_argument("--ceiling-methods", nargs="+", default=list(METHODS), choices=programs.names(),
                   help="methods measured against rag (default: every agentic method)")
    args = suite.script_args(p, argv, ("suite", "methods", "arms", "ray", "ray_cpus", "dataset"))
    if args.oracle != "all":
        cli.fail("--oracle: the ceiling is every role oracle (all); for one role's bound use evaluate.py --oracle ROLE")
    bundles = {d: datasets.load(d, args.data_dir) for d in args.datasets}
    entries = tuple(suite.Entry(m, (BASELINE,), tuple(d for d, b in bundles.items() if runs_on(m, b.examples)))
                    for m in args.ceiling_methods)
    for entry in entries:
        if skipped := [d for d in args.datasets if d not in entry.datasets]:
            print(f"note: {entry.method} skipped on {', '.join(skipped)}: a question lacks a label of its oracle roles")
    cells, pairs = suite.plan(entries, oracle=args.oracle)
    cli.check_args(args, list(dict.fromkeys(c.program for c in cells)))
    results: list[suite.Result] = []
    with tracking.run(args.experiment, "ceiling", tags={"entry": ENTRY}) as parent:
        tracking.log_params({"methods": args.ceiling_methods, "datasets": args.datasets, "oracle": args.oracle,
                             "cells": [f"{c.label}@{c.dataset}" for c in cells]})
        for dataset in dict.fromkeys(c.dataset for c in cells):
            # every question (train and dev 0)
            s = session(args.replace(dataset=dataset, test=args.test or len(bundles[dataset].examples)), True,
                        no_lm=True)  # every program under --oracle all: none starts an LM
            results += [suite.run_cell(suite.cell_session(s, c), c, parent.info.run_id, "ceiling", entry=ENTRY)
                        for c in cells if c.dataset == dataset]
        board = suite.log_leaderboard(results, pairs, f"ceiling: --oracle {args.oracle}, whole shared data")
        table = report(results, pairs)
        mlflow.log_text(table, "report.md")
    print(f"\n{board.markdown}\n\n{table}\n\nrun {parent.info.run_id} (ceiling)")
    return {"run_id": parent.info.run_id, "results": results, "report": table}


if __name__ == "__main__":
    cli.interruptible(main)()
