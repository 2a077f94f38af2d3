"""Reading UTF-8 JSON and JSONL files, with a one-line error naming the file and line for bad bytes or bad JSON;
writing a file whole or not at all."""
from __future__ import annotations

import json
from collections.abc import Iterator
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


def utf8_text(path: Path) -> str:
    """The text of a UTF-8 file; other bytes are a one-line ``ValueError`` naming the file and line."""
    raw = Path(path).read_bytes()
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


def write_whole(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` (UTF-8, parent folders made) through a temporary file renamed over it, so an
    interrupted write leaves the old file or none, never half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
