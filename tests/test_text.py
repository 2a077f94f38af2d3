"""Refusal detection, query-repeat checks and echoed format text (programs/shared/text.py)."""
import pytest

from programs.shared.text import abstained, clip, query_text, repeats, unechoed


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


NOTE = ' # note: the value you produce must adhere to the JSON schema: {"type": "string"} # complete'


@pytest.mark.parametrize("text, clean", [
    ('"Black Death and new epidemics"' + NOTE, '"Black Death and new epidemics"'),  # the 0.5B's CORAL replan query
    ("Fresno ethnic groups# NOTE: The value you produce must be one of: a; b", "Fresno ethnic groups"),
    ("Tesla patents  #note:the value you produce must adhere to the JSON schema: {\u201ctype\u201d: \u201cstring\u201d}",
     "Tesla patents"),
    ("seaweed soup[[ ## completed ## ]]", "seaweed soup"),
    ("[[ ## query ## ]]\nseaweed soup\n\n[[ ## completed ## ]]", "seaweed soup"),
    ("first line" + NOTE + "\nsecond line", "first line  \nsecond line"),  # only the note's own line is cut
    ("C# notes for beginners", "C# notes for beginners"),  # a '#' that is not the format's note stays
    ("# note: bring a towel", "# note: bring a towel"),
    ("what the value you produce means", "what the value you produce means"),
    ("", ""), (None, "")])
def test_echoed_format_text_is_removed_and_nothing_else(text, clean):
    assert unechoed(text) == clean


def test_clip_removes_the_echo_before_counting_words():
    assert clip("Amazon rainforest drought 2010" + NOTE, 4) == "Amazon rainforest drought 2010"
    assert clip("Amazon [[ ## completed ## ]] rainforest", 2) == "Amazon rainforest"


@pytest.mark.parametrize("reply", ["None", "none.", " NONE ", "'None'", "N/A", "n/a", "null", "Nil", "nothing",
                                   "None needed.", "No further search needed", "No additional information is needed.",
                                   "no query", "", "   ", "[[ ## next_query ## ]] None", "None" + NOTE])
def test_a_reply_that_says_there_is_no_query_is_read_as_none(reply):
    assert query_text(reply) == "" and clip(reply, 8) == ""


@pytest.mark.parametrize("reply", ["None of the Beatles' wives", "Null Island location", "Nothing Compares 2 U singer",
                                   "N/A ratio Alvin Lee", "further reading on Chad Gray", "search engine founded 1998"])
def test_a_query_that_merely_holds_a_null_word_is_kept(reply):
    assert query_text(reply) == reply and clip(reply, 12) == reply
