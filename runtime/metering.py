"""Cost accounting for LM work: calls and LM latency (a DSPy callback), tokens (DSPy usage tracking), wall seconds.

Each ``metered()`` block owns one :class:`Cost`, carried in DSPy's per-context settings, so blocks running at the
same time in different threads (``evaluate(..., threads=N)``) each count only their own calls."""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass

import dspy
from dspy.utils.callback import BaseCallback

_KEY = "cost_meters"  # DSPy settings key: the Costs of the enclosing metered() blocks, outermost first
_LOCK = threading.Lock()  # a program's own threads (dspy.Parallel) share their caller's Costs


@dataclass
class Cost:
    lm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    lm_seconds: float = 0.0  # sum of LM call latencies (cache hits included); seconds - lm_seconds = orchestration

    def as_dict(self) -> dict:
        return asdict(self)


class CallMeter(BaseCallback):
    """Adds every LM call made through DSPy (cache hits included), and its latency, to the enclosing Costs."""

    def __init__(self):
        self._started: dict[str, tuple[float, tuple[Cost, ...]]] = {}

    def on_lm_start(self, call_id, instance, inputs):
        meters = dspy.settings.get(_KEY) or ()
        with _LOCK:
            for cost in meters:
                cost.lm_calls += 1
            self._started[call_id] = (time.perf_counter(), meters)

    def on_lm_end(self, call_id, outputs, exception=None):
        with _LOCK:
            t0, meters = self._started.pop(call_id, (None, ()))
            if t0 is not None:
                for cost in meters:
                    cost.lm_seconds += time.perf_counter() - t0


COUNTER = CallMeter()


@contextmanager
def metered():
    """Measure the LM work of this thread (and threads it starts through DSPy) inside the block; tokens count
    fresh (non-cached) calls only, as DSPy reports them."""
    cost, t0 = Cost(), time.perf_counter()
    with dspy.track_usage() as tracker, dspy.context(**{_KEY: (*(dspy.settings.get(_KEY) or ()), cost)}):
        try:
            yield cost
        finally:
            cost.seconds = time.perf_counter() - t0
            for usage in tracker.get_total_tokens().values():
                cost.prompt_tokens += int(usage.get("prompt_tokens") or 0)
                cost.completion_tokens += int(usage.get("completion_tokens") or 0)
