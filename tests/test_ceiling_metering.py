"""What the ceiling (scripts/ceiling.py) counts and what it never starts: each oracle labelling call and each retriever
query metered per question, and an all-oracle session that builds no LM."""
import dspy
import pytest

import retrieval.retriever
from evaluation.metrics import gold_of
from experiments import suite
from experiments.sessions import session
from programs.shared.oracle import gold_labels, labelling
from retrieval.corpus import Corpus
from retrieval.retriever import Retriever
from runtime.metering import metered
from tests.test_oracle_roles import DOCS, TWO_HOP


def test_each_oracle_labelling_call_and_each_search_is_metered(embedder):
    search = Retriever([Corpus("musique", DOCS, "en")], embedder)
    with metered() as cost, gold_labels(gold_of(TWO_HOP)):
        done = labelling(frozenset({"controller"}), "controller")  # taking the labelling is not a call
        done([])
        done(search.search("Hagar", 2))
        search.search_many(["Keturah", "Sarah"], 1)
    assert (cost.oracle_calls, cost.searches, cost.lm_calls) == (2, 3, 0)


def test_a_session_that_makes_no_lm_call_builds_no_lm(embedder, monkeypatch):
    monkeypatch.setattr(retrieval.retriever, "get_embedder", lambda name: embedder)
    args = suite.parser("test").parse_args(["--dataset", "demo", "--oracle", "all"])
    s = session(args, True, no_lm=True)  # tests/conftest.py refuses any embedded server start
    assert s.roles.writer is None and dspy.settings.lm is None
    assert all(p.lm is None for p in s.build("seal").predictors())
    with pytest.raises(ValueError, match="No LM is loaded"):  # a stray call fails its question
        dspy.Predict("question -> answer")(question="x")
