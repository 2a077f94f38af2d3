"""Oracle roles (``--oracle ROLE[,ROLE]``): a role's decisions replaced by the gold labels of the question being
answered -- the upper bound each role leaves on the table, and a check of each method's loop that no model weakness
can hide.

Roles (:data:`ROLES`): ``relevance`` (a passage is a gold passage), ``sufficiency`` (the passages held include
every gold passage), ``controller`` (STOP once every gold passage has been retrieved), ``verdict`` (the answer judged
is right by the task metric), ``planner`` (the corpus of the culture the question is about), ``gap`` (the titles of
the gold passages not held: what a gap specification should name). Gold passages are
paragraph ids where the data has them (MuSiQue's ``gold_ids``, XRAG's supporting article), else gold titles.

The labels never travel in a program's inputs: the evaluation sets them around each question's call
(:func:`gold_labels`), and a program built with oracle roles reads one role's labels with :func:`oracle`, only for
the roles it was built with. Only ``gap`` reaches a prompt, by design: its titles are the gap a micro-query is
written from, so it tests the repair that follows a perfect gap specification.

One label is read without a role: the culture's language (``Gold.own``), which *defines* the fixed own-corpus
scope C_own (:func:`own_language`) -- the CORAL paper's own-corpus rows, an oracle by its own account on BLEnD,
whose questions are English while their culture is not.
"""
from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from operator import attrgetter
from typing import Callable, Iterable

from retrieval.corpus import Passage

ROLES = ("relevance", "sufficiency", "controller", "verdict", "planner", "gap")


def parse_roles(text: str | Iterable[str] | None) -> tuple[str, ...]:
    """``"verdict,relevance"`` -> ``("relevance", "verdict")``; an unknown role is one error naming the choices."""
    names = [r.strip() for r in (text.split(",") if isinstance(text, str) else text or ()) if r.strip()]
    if unknown := [r for r in names if r not in ROLES]:
        raise ValueError(f"unknown --oracle role '{unknown[0]}'; choose from: {', '.join(ROLES)}")
    return tuple(r for r in ROLES if r in names)


def check_roles(text: str | Iterable[str] | None, allowed: Iterable[str], program: str) -> frozenset[str]:
    """The oracle roles a program is built with; a role it has no decision for is one error naming its roles."""
    roles, allowed = parse_roles(text), tuple(allowed)
    if stray := [r for r in roles if r not in allowed]:
        raise ValueError(f"--oracle {stray[0]}: {program} has no such decision; its oracle roles: "
                         f"{', '.join(allowed) or 'none'}")
    return frozenset(roles)


@dataclass(frozen=True)
class Gold:
    """One question's gold labels, one method per role. ``keys``: its gold passages under ``key`` (paragraph ids or
    titles); ``correct``: whether an answer is right by the task metric; ``culture``: the language of the corpus
    of the culture the question is about (XRAG: of its supporting article); ``titles``: the gold passages' titles;
    ``own``: the language of the culture the question is about where the data names one (BLEnD, CLIcK), which
    the fixed own-corpus scope searches."""

    keys: frozenset[str] = frozenset()
    key: Callable[[Passage], str] = attrgetter("title")
    correct: Callable[[str], bool] | None = None
    culture: str | None = None
    titles: frozenset[str] = frozenset()
    own: str | None = None

    def missing(self, role: str) -> bool:
        """Whether this question gives no label for ``role``."""
        return {"verdict": self.correct is None, "planner": self.culture is None,
                "gap": not self.titles}.get(role, not self.keys)

    def relevance(self, passage: Passage) -> bool:
        return self.key(passage) in self.keys

    def sufficiency(self, passages: Iterable[Passage]) -> bool:
        return self.keys <= {self.key(p) for p in passages}

    def controller(self, retrieved: Iterable[Passage]) -> bool:
        """STOP: every gold passage is among those retrieved so far."""
        return self.sufficiency(retrieved)

    def verdict(self, answer: str) -> bool:
        return self.correct(answer)

    def planner(self) -> str | None:
        return self.culture

    def gap(self, held: Iterable[Passage]) -> tuple[str, ...]:
        """The gold titles none of the ``held`` passages has."""
        return tuple(sorted(self.titles - {p.title for p in held}))


_GOLD: ContextVar[Gold | None] = ContextVar("gold_labels", default=None)


@contextmanager
def gold_labels(gold: Gold):
    """Within the block (one question's call), oracle roles read ``gold``."""
    token = _GOLD.set(gold)
    try:
        yield
    finally:
        _GOLD.reset(token)


def oracle(roles: frozenset[str], role: str) -> Callable | None:
    """The gold labelling of ``role`` for the question being answered when ``role`` is among the program's oracle
    ``roles``, else None (the program decides as usual). A question without that label is an error (the example
    fails): a gold label is never guessed."""
    if role not in roles:
        return None
    gold = _GOLD.get()
    if gold is None or gold.missing(role):
        raise ValueError(f"--oracle {role}: no gold label for this question (the evaluation sets them per question)")
    return getattr(gold, role)


def own_language(lang: str) -> str:
    """The language of the question's own corpus (the fixed scope C_own): its culture's (``Gold.own``) where the
    question being answered has one, else ``lang``, the language it is written in (also outside an evaluation: a
    direct call, DSPy's compile, which set no labels)."""
    gold = _GOLD.get()
    return (gold.own if gold else None) or lang
