"""What the writers of the evidence programs are shown at a run's default settings (issue 61, items 4 and 6c): whole
passages, cut only when ``--max-chars`` asks, and the question's language, as ``rag``'s writer is told it. Programs
are built as a run builds them (flags parsed, the session's config) and run on a routed DummyLM."""

import pytest

import programs
from experiments import cli
from experiments.derived import Derived
from retrieval.corpus import Passage
from runtime.language import language_name
from tests.dummies import routed
from tests.test_rag_critic import CORRECT, FIXTURES

# A made-up passage of ~1,500 characters whose last sentence holds the answer.
ANSWER_SENTENCE = "Its director Ana Berg was born in Lyon."
LONG = " ".join(f"Blue Fox was shown in hall {i} of the old town cinema during week {i} of its first run."
                for i in range(1, 18)) + " " + ANSWER_SENTENCE
GOLD = Passage("toy:long", "Blue Fox", LONG, corpus="toy", score=1.0)
QUESTION = "Where was the director of Blue Fox born?"

# each signature's reply, by a marker of its prompt (first match wins); the writers last
ROUTES = {"`[[ ## searches ## ]]`": {"searches": "1. Blue Fox director | the film's director"},
          "`[[ ## decision ## ]]`": {"decision": "STOP", "next_query": ""},
          "`[[ ## triples ## ]]`": {"triples": '["Ana Berg | born in | Lyon"]'},
          "`[[ ## coverage ## ]]`": {"coverage": "1.0", "bridge": "linked", "corroboration": "corroborated",
                                     "answerability": "0.9", "sufficient": "True"},
          "`[[ ## missing_entities ## ]]`": {"missing_entities": "[]", "missing_relations": "[]"},
          "`[[ ## query ## ]]`": {"query": "Ana Berg"},
          "`[[ ## judgement ## ]]`": CORRECT,
          "`[[ ## relevant ## ]]`": {"relevant": "True", "support": "full", "usefulness": "5", "next_query": ""},
          "`[[ ## grade ## ]]`": {"grade": "correct"},
          "`[[ ## answer ## ]]`": {"reasoning": "The passage names the birthplace.", "answer": "Lyon [1]"}}
WRITER = "`[[ ## answer ## ]]`"


class OnePassage:
    """Stands in for the Retriever: every search finds the long passage."""

    def search(self, query, k, corpora=None):
        return [GOLD]


@pytest.fixture(autouse=True)
def taxonomy(monkeypatch):
    monkeypatch.setenv("RAG_DATA_DIR", str(FIXTURES))  # rag_critic's error taxonomy


def writer_prompts(name: str, *flags: str, lang: str | None = None) -> list[str]:
    """The prompts of program ``name``'s writer calls, built from the command line ``flags`` as a run builds it."""
    args = cli.parser("t").parse_args(["--program", name, *flags])
    lm = routed(ROUTES)
    programs.build(name, search=OnePassage(), **Derived(args, "short").program_config(name))(question=QUESTION, lang=lang)
    prompts = [h["messages"][-1]["content"] for h in lm.history if WRITER in h["messages"][-1]["content"]]
    assert prompts, f"{name} wrote no answer"
    return prompts


@pytest.mark.parametrize("name", ["rag", "par2", "seal", "rag_critic"])
def test_a_long_gold_passage_reaches_the_writer_whole_unless_a_cut_is_asked(name):
    assert len(LONG) > 1400 and LONG.endswith(ANSWER_SENTENCE)
    assert all(LONG in prompt for prompt in writer_prompts(name))
    for prompt in writer_prompts(name, "--max-chars", "600"):
        assert LONG[:300] in prompt and ANSWER_SENTENCE not in prompt


@pytest.mark.parametrize("name", ["par2", "seal", "rag_cited", "self_rag", "crag", "cot", "ircot", "react", "flare",
                                  "metarag"])
def test_the_writer_is_told_the_questions_language_as_rags_is(name):
    told = f"[[ ## answer_language ## ]]\n{language_name('de')}"
    assert all(told in prompt for prompt in writer_prompts("rag", lang="de"))
    assert all(told in prompt for prompt in writer_prompts(name, lang="de"))
    assert not any("answer_language" in prompt for prompt in writer_prompts(name))
