"""Refusal detection and query-repeat checks (programs/shared/text.py)."""
import pytest

from programs.shared.text import abstained, repeats


@pytest.mark.parametrize("answer", ["I don't know", "I don’t know", "i dont know.", "I DO NOT KNOW", "",
                                    "I don't know the answer.", "I don’t know who directed it", "Unknown",
                                    "  unknown. ", "Not enough information", "insufficient evidence",
                                    "The passages do not mention it", "I cannot determine this", "**I don't know**"])
def test_refusals_are_detected_after_normalisation(answer):
    assert abstained(answer)


@pytest.mark.parametrize("answer", ["Lansing", "Unknown Soldier", "Knowledge", "I Know What You Did", "None of them",
                                    "Don Knotts", "no"])
def test_answers_are_not_refusals(answer):
    assert not abstained(answer)


def test_repeats_by_content_word_overlap():
    assert repeats("Ana Berg birthplace", ["ana berg birthplace?"])
    assert not repeats("Ana Berg birthplace", ["Blue Fox director"])
    assert repeats("", []) and repeats("the of a", [])  # nothing to search for
