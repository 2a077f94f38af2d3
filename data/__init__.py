"""Dataset registry: ``load(name, data_dir)`` -> :class:`Bundle` (examples + retrieval corpora), and seeded splits."""
from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import dspy

from retrieval.corpus import Corpus
from runtime.files import read_json, read_jsonl, utf8_text, write_whole


@dataclass
class Bundle:
    name: str
    examples: list[dspy.Example]
    corpora: list[Corpus]
    task: str  # "short" (free-form answer) or "mcq" (options in, letter out)
    source: str  # what was read, for provenance in MLflow
    groups: tuple[str, ...] = ()  # example fields to break metrics down by (e.g. "lang", "tier")

    @functools.cached_property
    def fingerprint(self) -> str:
        """SHA-256 of what the bundle holds: every field of every example (and which are inputs) and every corpus
        (:attr:`Corpus.fingerprint`), not where it was read from. Results depend on it, so result checkpoints are
        keyed by it. Computed once, on first use, when the bundle is final (``data.corpora.load`` has applied the
        corpus flags)."""
        digest = hashlib.sha256()
        for ex in sorted(self.examples, key=lambda ex: str(ex.id)):
            fields = dict(ex.items(include_dspy=True))  # serialised by json's C encoder (``toDict`` is 5x slower)
            digest.update(json.dumps([fields, sorted(getattr(ex, "_input_keys", None) or ())], sort_keys=True,
                                     ensure_ascii=False, default=str).encode() + b"\n")
        for corpus in self.corpora:
            digest.update(f"{corpus.name}\0{corpus.lang}\0{corpus.fingerprint}\n".encode())
        return digest.hexdigest()


@dataclass
class Splits:
    train: list[dspy.Example]
    dev: list[dspy.Example]
    test: list[dspy.Example]
    seed: int

    def ids(self) -> dict[str, list[str]]:
        return {name: [ex.id for ex in getattr(self, name)] for name in ("train", "dev", "test")}


def data_dir(explicit: str | Path | None = None) -> Path | None:
    value = explicit or os.environ.get("RAG_DATA_DIR")
    return Path(value).expanduser() if value else None


def require_file(root: Path | None, *candidates: str) -> Path:
    """First existing ``root/candidate``; otherwise a one-line error naming the path and ``RAG_DATA_DIR``."""
    if root is None:
        raise FileNotFoundError(f"no data dir: set RAG_DATA_DIR (or pass --data-dir) to the folder holding {candidates[0]}")
    for rel in candidates:
        if (root / rel).exists():
            return root / rel
    raise FileNotFoundError(f"data file not found: {root / candidates[0]}; point RAG_DATA_DIR (or --data-dir) "
                            "at the benchmark data folder")


def load_records(files: list[Path]):
    """The rows of JSON/JSONL (or parquet) release files through HF ``datasets``, Arrow-cached in the project by the
    files' content: ``datasets`` keys its cache by path and mtime, so it reads a content-addressed copy of the bytes
    hashed here (a file replaced with its mtime kept is new data, never the old file's cached rows). A JSON file it
    cannot read is read again with :func:`read_jsonl` / :func:`read_json` to name the bad line; JSON files are
    checked to be UTF-8 first (Arrow would load other bytes and fail later, on reading the row)."""
    from datasets import load_dataset

    from runtime.paths import project_cache

    kind = "parquet" if files[0].suffix == ".parquet" else "json"
    contents = [path.read_bytes() for path in files]
    digest = hashlib.sha256()
    for path, raw in zip(files, contents):
        if kind == "json":
            utf8_text(path, raw)
        digest.update(f"{path.name}\0{len(raw)}\0".encode() + raw)
    cache = project_cache() / "hf" / digest.hexdigest()[:24]
    copies = [cache / "files" / f"{i}-{path.name}" for i, path in enumerate(files)]
    for copy, raw in zip(copies, contents):
        if not copy.exists():
            write_whole(copy, raw)
    quiet = logging.getLogger("datasets")  # its error log of a failed read (a traceback) is said below in one line
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    try:
        return load_dataset(kind, data_files=[str(c) for c in copies], split="train", cache_dir=str(cache))
    except Exception as err:
        if kind == "json":
            for path in files:
                for _ in (read_jsonl(path) if path.suffix == ".jsonl" else [read_json(path)]):
                    pass
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise ValueError(f"cannot read {', '.join(map(str, files))} ({first}); check the files' format") from None
    finally:
        quiet.setLevel(level)


def _loaders() -> dict[str, Callable[[Path | None], Bundle]]:
    from data import blend, click, demo, hotpotqa, musique, open_qa, twowiki, xrag

    return {"demo": demo.load_multihop, "demo_culture": demo.load_culture, "hotpotqa": hotpotqa.load,
            "2wiki": twowiki.load, "blend": blend.load_mcq, "blend_short": blend.load_short, "click": click.load,
            "click_all": click.load_all,
            "musique": musique.load, "nq": open_qa.load_nq, "triviaqa": open_qa.load_triviaqa, **xrag.loaders()}


def names() -> list[str]:
    return sorted(_loaders())


def load(name: str, data_dir_: str | Path | None = None) -> Bundle:
    loaders = _loaders()
    if name not in loaders:
        raise ValueError(f"unknown dataset '{name}'; choose one of: {', '.join(sorted(loaders))}")
    return loaders[name](data_dir(data_dir_))


def split(examples: list[dspy.Example], n_train: int, n_dev: int, n_test: int, seed: int = 13) -> Splits:
    """Seeded, disjoint train/dev/test: sort by id, shuffle with ``random.Random(seed)``, cut in that order.
    Negative sizes and repeated ids (which would put one question in two splits, and in one checkpoint record) are
    refused."""
    negative = [f"--{name} {n}" for name, n in (("train", n_train), ("dev", n_dev), ("test", n_test)) if n < 0]
    if negative:
        raise ValueError(f"split sizes cannot be negative ({', '.join(negative)}); give 0 or more")
    repeated = sorted(i for i, n in Counter(str(ex.id) for ex in examples).items() if n > 1)
    if repeated:
        raise ValueError(f"the dataset repeats example ids ({', '.join(repeated[:3])}"
                         f"{', ...' if len(repeated) > 3 else ''}); ids must be unique: fix its loader or data")
    need = n_train + n_dev + n_test
    if need > len(examples):
        raise ValueError(f"asked for {n_train}+{n_dev}+{n_test}={need} examples but the dataset has {len(examples)}; "
                         "lower --train/--dev/--test")
    pool = sorted(examples, key=lambda ex: ex.id)
    random.Random(seed).shuffle(pool)
    return Splits(pool[:n_train], pool[n_train:n_train + n_dev], pool[n_train + n_dev:need], seed)


def circular(examples: list[dspy.Example]) -> list[dspy.Example]:
    """Circular multiple choice: each example once per cyclic shift of its options, so every option text (the
    gold one included) stands at every letter exactly once. Copies get id ``<id>#r<shift>``, ``base_id`` and
    ``rotation``; ``evaluation.loop.summarize`` counts a question as solved only when all its copies are.
    A writer that always picks one letter scores 1/n per copy and 0 circular."""
    out = []
    for ex in examples:
        if not ex.get("options"):
            raise ValueError(f"circular evaluation needs multiple-choice examples; {ex.id} has no options")
        letters, texts = list(ex.options), list(ex.options.values())
        gold = letters.index(ex.answer)
        for shift in range(len(texts)):
            letter = letters[(gold - shift) % len(texts)]
            out.append(ex.copy(id=f"{ex.id}#r{shift}", base_id=ex.id, rotation=shift, answer=letter,
                               answers=[letter], options=dict(zip(letters, texts[shift:] + texts[:shift]))))
    return out
