"""Multiple choice from token logprobs on the embedded llama.cpp server (RAG_REAL_LM=1; two demo questions). CORAL's
grammar-constrained corpus names are checked in ``test_real_lm.test_coral_and_its_baseline``."""
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

