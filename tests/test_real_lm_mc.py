"""Multiple choice from token logprobs and grammar-constrained corpus names on the embedded llama.cpp server
(RAG_REAL_LM=1; two demo questions)."""
import pytest

import data
import programs
from decoding.choice import MCScoring
from runtime.lm import make_lm
from runtime.roles import init_dspy

pytestmark = pytest.mark.real_lm


@pytest.fixture(autouse=True)
def lm(monkeypatch):
    monkeypatch.delenv("RAG_INDEX_DIR")  # reuse the shared faiss indexes
    lm = make_lm("local:qwen-0.5b", cache=False)
    init_dspy(lm, cache=False)
    return lm


def test_the_server_returns_option_letter_probabilities(capsys):
    examples = data.load("demo_culture").examples[:2]
    observed = []
    program = programs.build("direct", mc=MCScoring("logprob", observed=observed))
    for ex in examples:
        pred = program(**ex.inputs())
        assert pred.answer in ex.options
    assert len(observed) == 2 and "no token logprobs" not in capsys.readouterr().err
    for seen in observed:
        assert set(seen["probs"]) == set(examples[0].options) and abs(sum(seen["probs"].values()) - 1) < 1e-9


def test_planner_names_only_pool_corpora_under_the_grammar():
    from retrieval.retriever import Retriever

    bundle = data.load("demo_culture")
    program = programs.build("coral", search=Retriever(bundle.corpora), k=1, loops=1)
    ex = bundle.examples[0]
    trace = program(**ex.inputs()).trace
    assert trace["unknown_corpora"] == 0 and trace["parse_failures"] == 0
    assert set(trace["corpora"][0]) <= set(program.search.languages())
