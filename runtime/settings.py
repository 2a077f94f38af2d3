"""A setting declared once: its name, type, default, range or choices and help. The command line's flags, their
validation, the checkpoint key, the MLflow params and a compiled artifact's config are all read from declarations."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Setting:
    """One setting. ``kind``: int, float, str or bool. ``low``/``high``: an inclusive range for a number (None: open).
    ``check``: for a string, a function that returns False or raises ValueError (its message is the problem) on a value
    it does not accept, and ``choices`` names what it accepts. ``none_ok``: None is a value (e.g. whole passages),
    not a flag left out. ``external``: a value pointing outside the project (a path, a server, a model to download)."""
    name: str
    kind: type
    default: Any = None
    help: str = ""
    low: float | None = None
    high: float | None = None
    check: Callable[[Any], Any] | None = None
    choices: str = ""
    none_ok: bool = False
    external: Callable[[Any], bool] | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def problem(self, value, low: float | None = None, scope: str = "") -> str:
        """Why ``value`` is not a valid value of this setting ('' when it is); ``low``: a stricter lower bound (a
        method's own), said ``scope`` (e.g. " for coral")."""
        if value is None:
            return ""
        if self.kind in (int, float):
            if isinstance(value, bool) or not isinstance(value, (int, float) if self.kind is float else int):
                return f"must be {'a number' if self.kind is float else 'an integer'}{scope} (got {value!r})"
            low = self.low if low is None else low
            if low is not None and value < low or self.high is not None and value > self.high:
                span = f"from {low} to {self.high}" if self.high is not None and low is not None else \
                    f">= {low}" if low is not None else f"<= {self.high}"
                return f"must be {span}{scope} (got {value})"
            return ""
        if not isinstance(value, self.kind):
            return f"must be a {self.kind.__name__} (got {value!r})"
        if self.check is not None:
            try:
                if self.check(value) is False:
                    return f"must be one of {self.choices} (got {value!r})"
            except ValueError as err:
                return str(err)
        return ""

    def parse(self, text: str):
        """The value of ``text`` given on the command line; ValueError (the problem) when it is not valid."""
        value = self.kind(text)
        if problem := self.problem(value):
            raise ValueError(problem)
        return value
