"""Dense search served by Milvus (``--retriever milvus:URI``, and ``hybrid:milvus:URI``): a local milvus-lite file
(``milvus:./rag.db``), a Milvus server or a cluster (``milvus:http://host:19530``), through ``pymilvus``
(``pip install '.[milvus]'``).

One collection per corpus (so one per language corpus), named by corpus, content hash and embedder id; it is filled
once from the corpus's faiss index (the cached in-memory one, or the prebuilt one of an on-disk corpus), so nothing
is embedded twice. Leave-out filters (:func:`retrieval.corpus.excluded`) become server-side filters on ``grp``.
Many processes (e.g. Ray workers) share one Milvus server instead of each loading an index.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import faiss
import numpy as np

from retrieval.corpus import _EXCLUDED, Corpus, Passage
from retrieval.dense import Dense, local_index
from retrieval.first_stage import Setup, register
from runtime.embedders import Embedder

INDEX_TYPES = {"flat": "FLAT", "ivf": "IVF_FLAT", "hnsw": "HNSW"}
MAX_LIMIT = 16_384  # Milvus caps topk
_CLIENTS: dict[str, object] = {}


class StoreUnavailable(ConnectionError):
    """The Milvus server could not be reached or did not answer in time: a transient error (asking again later can
    succeed), where any other Milvus error is not."""


def unavailable(err: Exception) -> bool:
    """Whether a pymilvus error means the server is unreachable: its gRPC status (pymilvus keeps it as ``code`` once
    its own retries are spent) is UNAVAILABLE or DEADLINE_EXCEEDED, or it is pymilvus's connection error."""
    import grpc
    from pymilvus.exceptions import ConnectError, MilvusUnavailableException

    code = err.code() if isinstance(err, grpc.RpcError) else getattr(err, "code", None)
    return isinstance(err, (ConnectError, MilvusUnavailableException)) or code in (
        grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


def client(uri: str):
    """One ``MilvusClient`` per URI and process (milvus-lite allows one client per database file)."""
    if uri not in _CLIENTS:
        try:
            from pymilvus import MilvusClient
        except ImportError:
            raise ValueError("--retriever milvus:URI needs pymilvus: pip install '.[milvus]'") from None
        _CLIENTS[uri] = MilvusClient(uri)
    return _CLIENTS[uri]


class MilvusIndex:
    """The :meth:`retrieval.dense.CorpusIndex.search_vectors` contract over one Milvus collection."""

    def __init__(self, corpus: Corpus, uri: str, collection: str):
        self.corpus, self.uri, self.collection, self.client = corpus, uri, collection, client(uri)
        self.group_sizes = corpus.group_sizes()

    @classmethod
    def build(cls, corpus: Corpus, embedder: Embedder, uri: str, cache_dir: Path | None = None,
              index_type: str = "flat") -> "MilvusIndex":
        name = re.sub(r"\W", "_", f"{corpus.name}_{corpus.content_hash[:12]}_{embedder.id}")[:255]
        found = cls(corpus, uri, name)
        milvus = found.client
        if milvus.has_collection(name) and milvus.get_collection_stats(name)["row_count"] == len(corpus):
            milvus.load_collection(name)
            return found
        local = local_index(corpus, embedder, cache_dir)
        milvus.drop_collection(name)  # a half-filled one from an interrupted run
        found._create(local.index.d, index_type)
        found._fill(local.index)
        milvus.load_collection(name)
        return found

    def _create(self, dim: int, index_type: str) -> None:
        from pymilvus import DataType

        schema = self.client.create_schema(auto_id=False)
        schema.add_field("row", DataType.INT64, is_primary=True)
        schema.add_field("grp", DataType.VARCHAR, max_length=512)
        schema.add_field("vec", DataType.FLOAT_VECTOR, dim=dim)
        params = self.client.prepare_index_params()
        params.add_index("vec", index_type=INDEX_TYPES.get(index_type, "FLAT"), metric_type="IP")
        self.client.create_collection(self.collection, schema=schema, index_params=params)

    def _fill(self, index: faiss.Index, batch: int = 5_000) -> None:
        """Insert every vector of ``index`` (read back in batches) with its row and group."""
        ivf = faiss.try_extract_index_ivf(index)
        if ivf is not None:
            ivf.make_direct_map()
        for start in range(0, index.ntotal, batch):
            vectors = index.reconstruct_n(start, min(batch, index.ntotal - start))
            docs = self.corpus.docs.rows(start, start + batch) if hasattr(self.corpus.docs, "rows") else \
                self.corpus.docs[start:start + batch]
            self.client.insert(self.collection, [{"row": start + i, "grp": str(d.get("group", "")), "vec": v.tolist()}
                                                 for i, (d, v) in enumerate(zip(docs, vectors))])

    def search_vectors(self, queries: np.ndarray, k: int) -> list[list[Passage]]:
        """Top-``k`` per query; groups hidden by :func:`retrieval.corpus.excluded` are filtered by Milvus."""
        k = min(k, len(self.corpus), MAX_LIMIT)
        if k <= 0 or not len(queries):
            return [[] for _ in range(len(queries))]
        hidden = sorted(g for g in _EXCLUDED.get() if g in self.group_sizes)
        where = f"grp not in {json.dumps(hidden, ensure_ascii=False)}" if hidden else ""
        try:
            found = self.client.search(self.collection, data=[q.tolist() for q in np.asarray(queries, np.float32)],
                                       limit=k, filter=where, output_fields=["row"],
                                       search_params={"metric_type": "IP"})
        except Exception as err:
            if unavailable(err):
                raise StoreUnavailable(f"Milvus at {self.uri} is unavailable: {err}") from err
            raise
        return [[self.corpus.passage(int(h["entity"]["row"]), float(h["distance"])) for h in hits] for hits in found]


@register
class Milvus(Dense):
    """``milvus:URI``: :class:`retrieval.dense.Dense` with each corpus's vectors in a collection at ``URI``."""

    name, arg = "milvus", "URI"

    def __init__(self, corpora: list[Corpus], setup: Setup, arg: str = ""):
        self.uri = arg
        super().__init__(corpora, setup)

    def index(self, corpus: Corpus, setup: Setup) -> MilvusIndex:
        return MilvusIndex.build(corpus, setup.embedder, self.uri, setup.cache_dir, setup.index_type)
