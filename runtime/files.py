"""Reading UTF-8 JSON and JSONL files, with a one-line error naming the file and line for bad bytes or bad JSON;
writing a file whole or not at all; one writer per file (:func:`locked`)."""
from __future__ import annotations

import fcntl
import json
import os
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

JSON_TYPES = {list: "array", str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}


def read_jsonl(path: Path, required: tuple[str, ...] = ()) -> Iterator[dict]:
    """The JSON objects of a JSONL file, one per non-blank line, read lazily. A line that is not UTF-8, not JSON,
    not an object or lacks a ``required`` key stops the read with a one-line ``ValueError`` naming file and line."""
    with open(path, "rb") as fh:
        for n, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            try:
                row = json.loads(raw.decode("utf-8-sig"))
            except UnicodeDecodeError as err:
                raise ValueError(f"{path} line {n}: not UTF-8 text (byte {raw[err.start]:#04x} at column "
                                 f"{err.start + 1}); re-save the file as UTF-8") from None
            except json.JSONDecodeError as err:
                raise ValueError(f"{path} line {n}: not valid JSON ({err.msg} at column {err.colno}); fix or delete "
                                 "that line") from None
            if not isinstance(row, dict):
                raise ValueError(f"{path} line {n}: a JSON {JSON_TYPES.get(type(row), type(row).__name__)} where an "
                                 "object {...} was expected; each line must be one object")
            missing = [key for key in required if key not in row]
            if missing:
                raise ValueError(f"{path} line {n}: lacks {', '.join(missing)}; each line needs "
                                 f"{', '.join(required)}")
            yield row


def utf8_text(path: Path, raw: bytes | None = None) -> str:
    """The text of a UTF-8 file (``raw``: its bytes, when already read); other bytes are a one-line ``ValueError``
    naming the file and line."""
    raw = Path(path).read_bytes() if raw is None else raw
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = raw[:err.start].count(b"\n") + 1
        raise ValueError(f"{path} line {line}: not UTF-8 text (byte {raw[err.start]:#04x}); re-save the file as "
                         "UTF-8") from None


def read_json(path: Path):
    """A whole JSON file; not UTF-8 or not JSON is a one-line ``ValueError`` naming the file and line."""
    text = utf8_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} line {err.lineno}: not valid JSON ({err.msg} at column {err.colno}); the file is "
                         "damaged: fix it or fetch it again") from None


def write_whole(path: Path, text: str | bytes) -> None:
    """Write ``text`` to ``path`` (UTF-8, or bytes as they are; parent folders made) through a temporary file of its
    own in the same folder, synced to disk and renamed over it (the folder synced too), so an interrupted write or a
    crash leaves the old file or the new one, never half a file, and concurrent writers never share a temporary
    file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")  # created new ("x"), with the usual permissions
    try:
        with open(tmp, "xb") if isinstance(text, bytes) else open(tmp, "x", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    sync_folder(path.parent)


def sync_folder(folder: Path) -> None:
    """Make the names in ``folder`` (a file created or renamed there) survive a crash."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Busy(RuntimeError):
    """Another process holds the file :func:`locked` was asked for."""


@contextmanager
def locked(path: Path, wait: bool = False, hint: str = "") -> Iterator[None]:
    """Hold an exclusive lock on ``path`` for the block: ``flock`` on ``<path>.lock``, which holds the holder's pid.
    The OS releases it when its holder exits however it dies (SIGKILL included), so no stale lock outlives a crash;
    the lock file itself stays (removing it would let two processes lock two different files). Held by another
    process: :class:`Busy`, one line naming the file, the holder's pid and ``hint``; with ``wait`` a line on stderr
    and a wait for it instead."""
    lock = path.with_name(path.name + ".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = f"pid {os.pread(fd, 20, 0).decode(errors='replace').strip() or 'unknown'}"
            if not wait:
                raise Busy(f"{path} is in use by another run ({holder}); {hint or 'let it finish first'}") from None
            print(f"waiting for another run ({holder}) to finish with {path}", file=sys.stderr)
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock
