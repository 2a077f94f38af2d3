"""Where the project keeps things that must stay out of git."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def cache_dir() -> Path:
    """Model/wheel/index cache shared across checkouts (``RAG_CACHE_DIR``, default ``~/.cache/agentic-rag``)."""
    path = Path(os.environ.get("RAG_CACHE_DIR", Path.home() / ".cache" / "agentic-rag")).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return path


def project_cache() -> Path:
    """Per-checkout, git-ignored cache (DSPy disk cache, faiss indexes, eval checkpoints)."""
    path = Path(os.environ.get("RAG_PROJECT_CACHE", PROJECT_ROOT / ".cache"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def index_dir() -> Path:
    """faiss index cache (``RAG_INDEX_DIR``, default ``$RAG_CACHE_DIR/indexes``): content-addressed, so checkouts share it."""
    path = Path(os.environ.get("RAG_INDEX_DIR", cache_dir() / "indexes")).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return path


def server_dir() -> Path:
    """Where processes meet to share one embedded LM server per model (``RAG_SERVER_DIR``, default
    ``$RAG_CACHE_DIR/servers``): a lock, the running server's port file, lease files, the server log."""
    path = Path(os.environ.get("RAG_SERVER_DIR", cache_dir() / "servers")).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return path


def prune_versions(root: Path, pattern: str, keep: int) -> None:
    """Delete all but the ``keep`` most recently used cache folders under ``root`` matching ``pattern``."""
    versions = sorted(root.glob(pattern), key=lambda p: p.stat().st_mtime, reverse=True)
    for stale in versions[keep:]:
        shutil.rmtree(stale, ignore_errors=True)
