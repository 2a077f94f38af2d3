"""The first stage of retrieval as one protocol and a registry: each first-stage retriever (``dense`` faiss,
``bm25``, ``milvus:URI``, ``hybrid`` fusion, ...) is a :class:`FirstStage` subclass in a file of this package that
registers itself with :func:`register`; ``--retriever`` spells one as ``NAME`` or ``NAME:ARG``.
:class:`retrieval.retriever.Retriever` builds the spelled one over its corpora and reranks what it finds.

Steps to add one: docs/extending.md ("Add a first-stage retriever").
"""
from __future__ import annotations

import importlib
import pkgutil
import sys
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

from retrieval.corpus import Corpus, Passage
from runtime.embedders import Embedder

_STAGES: dict[str, type[FirstStage]] = {}


@dataclass(frozen=True)
class Setup:
    """What a first stage is built with besides its corpora (the retrieval flags): the embedder, where indexes are
    cached, the faiss index type, and hybrid's fusion depth and reciprocal-rank constant."""

    embedder: Embedder
    cache_dir: Path | None
    index_type: str
    fuse_depth: int
    rrf_k: float


class FirstStage(ABC):
    """Candidates from each of a set of corpora. A subclass sets ``name`` (and ``arg``, what follows ``NAME:``,
    when it takes one), builds its indexes in ``__init__(corpora, setup, arg)`` and answers :meth:`search`."""

    name: ClassVar[str]
    arg: ClassVar[str] = ""  # e.g. "URI" for milvus:URI; '' when spelled by name alone
    vectors: ClassVar[bool] = False  # searches by query vector: what hybrid fuses with BM25

    @abstractmethod
    def __init__(self, corpora: list[Corpus], setup: Setup, arg: str = ""): ...

    @abstractmethod
    def search(self, queries: list[str], k: int, names: list[str]) -> list[dict[str, list[Passage]]]:
        """Per query (at least one), the top ``k`` of each corpus in ``names``, best first, ``score`` its own;
        documents hidden by :func:`retrieval.corpus.excluded` are never returned."""

    def stored_vectors(self, passages: list[Passage]) -> np.ndarray | None:
        """The indexed vectors of ``passages`` (for the ``embed`` reranker), None when it holds none."""
        return None

    @classmethod
    def spellings(cls) -> tuple[str, ...]:
        """What ``--retriever`` accepts for it (``NAME`` or ``NAME:ARG``)."""
        return (f"{cls.name}:{cls.arg}" if cls.arg else cls.name,)

    @classmethod
    def accepts(cls, arg: str) -> bool:
        """Whether ``arg`` (after ``NAME:``; '' for ``NAME`` alone) is an argument it takes."""
        return bool(arg) == bool(cls.arg)

    @classmethod
    def external(cls, arg: str) -> str:
        """What ``arg`` points to outside the project (a server, a file), '' when nothing."""
        return arg


def register(stage: type[FirstStage]) -> type[FirstStage]:
    """Class decorator: ``--retriever`` may name ``stage`` from now on (a second one of the same name replaces it)."""
    _STAGES[stage.name] = stage
    return stage


def stages() -> dict[str, type[FirstStage]]:
    """Every registered first stage by name. Each module of this package is imported first (those imported already
    cost nothing), so a file that registers one needs no import anywhere else."""
    for module in pkgutil.iter_modules(sys.modules[__package__].__path__):
        importlib.import_module(f"{__package__}.{module.name}")
    return _STAGES


def spellings() -> tuple[str, ...]:
    """What ``--retriever`` accepts: the spellings of every first stage, fewest arguments first, then by name."""
    every = (s for stage in stages().values() for s in stage.spellings())
    return tuple(sorted(every, key=lambda s: (s.count(":"), s)))


def find(spelling: str) -> tuple[type[FirstStage], str] | None:
    """The first stage ``spelling`` names and its argument, None when it names none."""
    name, _, arg = spelling.partition(":")
    stage = stages().get(name)
    return (stage, arg) if stage is not None and stage.accepts(arg) else None


def parse(spelling: str) -> tuple[type[FirstStage], str]:
    """:func:`find`, or ValueError (one line naming the choices) when ``spelling`` names no first stage."""
    found = find(spelling)
    if found is None:
        raise ValueError(f"unknown retriever '{spelling}'; choose one of: {', '.join(spellings())}")
    return found


def build(spelling: str, corpora: list[Corpus], setup: Setup) -> FirstStage:
    """The first stage ``spelling`` names, built over ``corpora``."""
    stage, arg = parse(spelling)
    return stage(corpora, setup, arg)
