"""Build the retrieval indexes of registered datasets into the shared, content-addressed index cache, so the first
evaluation (or test) on them does not embed. ``make setup`` runs it for the bundled demo sets and, when
``RAG_DATA_DIR`` is set, for the benchmark sets the real-LM tests search; already-built indexes are only checked.

``python -m scripts.embed_corpora demo=hybrid demo_culture hotpotqa=bm25 xrag_mono_oracle:zh``
(``DATASET[=RETRIEVER]``, the retriever ``dense`` unless named; the default embedder, flat faiss index)."""
from __future__ import annotations

import argparse
import sys
import time

import data
from retrieval.retriever import Retriever


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("datasets", nargs="+", metavar="DATASET[=RETRIEVER]")
    args = p.parse_args(argv)
    for spec in args.datasets:
        name, _, retriever = spec.partition("=")
        start = time.perf_counter()
        try:
            corpora = data.load(name).corpora
            Retriever(corpora, retriever=retriever or "dense")
        except (ValueError, KeyError, FileNotFoundError) as err:
            sys.exit(f"error: {spec}: {err}")
        print(f"{spec}: {sum(len(c.docs) for c in corpora)} documents in {len(corpora)} corpora indexed "
              f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
