"""PAR2-RAG end to end on the embedded Qwen2.5-Coder 0.5B model (2 demo questions, small m and H); slow, runs only
with RAG_REAL_LM=1."""
import pytest

import data
import programs
from evaluation.loop import evaluate
from evaluation.task_metrics import answer_metrics
from retrieval.retriever import Retriever
from runtime.lm import make_lm
from runtime.roles import init_dspy

pytestmark = pytest.mark.real_lm


def test_par2_plans_anchors_and_stops_within_its_budget_on_the_demo(monkeypatch):
    monkeypatch.delenv("RAG_INDEX_DIR")  # reuse the cached demo index
    init_dspy(make_lm("local:qwen-0.5b", cache=False), cache=False)
    bundle = data.load("demo")
    examples = data.split(bundle.examples, 0, 2, 0, seed=13).dev
    program = programs.build("par2", search=Retriever(bundle.corpora), k=2, loops=2, subqueries=2, context_tokens=600)
    records, summary = evaluate(program, examples, answer_metrics(bundle.task), k=4)
    assert summary["failed_examples"] == 0 and summary["prompt_tokens"] > 0
    for r in records:
        trace = r["trace"]
        assert isinstance(r["answer"], str) and 1 <= trace["iterations"] <= 2
        assert 1 <= len(trace["plan"]) <= 2 and trace["stop_reason"] in ("esc_stop", "loop_budget", "no_new_evidence")
        assert len({p["id"] for p in r["passages"]}) == len(r["passages"]) >= 2  # the anchor, deduplicated
    # plan (1) + writes (<= 2) + ESC (<= 1), plus at most one retry each for plan and ESC
    assert 2 <= summary["lm_calls"] <= 6
