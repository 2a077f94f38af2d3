"""Suite plots (matplotlib, headless): quality vs cost per dataset, per-language bars, loop-budget curves."""
from __future__ import annotations

import math
from collections import defaultdict

from evaluation.loop import per_question
from evaluation.stats import bootstrap_ci


def pyplot():
    """matplotlib's pyplot on the headless backend, imported on first use (not at every CLI's start)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


PRIMARY = ("judge", "accuracy", "em", "f1")


def _metric(summaries: list[dict]) -> str:
    return next((m for m in PRIMARY if all(m in s for s in summaries)), "f1")


def interval(result, metric: str) -> tuple[float, float]:
    """How far the 95% bootstrap CI of ``metric`` over the cell's questions (each question's worst circular copy)
    reaches below and above the cell's reported value; (0, 0) without per-question records."""
    y = result.summary.get(metric, 0.0)
    _, low, high = bootstrap_ci(list(per_question(result.records, metric).values()))
    return (0.0, 0.0) if math.isnan(low) else (max(0.0, y - low), max(0.0, high - y))


#: The cost axes of :func:`frontier`: (label, cost per question from a summary).
TIME_AND_TOKENS = (("seconds per question", lambda s: s.get("seconds", 0.0)),
                   ("tokens per question", lambda s: s.get("prompt_tokens", 0.0) + s.get("completion_tokens", 0.0)))
CALLS_AND_PROMPT = (("LM calls per question", lambda s: s.get("lm_calls", 0.0)),
                    ("prompt tokens per question", lambda s: s.get("prompt_tokens", 0.0)))


def frontier(dataset: str, results: list, costs=TIME_AND_TOKENS):
    """Primary metric against each of two ``costs`` per question (default: seconds, tokens): one labelled point per
    cell, with the 95% bootstrap CI of the metric over questions as a vertical bar (at n=30 most differences sit
    inside it)."""
    metric = _metric([r.summary for r in results])
    bars = [interval(r, metric) for r in results]  # one bootstrap per cell, drawn on both axes
    fig, axes = pyplot().subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, (xlabel, cost) in zip(axes, costs):
        for r, (below, above) in zip(results, bars):
            x, y = cost(r.summary), r.summary.get(metric, 0.0)
            ax.errorbar(x, y, yerr=[[below], [above]], fmt="o", capsize=3)
            ax.annotate(r.cell.label, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(f"{metric} (95% bootstrap CI)")
    fig.suptitle(f"{dataset}: quality vs cost")
    fig.tight_layout()
    return fig


LANGUAGE_FIELDS = ("lang", "source_lang")  # example fields that name a language (question's, culture's)


def languages(dataset: str, results: list):
    """Grouped bars of the primary metric per language, one bar per cell; None without a language breakdown."""
    metric = _metric([r.summary for r in results])
    for field in LANGUAGE_FIELDS:
        prefix = f"{metric}_by_{field}/"
        langs = sorted({k[len(prefix):] for r in results for k in r.summary if k.startswith(prefix)})
        if len(langs) >= 2:
            break
    else:
        return None
    fig, ax = pyplot().subplots(figsize=(max(6, len(langs) * len(results) * 0.25), 4))
    width = 0.8 / len(results)
    for i, r in enumerate(results):
        ax.bar([j + i * width for j in range(len(langs))], [r.summary.get(prefix + lang, 0.0) for lang in langs],
               width=width, label=r.cell.label)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(langs))], langs)
    ax.set_ylabel(metric)
    ax.set_title(f"{dataset}: {metric} per language")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def budgets(dataset: str, results: list):
    """Primary metric and LM calls per question against the loop budget, one line per program and k; None when
    no program was run at more than one budget."""
    lines = defaultdict(list)
    for r in results:
        config = dict(r.cell.config)
        if "loops" in config:
            lines[(r.cell.program, config.get("k"))].append((config["loops"], r.summary))
    lines = {key: sorted(points, key=lambda p: p[0]) for key, points in lines.items() if len(points) > 1}
    if not lines:
        return None
    metric = _metric([s for points in lines.values() for _, s in points])
    fig, axes = pyplot().subplots(1, 2, figsize=(10, 4))
    for (program, k), points in sorted(lines.items(), key=lambda kv: str(kv[0])):
        label = program + (f" k={k}" if k is not None else "")
        xs = [loops for loops, _ in points]
        axes[0].plot(xs, [s.get(metric, 0.0) for _, s in points], marker="o", label=label)
        axes[1].plot(xs, [s.get("lm_calls", 0.0) for _, s in points], marker="o", label=label)
    for ax, ylabel in zip(axes, (metric, "LM calls per question")):
        ax.set_xlabel("loop budget L")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"{dataset}: loop budget")
    fig.tight_layout()
    return fig


def figures(results: list) -> list[tuple[str, object]]:
    """(artifact name, figure) for every plot the suite's results support."""
    out = []
    for dataset in dict.fromkeys(r.cell.dataset for r in results):
        mine = [r for r in results if r.cell.dataset == dataset]
        for kind, make in (("frontier", frontier), ("languages", languages), ("budgets", budgets)):
            fig = make(dataset, mine)
            if fig is not None:
                out.append((f"plots/{dataset}_{kind}.png", fig))
    return out


def close(fig) -> None:
    pyplot().close(fig)
