"""Shared text helpers for query and evidence bookkeeping: normalisation, content words, phrase mentions, Jaccard."""
from __future__ import annotations

import re

STOPWORDS = frozenset("""
a an the and or but nor of in on at to for from by with about as into onto over under than then that this these those
is are was were be been being am do does did has have had having it its he him his she her hers they them their
theirs we us our you your i me my who whom whose what which when where why how whether there here not no yes
also both either neither more most same other such s
""".split())


REFUSALS = ("i don't know", "i do not know", "unknown", "")


def abstained(answer: str | None) -> bool:
    """Whether ``answer`` is a refusal such as "I don't know" (judged wrong by the metrics)."""
    return (answer or "").strip().lower().rstrip(".") in REFUSALS


def words(text: str) -> list[str]:
    """Lower-cased word tokens (letters/digits), punctuation dropped."""
    return re.findall(r"\w+", (text or "").lower())


def normalize(text: str) -> str:
    return " ".join(words(text))


def content_words(text: str) -> set[str]:
    """The words of ``text`` that carry meaning (stopwords removed)."""
    return set(words(text)) - STOPWORDS


def jaccard(a: str, b: str) -> float:
    """Jaccard similarity of the content-word sets of two texts (0.0 when either has none)."""
    x, y = content_words(a), content_words(b)
    return len(x & y) / len(x | y) if x and y else 0.0


def mentions(text: str, phrase: str) -> bool:
    """Whether ``phrase`` occurs in ``text`` as whole words, ignoring case and punctuation."""
    needle = normalize(phrase)
    return bool(needle) and f" {needle} " in f" {normalize(text)} "
