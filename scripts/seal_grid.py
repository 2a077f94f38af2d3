"""SEAL-RAG grid: k x loop budget L x {seal, self_rag, crag, rag_cited} on one seeded multi-hop slice (HotpotQA by
default), as a suite run.

``python -m scripts.seal_grid --dev 30 --lm local:qwen-0.5b --seed 13 [--judge-lm local:qwen-1.5b]
[--ks 1 3] [--budgets 0 1 3 5] [--programs seal self_rag crag rag_cited] [--ledger-to-writer] [--corpus bundled]
[--dataset musique]``

A thin use of ``evaluate.py --suite`` (``experiments/suite.py``), whose flags it takes (``--dev``: the questions of
the seeded slice; a flag the grid sets itself, or one a suite refuses, is one line): the grid is one suite entry
(seal against its baselines at every (k, L)), so every cell gets its child run, per-question checkpoint and the
suite's leaderboard (judge, EM, F1, retrieval, cost; seal vs each arm by exact McNemar with bootstrap CIs and
Holm). This script adds what only SEAL has, logged as the parent run's ``report.md``: how many held passages the
ranking replaced per repair, and paired t-tests on gold-title precision/recall/F1@k (bootstrap CIs, Holm across the whole grid).

Every arm answers with the same writer over its final k passages (2-4 words with cited passages, or "I don't
know"; ``rag_cited`` is single-pass rag under that writer, run once per k); ``--ledger-to-writer`` adds seal_ledger
rows (seal whose writer also sees the verified facts). The corpus is the pooled ``multihop_pool`` setting by
default (``--corpus bundled``: HotpotQA's own 1,952 paragraphs; on all 198 questions both give rag the same P@1,
0.884: see ``scripts/retrieval_difficulty.py``). LM responses are not cached by default, so s/q is each cell's cost.
"""
from __future__ import annotations

import argparse
import math

import mlflow

from experiments import cli, suite
from experiments.cli import interruptible
from evaluation.leaderboard import fmt
from evaluation.stats import bootstrap_ci, holm, paired_scores, paired_t

PROGRAMS = ("seal", "self_rag", "crag", "rag_cited")
LEDGER = "seal_ledger"  # seal with ledger_to_writer: its own row
PAIRED = {"title_precision": "P@k", "title_recall": "R@k", "title_f1": "F1@k"}  # judge: in the leaderboard


def replacements(records: list[dict]) -> dict:
    """Over every repair of a seal cell: held passages replaced per repair, and the share of repairs that
    replaced at least one."""
    per_loop = [n for r in records for n in (r.get("trace") or {}).get("replaced", [])]
    if not per_loop:
        return {}
    return {"replaced_per_loop": sum(per_loop) / len(per_loop),
            "loops_replacing": sum(n > 0 for n in per_loop) / len(per_loop), "repairs": len(per_loop)}


def comparisons(results: list) -> list[dict]:
    """seal vs every other arm at the same k (and L, for looped arms; a single-pass arm is paired with seal at
    every L) on gold-title P/R/F1@k: means, mean difference with its paired bootstrap CI, paired t-test p, and
    the p-values Holm-corrected across the whole grid."""
    seal = [r for r in results if r.cell.program == "seal"]
    out = []
    for other in results:
        if other.cell.program == "seal":
            continue
        mine = dict(other.cell.config)
        for ref in seal:
            config = dict(ref.cell.config)
            if config["k"] != mine["k"] or ("loops" in mine and mine["loops"] != config["loops"]):
                continue
            for metric, label in PAIRED.items():
                pairs = list(paired_scores(ref.records, other.records, metric).values())
                a, b = [x for x, _ in pairs], [y for _, y in pairs]
                diff, low, high = bootstrap_ci(pairs)
                out.append({"k": config["k"], "L": config["loops"], "vs": other.cell.program, "metric": label,
                            "n": len(pairs), "seal": sum(a) / len(a) if a else math.nan,
                            "other": sum(b) / len(b) if b else math.nan, "diff": diff, "low": low,
                            "high": high, "p": paired_t(a, b)})
    for row, adjusted in zip(out, holm([r["p"] for r in out])):
        row["p_holm"] = adjusted
    return out


def report(results: list, sessions=None) -> str:
    """The SEAL-only diagnostics: replacement counts per seal cell and the title-metric tests."""
    lines = ["### How often the ranking replaced a held passage", "",
             "| cell | repairs | replaced per repair | repairs that replaced |", "|---|---|---|---|"]
    for r in results:
        if r.cell.program in ("seal", LEDGER) and (rep := replacements(r.records)):
            lines.append(f"| {r.cell.label} | {rep['repairs']} | {fmt(rep['replaced_per_loop'])} | "
                         f"{fmt(rep['loops_replacing'])} |")
    rows = comparisons(results)
    lines += ["", f"### seal vs each arm on gold-title metrics (paired t; Holm across all {len(rows)} tests)", "",
              "| k | L | seal vs | metric | n | seal | other | diff | 95% CI | p | Holm p |", "|---" * 11 + "|"]
    lines += [f"| {r['k']} | {r['L']} | {r['vs']} | {r['metric']} | {r['n']} | {fmt(r['seal'])} | "
              f"{fmt(r['other'])} | {fmt(r['diff'])} | [{fmt(r['low'])}, {fmt(r['high'])}] | {fmt(r['p'])} | "
              f"{fmt(r['p_holm'])} |" for r in rows]
    mlflow.log_metrics({f"p_holm_k{r['k']}_L{r['L']}_{r['vs']}_{r['metric'].replace('@', 'at')}": r["p_holm"]
                        for r in rows if not math.isnan(r["p_holm"])})
    return "\n".join(lines) + "\n"


DATASETS = ("hotpotqa", "2wiki", "musique")
#: What the grid sets itself: its suite and split (every question of ``--dev`` is a grid question), its k and L
#: (``--ks``, ``--budgets``) and the LM cache (``--cache``).
FIXED = ("suite", "datasets", "methods", "split", "train", "test", "k", "loops", "no_cache")


def parser() -> argparse.ArgumentParser:
    """The suite's flags (``experiments.suite.parser``) at the grid's defaults, with the grid's own."""
    p = suite.parser(__doc__.splitlines()[0])
    p.set_defaults(dataset="hotpotqa", dev=30, corpus="multihop_pool", experiment="seal-grid", judge=True)
    p.add_argument("--ks", type=int, nargs="+", default=[1, 3], help="retrieval depths")
    p.add_argument("--budgets", type=int, nargs="+", default=[0, 1, 3, 5], help="loop budgets L")
    p.add_argument("--programs", nargs="+", default=list(PROGRAMS), choices=PROGRAMS, help="arms (seal is always run)")
    p.add_argument("--cache", action="store_true", help="reuse cached LM responses (faster, but cells that share "
                                                        "prompts, e.g. seal at L=1 and L=3, then report fewer s/q)")
    return p


def main(argv=None) -> dict:
    p = parser()
    args = suite.script_args(p, argv, FIXED)
    if args.dataset not in DATASETS:
        cli.fail(f"--dataset {args.dataset}: the grid's title metrics need a multi-hop dataset ({', '.join(DATASETS)})")
    # --ledger-to-writer adds the seal_ledger rows (seal whose writer sees the ledger) beside seal's own
    baselines = [n for n in args.programs if n != "seal"] + ([LEDGER] if args.ledger_to_writer else [])
    entry = suite.Entry("seal", tuple(baselines), (args.dataset,), {"k": tuple(args.ks), "loops": tuple(args.budgets)})
    args = args.replace(suite="seal-grid", split="dev", train=0, test=0, no_cache=not args.cache,
                        ledger_to_writer=False)
    out = suite.run_suite(args, custom=(entry,), report=report)
    return {r.cell.label: r.summary | replacements(r.records) for r in out["results"]}


if __name__ == "__main__":
    interruptible(main)()
