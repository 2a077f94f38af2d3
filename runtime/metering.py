"""Cost accounting for LM work: calls (also by the predictor that made them: ``runtime.lm.CALLER``) and LM latency (a
DSPy callback), prompt tokens sent and computed, completion tokens (DSPy usage tracking), wall seconds, retriever
queries and the oracle role calls that stood in for LM calls, the machine's load beside them; and LM budgets
(:func:`limited`), enforced by the same callback.

Each ``metered()`` block owns one :class:`Cost`, carried in DSPy's per-context settings, so blocks running at the
same time in different threads (``evaluate(..., threads=N)``) each count only their own calls."""
from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

import dspy
from dspy.utils.callback import BaseCallback

from runtime.lm import CALLER

_KEY = "cost_meters"  # DSPy settings key: the Costs of the enclosing metered() blocks, outermost first
_LIMITS = "lm_limits"  # DSPy settings key: the Limits of the enclosing limited() blocks
_LOCK = threading.Lock()  # a program's own threads (dspy.Parallel) share their caller's Costs
#: Where :attr:`Cost.lm_calls_by` counts an LM call made while no predictor named its caller (``runtime.lm.CALLER``
#: unset: a call outside an evaluated question's predictors, or outside any evaluated question).
NO_PREDICTOR = "(no predictor)"
#: Above this 1-minute load average per core (:func:`machine_load`) a block's seconds were taken beside other work:
#: one LM job on its own keeps it near 1 (the server's threads on every core).
IDLE_LOAD = 1.5


def machine_load() -> float:
    """The machine's 1-minute load average per core."""
    return os.getloadavg()[0] / (os.cpu_count() or 1)


@dataclass
class Cost:
    lm_calls: int = 0
    prompt_tokens: int = 0
    prompt_tokens_computed: int = 0  # prompt_tokens less those the endpoint reports cached (its prefix reuse)
    completion_tokens: int = 0
    seconds: float = 0.0
    lm_seconds: float = 0.0  # sum of LM call latencies (cache hits included); seconds - lm_seconds = orchestration
    oracle_calls: int = 0  # oracle role labels read in place of an LM call (:func:`count`)
    searches: int = 0  # retriever queries (:func:`count`)
    #: LM calls by the predictor that made them, as ``runtime.lm.CALLER`` names it (its name in the program; one
    #: the program does not name, by its signature), else under :data:`NO_PREDICTOR`
    lm_calls_by: dict[str, int] = field(default_factory=dict)
    #: the machine's load per core (:func:`machine_load`), the higher of the block's start and end: above
    #: :data:`IDLE_LOAD` its seconds are not this work's alone
    load: float | None = None

    def as_dict(self) -> dict:
        return asdict(self)


class BudgetSpent(BaseException):
    """Raised in place of an LM call past a :class:`Limit`. A BaseException, so neither DSPy's guard around callbacks
    nor code that catches ``Exception`` around one example (the optimizers' scoring) swallows it."""


@dataclass
class Limit:
    """At most ``calls`` LM calls (counted as :class:`CallMeter` counts them, cache hits included, so a re-run with
    the same limit stops at the same call) and ``minutes`` of wall time, checked when an LM call starts."""
    calls: int | None = None
    minutes: float | None = None
    used: int = 0
    deadline: float | None = None
    reached: str = ""  # what stopped the block ("12 LM calls", "5 minutes"); empty while within the limit

    def take(self) -> None:
        """Count one LM call, or raise :class:`BudgetSpent` (again at every later call) once the limit is reached."""
        if self.calls is not None and self.used >= self.calls:
            self.reached = f"{self.calls} LM calls"
        elif self.deadline is not None and time.perf_counter() >= self.deadline:
            self.reached = f"{self.minutes:g} minutes"
        if self.reached:
            raise BudgetSpent(self.reached)
        self.used += 1


class CallMeter(BaseCallback):
    """Adds every LM call made through DSPy (cache hits included), by its predictor, and its latency, to the
    enclosing Costs; refuses a call past an enclosing :class:`Limit`."""

    def __init__(self):
        self._started: dict[str, tuple[float, tuple[Cost, ...]]] = {}

    def on_lm_start(self, call_id, instance, inputs):
        meters = dspy.settings.get(_KEY) or ()
        caller = CALLER.get()
        by = NO_PREDICTOR if caller is None else caller["predictor"]
        with _LOCK:
            for limit in dspy.settings.get(_LIMITS) or ():
                limit.take()
            for cost in meters:
                cost.lm_calls += 1
                cost.lm_calls_by[by] = cost.lm_calls_by.get(by, 0) + 1
            self._started[call_id] = (time.perf_counter(), meters)

    def on_lm_end(self, call_id, outputs, exception=None):
        with _LOCK:
            t0, meters = self._started.pop(call_id, (None, ()))
            if t0 is not None:
                for cost in meters:
                    cost.lm_seconds += time.perf_counter() - t0


COUNTER = CallMeter()


def count(field: str, n: int = 1) -> None:
    """Add ``n`` to ``field`` of the enclosing Costs: ``searches`` (retriever queries) or ``oracle_calls`` (gold
    labels read where the program would call its LM)."""
    with _LOCK:
        for cost in dspy.settings.get(_KEY) or ():
            setattr(cost, field, getattr(cost, field) + n)


@contextmanager
def metered():
    """Measure the LM work of this thread (and threads it starts through DSPy) inside the block; tokens count
    fresh (non-cached) calls only, as DSPy reports them."""
    cost, t0, load = Cost(), time.perf_counter(), machine_load()
    with dspy.track_usage() as tracker, dspy.context(**{_KEY: (*(dspy.settings.get(_KEY) or ()), cost)}):
        try:
            yield cost
        finally:
            cost.seconds = time.perf_counter() - t0
            cost.load = round(max(load, machine_load()), 2)
            for usage in tracker.get_total_tokens().values():
                cost.prompt_tokens += int(usage.get("prompt_tokens") or 0)
                cost.prompt_tokens_computed += computed_prompt_tokens(usage)
                cost.completion_tokens += int(usage.get("completion_tokens") or 0)


def computed_prompt_tokens(usage: dict) -> int:
    """The prompt tokens of ``usage`` the endpoint computed: those sent less OpenAI's
    ``prompt_tokens_details.cached_tokens`` (the embedded server reports its prefix reuse there; an endpoint that
    reports none is counted as computing every token sent)."""
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    return int(usage.get("prompt_tokens") or 0) - int(cached)


@contextmanager
def limited(limit: Limit):
    """Enforce ``limit`` on the LM calls of this thread (and threads it starts through DSPy) inside the block: the
    call past it raises :class:`BudgetSpent`, and so does every later one."""
    if limit.minutes is not None:
        limit.deadline = time.perf_counter() + 60 * limit.minutes
    with dspy.context(**{_LIMITS: (*(dspy.settings.get(_LIMITS) or ()), limit)}):
        yield limit
