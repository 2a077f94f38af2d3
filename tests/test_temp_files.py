"""Temporary files are removed (issue 59, item 8): the tracking server's log and downloaded artifacts."""
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from evaluation import tracking

ROOT = Path(__file__).resolve().parents[1]


def test_the_tracking_servers_log_is_removed_when_it_stops(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(RuntimeError, match="mlflow server did not start"):
        with tracking.server("bogus://nowhere", timeout=120):
            pass
    assert not list(tmp_path.iterdir())


DOWNLOAD = """
import mlflow.artifacts, sys
from pathlib import Path
from runtime import store

def fetched(run_id, artifact_path, dst_path):
    (Path(dst_path) / artifact_path).write_text("{}")
    return str(Path(dst_path) / artifact_path)

mlflow.artifacts.download_artifacts = fetched
print(store.download("run", "program.json"))
"""


def test_a_downloaded_artifact_is_removed_when_the_process_exits(tmp_path):
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(temp)}
    out = subprocess.run([sys.executable, "-c", DOWNLOAD], capture_output=True, text=True, cwd=ROOT, env=env)
    assert out.returncode == 0, out.stderr
    assert Path(out.stdout.strip()).parent.parent == temp and not list(temp.iterdir())
