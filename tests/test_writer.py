import pytest

from programs.shared.writer import Writer, parse_choice
from retrieval.corpus import Passage

OPTS = {"A": "Tteokguk", "B": "Zongzi", "C": "Mooncake", "D": "Turkey"}


@pytest.mark.parametrize("raw, letter", [
    ("B", "B"), ("C.", "C"), ("(D) Turkey", "D"), ("The answer is A", "A"), ("answer: b", ""),
    ("Mooncake", "C"), ("I would pick zongzi here", "B"), ("Option D", "D"), ("", ""), ("none of these", ""),
])
def test_parse_choice(raw, letter):
    assert parse_choice(raw, OPTS) == letter


def test_writer_multiple_choice_returns_a_parsed_letter(dummy):
    dummy([{"answer": "(C) Mooncake"}])
    out = Writer()(question="What is eaten at the Mid-Autumn Festival in China?", options=OPTS,
                   passages=[Passage("zh:1", "中秋节", "吃月饼")])
    assert out.answer == "C" and out.raw_answer == "(C) Mooncake"


def test_writer_short_answer_sees_the_passages(dummy):
    lm = dummy([{"answer": " Seine "}])
    out = Writer(max_chars=20)(question="River of Paris?", passages=[Passage("c:1", "Paris", "The Seine crosses Paris " * 5)])
    assert out.answer == "Seine"
    prompt = lm.history[-1]["messages"][-1]["content"]
    assert "[Paris] The Seine crosses …" in prompt  # truncated to max_chars at a word boundary


@pytest.mark.parametrize("raw, letter", [
    ("A cup of tea", "C"),             # starts like the letter A, names option C
    ("A cup of tea.", "C"),
    ("C. A cup of tea", "C"),
    ("A", "A"), ("B.", "B"),            # a bare letter when no option text is quoted
    ("I’d say a cup of TEA", "C"),      # curly apostrophe, case
    ("Tea", "D"),                      # "Tea" alone is option D, not part of C
    ("A coffee", "A"),                 # no option text: the leading letter
])
def test_option_text_wins_over_a_leading_letter(raw, letter):
    options = {"A": "Coffee with milk", "B": "Juice", "C": "A cup of tea", "D": "Tea"}
    assert parse_choice(raw, options) == letter


@pytest.mark.parametrize("reasoning", [False, True])
def test_writer_asks_for_the_answer_in_the_questions_language_with_or_without_chain_of_thought(dummy, reasoning):
    lm = dummy([{"reasoning": "Die Seine fließt durch Paris.", "answer": "Seine"}])
    out = Writer(reasoning=reasoning)(question="Welcher Fluss?", passages=[Passage("c:1", "Paris", "The Seine.")],
                                      lang="de")
    prompt = lm.history[-1]["messages"][-1]["content"]
    assert out.answer == "Seine" and "[[ ## answer_language ## ]]\nGerman" in prompt
    assert ("[[ ## reasoning ## ]]" in lm.history[-1]["messages"][0]["content"]) == reasoning
