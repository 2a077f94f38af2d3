"""PAR2-RAG against its baselines and ablations on one seeded slice, and the step-budget (H) table, in one MLflow run.

``python -m scripts.par2_compare --dataset musique --test 30 --k 5 --loops 5 --judge --judge-lm local:qwen-1.5b``
``python -m scripts.par2_compare --dataset musique --test 30 --programs par2 --budgets 3 5 7``   (the H table)

A thin use of the suite machinery (``experiments/suite.py``): every (program, H) cell is a child run of one parent
run, checkpointed per question (an interrupted run resumes), and the parent holds the suite's leaderboard (EM, F1,
judge, retrieval, LM calls, tokens and seconds per question; every program paired with par2 at the same H by exact
McNemar with bootstrap CIs and Holm). The parent's report.md adds PAR2's own measures: Recall (any gold paragraph),
NDCG and All-Pass over everything a program retrieved (by paragraph identity; @k: its first k distinct paragraphs by
rank of first retrieval), passages retrieved, fallbacks per question and the questions with a CONTINUE, for
``--programs`` at H=``--loops`` and, with ``--budgets``, for ``--budget-programs`` at every H, each paired with par2
at the same H by a paired t-test on Recall@k.
``--compile`` also bootstraps par2's demos on the train split and reports the compiled program next to the uncompiled.
"""
from __future__ import annotations

import math

import mlflow

import programs
from experiments import cli, suite
from evaluation import tracking
from experiments.cli import compile_metric, interruptible
from experiments.sessions import session
from optimizers import settings as compile_settings
from optimizers.compile import compile_program
from programs.registry import PAR2_H
from evaluation.leaderboard import answered, fmt
from evaluation.stats import paired_scores, paired_t
from runtime.metering import metered

REFERENCE = "par2"
#: The paper suite's par2 arms (``experiments.suite.SUITES``), par2 last.
DEFAULT_PROGRAMS = (*next(e.baselines for e in suite.SUITES["paper"] if e.method == REFERENCE), REFERENCE)
BUDGET_PROGRAMS = ("par2", "par2_chain", "ircot")
ENTRY = "scripts/par2_compare.py"
COLUMNS = (("recall_any", "Recall@k"), ("ndcg", "NDCG@k"), ("all_pass", "All-Pass@k"),
           ("recall_any_all", "Recall"), ("ndcg_all", "NDCG"), ("all_pass_all", "All-Pass"),
           ("retrieved_n", "retrieved/q"), ("fallbacks", "fallbacks/q"), ("continued", "CONTINUE>=1"))


def fallbacks(records: list[dict]) -> float:
    """Mean per question of the fallbacks a program counted in its trace (plan, ESC, thought, answer)."""
    counts = [sum(((r.get("trace") or {}).get("fallbacks") or {}).values()) for r in records]
    return sum(counts) / len(counts) if counts else math.nan


def continued(records: list[dict]) -> int:
    """Questions on which the controller said CONTINUE at least once (PAR2's trace)."""
    return sum(bool((r.get("trace") or {}).get("continued")) for r in records)


def paired(results: list, reference=None) -> tuple[str, dict]:
    """PAR2's retrieval measures and fallbacks of every result and, with a ``reference`` result, a paired t-test
    on Recall@k against it on the same questions. Returns the markdown table and the p-values as metrics."""
    vs = reference.cell.label if reference else "-"
    lines = ["| program | answered | " + " | ".join(label for _, label in COLUMNS)
             + f" | Recall@k paired t p vs {vs} |", "|---" * (len(COLUMNS) + 3) + "|"]
    metrics = {}
    for result in results:
        special = {"fallbacks": fallbacks, "continued": continued}
        values = [special[key](result.records) if key in special else result.summary.get(key) for key, _ in COLUMNS]
        p = math.nan
        if reference and result is not reference:
            pairs = paired_scores(reference.records, result.records, "recall_any").values()
            p = paired_t([a for a, _ in pairs], [b for _, b in pairs])
            metrics[f"{result.cell.label}_vs_{vs}_ttest_recall_p"] = p
        lines.append(f"| {result.label} | {answered(result.summary)} | " + " | ".join(map(fmt, values))
                     + f" | {fmt(p)} |")
    return "\n".join(lines), {k: v for k, v in metrics.items() if not math.isnan(v)}


def main(argv=None) -> dict[str, dict]:
    p = suite.parser(__doc__.splitlines()[0])
    p.add_argument("--programs", nargs="*", default=list(DEFAULT_PROGRAMS), choices=programs.names())
    p.add_argument("--budgets", type=int, nargs="*", default=[], help="loop budgets H for the step-budget table")
    p.add_argument("--budget-programs", nargs="+", default=list(BUDGET_PROGRAMS), choices=programs.names())
    p.add_argument("--compile", action="store_true", help="also bootstrap par2 on train and report it compiled")
    cli.add_flags(p, (compile_settings.DEMOS,))
    p.set_defaults(dataset="musique", split="test")
    args = suite.script_args(p, argv, suite.OWN_CELLS)
    args = args.replace(k=programs.run_k(REFERENCE, args.k))  # every arm at par2's k
    s = session(args, needs_search=True)
    args = s.args  # as resolved
    examples = getattr(s.splits, args.split)
    title = (f"PAR2-RAG comparison: {args.dataset} {args.split}, n={len(examples)}, seed={args.seed}, k={args.k}, "
             f"lm={args.lm}, planner={args.planner_lm or args.lm}, judge={s.derived.judged_by}")
    groups = {args.loops: [suite.cell(name, args.dataset, {"loops": args.loops}, args.oracle)
                           for name in args.programs]}
    for h in args.budgets:
        groups.setdefault(h, [])
        groups[h] += [c for c in (suite.cell(n, args.dataset, {"loops": h}, args.oracle) for n in args.budget_programs)
                      if c not in groups[h]]
    with tracking.run(args.experiment, f"par2-compare-{args.dataset}-n{len(examples)}", tags={"entry": ENTRY}) as run:
        shared = {key: v for key, v in s.params(REFERENCE).items() if key not in ("program", "program_config")}
        tracking.log_params(shared | {"programs": args.programs, "budgets": args.budgets, "compile": args.compile,
                                      "budget_programs": args.budget_programs, "eval_split": args.split})
        results = {}

        def arm(cell, program=None):
            if cell not in results:  # a cell shared by the main table and a budget (same H) runs once
                results[cell] = suite.run_cell(suite.cell_session(s, cell), cell, run.info.run_id, "par2-compare",
                                               program=program, examples=examples, entry=ENTRY)
            return results[cell]

        for cells in groups.values():
            for cell in cells:
                arm(cell)
        if args.compile:
            _, metric = compile_metric(s.bundle.task, None)
            reference = suite.cell(REFERENCE, args.dataset, {"loops": args.loops})
            with metered() as cost:
                compiled = compile_program(suite.cell_session(s, reference).build(REFERENCE), "bootstrap",
                                           s.splits.train, s.splits.dev, metric, max_demos=args.demos)
            tracking.log_metrics(cost.as_dict(), "compile")
            groups[args.loops].append(suite.Cell(REFERENCE, args.dataset, reference.config, "compiled"))
            arm(groups[args.loops][-1], compiled)
        pairs, report, sig = [], [f"## {title}"], {}
        for h, cells in groups.items():
            ref = next((c for c in cells if c.program == REFERENCE and not c.variant), None)
            pairs += [p for p in suite.against(ref, cells) if p not in pairs] if ref else []
            text, metrics = paired([results[c] for c in cells], results[ref] if ref else None)
            at = h if h is not None else f"each method's default ({PAR2_H} for par2 and its loop baselines)"
            report += [f"### programs at H={at}", text]
            sig |= metrics
        board = suite.log_leaderboard(list(results.values()), pairs, title)
        text = "\n\n".join(report) + "\n"
        mlflow.log_metrics(sig)
        mlflow.log_text(text, "report.md")
    print(f"\n{board.markdown}\n{text}\nrun {run.info.run_id}")
    return {cell.label: result.summary for cell, result in results.items()}


if __name__ == "__main__":
    interruptible(main)()
