"""Cost accounting for LM work: calls (a DSPy callback), tokens (DSPy usage tracking) and wall seconds."""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass

import dspy
from dspy.utils.callback import BaseCallback


class CallCounter(BaseCallback):
    """Counts every LM call made through DSPy (cache hits included)."""

    def __init__(self):
        self._lock = threading.Lock()
        self.calls = 0

    def on_lm_start(self, call_id, instance, inputs):
        with self._lock:
            self.calls += 1


COUNTER = CallCounter()


@dataclass
class Cost:
    lm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)


@contextmanager
def metered():
    """Measure the LM work inside the block; tokens count fresh (non-cached) calls only, as DSPy reports them."""
    cost, calls0, t0 = Cost(), COUNTER.calls, time.perf_counter()
    try:
        with dspy.track_usage() as tracker:
            yield cost
    finally:
        cost.lm_calls = COUNTER.calls - calls0
        cost.seconds = time.perf_counter() - t0
        for usage in tracker.get_total_tokens().values():
            cost.prompt_tokens += int(usage.get("prompt_tokens") or 0)
            cost.completion_tokens += int(usage.get("completion_tokens") or 0)
