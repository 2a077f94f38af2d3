"""How good is a program's error critic? Identification of wrong answers, and tier-1 agreement with a stronger
critic model.

``python -m scripts.critic_eval --run <compare run id> [--predictions predictions/rag_critic.jsonl]
[--reference-lm local:qwen-1.5b --limit 20]``
Reads the per-question records of a ``rag_critic`` evaluation (``scripts/rag_critic_compare.py`` or
``evaluate.py``). Gold correctness of the first answer is F1 >= 0.5 against the reference answer. With
``--reference-lm`` the same critic signature runs on that LM over the first ``--limit`` records (same question,
passages and first answer); its verdicts and labels are logged as ``reference_labels.json``. Those reference
labels are **model-made** (no human error annotations exist for these answers): tier-1 agreement measures how
often two critic models agree, not correctness of the labels.
"""
from __future__ import annotations

import argparse
import json
import math

import mlflow

import data
from evaluation import tracking
from evaluation.critic_scores import answer_is_wrong, identification, tier1_agreement
from evaluation.error_profile import passage_lookup
from evaluation.leaderboard import fmt
from programs.rag_critic.error_critic import ErrorCritic
from programs.rag_critic.taxonomy import load_taxonomy
from runtime import store
from runtime.lm import make_lm
from runtime.roles import init_dspy


def first_rounds(records: list[dict]) -> list[dict]:
    """Per record with a critic trace: question, gold, first answer, its passage ids and the critique."""
    out = []
    for r in records:
        rounds = (r.get("trace") or {}).get("rounds") or []
        if rounds and "critique" in rounds[0]:
            out.append({"id": r["id"], "question": r["question"], "gold": r["gold"], "answer": rounds[0]["answer_in"],
                        "passage_ids": rounds[0].get("passages_in", []), "critique": rounds[0]["critique"]})
    return out


def reference_labels(items: list[dict], critic: ErrorCritic, lookup: dict) -> list[dict]:
    labelled = []
    for it in items:
        c = critic(question=it["question"], passages=[lookup[i] for i in it["passage_ids"] if i in lookup],
                   prediction=it["answer"])
        labelled.append({"id": it["id"], **c.as_dict()})
    return labelled


def report(items: list[dict], reference: list[dict] | None, critic_lm: str, reference_lm: str | None) -> tuple:
    wrong = [answer_is_wrong(it["answer"], it["gold"]) for it in items]
    own = identification([it["critique"]["verdict"] != "Correct" for it in items], wrong)
    metrics = {f"critic_{k}": v for k, v in own.items()}
    lines = [f"critic ({critic_lm}) vs gold correctness: " + ", ".join(f"{k}={fmt(v)}" for k, v in own.items())]
    if reference:
        n = len(reference)
        ref = identification([r["verdict"] != "Correct" for r in reference], wrong[:n])
        sub = identification([it["critique"]["verdict"] != "Correct" for it in items[:n]], wrong[:n])
        # agreement on the answers that are wrong and that both critics flagged with tier-1 labels
        pairs = [(it["critique"]["tier1"], r["tier1"]) for it, r, w in zip(items, reference, wrong) if w]
        agree = tier1_agreement([a for a, _ in pairs], [b for _, b in pairs])
        metrics |= {f"reference_{k}": v for k, v in ref.items()} | {f"critic_on_reference_items_{k}": v
                                                                     for k, v in sub.items()}
        metrics |= {f"tier1_agreement_{k}": v for k, v in agree.items()}
        lines += [f"same {n} items, critic: " + ", ".join(f"{k}={fmt(v)}" for k, v in sub.items()),
                  f"reference ({reference_lm}, model-made labels): " + ", ".join(f"{k}={fmt(v)}"
                                                                                 for k, v in ref.items()),
                  "tier-1 agreement on gold-wrong answers both labelled: " + ", ".join(
                      f"{k}={fmt(v)}" for k, v in agree.items())]
    return "\n".join(lines), {k: float(v) for k, v in metrics.items() if not math.isnan(v)}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", required=True, help="MLflow run id holding the rag_critic predictions")
    p.add_argument("--predictions", default="predictions/rag_critic.jsonl", help="artifact path in that run")
    p.add_argument("--reference-lm", help="stronger critic LM, e.g. local:qwen-1.5b (labels are model-made)")
    p.add_argument("--limit", type=int, default=20, help="records the reference critic labels")
    p.add_argument("--data-dir", help="benchmark data folder (default: $RAG_DATA_DIR)")
    p.add_argument("--experiment", default="agentic-rag")
    args = p.parse_args(argv)
    path = store.download(args.run, args.predictions)
    params = mlflow.get_run(args.run).data.params
    items = first_rounds([json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()])
    if not items:
        raise SystemExit(f"error: {args.predictions} of run {args.run} has no rag_critic traces")
    reference = None
    if args.reference_lm:
        taxonomy = load_taxonomy(args.data_dir)
        init_dspy(make_lm(args.reference_lm), cache=True)
        ids = {i for it in items[:args.limit] for i in it["passage_ids"]}
        lookup = passage_lookup(data.load(params["dataset"], args.data_dir).corpora, ids)
        reference = reference_labels(items[:args.limit], ErrorCritic(taxonomy=taxonomy), lookup)
    text, metrics = report(items, reference, params.get("critic_lm", "?"), args.reference_lm)
    with tracking.run(args.experiment, f"critic-eval-{args.run[:8]}", tags={"entry": "scripts/critic_eval.py"}) as run:
        tracking.log_params({"source_run": args.run, "predictions": args.predictions, "critic_lm":
                             params.get("critic_lm", ""), "reference_lm": args.reference_lm or "",
                             "limit": args.limit, "dataset": params.get("dataset", "")})
        mlflow.log_metrics(metrics)
        mlflow.log_text(text, "critic_eval.md")
        if reference:
            tracking.log_json("reference_labels.json", {
                "note": f"labels made by the critic signature on {args.reference_lm}: model-made, not human",
                "labels": reference})
    print(f"{text}\n\nrun {run.info.run_id}")
    return metrics


if __name__ == "__main__":
    main()
