"""A setting declared once: its name, type, default, range or choices and help. The command line's flags, their
validation, the checkpoint key, the MLflow params and a compiled artifact's config and data are all read from
declarations (``programs.registry``: the methods'; ``retrieval.settings``, ``data.settings``: the rest)."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import Any, Callable, Iterable


@dataclass(frozen=True)
class Setting:
    """One setting. ``kind``: int, float, str or bool; a number is finite. ``low``/``high``: an inclusive range for a
    number (None: open). ``choices``: the values a string takes, as spelled (a tuple); they are the closed list it may
    take, unless ``check`` is given, a function that returns False or raises ValueError (its message is the problem)
    on a value it does not accept (then ``choices`` only names them: ``cross:<model>``). ``none_ok``: None is a value
    (e.g. whole passages), not a flag left out. ``external``: whether a value points outside the project (a path, a
    server, a model to download). ``omit_default``: left out of a run's settings (and checkpoint key) at its default
    (a setting added after checkpoints were keyed without it, so those keys still hold). The shape of its flag:
    ``switch``, a bool set by the bare flag (no ``--no-`` form); ``many``, one or more values; ``const``, the value of
    the flag given without one."""
    name: str
    kind: type
    default: Any = None
    help: str = ""
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()
    check: Callable[[Any], Any] | None = None
    none_ok: bool = False
    external: Callable[[Any], bool] | None = None
    omit_default: bool = False
    switch: bool = False
    many: bool = False
    const: Any = None

    def __post_init__(self):
        if isinstance(self.choices, str):
            raise TypeError(f"Setting {self.name!r}: choices is a tuple of values, not {self.choices!r}")

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def at(self, default=None, low: float | None = None) -> Setting:
        """This setting as one method takes it: its own default (its paper's) and, where it needs more, a higher
        lowest value."""
        return replace(self, default=default, low=self.low if low is None else low)

    def points_outside(self, value) -> bool:
        return self.external is not None and isinstance(value, str) and self.external(value)

    def problem(self, value, scope: str = "") -> str:
        """Why ``value`` is not a valid value of this setting ('' when it is), said ``scope`` (e.g. " for coral")."""
        if value is None:
            return ""
        if self.kind in (int, float):
            if isinstance(value, bool) or not isinstance(value, (int, float) if self.kind is float else int):
                return f"must be {'a number' if self.kind is float else 'an integer'}{scope} (got {value!r})"
            if isinstance(value, float) and not math.isfinite(value):  # NaN passes any range: it compares false
                return f"must be a finite number{scope} (got {value})"
            low, high = self.low, self.high
            if low is not None and value < low or high is not None and value > high:
                span = f"from {low} to {high}" if high is not None and low is not None else \
                    f">= {low}" if low is not None else f"<= {high}"
                return f"must be {span}{scope} (got {value})"
        elif not isinstance(value, self.kind):
            return f"must be a {self.kind.__name__} (got {value!r})"
        if self.check is None and self.choices and value not in self.choices:
            return f"must be one of {', '.join(self.choices)} (got {value!r})"
        if self.check is not None:
            try:
                if self.check(value) is False:
                    return f"must be one of {', '.join(self.choices)} (got {value!r})"
            except ValueError as err:
                return str(err)
        return ""


class Settings(SimpleNamespace):
    """A run's settings by name, as its entry point parsed them (``experiments.cli.parser`` fills one): plain values
    that library code reads, with no parser behind them. Frozen: a resolved or changed value is a new one
    (:meth:`replace`), so what one layer resolved is never changed under another."""

    def __setattr__(self, name, value):
        raise AttributeError(f"settings are frozen: {name} is set with .replace({name}=...), a new Settings")

    __delattr__ = __setattr__

    def replace(self, **changes) -> Settings:
        """These settings with ``changes``."""
        return type(self)(**{**vars(self), **changes})

    def of(self, declared: Iterable[Setting]) -> dict:
        """The values of the ``declared`` settings, by name."""
        return {s.name: getattr(self, s.name) for s in declared}
