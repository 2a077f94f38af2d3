"""SEAL-RAG grid: k x loop budget L x {seal, self_rag, crag, rag} on one seeded HotpotQA slice, in one MLflow run.

``python scripts/seal_grid.py --n 30 --lm local:qwen-0.5b --seed 13 [--judge-lm local:qwen-1.5b]
[--ks 1 3] [--budgets 0 1 3 5] [--programs seal self_rag crag rag] [--ledger-to-writer] [--corpus bundled]``

Every arm answers with the same writer over its final k passages (2-4 words with cited passages, or "I don't
know"); ``--ledger-to-writer`` adds seal_ledger rows (seal whose writer also sees the verified facts). The corpus
is the pooled ``multihop_pool`` setting by default (``--corpus bundled``: HotpotQA's own 1,952 paragraphs; on all
198 questions both give rag the same P@1, 0.884: see ``scripts/retrieval_difficulty.py``).

Prints the grid table (judge/EM/F1, gold-title P/R/F1@k, citation precision, loops, how many held passages the
ranking replaced per repair, LM calls and seconds per question) and the paired comparisons of seal with each
baseline per (k, L) cell: judge correctness by exact McNemar, title precision/recall/F1 by paired t-tests, each
with the mean difference and its 95% paired bootstrap CI, and every p-value Holm-Bonferroni corrected across the
whole grid. ``rag`` is single-pass, so it runs once per k and is paired with seal at every L. Every cell is
checkpointed, so an interrupted grid resumes; LM responses are not cached by default, so s/q is each cell's cost.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import mlflow  # noqa: E402

import programs  # noqa: E402
from data import corpora as sources  # noqa: E402
from optimizers import cli, tracking  # noqa: E402
from optimizers.evaluation import evaluate  # noqa: E402
from optimizers.stats import bootstrap_ci, holm, mcnemar_exact, paired_t  # noqa: E402
from runtime.roles import assign_roles  # noqa: E402

PROGRAMS = ("seal", "self_rag", "crag", "rag")
LEDGER = "seal_ledger"  # seal with ledger_to_writer: its own row
COLUMNS = {"judge": "judge", "em": "EM", "f1": "F1", "title_precision": "P@k", "title_recall": "R@k",
           "title_f1": "F1@k", "citation_precision": "cite P", "iterations": "iters/q",
           "replaced_per_loop": "repl/loop", "lm_calls": "LM calls/q", "seconds": "s/q",
           "failed_examples": "failed"}
PAIRED = {"judge": "judge", "title_precision": "P@k", "title_recall": "R@k", "title_f1": "F1@k"}


def cell_name(name: str, k: int, loops: int | None) -> str:
    return f"{name}_k{k}" + ("" if loops is None else f"_L{loops}")


def fmt(value) -> str:
    """Numbers with 3 decimals (counts as integers); missing or undefined values as "-"."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return str(value) if isinstance(value, (int, str)) else f"{value:.3f}"


def replacements(records: list[dict]) -> dict:
    """Over every repair of a seal cell: held passages replaced per repair, and the share of repairs that
    replaced at least one."""
    per_loop = [n for r in records for n in (r.get("trace") or {}).get("replaced", [])]
    if not per_loop:
        return {}
    return {"replaced_per_loop": sum(per_loop) / len(per_loop),
            "loops_replacing": sum(n > 0 for n in per_loop) / len(per_loop), "repairs": len(per_loop)}


def cells(names: list[str], ks: list[int], budgets: list[int]) -> list[tuple[str, int, int | None]]:
    """(program, k, L) per grid cell, rag once per k (L=None) and first (the cheapest cells run first, so a grid
    cut short by a time limit still has its reference arm)."""
    looped = [n for n in names if n != "rag"]
    return [("rag", k, None) for k in ks if "rag" in names] + [(n, k, L) for k in ks for L in budgets for n in looped]


def grid_table(summaries: dict, grid: list) -> str:
    rows = ["| program | k | L | " + " | ".join(COLUMNS.values()) + " |", "|---" * (len(COLUMNS) + 3) + "|"]
    for name, k, loops in grid:
        summary = summaries[cell_name(name, k, loops)]
        values = [summary.get(c) if c == "failed_examples" or c not in summary else float(summary[c])
                  for c in COLUMNS]
        rows.append(f"| {name} | {k} | {fmt(loops)} | " + " | ".join(map(fmt, values)) + " |")
    return "\n".join(rows)


def comparisons(records: dict, grid: list) -> list[dict]:
    """seal vs each other arm per (k, L) and metric: means, mean difference with its bootstrap CI, raw p."""
    out = []
    for name, k, loops in grid:
        if name == "seal":
            continue
        seal_cells = [cell_name("seal", k, L) for n, kk, L in grid if n == "seal" and kk == k
                      and (loops is None or L == loops)]
        for seal_cell in seal_cells:
            seal = {r["id"]: r for r in records[seal_cell]}
            base = {r["id"]: r for r in records[cell_name(name, k, loops)]}
            ids = [i for i in seal if i in base]
            for metric, label in PAIRED.items():
                a = [float(seal[i].get(metric) or 0.0) for i in ids]
                b = [float(base[i].get(metric) or 0.0) for i in ids]
                if metric == "judge":
                    only_a, only_b, p = mcnemar_exact([x >= 1.0 for x in a], [y >= 1.0 for y in b])
                    test = f"McNemar {only_a}/{only_b}"
                else:
                    p, test = paired_t(a, b), "paired t"
                diff, low, high = bootstrap_ci(list(zip(a, b)))
                out.append({"k": k, "L": seal_cell.rsplit("_L", 1)[1], "vs": name, "metric": label, "n": len(ids),
                            "seal": sum(a) / len(ids) if ids else math.nan,
                            "other": sum(b) / len(ids) if ids else math.nan,
                            "diff": diff, "low": low, "high": high, "test": test, "p": p})
    for row, adjusted in zip(out, holm([r["p"] for r in out])):
        row["p_holm"] = adjusted
    return out


def significance_table(rows: list[dict]) -> str:
    lines = ["| k | L | seal vs | metric | n | seal | other | diff | 95% CI | test | p | Holm p |", "|---" * 12 + "|"]
    for r in rows:
        lines.append(f"| {r['k']} | {r['L']} | {r['vs']} | {r['metric']} | {r['n']} | {fmt(r['seal'])} | "
                     f"{fmt(r['other'])} | {fmt(r['diff'])} | [{fmt(r['low'])}, {fmt(r['high'])}] | {r['test']} | "
                     f"{fmt(r['p'])} | {fmt(r['p_holm'])} |")
    return "\n".join(lines)


def build(s: cli.Session, name: str, k: int, loops: int):
    """Program ``name`` at this cell's k and loop budget, with the session's retriever and role LMs; every arm
    gets the evidence writer (rag with ``cite=True``), seal_ledger is seal with ``ledger_to_writer``."""
    config = s.config | {"k": k, "loops": loops, "cite": True, "ledger_to_writer": name == LEDGER}
    program = programs.build("seal" if name == LEDGER else name, search=s.retriever, **config)
    return assign_roles(program, s.roles)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=30, help="questions in the seeded HotpotQA slice")
    p.add_argument("--lm", default="local:qwen-0.5b", help="LM for every role but the judge")
    p.add_argument("--judge-lm", help="judge LM (default: --lm)")
    p.add_argument("--seed", type=int, default=13, help="slice seed")
    p.add_argument("--ks", type=int, nargs="+", default=[1, 3], help="retrieval depths")
    p.add_argument("--budgets", type=int, nargs="+", default=[0, 1, 3, 5], help="loop budgets L")
    p.add_argument("--programs", nargs="+", default=list(PROGRAMS), choices=PROGRAMS, help="arms (seal is always run)")
    p.add_argument("--ledger-to-writer", action="store_true", help="add seal_ledger rows (writer sees the ledger)")
    p.add_argument("--corpus", default="multihop_pool", type=sources.source_arg,
                   help="retrieval corpus (default: multihop_pool; bundled: HotpotQA's own paragraphs)")
    p.add_argument("--data-dir", help="benchmark data folder (default: $RAG_DATA_DIR)")
    p.add_argument("--experiment", default="seal-grid", help="MLflow experiment")
    p.add_argument("--cache", action="store_true", help="reuse cached LM responses (faster, but cells that share "
                                                        "prompts, e.g. seal at L=1 and L=3, then report fewer s/q)")
    args = p.parse_args(argv)
    flags = ["--dataset", "hotpotqa", "--train", "0", "--dev", str(args.n), "--test", "0", "--seed", str(args.seed),
             "--lm", args.lm, "--judge", "--experiment", args.experiment, "--corpus", args.corpus]
    flags += ["--judge-lm", args.judge_lm] if args.judge_lm else []
    flags += ["--data-dir", args.data_dir] if args.data_dir else []
    flags += [] if args.cache else ["--no-cache"]
    s = cli.session(cli.parser(__doc__.splitlines()[0]).parse_args(flags), needs_search=True)
    examples = s.splits.dev
    names = ["seal", *(n for n in args.programs if n != "seal")] + ([LEDGER] if args.ledger_to_writer else [])
    grid = cells(names, args.ks, args.budgets)

    summaries, records = {}, {}
    with tracking.run(args.experiment, f"seal-grid-hotpotqa-{args.corpus}-n{args.n}",
                      tags={"entry": "scripts/seal_grid.py"}) as run:
        shared = {key: v for key, v in s.params("seal").items() if key not in ("program", "program_config")}
        tracking.log_params(shared | {"grid_programs": names, "grid_k": args.ks, "grid_loops": args.budgets,
                                      "max_chars": s.args.max_chars})
        for name, k, loops in grid:
            cell = cell_name(name, k, loops)
            program = build(s, name, k, loops or 0)
            records[cell], summaries[cell] = evaluate(program, examples, s.metrics, k=k, retries=s.args.retries,
                                                      checkpoint=s.checkpoint("grid", cell, program, examples),
                                                      desc=cell)
            summaries[cell] |= replacements(records[cell])
            tracking.log_metrics(summaries[cell], cell)
            tracking.log_jsonl(f"predictions/{cell}.jsonl", records[cell])
        rows = comparisons(records, grid)
        corpus = {c.name: len(c) for c in s.bundle.corpora}
        report = (f"## SEAL-RAG grid: HotpotQA, n={len(examples)}, seed={args.seed}, corpus={args.corpus} {corpus}, "
                  f"lm={args.lm}, judge={args.judge_lm or args.lm}\n\n{grid_table(summaries, grid)}\n\n"
                  f"### seal vs each arm (paired; Holm across all {len(rows)} tests)\n\n{significance_table(rows)}\n")
        mlflow.log_metrics({f"p_holm_k{r['k']}_L{r['L']}_{r['vs']}_{r['metric'].replace('@', 'at')}": r["p_holm"]
                            for r in rows if not math.isnan(r["p_holm"])} | {"judge_failures": s.judge.failures})
        mlflow.log_text(report, "grid.md")
    print(f"\n{report}\nrun {run.info.run_id}")
    return summaries


if __name__ == "__main__":
    main()
