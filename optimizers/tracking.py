"""MLflow tracking in the project's sqlite store: ``mlflow ui --backend-store-uri sqlite:///mlruns/mlflow.db``."""
from __future__ import annotations

import fcntl
import json
import os
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlencode, urlparse, urlsplit, urlunsplit

import mlflow

from runtime.paths import PROJECT_ROOT

MAX_PARAM = 6000


def mlruns() -> Path:
    """The store folder (``RAG_MLRUNS``, default ``./mlruns``): sqlite db + ``artifacts/``."""
    path = Path(os.environ.get("RAG_MLRUNS", PROJECT_ROOT / "mlruns"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{mlruns() / 'mlflow.db'}"


def git_commit() -> str:
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=PROJECT_ROOT, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=PROJECT_ROOT,
                               capture_output=True, text=True).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def setup(experiment: str) -> None:
    """Point MLflow at the store and select ``experiment``, under a file lock: two runs starting together would
    otherwise both create the sqlite tables (one fails) or the experiment. A tracking server keeps its own
    artifacts."""
    with open(mlruns() / ".setup.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        mlflow.set_tracking_uri(tracking_uri())
        if mlflow.get_experiment_by_name(experiment) is None:
            served = tracking_uri().startswith(("http://", "https://"))
            mlflow.create_experiment(experiment, artifact_location=None if served else
                                     (mlruns() / "artifacts" / experiment).as_uri())
        mlflow.set_experiment(experiment)


@contextmanager
def run(experiment: str, run_name: str, tags: dict | None = None):
    """An MLflow run, ended FINISHED, FAILED on an error, or KILLED on Ctrl-C / SIGTERM (see ``cli.session``)."""
    setup(experiment)
    with mlflow.start_run(run_name=run_name, tags={"git_commit": git_commit(), **(tags or {})}) as active:
        try:
            yield active
        except KeyboardInterrupt:
            mlflow.end_run("KILLED")
            raise


def redact(text: str) -> str:
    """``text`` without credentials if it is a URL: ``user:password@`` and every query value become ``***``."""
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not ("@" in parts.netloc or parts.query):
        return text
    netloc = "***@" + parts.netloc.rsplit("@", 1)[1] if "@" in parts.netloc else parts.netloc
    query = urlencode([(k, "***") for k, _ in parse_qsl(parts.query, keep_blank_values=True)], safe="*")
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def log_params(params: dict) -> None:
    """Log flat params, URLs without their credentials (:func:`redact`, e.g. an ``--api-base`` with a key); values
    too long for an MLflow param are logged as JSON artifacts instead."""
    flat = {}
    for key, value in params.items():
        text = redact(value) if isinstance(value, str) else json.dumps(value, default=str)
        if len(text) > MAX_PARAM:
            log_json(f"params/{key}.json", value)
            text = f"see artifact params/{key}.json"
        flat[key] = text
    mlflow.log_params(flat)


def log_metrics(summary: dict, prefix: str) -> None:
    mlflow.log_metrics({f"{prefix}_{k}": float(v) for k, v in summary.items() if isinstance(v, (int, float))})


def log_json(name: str, obj) -> None:
    mlflow.log_text(json.dumps(obj, ensure_ascii=False, indent=1, default=str), name)


def log_jsonl(name: str, records: list[dict]) -> None:
    mlflow.log_text("\n".join(json.dumps(r, ensure_ascii=False, default=str) for r in records) + "\n", name)


def artifact_path(name: str) -> str:
    """Where artifact ``name`` of the active run is stored: a local path for this project's file store."""
    uri = mlflow.get_artifact_uri(name)
    parsed = urlparse(uri)
    return unquote(parsed.path) if parsed.scheme == "file" else uri


def download(run_id: str, artifact: str) -> Path:
    """Fetch one artifact of ``run_id`` from the project store into a temp dir."""
    mlflow.set_tracking_uri(tracking_uri())
    return Path(mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=artifact,
                                                    dst_path=tempfile.mkdtemp(prefix="rag-artifact-")))


@contextmanager
def server(backend_uri: str | None = None, artifacts: Path | None = None, timeout: float = 600):
    """A local ``mlflow server`` on 127.0.0.1 (free port) over ``backend_uri`` (default: the project's sqlite
    store); yields its URL and stops it on exit. Concurrent writers (Ray cells) log through one such server."""
    import socket
    import sys
    import time
    import urllib.request

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    backend_uri = backend_uri or f"sqlite:///{mlruns() / 'mlflow.db'}"
    cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", backend_uri, "--host", "127.0.0.1",
           "--port", str(port), "--workers", "1"]
    cmd += ["--artifacts-destination", str(artifacts)] if artifacts else []
    log = tempfile.NamedTemporaryFile("w+", prefix="mlflow-server-", suffix=".log", delete=False)
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"mlflow server did not start; log {log.name}:\n"
                                       + Path(log.name).read_text()[-2000:])
                time.sleep(0.5)
        server.log = log.name
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
