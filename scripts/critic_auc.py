"""Decision-quality table: does an LM's passage-relevance decision know more than the retriever?

``python -m scripts.critic_auc --datasets hotpotqa musique xquad --lm local:qwen-0.5b local:qwen-1.5b``

For each dataset and candidate set, labelled (question, passage, is_gold) decisions:

- ``distractors``: each question's gold paragraphs against the dataset's own distractor paragraphs (HotpotQA:
  supporting-fact titles vs the other context paragraphs; MuSiQue: supporting vs non-supporting paragraphs; XQuAD
  mono setting: the supporting English paragraph vs the setting's distractors), at most ``--distractors`` per
  question;
- ``topk``: the retriever's own top ``--k`` over the dataset's pooled paragraphs, gold vs the others: the set a
  method decides on.

Questions are taken in a seeded order until both classes have ``--min`` decisions. Rows: the retriever's score
(and, on ``topk``, its rank) with no LM; per LM the relevance decision (``decoding.decisions``, signature
``JudgeRelevance``) read three ways from one call per passage: ``generate`` (the written yes/no), ``logprob``
(P(yes) at the label token) and ``fused`` (a logistic model of P(yes) and the retriever's score minus the best score
of the question's candidates, as programs fuse it: ``decoding.decisions.relative``; fitted 5-fold
grouped by question: no row is scored by a model fitted on it), and ``fused where it helps`` (the same, each
fold's model reading P(yes) only where ``decoding.decisions.lm_adds`` finds it lowers the loss within that fold's
training questions, as calibration fits a gate; the row says in how many folds it did). ROC AUC with a 95% bootstrap CI (questions
resampled), seconds per decision (wall clock of the LM call) and its prompt / completion tokens (fresh calls: a
load-free measure of cost). One MLflow run logs every decision's scores."""
from __future__ import annotations

import argparse
import itertools
import random
import sys
from pathlib import Path

import mlflow
import numpy as np
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import GroupKFold

import data as datasets
from data import hotpotqa, musique
from data.xrag import paragraph, read_xquad, xquad_records
from decoding.decisions import YES_NO, Gate, decide, fit_fusion, lm_adds, relative, written_label
from evaluation import settings as evaluation_settings, tracking
from experiments import cli
from retrieval.corpus import Corpus, Passage
from retrieval.retriever import Retriever
from runtime.embedders import get_embedder
from runtime.lm import make_lm
from runtime.metering import metered
from runtime.roles import init_dspy
from signatures.critic import JudgeRelevance

DATASETS = ("hotpotqa", "musique", "xquad")
CANDIDATES = ("distractors", "topk")


def auc(gold: list[float], other: list[float]) -> float:
    """P(gold > other) + P(tie) / 2; NaN when either side is empty."""
    if not gold or not other:
        return float("nan")
    return float(roc_auc_score([1] * len(gold) + [0] * len(other), [*gold, *other]))


def bootstrap_ci(rows: list[dict], key: str, reps: int = 1000, seed: int = 0) -> tuple[float, float]:
    """95% percentile interval of the AUC of ``key`` with questions resampled (a question's passages together)."""
    by_q: dict[str, list[dict]] = {}
    for r in rows:
        by_q.setdefault(r["qid"], []).append(r)
    groups, rng, values = list(by_q.values()), random.Random(seed), []
    for _ in range(reps):
        sample = [r for g in rng.choices(groups, k=len(groups)) for r in g]
        value = auc([r[key] for r in sample if r["gold"]], [r[key] for r in sample if not r["gold"]])
        if value == value:
            values.append(value)
    return (float(np.percentile(values, 2.5)), float(np.percentile(values, 97.5))) if values else (np.nan, np.nan)


def cross_fitted(rows: list[dict], folds: int = 5, select: bool = False) -> tuple[list[float], int]:
    """Fused probability of each row from a fusion model fitted on the other questions' rows (grouped k-fold), and
    in how many folds it read the LM. ``select``: each fold's model keeps the LM feature only where
    ``decoding.decisions.lm_adds`` finds it helps within that fold's training rows, as calibration fits a gate."""
    out, with_lm = [0.0] * len(rows), 0
    groups = [r["qid"] for r in rows]
    for train, test in GroupKFold(n_splits=min(folds, len(set(groups)))).split(rows, groups=groups):
        pairs, gold = [(rows[i]["logprob"], rows[i]["relative"]) for i in train], [rows[i]["gold"] for i in train]
        lm = lm_adds(pairs, gold, [groups[i] for i in train])["kept"] if select else True
        with_lm += lm
        gate = Gate()
        gate.weights = fit_fusion(pairs, gold, lm)
        for i, p in zip(test, gate.fuse([rows[i]["logprob"] for i in test], [rows[i]["relative"] for i in test])):
            out[i] = p
    return out, with_lm


# ---------------------------------------------------------------- labelled passages per dataset

def _records(name: str, root: Path | None, lang: str) -> list[dict]:
    """Per question: {qid, question, gold: [Passage], distractors: [Passage]} in the dataset's file order."""
    if name in ("hotpotqa", "musique"):
        return {"hotpotqa": hotpotqa, "musique": musique}[name].contexts(root)
    out = []
    for rec in xquad_records(root, "mono", lang):
        def passage(d):
            return Passage(f"xquad:{d['id']}", d["title"], d["text"])
        out.append({"qid": rec["id"], "question": rec["question"], "gold": [passage(rec["supporting"][0])],
                    "distractors": [passage(d) for d in rec["distracting"]]})
    return out


def _pool(name: str, root: Path | None) -> Corpus:
    """The dataset's pooled paragraphs, as the methods search them."""
    if name in ("hotpotqa", "musique"):
        (corpus,) = datasets.load(name, root).corpora
        return corpus
    en = read_xquad(root, "en")
    docs = [paragraph(en, "en", a, p) for a in range(len(en)) for p in range(len(en[a]["paragraphs"]))]
    return Corpus("xquad", [{"id": d["id"], "title": d["title"], "text": d["text"]} for d in docs], "en")


def _key(p: Passage) -> tuple[str, str]:
    return p.title, " ".join(p.text.split())[:200]


def labelled(name: str, candidates: str, root: Path | None, retriever_of, embedder, minimum: int, distractors: int,
             k: int, seed: int, lang: str = "de") -> list[dict]:
    """Decisions (qid, question, passage, gold, retriever score, rank) until both classes hold ``minimum``; the
    retriever (``retriever_of(name)``, topk) or the ``embedder``'s cosine (distractors) gives the score."""
    records = sorted(_records(name, root, lang), key=lambda r: r["qid"])
    random.Random(f"{seed}:{candidates}").shuffle(records)
    rows: list[dict] = []
    for rec in records:
        if sum(r["gold"] for r in rows) >= minimum and sum(not r["gold"] for r in rows) >= minimum:
            break
        if not rec["gold"]:
            continue
        if candidates == "distractors":
            passages = [(p, True) for p in rec["gold"]] + [(p, False) for p in rec["distractors"][:distractors]]
            q = embedder.encode_queries([rec["question"]])
            vectors = embedder.encode_passages([f"{p.title}. {p.text}" for p, _ in passages])
            scored = [(p, g, float(s), None) for (p, g), s in zip(passages, (vectors @ q.T)[:, 0])]
        else:
            gold = {_key(p) for p in rec["gold"]}
            scored = [(p, _key(p) in gold, p.score, rank)
                      for rank, p in enumerate(retriever_of(name).search(rec["question"], k), 1)]
        rows += [{"dataset": name, "candidates": candidates, "qid": rec["qid"], "question": rec["question"],
                  "passage": p, "gold": bool(g), "retriever": s, "relative": rel, "rank": rank}
                 for (p, g, s, rank), rel in zip(scored, relative([s for _, _, s, _ in scored]))]
    return rows


# ---------------------------------------------------------------- the LM decisions

def judge(rows: list[dict], max_chars: int | None, chat: bool = False) -> None:
    """Adds ``generate`` (1/0 written yes/no, 0.5 unreadable), ``logprob`` (P(yes); the written reading where no
    logprobs were read), ``read`` and ``seconds`` to every row, from one relevance decision per passage with the
    configured LM, asked bare (``chat``: in the ChatAdapter's field layout)."""
    import dspy

    predictor = dspy.Predict(JudgeRelevance)
    for r in rows:
        with metered() as cost:
            d = decide(predictor, {"relevant": YES_NO}, {"max_tokens": 32}, chat=chat,
                       question=r["question"], passage=r["passage"].format(max_chars))
        r["seconds"] = cost.seconds
        r["tokens"] = (cost.prompt_tokens, cost.completion_tokens)  # (0, 0) for a cached reply
        r["written"] = str(d.output.get("relevant")) if d.output is not None else None
        r["generate"] = {"yes": 1.0, "no": 0.0}.get(written_label(r["written"], YES_NO), 0.5)
        r["logprob"] = d.prob("relevant", "yes") if d.probs.get("relevant") else r["generate"]
        r["read"] = bool(d.probs.get("relevant"))


def summarise(rows: list[dict], key: str) -> dict:
    gold, other = [r[key] for r in rows if r["gold"]], [r[key] for r in rows if not r["gold"]]
    lo, hi = bootstrap_ci(rows, key)
    return {"auc": auc(gold, other), "ci": (lo, hi), "n_gold": len(gold), "n_other": len(other)}


def table_line(dataset, candidates, row_name, s: dict, seconds: str, tokens: str = "-") -> str:
    return (f"| {dataset} | {candidates} | {row_name} | {s['n_gold']} / {s['n_other']} | {s['auc']:.3f} | "
            f"{s['ci'][0]:.3f}-{s['ci'][1]:.3f} | {seconds} | {tokens} |")


def tokens_per_decision(rows: list[dict]) -> str:
    """Mean prompt / completion tokens of the decisions asked afresh (cached replies report none)."""
    fresh = [r["tokens"] for r in rows if r["tokens"][0]]
    return f"{np.mean([t[0] for t in fresh]):.0f} / {np.mean([t[1] for t in fresh]):.1f}" if fresh else "(cached)"


#: The toolkit's flags this table takes as declared (``--lm``, ``--k``, ``--datasets``, ``--candidates`` and ``--out``
#: are its own: several LMs, the top k it judges, its datasets and candidate sets, a markdown file).
SHARED = ("api_base", "embedder", "max_chars", "seed", "data_dir", "no_cache", "experiment")


def main(argv=None) -> list[str]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    p.add_argument("--candidates", nargs="+", default=list(CANDIDATES), choices=CANDIDATES)
    p.add_argument("--lm", nargs="+", default=["local:qwen-0.5b"], help="LMs making the decision")
    p.add_argument("--min", type=int, default=40, help="decisions of each class (gold, other) at least")
    p.add_argument("--distractors", type=int, default=2, help="distractor paragraphs per question")
    p.add_argument("--k", type=int, default=5, help="retrieved passages per question (topk)")
    p.add_argument("--xquad-lang", default="de", help="question language of the XQuAD mono setting")
    p.add_argument("--prompt", nargs="+", default=["label"], choices=("label", "chat"),
                   help="how the decision is asked: a bare prompt whose reply is the label (what programs use: "
                        "decoding.decisions.LabelAdapter, one output token), or the ChatAdapter's field layout")
    p.add_argument("--out", help="markdown file for the table (appended per row as rows finish)")
    cli.add_flags(p, [s for s in (cli.DATA_DIR, *cli.SETTINGS, *evaluation_settings.SETTINGS) if s.name in SHARED])
    p.set_defaults(experiment="critic-auc")
    args = p.parse_args(argv)
    root = datasets.data_dir(args.data_dir)
    retrievers: dict[str, Retriever] = {}
    embedder = get_embedder(args.embedder)

    def retriever_of(name):
        if name not in retrievers:
            retrievers[name] = Retriever([_pool(name, root)], embedder)
        return retrievers[name]

    lines = ["| dataset | candidates | decision | gold / other | ROC AUC | 95% CI | s/decision | tokens in / out |",
             "|---|---|---|---|---|---|---|---|"]

    def emit(line):
        lines.append(line)
        print(line, flush=True)
        if args.out:
            Path(args.out).write_text("\n".join(lines) + "\n")

    with tracking.run(args.experiment, "decision-quality", tags={"entry": "scripts/critic_auc.py"}) as run:
        tracking.log_params({k: v for k, v in vars(args).items() if k not in ("data_dir",)})
        sets = {}
        for name in args.datasets:
            for cand in args.candidates:
                try:
                    sets[name, cand] = labelled(name, cand, root, retriever_of, embedder, args.min, args.distractors,
                                                args.k, args.seed, args.xquad_lang)
                except (FileNotFoundError, ValueError) as err:
                    print(f"error: {err}", file=sys.stderr)
                    raise SystemExit(2)
                rows = sets[name, cand]
                emit(table_line(name, cand, "retriever score (no LM)", summarise(rows, "retriever"), "-"))
                emit(table_line(name, cand, "retriever score - question's best (no LM)",
                                summarise(rows, "relative"), "-"))
                if cand == "topk":
                    for r in rows:
                        r["neg_rank"] = -r["rank"]
                    emit(table_line(name, cand, "retriever rank (no LM)", summarise(rows, "neg_rank"), "-"))
        for lm_name in args.lm:
            init_dspy(make_lm(lm_name, args.api_base, cache=not args.no_cache), cache=not args.no_cache)
            for prompt, ((name, cand), rows) in itertools.product(args.prompt, sets.items()):
                short = lm_name.split(":")[-1] + ("" if prompt == "label" else f" {prompt}-prompt")
                judge(rows, args.max_chars, chat=prompt == "chat")
                fused, _ = cross_fitted(rows)
                selected, with_lm = cross_fitted(rows, select=True)
                for r, f, g in zip(rows, fused, selected):
                    r["fused"], r["selected"] = f, g
                seconds = f"{np.mean([r['seconds'] for r in rows]):.2f}"
                unread = sum(not r["read"] for r in rows)
                labels = {"selected": f"fused where it helps (LM read in {with_lm} of 5 folds)"}
                for mode in ("generate", "logprob", "fused", "selected"):
                    s = summarise(rows, mode)
                    emit(table_line(name, cand, f"{short} {labels.get(mode, mode)}", s, seconds,
                                    tokens_per_decision(rows))
                         + (f" <!-- {unread} unread -->" if unread and mode == "logprob" else ""))
                    mlflow.log_metric(f"{name}_{cand}_{short}_{mode}_auc", s["auc"])
                tracking.log_jsonl(f"scores/{name}_{cand}_{short}.jsonl",
                                   [{k: (v.title if k == "passage" else v) for k, v in r.items()} for r in rows])
        text = "\n".join(lines)
        mlflow.log_text(text + "\n", "decision_quality.md")
    print(f"\nrun {run.info.run_id}\n\n{text}")
    return lines


if __name__ == "__main__":
    main()
