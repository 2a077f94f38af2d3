"""End-to-end: ``rag`` over a hybrid first stage with the embedded 0.5B model grading candidates (``--rerank lm``)."""
import pytest

import data
import programs
from evaluation.loop import evaluate
from evaluation.task_metrics import answer_metrics
from retrieval.retriever import Retriever
from runtime.lm import make_lm
from runtime.roles import init_dspy
from test_real_lm import one_call_per_try

pytestmark = pytest.mark.real_lm


def test_rag_on_hybrid_retrieval_with_the_lm_reranker():
    init_dspy(make_lm("local:qwen-0.5b", cache=False), cache=False)
    bundle = data.load("demo")
    examples = data.split(bundle.examples, 0, 1, 0, seed=13).dev
    search = Retriever(bundle.corpora, retriever="hybrid", rerank="lm", rerank_depth=4)
    records, summary = evaluate(programs.build("rag", search=search, k=2), examples, answer_metrics(bundle.task), k=2)
    tries = records[0]["tries"]  # a parse retry runs the program (and its reranker) again
    assert summary["failed_examples"] == 0 and search.reranker.calls == 4 * tries
    assert search.reranker.failures < 4  # the model's grades parse (at least one of four)
    assert len(records[0]["passages"]) == 2 and one_call_per_try(records[0], 5)  # 4 grades + 1 answer
