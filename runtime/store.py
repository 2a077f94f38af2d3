"""The project's MLflow store: where it is (:func:`mlruns`, :func:`tracking_uri`) and reading a run's artifact
(:func:`download`). Logging runs is :mod:`evaluation.tracking`'s."""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

from runtime.paths import PROJECT_ROOT


def mlruns() -> Path:
    """The store folder (``RAG_MLRUNS``, default ``./mlruns``): sqlite db + ``artifacts/``."""
    path = Path(os.environ.get("RAG_MLRUNS", PROJECT_ROOT / "mlruns"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{mlruns() / 'mlflow.db'}"


def download(run_id: str, artifact: str) -> Path:
    """Fetch one artifact of ``run_id`` from the project store into a temp dir, removed when the process exits."""
    import mlflow  # slow to import: only when a run is read

    mlflow.set_tracking_uri(tracking_uri())
    folder = tempfile.mkdtemp(prefix="rag-artifact-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return Path(mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=artifact, dst_path=folder))
