"""Languages: the names of ISO 639-1 codes as prompts say them, and language identification by ``lingua``.

Language rule for short answers (:func:`language_verdict`): wrong when lingua is confident the answer is in another
language than the question AND that language differs from the one lingua gives the gold answer, so numbers and
golds copied as they are pass."""
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


def language_verdict(answer: str, lang: str, golds=()) -> bool | None:
    """Whether a short ``answer`` counts as written in ``lang`` by lingua (see the module rule); None when lingua
    cannot tell an answer with letters that is not a gold."""
    if not re.search(r"[^\W\d_]", answer or "") or any(normalize_text(answer) == normalize_text(g) for g in golds):
        return True  # digits only, or a gold as it is: the gold is in the question's language by construction
    found = detect(answer)
    if found is None:
        return None
    return found == lang or any(detect(g) == found for g in golds)


def in_language(answer: str, lang: str, golds=()) -> bool:
    """:func:`language_verdict`, an undecided answer passing (no judge to ask)."""
    return language_verdict(answer, lang, golds) is not False
