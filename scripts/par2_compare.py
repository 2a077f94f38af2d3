"""PAR2-RAG against its baselines and ablations on one seeded slice, and the step-budget (H) table, in one MLflow run.

``python scripts/par2_compare.py --dataset musique --test 30 --k 5 --loops 5 --judge --judge-lm local:qwen-1.5b``
``python scripts/par2_compare.py --dataset musique --test 30 --programs par2 --budgets 3 5 7``   (the H table)

Prints (1) one markdown table for ``--programs`` at loop budget ``--loops``: EM, F1, judge, Recall@k (any gold
title), NDCG@k, All-Pass@k, iterations, fallbacks, LM calls, prompt tokens and seconds per question; (2) each
program paired with par2 on the same questions: exact McNemar on correctness (judge with ``--judge``, else EM) and
a paired t-test on Recall@k; (3) with ``--budgets``, the same for ``--budget-programs`` at every H, each paired with
par2 at the same H. Every cell is checkpointed, so an interrupted run resumes where it stopped. ``--compile`` also
bootstraps par2's demos on the train split and reports the compiled program next to the uncompiled one.
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import mlflow  # noqa: E402

import programs  # noqa: E402
from optimizers import tracking  # noqa: E402
from optimizers.cli import compile_metric, parser, session  # noqa: E402
from optimizers.compile import compile_program  # noqa: E402
from optimizers.evaluation import evaluate  # noqa: E402
from optimizers.stats import mcnemar_exact, paired_t  # noqa: E402
from runtime.metering import metered  # noqa: E402
from runtime.roles import assign_roles  # noqa: E402

DEFAULT_PROGRAMS = ("direct", "cot", "rag", "react", "ircot", "par2_anchor", "par2_chain", "par2")
BUDGET_PROGRAMS = ("par2", "par2_chain", "ircot")
REFERENCE = "par2"
COLUMNS = (("em", "EM"), ("f1", "F1"), ("judge", "judge"), ("recall_any", "Recall@k"), ("ndcg", "NDCG@k"),
           ("all_pass", "All-Pass@k"), ("iterations", "iters/q"), ("fallbacks", "fallbacks/q"),
           ("lm_calls", "LM calls/q"), ("prompt_tokens", "prompt tok/q"), ("seconds", "s/q"),
           ("failed_examples", "failed"))


def fmt(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return str(value) if isinstance(value, (int, str)) else f"{value:.3f}" if abs(value) < 100 else f"{value:.0f}"


def fallbacks(records: list[dict]) -> float:
    """Mean per question of the fallbacks a program counted in its trace (plan, ESC, thought, answer)."""
    counts = [sum(((r.get("trace") or {}).get("fallbacks") or {}).values()) for r in records]
    return sum(counts) / len(counts) if counts else math.nan


def table(summaries: dict[str, dict], records: dict[str, list[dict]]) -> str:
    shown = [(key, label) for key, label in COLUMNS if any(key in s for s in summaries.values()) or key == "fallbacks"]
    lines = ["| program | n | " + " | ".join(label for _, label in shown) + " |", "|---" * (len(shown) + 2) + "|"]
    for name, s in summaries.items():
        values = [fallbacks(records[name]) if key == "fallbacks" else s.get(key) for key, _ in shown]
        lines.append(f"| {name} | {s['n']} | " + " | ".join(map(fmt, values)) + " |")
    return "\n".join(lines)


def paired(records: dict[str, list[dict]], reference: str, correct: str) -> tuple[str, dict]:
    """Every cell against ``reference`` on the same questions: McNemar on ``correct`` (score 1 = right) and a
    paired t-test on Recall@k. Returns the markdown table and the p-values as metrics."""
    lines = [f"| program | n | only {reference} right | only program right | McNemar p | Recall@k {reference} | "
             "Recall@k program | paired t p |", "|---" * 8 + "|"]
    metrics = {}
    ref = {r["id"]: r for r in records[reference]}
    for name, recs in records.items():
        if name == reference:
            continue
        mine = {r["id"]: r for r in recs}
        ids = [i for i in ref if i in mine]
        only_ref, only_prog, p = mcnemar_exact([ref[i].get(correct, 0.0) >= 1.0 for i in ids],
                                               [mine[i].get(correct, 0.0) >= 1.0 for i in ids])
        recall = [[d[i].get("recall_any", 0.0) for i in ids] for d in (ref, mine)]
        p_t = paired_t(*recall)
        means = [sum(x) / len(ids) if ids else math.nan for x in recall]
        lines.append(f"| {name} | {len(ids)} | {only_ref} | {only_prog} | {fmt(p)} | {fmt(means[0])} | "
                     f"{fmt(means[1])} | {fmt(p_t)} |")
        metrics |= {f"{name}_vs_{reference}_mcnemar_p": p, f"{name}_vs_{reference}_ttest_recall_p": p_t}
    return "\n".join(lines), {k: v for k, v in metrics.items() if not math.isnan(v)}


def main(argv=None) -> dict[str, dict]:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--programs", nargs="*", default=list(DEFAULT_PROGRAMS), choices=programs.names())
    p.add_argument("--split", default="test", choices=["dev", "test"], help="evaluated split")
    p.add_argument("--budgets", type=int, nargs="*", default=[], help="loop budgets H for the step-budget table")
    p.add_argument("--budget-programs", nargs="+", default=list(BUDGET_PROGRAMS), choices=programs.names())
    p.add_argument("--compile", action="store_true", help="also bootstrap par2 on train and report it compiled")
    p.add_argument("--demos", type=int, default=2, help="max bootstrapped and labeled demos per predictor")
    p.set_defaults(dataset="musique")
    args = p.parse_args(argv)
    s = session(args, needs_search=True)
    examples = getattr(s.splits, args.split)
    correct = "judge" if s.judge else "em"
    report = [f"## PAR2-RAG comparison: {args.dataset} {args.split}, n={len(examples)}, seed={args.seed}, "
              f"k={args.k}, lm={args.lm}, planner={args.planner_lm or args.lm}, judge={args.judge_lm or args.lm}"
              if s.judge else f"## PAR2-RAG comparison: {args.dataset} {args.split}, n={len(examples)}, "
              f"seed={args.seed}, k={args.k}, lm={args.lm}, planner={args.planner_lm or args.lm}, no judge"]

    def run_cell(cell: str, program, summaries: dict, records: dict) -> None:
        records[cell], summaries[cell] = evaluate(program, examples, s.metrics, k=args.k, retries=args.retries,
                                                  checkpoint=s.checkpoint(args.split, cell, program, examples),
                                                  desc=cell)
        tracking.log_metrics(summaries[cell], cell)
        tracking.log_jsonl(f"predictions/{cell}.jsonl", records[cell])
        print(f"{cell}: " + " ".join(f"{key}={fmt(summaries[cell].get(key))}" for key, _ in COLUMNS
                                     if key in summaries[cell]), flush=True)  # survives an interrupted run

    def build(name: str, loops: int):
        return assign_roles(programs.build(name, search=s.retriever, **(s.config | {"loops": loops})), s.roles)

    with tracking.run(args.experiment, f"par2-compare-{args.dataset}-n{len(examples)}",
                      tags={"entry": "scripts/par2_compare.py"}) as run:
        shared = {key: v for key, v in s.params(REFERENCE).items() if key not in ("program", "program_config")}
        tracking.log_params(shared | {"programs": args.programs, "budgets": args.budgets,
                                      "budget_programs": args.budget_programs, "compile": args.compile,
                                      "eval_split": args.split, "eval_ids": [ex.id for ex in examples]})
        summaries, records, sig = {}, {}, {}
        for name in args.programs:
            run_cell(name, build(name, args.loops), summaries, records)
        if args.compile:
            _, metric = compile_metric(s.bundle.task, None)
            with metered() as cost:
                compiled = compile_program(build(REFERENCE, args.loops), "bootstrap", s.splits.train, s.splits.dev,
                                           metric, max_demos=args.demos)
            tracking.log_metrics(cost.as_dict(), "compile")
            run_cell(f"{REFERENCE}_compiled", compiled, summaries, records)
        if summaries:
            report += [f"### programs at H={args.loops}", table(summaries, records)]
            if REFERENCE in records:
                text, sig = paired(records, REFERENCE, correct)
                report += [f"### paired with {REFERENCE} (McNemar on {correct}, paired t on Recall@k)", text]
        for h in args.budgets:
            cells_s, cells_r = {}, {}
            for name in args.budget_programs:
                reuse = name in records and h == args.loops
                cells_s[name], cells_r[name] = (summaries[name], records[name]) if reuse else ({}, [])
                if not reuse:
                    run_cell(f"{name}_H{h}", build(name, h), summaries, records)
                    cells_s[name], cells_r[name] = summaries[f"{name}_H{h}"], records[f"{name}_H{h}"]
            report += [f"### step budget H={h}", table(cells_s, cells_r)]
            if REFERENCE in cells_r:
                text, metrics = paired(cells_r, REFERENCE, correct)
                report += [text]
                sig |= {f"H{h}_{key}": v for key, v in metrics.items()}
        text = "\n\n".join(report) + "\n"
        mlflow.log_metrics(sig | ({"judge_failures": s.judge.failures} if s.judge else {}))
        mlflow.log_text(text, "compare.md")
    print(f"\n{text}\nrun {run.info.run_id}")
    return summaries


if __name__ == "__main__":
    main()
