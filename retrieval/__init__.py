"""Retrieval, the infrastructure below ``data`` and ``programs``: corpora and passages (:mod:`retrieval.corpus`),
first-stage retrievers, each a file registered with :mod:`retrieval.first_stage` (faiss :mod:`retrieval.dense`,
:mod:`retrieval.bm25`, :mod:`retrieval.milvus`, :mod:`retrieval.hybrid` fusion), on-disk indexes
(:mod:`retrieval.ondisk`), rerankers (:mod:`retrieval.rerank`) and the retriever that searches through them
(:mod:`retrieval.retriever`)."""
