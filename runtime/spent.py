"""Where this process's time went, for a run's closing line: the LM's prompt and decode seconds as its server reports
them with each reply (``usage.timings``: the embedded server, llama.cpp's own), retrieval seconds, and the rest
(imports, model and index loading, embedding, the programs' Python). Sums over calls: with ``--threads N`` calls
overlap, so the parts may add up to more than the wall time."""
from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from runtime.server_host import start_time

_LOCK = threading.Lock()
_LOADED = time.monotonic()


@dataclass
class Spent:
    prompt: float = 0.0
    decode: float = 0.0
    retrieval: float = 0.0
    lm_calls_timed: int = 0  # replies that reported their timings (a DSPy cache hit reports none: it cost nothing)


SPENT = Spent()


def add_lm(usage: dict | None) -> None:
    """Add one LM reply's reported timings (milliseconds) to :data:`SPENT`; a reply without them adds nothing."""
    timings = (usage or {}).get("timings") or {}
    if not isinstance(timings, dict) or "prompt_ms" not in timings:
        return
    with _LOCK:
        SPENT.prompt += float(timings["prompt_ms"]) / 1000
        SPENT.decode += float(timings.get("predicted_ms") or 0) / 1000
        SPENT.lm_calls_timed += 1


@contextmanager
def retrieving():
    """Count the block's wall time as retrieval."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        with _LOCK:
            SPENT.retrieval += time.perf_counter() - t0


def elapsed() -> float:
    """Wall seconds since this process started (where /proc tells: Linux), else since this module was loaded."""
    try:
        started = int(start_time(os.getpid())) / os.sysconf("SC_CLK_TCK")
        return float(Path("/proc/uptime").read_text().split()[0]) - started
    except (TypeError, ValueError, OSError):
        return time.monotonic() - _LOADED


def line() -> str:
    """``time: T s = LM prompt P s + LM decode D s + retrieval R s + other O s (...)`` for this process so far."""
    total, s = elapsed(), SPENT
    if not s.lm_calls_timed:
        lm = "LM (its server reports no timings)"
        return (f"time: {total:.0f} s, retrieval {s.retrieval:.0f} s; {lm} and everything else "
                f"{total - s.retrieval:.0f} s")
    other = total - s.prompt - s.decode - s.retrieval
    return (f"time: {total:.0f} s = LM prompt {s.prompt:.0f} s + LM decode {s.decode:.0f} s + retrieval "
            f"{s.retrieval:.0f} s + other {other:.0f} s (imports, loading the model and indexes, embedding, Python)")
