"""Lexical retrieval (``--retriever bm25``): a multilingual tokeniser and a ``bm25s`` index per corpus, cached on
disk by content hash.

Tokenisation (:func:`tokenize`): NFKC, lower-case, Unicode word runs (letters, digits and combining marks, so
Latin, Cyrillic, Arabic, Hangul, Devanagari ... words). Runs containing characters of scripts written without spaces (Han, Hiragana, Katakana, Thai,
Lao, Khmer, Myanmar) are cut into overlapping character bigrams, a single character standing alone; Hangul words
are kept whole and also cut into bigrams, so a noun matches when a particle is attached to it. No stemming and no
stop words: the scores stay language-neutral and IDF discounts frequent words.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import unicodedata
from collections import Counter
from contextlib import suppress
from pathlib import Path

import bm25s
import numpy as np
import regex
from filelock import FileLock

from retrieval.corpus import _EXCLUDED, Corpus
from retrieval.first_stage import FirstStage, Setup, register
from runtime.paths import index_dir, prune_versions

TOKENIZER_VERSION = "w1b2"  # part of the cache key: bump when tokenize() changes
KEEP_VERSIONS = 3
_WORD = regex.compile(r"[\w\p{M}]+")  # combining marks too, so Thai, Indic and vowelled Arabic words stay whole
_UNSPACED_SCRIPTS = r"\p{Han}\p{Hiragana}\p{Katakana}\p{Thai}\p{Lao}\p{Khmer}\p{Myanmar}"
_UNSPACED = regex.compile(rf"[{_UNSPACED_SCRIPTS}]")
_PIECES = regex.compile(rf"[{_UNSPACED_SCRIPTS}\p{{M}}]+|[^{_UNSPACED_SCRIPTS}]+")
_HANGUL = regex.compile(r"\p{Hangul}")


def _bigrams(run: str) -> list[str]:
    return [run] if len(run) < 2 else [run[i:i + 2] for i in range(len(run) - 1)]


def tokenize(text: str) -> list[str]:
    """Index terms of ``text`` (see the module docstring)."""
    tokens: list[str] = []
    for word in _WORD.findall(unicodedata.normalize("NFKC", text).lower()):
        if _UNSPACED.search(word):
            # split mixed runs ("iphone手机") into the spaced part and bigrams of the unspaced part
            for piece in _PIECES.findall(word):
                tokens += _bigrams(piece) if _UNSPACED.match(piece) else [piece]
        elif _HANGUL.search(word) and len(word) > 2:
            tokens += [word, *_bigrams(word)]
        else:
            tokens.append(word)
    return tokens


class BM25Index:
    """BM25 (Lucene variant, k1=1.5, b=0.75) over the ``title. text`` of each document of one corpus."""

    def __init__(self, corpus, model: bm25s.BM25):
        if model.scores["num_docs"] != len(corpus):
            raise ValueError(f"BM25 index for '{corpus.name}' holds {model.scores['num_docs']} documents "
                             f"for {len(corpus)}")
        self.corpus, self.model = corpus, model
        self.groups = np.array([str(d.get("group", "")) for d in corpus.docs])
        self.group_sizes = Counter(g for g in self.groups if g)

    @classmethod
    def from_corpus(cls, corpus) -> "BM25Index":
        model = bm25s.BM25()
        tokens = [tokenize(f"{d['title']}. {d['text']}") or [""] for d in corpus.docs]
        model.index(tokens, show_progress=False)
        return cls(corpus, model)

    @classmethod
    def build(cls, corpus, cache_dir: Path | None = None) -> "BM25Index":
        """Load the cached index for this corpus content or build and cache it (no pickle: numpy arrays + JSON)."""
        root = Path(cache_dir or index_dir())
        key = f"{corpus.name}-{corpus.content_hash[:16]}-bm25s-{TOKENIZER_VERSION}"
        (root / ".locks").mkdir(parents=True, exist_ok=True)
        with FileLock(root / ".locks" / f"{key}.lock"):
            return cls._load(corpus, root / key, key) or cls._save(cls.from_corpus(corpus), root, key)

    @classmethod
    def _save(cls, built: "BM25Index", root: Path, key: str) -> "BM25Index":
        folder = root / key
        built.model.save(str(folder), allow_pickle=False, show_progress=False)
        (folder / "meta.json").write_text(json.dumps({"key": key, "ntotal": len(built.corpus)}))
        prune_versions(root, f"{built.corpus.name}-*-bm25s-{TOKENIZER_VERSION}", KEEP_VERSIONS)
        return built

    @classmethod
    def _load(cls, corpus, folder: Path, key: str) -> "BM25Index | None":
        if not (folder / "meta.json").exists():
            return None
        try:
            meta = json.loads((folder / "meta.json").read_text())
            if meta.get("key") != key or meta.get("ntotal") != len(corpus):
                raise ValueError("metadata does not match the corpus")
            loaded = cls(corpus, bm25s.BM25.load(str(folder), allow_pickle=False, show_progress=False))
            with suppress(OSError):
                os.utime(folder)
            return loaded
        except Exception as err:  # a corrupt or half-written cache is rebuilt, never trusted
            print(f"warning: rebuilding BM25 cache {folder.name}: {err}", file=sys.stderr)
            shutil.rmtree(folder, ignore_errors=True)
            return None

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every document for ``query`` (zeros when no query term is in the vocabulary)."""
        ids = self.model.get_tokens_ids([t for t in tokenize(query) if t])
        if not ids:
            return np.zeros(len(self.corpus), np.float32)
        return np.asarray(self.model.get_scores_from_ids(ids), dtype=np.float32)

    def search(self, query: str, k: int, hidden: frozenset[str] = frozenset()) -> list:
        """Top-``k`` documents with a positive score, best first, skipping documents of ``hidden`` groups."""
        scores = self.scores(query)
        if hidden & self.group_sizes.keys():
            scores = np.where(np.isin(self.groups, list(hidden)), 0.0, scores)
        k = min(k, int((scores > 0).sum()))
        if k <= 0:
            return []
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.lexsort((top, -scores[top]))]  # score descending, row ascending on ties
        return [self.corpus.passage(int(r), float(scores[r])) for r in top]


@register
class BM25(FirstStage):
    """``bm25``: each corpus's :class:`BM25Index`, searched query by query."""

    name = "bm25"

    def __init__(self, corpora: list[Corpus], setup: Setup, arg: str = ""):
        self.indexes = {c.name: BM25Index.build(c, setup.cache_dir) for c in corpora}

    def search(self, queries, k, names):
        hidden = _EXCLUDED.get()
        return [{name: self.indexes[name].search(query, k, hidden) for name in names} for query in queries]
