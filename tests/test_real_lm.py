"""End-to-end on the embedded Qwen2.5-Coder 0.5B model (``pytest -m real_lm``); slow, needs ``make setup``."""
import os

import pytest

import data
import optimize
import programs
from optimizers.evaluation import evaluate
from optimizers.metrics import answer_metrics
from programs.retrieval import Retriever
from runtime.lm import make_lm
from runtime.roles import init_dspy

pytestmark = pytest.mark.real_lm


@pytest.fixture(autouse=True)
def shared_indexes(monkeypatch):
    """Reuse the real corpora's cached faiss indexes (embedding HotpotQA takes minutes on 2 cores)."""
    monkeypatch.delenv("RAG_INDEX_DIR")


@pytest.fixture(scope="module")
def lm():
    lm = make_lm("local:qwen-0.5b", cache=False)
    init_dspy(lm, cache=False)
    return lm


def bundles():
    yield "demo"
    if os.environ.get("RAG_DATA_DIR"):
        yield "hotpotqa"


@pytest.mark.parametrize("dataset", list(bundles()))
@pytest.mark.parametrize("name", ["direct", "rag"])
def test_baseline_answers_real_questions(lm, dataset, name):
    init_dspy(lm, cache=False)
    bundle = data.load(dataset)
    examples = data.split(bundle.examples, 0, 3, 0, seed=13).dev
    search = Retriever(bundle.corpora) if programs.spec(name).needs_search else None
    program = programs.build(name, search=search, k=3)
    records, summary = evaluate(program, examples, answer_metrics(bundle.task), k=3 if search else None)
    assert summary["failed_examples"] == 0
    assert all(r["answer"] and len(r["answer"]) < 200 for r in records)
    assert summary["lm_calls"] == 1.0 and summary["prompt_tokens"] > 0 and summary["seconds"] > 0
    if search:
        assert all(len(r["passages"]) == 3 for r in records) and "title_recall" in summary


def test_optimize_end_to_end_on_demo(lm, tmp_path):
    run_id = optimize.main(["--program", "rag", "--dataset", "demo", "--train", "2", "--dev", "2", "--test", "2",
                            "--k", "3", "--demos", "1", "--out", str(tmp_path / "p.json")])
    assert programs.load_compiled(str(tmp_path / "p.json")).k == 3 and run_id
