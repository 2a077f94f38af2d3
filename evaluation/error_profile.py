"""Error profile of any program: RAG-Critic's error critic labels each wrong answer of an evaluation with the
three-tier taxonomy; the tier-1/tier-2 distribution becomes a markdown table and a bar chart in MLflow.

A wrong answer is one the judge rejected (when the run used ``--judge``), else one with F1 below 0.5 (multiple
choice: a wrong letter). Failed examples are left out. The labels are the critic model's, not human annotations.
"""
from __future__ import annotations

from collections import Counter

import mlflow
from tqdm.auto import tqdm

from evaluation.metrics import F1_PASS
from evaluation.plots import close, pyplot
from programs.rag_critic.error_critic import ErrorCritic
from retrieval.corpus import Corpus, Passage


def is_wrong(record: dict) -> bool:
    """Wrong by the judge where there is one, else by F1, else by accuracy; an answer the measure could not score
    (None) is not known to be wrong."""
    name = "judge" if "judge" in record else "f1" if "f1" in record else "accuracy"
    value = record.get(name, 0.0)
    return value is not None and value < (F1_PASS if name == "f1" else 1.0)


def passage_lookup(corpora: list[Corpus], wanted: set[str]) -> dict[str, Passage]:
    """Passage id -> passage for the ``wanted`` ids (evidence that records list by id)."""
    return {f"{c.name}:{d['id']}": c.passage(i) for c in corpora for i, d in enumerate(c.docs)
            if f"{c.name}:{d['id']}" in wanted}


def profile(records: list[dict], critic: ErrorCritic, lookup: dict[str, Passage]) -> dict:
    """Critique every wrong, non-failed record; counts per tier-1 and tier-2 label (each label once per answer)."""
    wrong = [r for r in records if not r.get("failed") and is_wrong(r)]
    rows, tier1, tier2 = [], Counter(), Counter()
    for r in tqdm(wrong, desc="error profile", unit="q"):
        passages = [lookup[p["id"]] for p in r.get("passages") or [] if p["id"] in lookup]
        c = critic(question=r["question"], passages=passages, prediction=str(r.get("answer") or ""))
        tier1.update(c.tier1 if c.flagged else [])
        tier2.update(c.tier2 if c.flagged else [])
        rows.append({"id": r["id"], "question": r["question"], "answer": r.get("answer"), "gold": r.get("gold"),
                     **c.as_dict()})
    return {"n_records": len(records), "n_wrong": len(wrong), "rows": rows, "tier1": tier1, "tier2": tier2,
            "critic_said_correct": sum(r["verdict"] == "Correct" for r in rows),
            "unparsed": sum(r["verdict"] is None for r in rows),
            "unlabelled": sum(r["verdict"] == "Error" and not r["tier1"] for r in rows),
            "labels_snapped": sum(r["snapped"] for r in rows), "labels_dropped": sum(r["dropped"] for r in rows)}


def table(result: dict, taxonomy) -> str:
    """Markdown: every tier-1 label with its tier-2 labels below it, as counts and shares of the wrong answers."""
    n = max(result["n_wrong"], 1)
    lines = [f"Wrong answers: {result['n_wrong']} of {result['n_records']}; the critic called "
             f"{result['critic_said_correct']} of them correct, {result['unlabelled']} flagged without a valid "
             f"label, {result['unparsed']} unparsed. Labels are model-made (the critic LM), one count per answer "
             "and label; an answer may carry several.", "",
             "| tier-1 | tier-2 | answers | share of wrong |", "|---|---|---|---|"]
    for t1 in taxonomy.tier1:
        lines.append(f"| **{t1}** | | {result['tier1'][t1]} | {result['tier1'][t1] / n:.2f} |")
        lines += [f"| | {t2} | {result['tier2'][t2]} | {result['tier2'][t2] / n:.2f} |"
                  for t2 in taxonomy.tier2_of(t1) if result["tier2"][t2]]
    return "\n".join(lines)


def chart(result: dict, taxonomy, title: str = ""):
    """Two horizontal bar charts: tier-1 counts, and tier-2 counts coloured by their tier-1 parent."""
    plt = pyplot()
    colours = dict(zip(taxonomy.tier1, plt.get_cmap("tab10").colors))
    tier2 = [t for t in taxonomy.tier2 if result["tier2"][t]] or list(taxonomy.tier2)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 3 + 0.3 * (len(taxonomy.tier1) + len(tier2))),
                                      gridspec_kw={"height_ratios": [len(taxonomy.tier1), len(tier2)]})
    top.barh(list(taxonomy.tier1), [result["tier1"][t] for t in taxonomy.tier1],
             color=[colours[t] for t in taxonomy.tier1])
    bottom.barh(tier2, [result["tier2"][t] for t in tier2], color=[colours[taxonomy.parent[t]] for t in tier2])
    for ax, label in ((top, "tier-1"), (bottom, "tier-2")):
        ax.invert_yaxis()
        ax.set_xlabel(f"wrong answers with this {label} label (of {result['n_wrong']})")
        ax.tick_params(axis="y", labelsize=8)
    top.set_title(title or "error profile (labels by the critic LM)")
    fig.tight_layout()
    return fig


def log(result: dict, taxonomy, title: str = "") -> str:
    """Log table, chart, per-answer labels and counts to the active MLflow run; return the table."""
    md = table(result, taxonomy)
    mlflow.log_text(md, "error_profile/table.md")
    fig = chart(result, taxonomy, title)
    mlflow.log_figure(fig, "error_profile/chart.png")
    close(fig)
    mlflow.log_dict({"rows": result["rows"]}, "error_profile/critiques.json")
    n = max(result["n_wrong"], 1)
    metrics = {"error_profile_n_wrong": result["n_wrong"], "error_profile_critic_said_correct":
               result["critic_said_correct"], "error_profile_labels_snapped": result["labels_snapped"],
               "error_profile_labels_dropped": result["labels_dropped"]}
    metrics |= {f"error_profile_tier1/{t}": result["tier1"][t] / n for t in taxonomy.tier1}
    mlflow.log_metrics({k.replace(" ", "_"): float(v) for k, v in metrics.items()})
    return md
