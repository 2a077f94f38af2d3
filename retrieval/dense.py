"""Dense search (``--retriever dense``): a faiss inner-product index per corpus, built from the embedder's unit
vectors and cached on disk by corpus content, embedder id and index type, or an on-disk corpus's own prebuilt one."""
from __future__ import annotations

import json
import os
import shutil
import sys
from contextlib import suppress
from pathlib import Path

import faiss
import numpy as np
from filelock import FileLock
from tqdm.auto import tqdm

from retrieval.corpus import _EXCLUDED, Corpus, Passage
from retrieval.first_stage import FirstStage, Setup, register
from runtime.embedders import Embedder
from runtime.paths import index_dir, prune_versions

INDEX_TYPES = {"flat": "Flat", "hnsw": "HNSW32"}  # plus "ivf" (nlist chosen from corpus size)
# cached indexes kept per corpus name (most recently used): switching corpus sources (blend_kb, xquad) reuses them
KEEP_VERSIONS = 3


def index_factory(index_type: str, n: int) -> str:
    """The faiss factory string of ``index_type`` (flat, hnsw, ivf, or a factory string itself) for ``n`` vectors."""
    if index_type == "ivf":
        return f"IVF{max(1, min(int(4 * n ** 0.5), n // 39))},Flat"  # faiss wants >= 39 points per list
    if index_type in INDEX_TYPES:
        return INDEX_TYPES[index_type]
    if "," in index_type or index_type.startswith(("IVF", "HNSW", "PQ", "OPQ", "Flat")):
        return index_type
    raise ValueError(f"unknown index type '{index_type}'; choose one of: flat, hnsw, ivf (or a faiss factory string)")


def encode_passages(embedder: Embedder, docs: list[dict], bar=None) -> np.ndarray:
    """Unit vectors of ``docs`` (``title. text``) in the embedder's batches, advancing the progress ``bar``."""
    texts = [f"{d['title']}. {d['text']}" for d in docs]
    parts = []
    for i in range(0, len(texts), embedder.batch_size):
        parts.append(embedder.encode_passages(texts[i:i + embedder.batch_size]))
        if bar is not None:
            bar.update(len(parts[-1]))
    return np.concatenate(parts) if parts else np.zeros((0, 1), np.float32)


class CorpusIndex:
    """Inner-product faiss index over one corpus (vectors are L2-normalised, so scores are cosines)."""

    def __init__(self, corpus: Corpus, index: faiss.Index):
        if index.ntotal != len(corpus):
            raise ValueError(f"index for '{corpus.name}' holds {index.ntotal} vectors for {len(corpus)} documents")
        self.corpus, self.index = corpus, index
        self.group_sizes = corpus.group_sizes()

    @classmethod
    def from_vectors(cls, corpus: Corpus, vectors: np.ndarray, index_type: str = "flat") -> "CorpusIndex":
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        index = faiss.index_factory(vectors.shape[1], index_factory(index_type, len(vectors)),
                                    faiss.METRIC_INNER_PRODUCT)
        if not index.is_trained:
            index.train(vectors)
        index.add(vectors)
        return cls(corpus, index)

    @classmethod
    def build(cls, corpus: Corpus, embedder: Embedder, cache_dir: Path | None = None, index_type: str = "flat",
              progress: bool = True) -> "CorpusIndex":
        """Load the cached index for (corpus content, embedder, index type) or embed the corpus and cache it
        (default: :func:`runtime.paths.index_dir`)."""
        root = Path(cache_dir or index_dir())
        key = f"{corpus.name}-{corpus.content_hash[:16]}-{embedder.id}-{index_type}"
        (root / ".locks").mkdir(parents=True, exist_ok=True)
        # a second process waits for the first one's build and loads it instead of embedding the corpus again
        with FileLock(root / ".locks" / f"{key}.lock"):
            return cls._load(corpus, root / key, key) or cls._embed(corpus, embedder, root, key, index_type, progress)

    @classmethod
    def _embed(cls, corpus: Corpus, embedder: Embedder, root: Path, key: str, index_type: str,
               progress: bool) -> "CorpusIndex":
        with tqdm(total=len(corpus), desc=f"embedding {corpus.name}", unit=" passages",
                  disable=not progress or len(corpus) <= embedder.batch_size) as bar:
            vectors = encode_passages(embedder, corpus.docs, bar)
        built = cls.from_vectors(corpus, vectors, index_type)
        folder = root / key
        folder.mkdir(parents=True, exist_ok=True)
        faiss.write_index(built.index, str(folder / "index.faiss"))
        (folder / "meta.json").write_text(json.dumps({"key": key, "ntotal": len(corpus)}))
        prune_versions(root, f"{corpus.name}-*-{embedder.id}-{index_type}", KEEP_VERSIONS)
        return built

    @classmethod
    def _load(cls, corpus: Corpus, folder: Path, key: str) -> "CorpusIndex | None":
        if not (folder / "meta.json").exists():
            return None
        try:
            meta = json.loads((folder / "meta.json").read_text())
            index = faiss.read_index(str(folder / "index.faiss"))
            if meta.get("key") != key or meta.get("ntotal") != len(corpus):
                raise ValueError("metadata does not match the corpus")
            with suppress(OSError):  # marks it recently used for the KEEP_VERSIONS pruning (read-only caches skip)
                os.utime(folder)
            return cls(corpus, index)
        except Exception as err:  # a corrupt or half-written cache is rebuilt, never trusted
            print(f"warning: rebuilding index cache {folder.name}: {err}", file=sys.stderr)
            shutil.rmtree(folder, ignore_errors=True)
            return None

    def search_vectors(self, queries: np.ndarray, k: int) -> list[list[Passage]]:
        """Top-``k`` per query; documents of groups hidden by :func:`excluded` are skipped (over-fetched first)."""
        hidden = {g for g in _EXCLUDED.get() if g in self.group_sizes}
        k = min(k, len(self.corpus))
        if k <= 0:
            return [[] for _ in range(len(queries))]
        fetch = min(k + sum(self.group_sizes[g] for g in hidden), len(self.corpus))
        scores, rows = self.index.search(np.ascontiguousarray(queries, dtype=np.float32), fetch)
        return [[self.corpus.passage(int(r), float(s)) for s, r in zip(srow, rrow)
                 if r >= 0 and str(self.corpus.docs[r].get("group", "")) not in hidden][:k]
                for srow, rrow in zip(scores, rows)]


def local_index(corpus: Corpus, embedder: Embedder, cache_dir: Path | None = None,
                index_type: str = "flat") -> CorpusIndex:
    """The faiss index of ``corpus``: its own prebuilt one for an on-disk corpus (:mod:`retrieval.ondisk`), else
    the cached in-memory one."""
    if hasattr(corpus, "open_index"):
        return corpus.open_index(embedder)
    return CorpusIndex.build(corpus, embedder, cache_dir, index_type)


@register
class Dense(FirstStage):
    """``dense``: each corpus's :func:`local_index`, searched with one query-encoding call for all queries and one
    index search per corpus."""

    name, vectors = "dense", True

    def __init__(self, corpora: list[Corpus], setup: Setup, arg: str = ""):
        self.embedder = setup.embedder
        self.indexes = {c.name: self.index(c, setup) for c in corpora}

    def index(self, corpus: Corpus, setup: Setup):
        """The index searched for ``corpus`` (anything with :meth:`CorpusIndex.search_vectors`)."""
        return local_index(corpus, setup.embedder, setup.cache_dir, setup.index_type)

    def search(self, queries, k, names):
        vectors = self.embedder.encode_queries(queries)
        found = {name: self.indexes[name].search_vectors(vectors, k) for name in names}
        return [{name: found[name][i] for name in names} for i in range(len(queries))]

    def stored_vectors(self, passages):
        """Read back from the in-memory faiss indexes; None when a passage has none or it cannot give vectors back."""
        indexes = [self.indexes.get(p.corpus) for p in passages]
        rows = [i.corpus.row_of(p.id) if isinstance(i, CorpusIndex) else None for i, p in zip(indexes, passages)]
        if not passages or None in rows:
            return None
        try:
            return np.stack([i.index.reconstruct(row) for i, row in zip(indexes, rows)])
        except RuntimeError:  # e.g. an IVF index without a direct map
            return None
