"""Corpora and passages: a named collection of documents (:class:`Corpus`), the :class:`Passage` a search returns,
and the leave-out groups (:func:`excluded`) every index skips."""
from __future__ import annotations

import functools
import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import asdict, dataclass, field
from pathlib import Path

from runtime.files import read_jsonl

_EXCLUDED: ContextVar[frozenset[str]] = ContextVar("excluded_groups", default=frozenset())


@contextmanager
def excluded(groups: Iterable[str]) -> Iterator[None]:
    """Inside the block, documents whose ``group`` field is in ``groups`` cannot be retrieved (leave-one-out
    evaluation over knowledge rendered from the benchmark itself, e.g. the BLEnD corpus)."""
    token = _EXCLUDED.set(frozenset(groups))
    try:
        yield
    finally:
        _EXCLUDED.reset(token)


@dataclass(frozen=True)
class Passage:
    id: str  # "<corpus>:<source id>", stable across runs
    title: str
    text: str
    lang: str = "en"
    corpus: str = ""
    score: float = 0.0
    date: str | None = None  # publication date, where the data has one (XRAG's news articles)

    def clip(self, max_chars: int | None = None) -> str:
        """The text cut at a word boundary after ``max_chars`` characters; whole with ``None``."""
        if max_chars is None or len(self.text) <= max_chars:
            return self.text
        return self.text[:max_chars].rsplit(" ", 1)[0] + " …"

    def format(self, max_chars: int | None = None) -> str:
        """Prompt rendering: ``[title] (published <date>) text``, the text :meth:`clip`-ped to ``max_chars``."""
        dated = f"(published {self.date}) " if self.date else ""
        return f"[{self.title}] {dated}{self.clip(max_chars)}"

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class Corpus:
    """A named collection of ``{"id", "title", "text"}`` documents in one language."""

    name: str
    docs: list[dict]
    lang: str = "en"
    _hash: str = field(default="", repr=False)

    def __post_init__(self):
        for i, doc in enumerate(self.docs):
            missing = {"id", "title", "text"} - doc.keys()
            if missing:
                raise ValueError(f"corpus '{self.name}' document #{i} lacks {sorted(missing)}; "
                                 "each document needs id, title and text")
        ids = [str(d["id"]) for d in self.docs]
        if len(set(ids)) != len(ids):
            raise ValueError(f"corpus '{self.name}' has duplicate document ids; ids must be unique")

    @classmethod
    def from_jsonl(cls, path: str | Path, name: str | None = None, lang: str = "en") -> "Corpus":
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"corpus file not found: {path}")
        return cls(name or path.stem, list(read_jsonl(path, ("id", "title", "text"))), lang)

    @property
    def content_hash(self) -> str:
        if not self._hash:
            digest = hashlib.sha256()
            for d in self.docs:
                digest.update(json.dumps([str(d["id"]), d["title"], d["text"]], ensure_ascii=False).encode())
            self._hash = digest.hexdigest()
        return self._hash

    @functools.cached_property
    def fingerprint(self) -> str:
        """SHA-256 of every field of every document (``content_hash`` covers only what the index embeds; a
        document's ``group`` or ``date`` changes results too)."""
        return hashlib.sha256(json.dumps(self.docs, sort_keys=True, ensure_ascii=False, default=str).encode()
                              ).hexdigest()

    @property
    def index_fingerprint(self) -> str:
        """What its search depends on beyond the documents and the run's flags: '' for an index built from them (its
        embedder and index type are keyed by the run); a prebuilt index's own (:class:`retrieval.ondisk.DiskCorpus`)."""
        return ""

    def group_sizes(self) -> Counter:
        """Documents per ``group`` (the unit :func:`excluded` hides)."""
        return Counter(str(d["group"]) for d in self.docs if d.get("group"))

    def row_of(self, passage_id: str) -> int | None:
        """The row of the passage called ``passage_id`` ("<corpus>:<id>"), None when it is not in this corpus."""
        if not hasattr(self, "_rows"):
            self._rows = {f"{self.name}:{d['id']}": row for row, d in enumerate(self.docs)}
        return self._rows.get(passage_id)

    def passage(self, row: int, score: float = 0.0) -> Passage:
        d = self.docs[row]
        return Passage(f"{self.name}:{d['id']}", d["title"], d["text"], d.get("lang", self.lang), self.name, score,
                       d.get("date"))

    def __len__(self) -> int:
        return len(self.docs)


def dedup(passages: list[Passage]) -> list[Passage]:
    """Keep the first occurrence of each passage id, in order."""
    seen: set[str] = set()
    return [p for p in passages if not (p.id in seen or seen.add(p.id))]
