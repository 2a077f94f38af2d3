"""SEAL-RAG grid: k x loop budget L x {seal, self_rag, rag} on one seeded HotpotQA slice, in one MLflow run.

``python scripts/seal_grid.py --n 30 --lm local:qwen-0.5b --seed 13 [--judge-lm local:qwen-1.5b]``
Prints one markdown table (judge/EM/F1, gold-title P/R/F1@k, loops, LM calls and seconds per question per cell) and
the paired tests of seal vs self_rag per (k, L) cell: exact McNemar on judge correctness (binomial test on the
discordant pairs) and a two-sided paired t-test on per-question title precision. ``rag`` is single-pass, so it runs
once per k (its L column reads "-"). iters/q is the trace's iteration count: repairs for seal, re-retrievals for
self_rag, the single pass for rag. Every cell is checkpointed, so an interrupted grid resumes; LM responses are not
cached by default, so s/q is each cell's own cost.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import mlflow  # noqa: E402

import programs  # noqa: E402
from optimizers import cli, tracking  # noqa: E402
from optimizers.evaluation import evaluate  # noqa: E402
from optimizers.stats import mcnemar_exact, paired_t  # noqa: E402
from runtime.roles import assign_roles  # noqa: E402

PROGRAMS = ("seal", "self_rag", "rag")
COLUMNS = {"judge": "judge", "em": "EM", "f1": "F1", "title_precision": "P@k", "title_recall": "R@k",
           "title_f1": "F1@k", "iterations": "iters/q", "lm_calls": "LM calls/q", "seconds": "s/q",
           "failed_examples": "failed"}


def cell_name(name: str, k: int, loops: int | None) -> str:
    return f"{name}_k{k}" + ("" if loops is None else f"_L{loops}")


def fmt(value) -> str:
    """Numbers with 3 decimals (counts as integers); missing or undefined values as "-"."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return str(value) if isinstance(value, (int, str)) else f"{value:.3f}"


def grid_table(summaries: dict, ks: list[int], budgets: list[int]) -> str:
    rows = ["| program | k | L | " + " | ".join(COLUMNS.values()) + " |", "|---" * (len(COLUMNS) + 3) + "|"]
    for k in ks:
        cells = [(n, k, L) for L in budgets for n in PROGRAMS[:2]] + [("rag", k, None)]
        for name, _, loops in cells:
            summary = summaries[cell_name(name, k, loops)]
            values = [summary.get(c) if c == "failed_examples" or c not in summary else float(summary[c])
                      for c in COLUMNS]
            rows.append(f"| {name} | {k} | {fmt(loops)} | " + " | ".join(map(fmt, values)) + " |")
    return "\n".join(rows)


def significance(records: dict, ks: list[int], budgets: list[int]) -> tuple[str, dict]:
    """Paired seal-vs-self_rag tests per (k, L): the markdown table and the p-values as metrics."""
    rows = ["| k | L | n | seal judge | self_rag judge | only seal right | only self_rag right | McNemar p | "
            "seal P@k | self_rag P@k | paired t p |", "|---" * 11 + "|"]
    metrics = {}
    for k in ks:
        for loops in budgets:
            seal = {r["id"]: r for r in records[cell_name("seal", k, loops)]}
            base = {r["id"]: r for r in records[cell_name("self_rag", k, loops)]}
            ids = [i for i in seal if i in base]
            right = [[d[i]["judge"] >= 1.0 for i in ids] for d in (seal, base)]
            precision = [[d[i].get("title_precision", 0.0) for i in ids] for d in (seal, base)]
            only_seal, only_base, p_mcnemar = mcnemar_exact(*right)
            p_t = paired_t(*precision)
            means = [sum(x) / len(ids) if ids else math.nan for x in (*right, *precision)]
            rows.append(f"| {k} | {loops} | {len(ids)} | " + " | ".join(fmt(m) for m in means[:2]) +
                        f" | {only_seal} | {only_base} | {fmt(p_mcnemar)} | " +
                        " | ".join(fmt(m) for m in means[2:]) + f" | {fmt(p_t)} |")
            prefix = f"sig_k{k}_L{loops}"
            metrics |= {f"{prefix}_mcnemar_p": p_mcnemar, f"{prefix}_ttest_precision_p": p_t}
    return "\n".join(rows), {name: p for name, p in metrics.items() if not math.isnan(p)}


def build(s: cli.Session, name: str, k: int, loops: int):
    """Program ``name`` at this cell's k and loop budget, with the session's retriever and role LMs."""
    return assign_roles(programs.build(name, search=s.retriever, **(s.config | {"k": k, "loops": loops})), s.roles)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=30, help="questions in the seeded HotpotQA slice")
    p.add_argument("--lm", default="local:qwen-0.5b", help="LM for every role but the judge")
    p.add_argument("--judge-lm", help="judge LM (default: --lm)")
    p.add_argument("--seed", type=int, default=13, help="slice seed")
    p.add_argument("--ks", type=int, nargs="+", default=[1, 3], help="retrieval depths")
    p.add_argument("--budgets", type=int, nargs="+", default=[0, 1, 3], help="loop budgets L")
    p.add_argument("--data-dir", help="benchmark data folder (default: $RAG_DATA_DIR)")
    p.add_argument("--experiment", default="seal-grid", help="MLflow experiment")
    p.add_argument("--cache", action="store_true", help="reuse cached LM responses (faster, but cells that share "
                                                        "prompts, e.g. seal at L=1 and L=3, then report fewer s/q)")
    args = p.parse_args(argv)
    flags = ["--dataset", "hotpotqa", "--train", "0", "--dev", str(args.n), "--test", "0", "--seed", str(args.seed),
             "--lm", args.lm, "--judge", "--experiment", args.experiment]
    flags += ["--judge-lm", args.judge_lm] if args.judge_lm else []
    flags += ["--data-dir", args.data_dir] if args.data_dir else []
    flags += [] if args.cache else ["--no-cache"]
    s = cli.session(cli.parser(__doc__.splitlines()[0]).parse_args(flags), needs_search=True)
    examples = s.splits.dev
    cells = [(name, k, loops) for k in args.ks for name in PROGRAMS[:2] for loops in args.budgets]
    cells += [("rag", k, None) for k in args.ks]

    summaries, records = {}, {}
    with tracking.run(args.experiment, f"seal-grid-hotpotqa-n{args.n}", tags={"entry": "scripts/seal_grid.py"}) as run:
        shared = {key: v for key, v in s.params("seal").items() if key not in ("program", "program_config")}
        tracking.log_params(shared | {"grid_programs": PROGRAMS, "grid_k": args.ks, "grid_loops": args.budgets,
                                      "max_chars": s.args.max_chars})
        for name, k, loops in cells:
            cell = cell_name(name, k, loops)
            program = build(s, name, k, loops or 0)
            records[cell], summaries[cell] = evaluate(program, examples, s.metrics, k=k, retries=s.args.retries,
                                                      checkpoint=s.checkpoint("grid", cell, program, examples),
                                                      desc=cell)
            tracking.log_metrics(summaries[cell], cell)
            tracking.log_jsonl(f"predictions/{cell}.jsonl", records[cell])
        table = grid_table(summaries, args.ks, args.budgets)
        sig_table, sig_metrics = significance(records, args.ks, args.budgets)
        report = (f"## SEAL-RAG grid: HotpotQA, n={len(examples)}, seed={args.seed}, lm={args.lm}, "
                  f"judge={args.judge_lm or args.lm}\n\n{table}\n\n### seal vs self_rag (paired)\n\n{sig_table}\n")
        mlflow.log_metrics(sig_metrics | {"judge_failures": s.judge.failures})
        mlflow.log_text(report, "grid.md")
    print(f"\n{report}\nrun {run.info.run_id}")
    return summaries


if __name__ == "__main__":
    main()
