"""The compile settings, declared once (``runtime.settings.Setting``): the optimizer, its metric and budgets, the
teacher and where the compiled program goes. The command line's flags, a compile's MLflow params and the key of its
cost ledger are read from here, and a compile takes them as :class:`CompileOptions`."""
from __future__ import annotations

from dataclasses import dataclass

from evaluation.metrics import METRIC_NAMES
from optimizers.compile import OPTIMIZERS
from runtime.settings import Setting, Settings


def positive(value: float) -> bool:
    """Whether a limit is positive, else ValueError (no limit is the flag left out)."""
    if value <= 0:
        raise ValueError("must be positive (leave it out for no limit)")
    return True


OPTIMIZER = Setting("optimizer", str, "bootstrap", "the teleprompter that compiles the program", choices=OPTIMIZERS)
DEMOS = Setting("demos", int, 2, "max bootstrapped and labeled demos per predictor", 0)
#: The settings of a compile with any optimizer, each logged (:func:`params`) as it was given.
SETTINGS = (
    Setting("metric", str, None, "compile metric (default: f1, or accuracy for MCQ; judge needs --judge)",
            choices=METRIC_NAMES),
    DEMOS,
    Setting("candidates", int, 4, "candidate programs (random_search, mipro)", 1),
    Setting("budget", int, None, "mipro trials / gepa metric calls", 1),
    Setting("compile_budget", int, None, "stop the compile at this many LM calls (cache hits included) and keep the "
            "best program so far", check=positive),
    Setting("compile_minutes", float, None, "stop the compile after this many minutes and keep the best program so far",
            check=positive),
    Setting("demo_tokens", int, None, "drop each predictor's longest demos until its demos fit this many estimated "
            "tokens (chars/4)", check=positive),
)
#: Logged under these names (a compile's first params, which its cost ledgers are keyed by).
PARAMS = {"metric": "compile_metric", "demos": "max_demos"}
TEACHERS = ("self", "oracle")
TEACHER = Setting("teacher", str, "self", "bootstrap: make the demos from the program's own runs on train (self), or "
                  "from the same program built with every oracle role (oracle: --oracle all, no LM call), whose gold "
                  "sub-queries, plans and answers become the demos; the compiled program makes LM calls",
                  choices=TEACHERS)
OUT = Setting("out", str, None, "where to write the compiled program JSON (also logged to MLflow)")


def params(args: Settings, optimizer: str, metric: str) -> dict:
    """The compile's :data:`SETTINGS` as logged and keyed: under :data:`PARAMS`' names, with its ``optimizer`` and
    ``metric`` (``--metric`` or the task's), an unset one as ""."""
    values = {"optimizer": optimizer} | args.of(SETTINGS) | {"metric": metric}
    return {PARAMS.get(k, k): "" if v is None else v for k, v in values.items()}


@dataclass(frozen=True)
class CompileOptions:
    """What a compile reads of a run's settings (:data:`SETTINGS` and the few others it needs): its budgets, the
    split seed it compiles with, the gates it fits, and how it asks."""
    program: str
    demos: int
    candidates: int
    budget: int | None
    compile_budget: int | None
    compile_minutes: float | None
    demo_tokens: int | None
    metric: str | None
    seed: int
    decisions: str
    retries: int
    no_cache: bool

    @classmethod
    def of(cls, args: Settings) -> CompileOptions:
        return cls(**{name: getattr(args, name) for name in cls.__dataclass_fields__})
