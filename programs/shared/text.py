"""Shared text helpers for query and evidence bookkeeping: normalisation, content words, phrase mentions, Jaccard."""
from __future__ import annotations

import re

STOPWORDS = frozenset("""
a an the and or but nor of in on at to for from by with about as into onto over under than then that this these those
is are was were be been being am do does did has have had having it its he him his she her hers they them their
theirs we us our you your i me my who whom whose what which when where why how whether there here not no yes
also both either neither more most same other such s
""".split())


REFUSAL = re.compile(r"(?:i\s+(?:do\s*n[o']?t|do\s+not|cannot|can\s*not|am\s+not\s+sure)\s+"
                     r"(?:know|tell|say|determine|answer|be\s+sure)"
                     r"|not\s+(?:enough|sufficient)\s+(?:information|evidence|context)"
                     r"|insufficient\s+(?:information|evidence|context)|cannot\s+be\s+(?:determined|answered)"
                     r"|(?:the\s+)?(?:passages|facts|context)\s+do\s*(?:es)?\s*n[o']?t\s+"
                     r"(?:say|mention|state|give|contain))\b")
IDK = "I don't know"  # the abstention every abstaining writer gives
WHOLE_REFUSALS = frozenset({"unknown", "idk", "no answer", "none given", "n/a"})
APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'", "\u00b4": "'", "`": "'"})
#: Where a negation's scope ends: punctuation, or a conjunction that starts the next clause.
CLAUSE_END = re.compile(r"[.,;:!?()\[\]\n\u2013\u2014]|\s-+\s"
                        r"|\b(?:and|but|so|then|therefore|thus|hence|because|since)\b", re.I)
NEGATOR = re.compile(r"(?:not|never|cannot|unable|impossible|unnecessary|needless|pointless|refuse[sd]?"
                     r"|(?:do|does|did|ca|wo|should|would|could|need|must|is|are|was|were|has|have|had)n'?t)", re.I)
NO_NEED = frozenset({"need", "reason", "point", "longer"})  # "no" negates a verb in "no need to ..." and the like


def abstained(answer: str | None) -> bool:
    """Whether ``answer`` is a refusal: empty, "unknown" (the whole answer), or opening with "I don't know" (any
    apostrophe, any case, with or without a tail such as "the answer"), "not enough information" and the like."""
    text = " ".join((answer or "").translate(APOSTROPHES).casefold().split()).strip(" .!\"'*:-")
    return not text or text in WHOLE_REFUSALS or REFUSAL.match(text) is not None


def negated(before: str, scope: int = 4) -> bool:
    """Whether the text ``before`` a word negates it: an odd number of negators ("not", "never", "cannot", "don't"
    with or without its apostrophe, "unable", "impossible", "unnecessary", "no need", ...) among the last ``scope`` words of its clause. "It is not
    necessary to", "we cannot", "I dont think we should" negate; "not enough evidence, " (another clause), "no more
    search is needed" (a noun negated) and "no reason not to" (twice) do not."""
    ws = re.findall(r"[\w']+", CLAUSE_END.split(before.translate(APOSTROPHES))[-1])[-scope:]
    flips = [NEGATOR.fullmatch(w) is not None or (w.lower() == "no" and after.lower() in NO_NEED)
             for w, after in zip(ws, [*ws[1:], ""])]
    return sum(flips) % 2 == 1


def words(text: str) -> list[str]:
    """Lower-cased word tokens (letters/digits), punctuation dropped."""
    return re.findall(r"\w+", (text or "").lower())


def approx_tokens(text: str) -> int:
    """An estimate of the tokens ``text`` takes in a prompt: about four characters per token (English, BPE)."""
    return len(text or "") // 4 + 1


def normalize(text: str) -> str:
    return " ".join(words(text))


def content_words(text: str) -> set[str]:
    """The words of ``text`` that carry meaning (stopwords removed)."""
    return set(words(text)) - STOPWORDS


def jaccard(a: str, b: str) -> float:
    """Jaccard similarity of the content-word sets of two texts (0.0 when either has none)."""
    x, y = content_words(a), content_words(b)
    return len(x & y) / len(x | y) if x and y else 0.0


def repeats(query: str, earlier: list[str], threshold: float = 0.7) -> bool:
    """The query repeats an earlier one: content-word Jaccard at or above ``threshold`` with any of them (a query
    with no content word counts as a repeat)."""
    return not content_words(query) or any(jaccard(query, q) >= threshold for q in earlier)


def mentions(text: str, phrase: str) -> bool:
    """Whether ``phrase`` occurs in ``text`` as whole words, ignoring case and punctuation."""
    needle = normalize(phrase)
    return bool(needle) and f" {needle} " in f" {normalize(text)} "


def sentences(text: str) -> list[str]:
    """``text`` cut at sentence ends (., !, ? followed by white space)."""
    return [s for s in re.split(r"(?<=[.!?])\s+", " ".join((text or "").split())) if s]


#: What a small LM copies from DSPy's chat format into a field's value: a field marker (``[[ ## completed ## ]]``)
#: and the type note the format writes after a field (``# note: the value you produce must ...``, to the line's end).
FORMAT_ECHO = re.compile(r"\[\[\s*##[^\]\n]*##\s*\]\]|#\s*note\s*:\s*the value you produce\b[^\n]*", re.I)


def unechoed(text: str) -> str:
    """``text`` without :data:`FORMAT_ECHO` (a query that carries it searches for the format's words)."""
    return FORMAT_ECHO.sub(" ", text or "").strip()


#: The content words of a reply that says it has no value ("None", "N/A", "null", "no further search needed").
NO_VALUE = frozenset("""none null nil n na nothing applicable needed necessary required further additional query queries
search searches retrieval information empty""".split())


def query_text(reply: str | None) -> str:
    """A query as the LM wrote it, without echoed format text (:func:`unechoed`); empty when all it says is that
    there is none (its content words all in :data:`NO_VALUE`): a 0.5B critic's "None" was searched as the word."""
    text = unechoed(reply)
    return "" if content_words(text) <= NO_VALUE else text


def clip(query: str, max_words: int) -> str:
    """``query`` as :func:`query_text` reads it, on one line, cut to its first ``max_words`` words (the words
    themselves are kept as written)."""
    return " ".join(query_text(query).split()[:max_words])
