"""The suite's leaderboard: per dataset one row per cell (quality, retrieval, cost, failures) and, for every
method-vs-baseline pair, the paired difference with a 95% bootstrap CI, the exact McNemar p-value (and for F1 a
paired t-test) and the Holm-Bonferroni adjusted p-value across all pairs of the same metric in the table."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import mlflow
from dspy.evaluate.metrics import normalize_text

from evaluation import plots
from evaluation.stats import bootstrap_ci, holm, mcnemar_exact, paired_scores, paired_t

QUALITY = (("judge", "judge"), ("em", "EM"), ("f1", "F1"), ("accuracy", "acc"), ("circular_accuracy", "circ acc"))
RETRIEVAL = (("title_recall", "R@k"), ("title_precision", "P@k"), ("all_pass", "all-pass"), ("ndcg", "nDCG"),
             ("citation_precision", "cite P"))
COST = (("iterations", "iters/q", "{:.2f}"), ("lm_calls", "LM calls/q", "{:.1f}"),
        ("oracle_calls", "oracle calls/q", "{:.1f}"),  # the LM calls oracle roles stood in for: shown when any
        ("prompt_tokens", "prompt tok/q", "{:.0f}"), ("prompt_tokens_computed", "computed tok/q", "{:.0f}"),
        ("completion_tokens", "compl tok/q", "{:.0f}"),
        ("seconds", "s/q", "{:.1f}"), ("lm_seconds", "LM s/q", "{:.1f}"))
TIMED = ("seconds", "lm_seconds")  # timed only where the machine was left to the run (:func:`timing`)
#: What compiling a cell's program cost (its summary's ``compile_*`` keys, set by scripts/optimizer_table.py): shown
#: only when some cell has them. Demo tokens: estimated prompt tokens of each predictor's demos.
COMPILE = (("compile_lm_calls", "compile LM calls", "{:.0f}"),
           ("compile_prompt_tokens", "compile prompt tok", "{:.0f}"),
           ("compile_completion_tokens", "compile compl tok", "{:.0f}"), ("compile_minutes", "compile min", "{:.1f}"),
           ("compile_demo_tokens", "demo tok/predictor", "{}"), ("compile_budget_stop", "budget stop", "{}"))
#: What the per-run means average over (the same in the printed summary and the MLflow metrics).
MEANS = ("Scores are means over the answered questions; cost per question (/q) is over every asked question, each "
         "with the spend of all its attempts (an unanswered question's spend is cost too).")
PRIMARY = ("judge", "accuracy", "em")  # the per-question correctness the paired tests use, first one present
GRADED = ("f1",)  # also paired when present beside the primary: on hard sets EM sits at the floor, F1 still moves


@dataclass
class Board:
    markdown: str
    metrics: dict = field(default_factory=dict)
    pairs: list[dict] = field(default_factory=list)


def primary(summary: dict) -> str:
    return next((m for m in PRIMARY if m in summary), "f1")


def fmt(value, spec: str = "{:.3f}") -> str:
    """One table cell: "-" when missing or NaN, whole numbers and text as they are, other numbers by ``spec``."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return str(value) if isinstance(value, (int, str)) else spec.format(value)


def answered(summary: dict) -> str:
    """How many questions a run answered of those it asked ("6 of 6"); a run that left some unanswered (retryable:
    not scored; its score means are over the answered ones, its cost over all asked) says so: "4 of 6, incomplete"."""
    n = summary.get("n", 0)
    done = summary.get("answered", n - summary.get("retryable_examples", 0))
    return f"{done} of {n}" + (", incomplete" if done < n else "")


def overhead(summary: dict) -> float | None:
    """Share of the wall time per question spent outside LM calls (retrieval, parsing, Python)."""
    suffix = "_idle" if "timed_idle" in summary else ""  # the questions timed alone (:func:`timing`)
    if summary.get(f"seconds{suffix}") and summary.get(f"lm_seconds{suffix}") is not None:
        return max(0.0, 1.0 - summary[f"lm_seconds{suffix}"] / summary[f"seconds{suffix}"])
    return None


def timing(summary: dict, key: str, spec: str) -> str:
    """A seconds-per-question cell from the questions timed on a machine left to the run (``timed_idle``): "void"
    when none was, "12.3 (40 of 50 idle)" when some were not; as recorded for runs that predate the load's record."""
    if "timed_idle" not in summary:
        return fmt(summary.get(key), spec)
    idle, n = summary["timed_idle"], summary.get("n", 0)  # timed over every asked question, as cost is
    if not idle:
        return f"void (load {summary['load']:.1f}/core)"
    return fmt(summary.get(f"{key}_idle"), spec) + (f" ({idle} of {n} idle)" if idle < n else "")


def cell_table(results: list) -> str:
    summaries = [r.summary for r in results]
    quality = [(k, h) for k, h in QUALITY if any(k in s for s in summaries)]
    retrieval = [(k, h) for k, h in RETRIEVAL if any(k in s for s in summaries)]
    cost = [(k, h, f) for k, h, f in COST + COMPILE
            if any(k in s for s in summaries) and (k != "oracle_calls" or any(s.get(k) for s in summaries))]
    head = ["program", "answered", *(h for _, h in quality), *(h for _, h in retrieval), *(h for _, h, _ in cost),
            "orchestration", "failed"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        s = r.summary
        cells = [r.label, answered(s), *(fmt(s.get(k)) for k, _ in quality),
                 *(fmt(s.get(k)) for k, _ in retrieval),
                 *(timing(s, k, f) if k in TIMED else fmt(s.get(k), f) for k, _, f in cost),
                 fmt(overhead(s), "{:.0%}"), str(s.get("failed_examples", 0))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + f"\n\n{MEANS}"


def p_name(metric: str) -> str:
    """The name of a pair's p-value: a paired t-test's for a graded metric, else exact McNemar's."""
    return "ttest_p" if metric in GRADED else "mcnemar_p"


def differing(a: list[dict], b: list[dict], questions) -> int:
    """How many of ``questions`` (ids or base ids) two runs answered differently, after the SQuAD normalisation (a
    circular question counts when any of its copies, matched by id, differs): near 0, the method ran as its baseline
    on them, whatever the two scores say."""
    other = {r["id"]: normalize_text(r.get("answer") or "") for r in b}
    return len({r.get("base_id", r["id"]) for r in a
                if r["id"] in other and normalize_text(r.get("answer") or "") != other[r["id"]]} & set(questions))


def paired(method, baseline, metric: str | None = None) -> dict:
    """``method`` vs ``baseline`` on the questions both answered: difference of ``metric`` (default: the primary
    correctness metric; per question, the worst circular copy), its 95% bootstrap CI, and a test -- exact McNemar
    on per-question correctness, or for a graded metric (F1) a paired t-test, with the questions each side wins."""
    metric = metric or primary(method.summary)
    scored = paired_scores(method.records, baseline.records, metric)
    pairs = list(scored.values())
    a, b = [x for x, _ in pairs], [y for _, y in pairs]
    diffs = [x - y for x, y in pairs]
    if metric in GRADED:
        only_a, only_b = sum(d > 0 for d in diffs), sum(d < 0 for d in diffs)
        test, p = "paired t", paired_t(a, b)
    else:
        only_a, only_b, p = mcnemar_exact([x >= 1.0 for x in a], [y >= 1.0 for y in b])
        test = "McNemar"
    _, low, high = bootstrap_ci(diffs)
    return {"dataset": method.cell.dataset, "method": method.cell.label, "baseline": baseline.cell.label,
            "method_label": method.label, "baseline_label": baseline.label,
            "metric": metric, "n": len(pairs), "method_mean": sum(a) / len(a) if a else math.nan,
            "baseline_mean": sum(b) / len(b) if b else math.nan,
            "diff": sum(diffs) / len(diffs) if diffs else math.nan, "ci_low": low, "ci_high": high,
            "only_method": only_a, "only_baseline": only_b, "test": test, "p": p,
            "answers_differ": differing(method.records, baseline.records, scored),
            p_name(metric): p}


def pair_table(rows: list[dict]) -> str:
    lines = ["| dataset | method | baseline | metric | n | answers differ | method | baseline | diff | 95% CI | "
             "only method right | only baseline right | test | p | Holm p |", "|" + "---|" * 15]
    for r in rows:
        lines.append(f"| {r['dataset']} | {r['method_label']} | {r['baseline_label']} | {r['metric']} | {r['n']} | "
                     f"{r['answers_differ']} | {fmt(r['method_mean'])} | {fmt(r['baseline_mean'])} | "
                     f"{fmt(r['diff'], '{:+.3f}')} | [{fmt(r['ci_low'], '{:+.3f}')}, {fmt(r['ci_high'], '{:+.3f}')}] | "
                     f"{r['only_method']} | {r['only_baseline']} | {r['test']} | {fmt(r['p'])} | {fmt(r['holm_p'])} |")
    return "\n".join(lines)


def report(results: list, pairs: list[tuple], title: str) -> Board:
    """The markdown leaderboard of a suite run and its numbers as flat metrics."""
    by_cell = {(r.cell.dataset, r.cell): r for r in results}
    rows = []
    for d, m, b in pairs:
        if (d, m) in by_cell and (d, b) in by_cell:
            method, baseline = by_cell[(d, m)], by_cell[(d, b)]
            main = primary(method.summary)
            rows += [paired(method, baseline, metric) for metric in (main, *GRADED)
                     if metric == main or (metric in method.summary and metric in baseline.summary)]
    for metric in dict.fromkeys(r["metric"] for r in rows):  # Holm within each metric's family of tests
        family = [r for r in rows if r["metric"] == metric]
        for row, adjusted in zip(family, holm([r["p"] for r in family])):
            row["holm_p"] = adjusted
    parts = [f"# Leaderboard: {title}"]
    for dataset in dict.fromkeys(r.cell.dataset for r in results):
        parts.append(f"## {dataset}\n\n" + cell_table([r for r in results if r.cell.dataset == dataset]))
    if rows:
        parts.append("## Method vs baseline (paired, same questions)\n\n" + pair_table(rows) +
                     "\n\ndiff = method - baseline on the row's metric; 95% percentile bootstrap CI of the mean "
                     "per-question difference; exact McNemar test on per-question correctness, paired t-test on F1 "
                     "(only method/baseline right = questions where its F1 is higher); Holm-Bonferroni over every "
                     "pair of the same metric in this table. answers differ = paired questions whose two answers "
                     "are not the same text after normalising case, punctuation and articles: a method with few ran "
                     "as its baseline on the rest. orchestration = share of wall time outside LM calls.")
    metrics = {}
    for r in rows:
        key = f"{r['dataset']}_{r['method']}_vs_{r['baseline']}" + ("_" + r["metric"] if r["metric"] in GRADED else "")
        metrics |= {f"{key}_diff": r["diff"], f"{key}_{p_name(r['metric'])}": r["p"], f"{key}_holm_p": r["holm_p"]}
    for r in results:
        if (share := overhead(r.summary)) is not None:
            metrics[f"{r.cell.dataset}_{r.cell.label}_orchestration"] = share
    return Board("\n\n".join(parts) + "\n", {metric_name(k): v for k, v in metrics.items() if not math.isnan(v)},
                 rows)


def metric_name(key: str) -> str:
    """``key`` as an MLflow metric name: an oracle row's ``+oracle:ROLE`` becomes ``.oracle:ROLE`` (MLflow refuses
    ``+``; every other character of a cell label is allowed)."""
    return re.sub(r"[^\w\-. :/]", ".", key)


def log(board: Board, results: list, pairs: list[tuple]) -> None:
    """Leaderboard as artifact and run description, its numbers as metrics, the plots as figures (active run)."""
    mlflow.log_text(board.markdown, "leaderboard.md")
    mlflow.set_tag("mlflow.note.content", board.markdown)
    mlflow.log_metrics(board.metrics)
    for name, fig in plots.figures(results):
        mlflow.log_figure(fig, name)
        plots.close(fig)
