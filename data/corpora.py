"""Per-language retrieval corpora for the multilingual programs, chosen with ``--corpus SOURCE``:

- ``bundled``: the corpora that come with the dataset (the default for demo, demo_culture, hotpotqa, ...);
- ``jsonl:DIR``: your own ``DIR/<lang>.jsonl`` files (``{"id", "title", "text"}`` per line; long texts are cut
  into passages at sentence ends), e.g. Wikipedia articles exported on a machine with hub access;
- ``index:DIR``: corpora embedded and indexed beforehand, read from disk without re-embedding (the index memory-
  mapped, texts read by byte offset): a folder written by ``scripts/build_index.py`` or in FlashRAG's released
  layout (one ``*.jsonl`` + one ``*.index``), or a folder of such folders, one per language (:mod:`retrieval.ondisk`);
- ``wikipedia:LANGS`` (e.g. ``wikipedia:en,ko,es``): the first ``--max-docs`` articles (default 1000) of each
  language's Wikipedia from the HF hub (``wikimedia/wikipedia``, streamed, cut into passages); needs hub access;
- ``multihop_pool``: the pooled English open-retrieval setting (default of ``scripts/seal_grid.py``): every
  multi-hop paragraph available (the HotpotQA, 2WikiMultiHopQA and MuSiQue contexts and the XQuAD English
  paragraphs), searched as one pool (one corpus per source, merged by score under the shared embedder, so each
  source's index is the one its own dataset already built), so each question competes with the other datasets'
  distractors; gold-title metrics apply unchanged;
- ``multihop_windows``: the same paragraphs, deduplicated and cut into windows of 3 sentences that keep their
  paragraph's title, as one corpus ``pool_en`` (finer passages, a new index: ~9k passages to embed);
- ``xquad``: the XQuAD paragraphs of ``RAG_DATA_DIR/xquad/xquad.<lang>.json`` (240 per language, deduplicated);
  only ar, el, en, es and zh overlap the BLEnD languages;
- ``blend_kb``: knowledge rendered from the BLEnD annotations (default for blend, blend_short and click): per
  country and question one short document stating what its annotators answered, in English and in the local
  language, filed in the country's language corpus. Each document's ``group`` is its question id. With
  ``--leave-question-out`` (default) an example cannot retrieve any document of its own question id (no country's
  answers to it, so neither the gold nor the distractors' sources): what is left is the culture's answers to
  *other* questions. ``--no-leave-question-out`` is the *oracle* setting: the answer itself is retrievable, so it
  measures whether a method routes to the right culture's evidence, not knowledge coverage.
"""
from __future__ import annotations

import argparse
import re
from itertools import islice
from pathlib import Path

import data as datasets
from data import Bundle, require_file
from data.blend import blend_kb
from retrieval.corpus import Corpus
from retrieval.ondisk import open_corpus
from runtime.files import read_json, read_jsonl

SOURCES = ("bundled", "xquad", "blend_kb", "multihop_pool", "multihop_windows", "jsonl:DIR", "index:DIR",
           "wikipedia:LANGS")
PREFIXED = ("jsonl:", "index:", "wikipedia:")
WIKIPEDIA = ("wikimedia/wikipedia", "20231101")  # HF dataset and snapshot
DEFAULT_SOURCE = {"blend": "blend_kb", "blend_short": "blend_kb", "click": "blend_kb"}
XQUAD_LANGS = ("ar", "de", "el", "en", "es", "hi", "ro", "ru", "th", "tr", "vi", "zh")


def known(text: str) -> bool:
    """Whether ``text`` names a corpus source (:data:`SOURCES`, a prefixed one with what follows its prefix)."""
    return text in SOURCES[:5] or any(text.startswith(p) and len(text) > len(p) for p in PREFIXED)


def source_arg(text: str) -> str:
    """argparse type for a script's ``--corpus``."""
    if known(text):
        return text
    raise argparse.ArgumentTypeError(f"unknown corpus source '{text}'; choose one of: {', '.join(SOURCES)}")


def default_source(dataset: str) -> str:
    return DEFAULT_SOURCE.get(dataset, "bundled")


def build(source: str, root: Path | None, bundle: Bundle | None = None, max_docs: int | None = None) -> list[Corpus]:
    """The corpora of ``source`` (``bundled`` returns ``bundle.corpora``); ``max_docs`` caps the source documents
    per language of ``jsonl`` and ``wikipedia``."""
    if source == "bundled":
        return bundle.corpora
    if source == "xquad":
        return xquad(root)
    if source == "blend_kb":
        return blend_kb(root)
    if source == "multihop_pool":
        return multihop_sources(root)
    if source == "multihop_windows":
        return [multihop_pool(root)]
    if source.startswith("jsonl:"):
        return jsonl(Path(source[len("jsonl:"):]).expanduser(), max_docs=max_docs)
    if source.startswith("index:"):
        return open_corpus(Path(source[len("index:"):]))
    if source.startswith("wikipedia:"):
        return wikipedia(source[len("wikipedia:"):].split(","), max_docs or 1000)
    raise ValueError(f"unknown corpus source '{source}'; choose one of: {', '.join(SOURCES)}")


def apply(bundle: Bundle, source: str | None, leave_question_out: bool, root: Path | None,
          max_docs: int | None = None) -> Bundle:
    """Swap in the corpora of ``source`` (unless it is the dataset's default) and, when ``leave_question_out`` is
    off, let every example retrieve the documents rendered from its own annotations."""
    if source and source not in ("bundled", default_source(bundle.name)):
        bundle.corpora = build(source, root, bundle, max_docs)
    if not leave_question_out:
        for example in bundle.examples:
            example["leave_out"] = []
    return bundle


def require(bundle: Bundle) -> list[Corpus]:
    """The bundle's corpora; for a dataset that brings none (nq, triviaqa) and got none from ``--corpus``, a one-line
    error naming the fix."""
    if not bundle.corpora:
        raise ValueError(f"{bundle.name} comes with no retrieval corpus: give one with --corpus "
                         "jsonl:DIR|index:DIR|wikipedia:en (e.g. Wikipedia passages exported to DIR/en.jsonl), or run "
                         "a closed-book program")
    return bundle.corpora


def load(dataset: str, data_dir: str | None, source: str | None, leave_question_out: bool,
         max_docs: int | None = None) -> Bundle:
    """The dataset's bundle with the corpora of ``source`` applied: the one way programs and CLIs get their data."""
    return apply(datasets.load(dataset, data_dir), source, leave_question_out, datasets.data_dir(data_dir), max_docs)


def provenance(dataset: str, source: str | None, leave_question_out: bool, max_docs: int | None = None) -> dict:
    """What to log (and key result checkpoints by) about the corpora."""
    name = source or default_source(dataset)
    capped = {"max_docs": max_docs} if max_docs and name.startswith(PREFIXED) else {}
    oracle = " (oracle knowledge)" if not leave_question_out else " (own question left out)"
    return {"corpus_source": name + (oracle if name == "blend_kb" else ""),
            "leave_question_out": leave_question_out, **capped}


def passages(text: str, max_chars: int) -> list[str]:
    """``text`` cut into pieces of at most about ``max_chars`` characters at sentence ends."""
    sentences = re.split(r"(?<=[.!?。！？])\s+", text.strip())
    pieces, current = [], ""
    for sentence in sentences:
        if current and len(current) + 1 + len(sentence) > max_chars:
            pieces.append(current)
            current = sentence
        else:
            current = f"{current} {sentence}".strip()
    return pieces + [current] if current else pieces


def chunked(docs, max_chars: int) -> list[dict]:
    """``{"id", "title", "text", ...}`` documents cut into passages of about ``max_chars`` (ids ``<id>#<n>``)."""
    out = []
    for doc in docs:
        pieces = passages(doc["text"], max_chars)
        for n, piece in enumerate(pieces):
            out.append({**doc, "id": str(doc["id"]) if len(pieces) == 1 else f"{doc['id']}#{n}", "text": piece})
    return out


def jsonl(folder: Path, max_chars: int = 1500, max_docs: int | None = None) -> list[Corpus]:
    """One corpus per ``folder/<lang>.jsonl`` from its first ``max_docs`` documents, cut into passages."""
    files = sorted(folder.glob("*.jsonl"))
    if not files:
        raise FileNotFoundError(f"no <lang>.jsonl files in {folder}")
    corpora = []
    for path in files:
        docs = list(islice(read_jsonl(path, ("id", "title", "text")), max_docs))
        if not docs:
            raise ValueError(f"{path} holds no documents: give it one {{\"id\", \"title\", \"text\"}} object per "
                             "line, or remove it from the folder")
        corpora.append(Corpus(path.stem, chunked(docs, max_chars), path.stem))
    return corpora


def wikipedia(langs: list[str], max_docs: int, max_chars: int = 1500) -> list[Corpus]:
    """The first ``max_docs`` articles of each language's Wikipedia, streamed from the HF hub, cut into passages."""
    from datasets import load_dataset

    name, snapshot = WIKIPEDIA
    corpora = []
    for lang in langs:
        try:
            rows = list(islice(load_dataset(name, f"{snapshot}.{lang}", split="train", streaming=True), max_docs))
        except Exception as err:  # offline, unknown language, hub error: one line naming the way out
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise ValueError(f"cannot stream {name} {snapshot}.{lang} from the Hugging Face hub ({first}); export "
                             f"articles to DIR/{lang}.jsonl and use --corpus jsonl:DIR") from err
        docs = [{"id": r["id"], "title": r["title"], "text": r["text"]} for r in rows]
        corpora.append(Corpus(lang, chunked(docs, max_chars), lang))
    return corpora


def xquad(root: Path | None, langs=XQUAD_LANGS) -> list[Corpus]:
    """The distinct XQuAD paragraphs of each language, titled by their article."""
    corpora = []
    for lang in langs:
        release = read_json(require_file(root, f"xquad/xquad.{lang}.json"))
        docs, seen = [], set()
        for a, article in enumerate(release["data"]):
            for p, paragraph in enumerate(article["paragraphs"]):
                text = paragraph["context"].strip()
                if text not in seen:
                    seen.add(text)
                    docs.append({"id": f"{a:02d}-{p:02d}", "title": article["title"].replace("_", " "), "text": text})
        corpora.append(Corpus(lang, docs, lang))
    return corpora


POOL_SOURCES = ("hotpotqa", "2wiki", "musique")  # multi-hop datasets whose contexts go into ``multihop_pool``


def sentence_windows(docs, size: int = 2) -> list[dict]:
    """Each document cut into windows of ``size`` consecutive sentences (ids ``<id>#w<n>``), title kept."""
    out = []
    for doc in docs:
        sentences = [s for s in re.split(r"(?<=[.!?])\s+", " ".join(doc["text"].split())) if s]
        for n in range(0, len(sentences), size):
            out.append({**doc, "id": f"{doc['id']}#w{n // size}", "text": " ".join(sentences[n:n + size])})
    return out


def multihop_sources(root: Path | None) -> list[Corpus]:
    """The English paragraph corpus of every multi-hop dataset whose file is present (as its loader builds it, so
    its cached index is reused) plus the XQuAD English paragraphs (corpus ``xquad_en``)."""
    corpora = []
    for name in POOL_SOURCES:
        try:
            corpora += datasets.load(name, root).corpora
        except FileNotFoundError:
            continue
    if root is not None and (root / "xquad/xquad.en.json").exists():
        english = xquad(root, ("en",))[0]
        corpora.append(Corpus("xquad_en", english.docs, "en"))
    if not corpora:
        raise FileNotFoundError(f"no multi-hop data under {root}: the multihop pool needs RAG_DATA_DIR (or "
                                "--data-dir) with hotpotqa/, 2wikimultihopqa/ or musique/ files")
    return corpora


def multihop_pool(root: Path | None, window: int = 3) -> Corpus:
    """One English corpus ``pool_en`` of the distinct (title, text) paragraphs of :func:`multihop_sources`, cut
    into ``window``-sentence passages (ids ``<source>/<id>#w<n>``)."""
    docs: dict[tuple[str, str], dict] = {}
    for corpus in multihop_sources(root):
        for doc in corpus.docs:
            docs.setdefault((doc["title"], doc["text"]), {"id": f"{corpus.name}/{doc['id']}", "title": doc["title"],
                                                          "text": doc["text"]})
    return Corpus("pool_en", sentence_windows(docs.values(), window), "en")
