"""Retrieval, the infrastructure below ``data`` and ``programs``: corpora and passages (:mod:`retrieval.corpus`),
cached faiss indexes (:mod:`retrieval.dense`), BM25 (:mod:`retrieval.bm25`), on-disk and Milvus indexes
(:mod:`retrieval.ondisk`, :mod:`retrieval.milvus`), rerankers (:mod:`retrieval.rerank`) and the retriever that
searches and fuses them (:mod:`retrieval.retriever`)."""
