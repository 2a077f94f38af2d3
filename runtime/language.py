"""Languages: the names of ISO 639-1 codes as prompts say them, and language identification by ``lingua``.

Language rule for short answers (:func:`language_verdict`): lingua reads only the answer's own words, the ones it does
not copy from the question or a gold (names and copied spans say nothing about the language the answer is written
in: "Friedrich Ratzel of Germany was born in 1858." reads as German with the name, as English without it); wrong
when lingua is confident those are in another language than the question's. Numbers, golds as they are and
answers made only of copied words pass."""
from __future__ import annotations

import re
from functools import lru_cache

from dspy.evaluate.metrics import normalize_text

LANGUAGE_NAMES = {
    "am": "Amharic", "ar": "Arabic", "as": "Assamese", "az": "Azerbaijani", "de": "German", "el": "Greek",
    "en": "English", "es": "Spanish", "fa": "Persian", "ha": "Hausa", "hi": "Hindi", "id": "Indonesian",
    "ko": "Korean", "ro": "Romanian", "ru": "Russian", "su": "Sundanese", "th": "Thai", "tr": "Turkish",
    "vi": "Vietnamese", "zh": "Chinese",
}


def language_name(code: str) -> str:
    """The name of a language code, as the writer is told it."""
    return LANGUAGE_NAMES.get(code, code)


MIN_CONFIDENCE = 0.5  # below this lingua's top language counts as undecided
# the languages the detector chooses among: the XRAG languages plus the rest of XQuAD's
DETECTED = ("en", "de", "es", "zh", "ar", "el", "hi", "ro", "ru", "th", "tr", "vi")


@lru_cache(maxsize=1)
def _detector():
    from lingua import IsoCode639_1, LanguageDetectorBuilder

    codes = [getattr(IsoCode639_1, code.upper()) for code in DETECTED]
    return LanguageDetectorBuilder.from_iso_codes_639_1(*codes).with_preloaded_language_models().build()


def detect(text: str) -> str | None:
    """ISO 639-1 code of ``text`` when lingua is confident (``MIN_CONFIDENCE``), else None (too short,
    digits only, mixed)."""
    if not re.search(r"[^\W\d_]", text or ""):
        return None
    values = _detector().compute_language_confidence_values(text)
    if not values or values[0].value < MIN_CONFIDENCE:
        return None
    return values[0].language.iso_code_639_1.name.lower()


def own_words(answer: str, copied_from=()) -> str:
    """The words of ``answer`` that are not words of any text in ``copied_from`` (case-insensitive)."""
    copied = {w.casefold() for text in copied_from for w in re.findall(r"\w+", text or "")}
    return " ".join(w for w in re.findall(r"\w+", answer or "") if w.casefold() not in copied)


def language_verdict(answer: str, lang: str, golds=(), question: str = "") -> bool | None:
    """Whether a short ``answer`` to ``question`` counts as written in ``lang`` by lingua (see the module rule);
    None when lingua cannot tell the answer's own words."""
    if any(normalize_text(answer) == normalize_text(g) for g in golds):
        return True  # a gold as it is: in the question's language by construction
    rest = own_words(answer, (question, *golds))
    if not re.search(r"[^\W\d_]", rest):
        return True  # digits, or only words copied from the question or a gold
    found = detect(rest)
    return None if found is None else found == lang


def in_language(answer: str, lang: str, golds=(), question: str = "") -> bool:
    """:func:`language_verdict`, an undecided answer passing (no judge to ask)."""
    return language_verdict(answer, lang, golds, question) is not False
