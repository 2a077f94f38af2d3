"""Prebuilt on-disk corpora (FlashRAG layout and build_index's), resumable builds, and Milvus-lite vs faiss flat."""
import hashlib
import json
import os

import faiss
import pytest

from conftest import HashEmbedder
from data import corpora as sources
from retrieval import ondisk
from retrieval.ondisk import build_index, open_corpus
from retrieval.corpus import Corpus, excluded
from retrieval.dense import encode_passages
from retrieval.retriever import Retriever

WORDS = "river city mountain lake bridge tower castle forest island desert valley harbour".split()
DOCS = [{"id": f"d{i}", "title": f"Place {i}", "text": f"The {WORDS[i % 12]} near the {WORDS[(i * 5) % 12]} "
         f"is number {i}.", "group": f"g{i % 3}"} for i in range(30)]
QUERIES = [f"{a} {b}" for a, b in zip(WORDS, WORDS[3:] + WORDS[:3])]


def write_jsonl(path, docs):
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    return path


def flashrag_folder(tmp_path, docs):
    """FlashRAG's release layout: {"id", "contents": "\"title\"\\ntext"} lines and a faiss IP index over them."""
    folder = tmp_path / "wiki18"
    folder.mkdir()
    write_jsonl(folder / "wiki18_100w.jsonl", [{"id": d["id"], "contents": f"\"{d['title']}\"\n{d['text']}"}
                                               for d in docs])
    index = faiss.IndexFlatIP(256)
    index.add(encode_passages(HashEmbedder(), docs))  # built "elsewhere", by another embedder instance
    faiss.write_index(index, str(folder / "e5_Flat.index"))
    return folder


def test_flashrag_folder_is_searched_without_reembedding(tmp_path, embedder):
    folder = flashrag_folder(tmp_path, DOCS)
    (corpus,) = sources.build(f"index:{folder}", None)
    assert len(corpus) == 30 and corpus.docs[4] == {"id": "d4", "title": "Place 4", "text": DOCS[4]["text"]}
    on_disk = Retriever([corpus], embedder)
    in_memory = Retriever([Corpus("wiki18", [{k: d[k] for k in ("id", "title", "text")} for d in DOCS])],
                          HashEmbedder())
    for q in QUERIES:
        assert [p.id for p in on_disk.search(q, 10)] == [p.id for p in in_memory.search(q, 10)]
    assert embedder.passage_calls == 0
    assert corpus.content_hash == in_memory.corpora_by_name["wiki18"].content_hash


class Crash(HashEmbedder):
    """Fails on its ``after + 1``-th passage batch, like a build killed mid-way."""

    def __init__(self, after):
        super().__init__()
        self.after = after

    def _encode(self, texts, is_query):
        if not is_query and self.passage_calls >= self.after:
            raise KeyboardInterrupt
        return super()._encode(texts, is_query)


def test_interrupted_build_resumes_to_the_uninterrupted_index(tmp_path):
    source = write_jsonl(tmp_path / "places.jsonl", DOCS)
    whole = build_index(source, tmp_path / "whole", HashEmbedder(), shard_size=4, progress=False)
    with pytest.raises(KeyboardInterrupt):
        build_index(source, tmp_path / "resumed", Crash(after=3), shard_size=4, progress=False)
    assert len(list((tmp_path / "resumed/shards").glob("*.npy"))) == 3
    assert not (tmp_path / "resumed/manifest.json").exists()
    finisher = HashEmbedder()
    resumed = build_index(source, tmp_path / "resumed", finisher, shard_size=4, progress=False)
    assert finisher.passage_calls == 8 - 3  # only the missing shards (batch size 4 = one batch per shard)
    assert (resumed["count"], resumed["content_hash"]) == (whole["count"], whole["content_hash"]) == \
        (30, Corpus("places", DOCS).content_hash)
    a, b = (Retriever(open_corpus(tmp_path / f), HashEmbedder()) for f in ("whole", "resumed"))
    for q in QUERIES:
        assert [p.id for p in a.search(q, 10)] == [p.id for p in b.search(q, 10)]


def test_built_folder_keeps_groups_for_leave_out_and_languages(tmp_path, embedder):
    for lang in ("en", "es"):
        build_index(write_jsonl(tmp_path / f"{lang}.jsonl", DOCS), tmp_path / "multi" / lang, HashEmbedder(),
                    index="hnsw", name=lang, lang=lang, progress=False)
    r = Retriever(sources.build(f"index:{tmp_path / 'multi'}", None), embedder)
    assert faiss.downcast_index(r.stage.indexes["es"].index).hnsw.efSearch == 64  # the recorded search parameters
    assert r.languages() == {"en": "en", "es": "es"}
    with excluded(["g0", "g1"]):
        hits = r.search("river lake", 6)
    assert len(hits) == 6 and {int(p.id.split(":d")[1]) % 3 for p in hits} == {2}
    assert embedder.passage_calls == 0


def test_embedder_mismatch_is_one_clear_line(tmp_path):
    build_index(write_jsonl(tmp_path / "c.jsonl", DOCS), tmp_path / "built", HashEmbedder(), progress=False)
    (corpus,) = open_corpus(tmp_path / "built")
    with pytest.raises(ValueError, match=r"holds 256-d vectors but embedder hash-test gives 128-d") as err:
        Retriever([corpus], HashEmbedder(dim=128))
    assert "\n" not in str(err.value)
    other = HashEmbedder()
    other.id = "hash-other"
    with pytest.raises(ValueError, match="was built with embedder hash-test, not hash-other"):
        Retriever([corpus], other)


def test_an_index_built_by_other_embedder_code_is_refused_with_a_rebuild(tmp_path):
    """The same model with another runtime/embedders.py (normalisation, pooling) makes other vectors: its id differs
    (``Embedder.id``), and the line says to rebuild rather than to pass an --embedder already passed."""
    from runtime.embedders import Embedder

    coded = type("Coded", (HashEmbedder,), {"id": Embedder.id, "model_id": "hash-test"})()
    build_index(write_jsonl(tmp_path / "c.jsonl", DOCS), tmp_path / "built", coded, progress=False)
    manifest = json.loads((tmp_path / "built" / "manifest.json").read_text())
    assert manifest["embedder"] == coded.id != "hash-test"
    (tmp_path / "built" / "manifest.json").write_text(json.dumps(manifest | {"embedder": "hash-test+0ldc0de0"}))
    (corpus,) = open_corpus(tmp_path / "built")
    with pytest.raises(ValueError, match=r"built with embedder hash-test\+0ldc0de0, whose code \(runtime/embedders"
                                         r"\.py\) differs from this checkout's .*rebuild it with python -m "
                                         r"scripts\.build_index$"):
        Retriever([corpus], coded)


def test_unrecognised_folder_names_both_layouts(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"manifest\.json .*FlashRAG layout"):
        open_corpus(tmp_path)


def milvus_lite_or_skip():
    try:
        import milvus_lite  # noqa: F401
        import pymilvus  # noqa: F401
    except ImportError as err:
        pytest.skip(f"milvus-lite is not installed ({err}); pip install '.[milvus]'")


def test_milvus_lite_top_k_equals_faiss_flat_with_server_side_leave_out(tmp_path, embedder):
    milvus_lite_or_skip()
    corpora = [Corpus("en", DOCS, "en"), Corpus("es", DOCS[:12], "es")]
    flat = Retriever(corpora, embedder)
    milvus = Retriever(corpora, embedder, retriever=f"milvus:{tmp_path / 'rag.db'}")
    calls = embedder.passage_calls
    for q in QUERIES:
        assert [p.id for p in milvus.search(q, 10)] == [p.id for p in flat.search(q, 10)]
        assert [p.id for p in milvus.search(q, 3, corpora=["es"])] == [p.id for p in flat.search(q, 3, corpora=["es"])]
    with excluded(["g1"]):
        assert [p.id for p in milvus.search_many(QUERIES, 10)[2]] == [p.id for p in flat.search_many(QUERIES, 10)[2]]
        assert all(int(p.id.split(":d")[1]) % 3 != 1 for p in milvus.search("river", 20))
    assert embedder.passage_calls == calls  # the collections were filled from the cached faiss indexes


def test_hybrid_with_milvus_as_dense_engine_equals_faiss_hybrid_with_server_side_leave_out(tmp_path, embedder):
    milvus_lite_or_skip()
    corpora = [Corpus("en", DOCS, "en"), Corpus("es", DOCS[:12], "es")]
    flat = Retriever(corpora, embedder, retriever="hybrid")
    milvus = Retriever(corpora, embedder, retriever=f"hybrid:milvus:{tmp_path / 'rag.db'}")
    assert {type(i).__name__ for i in milvus.stage.dense.indexes.values()} == {"MilvusIndex"}
    assert all(milvus.stage.lexical.indexes.values())
    dense = Retriever(corpora, embedder)
    assert any([p.id for p in flat.search(q, 10)] != [p.id for p in dense.search(q, 10)] for q in QUERIES)
    for q in QUERIES:
        assert [p.id for p in milvus.search(q, 10)] == [p.id for p in flat.search(q, 10)]
        assert [p.id for p in milvus.search(q, 3, corpora=["es"])] == [p.id for p in flat.search(q, 3, corpora=["es"])]
    with excluded(["g1"]):
        assert [[p.id for p in hits] for hits in milvus.search_many(QUERIES, 10)] == \
            [[p.id for p in hits] for hits in flat.search_many(QUERIES, 10)]
        assert all(int(p.id.split(":d")[1]) % 3 != 1 for p in milvus.search("river", 20))


def test_a_prebuilt_corpus_is_fingerprinted_by_its_content_hash_and_an_edit_changes_it(tmp_path):
    folder = flashrag_folder(tmp_path, DOCS)
    (corpus,) = open_corpus(folder)
    assert corpus.fingerprint == corpus.content_hash  # no re-hash of every document on each run
    edited = [dict(d, text=d["text"] + " Edited.") if d["id"] == "d7" else d for d in DOCS]
    (tmp_path / "wiki18").rename(tmp_path / "old")
    (again,) = open_corpus(flashrag_folder(tmp_path, edited))
    assert again.fingerprint != corpus.fingerprint


def rewrite_keeping_mtime(path, text: str, rename: bool = False):
    """``path`` given other content of the same size with its old modification time, as ``cp -p`` (in place) or
    ``rsync -a`` (a new file renamed over it) leave it."""
    old = path.stat()
    assert len(text.encode()) == old.st_size
    target = path.with_name(path.name + ".new") if rename else path
    target.write_text(text)
    os.utime(target, ns=(old.st_atime_ns, old.st_mtime_ns))
    if rename:
        target.replace(path)


def test_a_corpus_or_index_rewritten_with_its_size_and_mtime_kept_is_hashed_anew(tmp_path):
    """Issue 73: the content hash of a prebuilt corpus and of its index was remembered under (path, size, mtime), so
    a file replaced by ``cp -p`` kept the old hash: results keyed as the old corpus, searched in the new one."""
    folder = flashrag_folder(tmp_path, DOCS)
    (corpus,) = open_corpus(folder)
    before = corpus.fingerprint, corpus.index_fingerprint
    docs, index = folder / "wiki18_100w.jsonl", folder / "e5_Flat.index"
    rewrite_keeping_mtime(docs, docs.read_text().replace("number 7.", "number 8."))
    stat, raw = index.stat(), bytearray(index.read_bytes())
    raw[-1] ^= 1  # one bit of the last vector
    index.write_bytes(bytes(raw))
    os.utime(index, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    (again,) = open_corpus(folder)
    assert again.fingerprint != before[0] and again.index_fingerprint != before[1]
    assert again.docs[7]["text"].endswith("number 8.")


def test_a_settled_files_hash_is_remembered_until_the_file_is_replaced(tmp_path, monkeypatch):
    """A file older than ``SETTLE_SECONDS`` is hashed once per version: the remembered hash is used until any write
    or rename changes its inode or change time, however its size and modification time are kept."""
    monkeypatch.setattr(ondisk, "SETTLE_SECONDS", -60, raising=False)  # every file counts as settled
    path = tmp_path / "index.bin"
    path.write_text("first version")
    assert ondisk.file_digest(path) == hashlib.sha256(b"first version").hexdigest()
    (memo,) = (ondisk.index_dir() / "digests").glob("index.bin-*")
    memo.write_text("remembered")
    assert ondisk.file_digest(path) == "remembered"  # read from the memo, not the file
    rewrite_keeping_mtime(path, "other version", rename=True)
    assert ondisk.file_digest(path) == hashlib.sha256(b"other version").hexdigest()


def test_a_built_folder_whose_corpus_changed_is_refused_with_a_rebuild(tmp_path):
    source = write_jsonl(tmp_path / "places.jsonl", DOCS)
    build_index(source, tmp_path / "built", HashEmbedder(), progress=False)
    corpus_file = tmp_path / "built" / "corpus.jsonl"
    rewrite_keeping_mtime(corpus_file, corpus_file.read_text().replace("number 7.", "number 8."))
    with pytest.raises(ValueError, match=r"corpus.jsonl is not the corpus the index beside it was built from .*"
                                         r"rebuild it with python -m scripts.build_index"):
        open_corpus(tmp_path / "built")
