"""XRAG end to end on the embedded 0.5B model: one XQuAD setting item per bound scored by the full protocol
(language ID + a one-judge panel), and the construction pipeline on one XQuAD article pair. Runs only with
RAG_REAL_LM=1 and RAG_DATA_DIR set."""
import os

import pytest

import data
import programs
from construction.xrag import XRAGBuilder
from data.xrag import paragraph, read_xquad
from evaluation.loop import evaluate
from evaluation.xlingual import JudgePanel, xrag_metrics
from retrieval.retriever import Retriever
from runtime.lm import make_lm
from runtime.roles import init_dspy

pytestmark = [pytest.mark.real_lm,
              pytest.mark.skipif(not os.environ.get("RAG_DATA_DIR"), reason="needs RAG_DATA_DIR (XQuAD)")]


@pytest.fixture(autouse=True)
def lm(monkeypatch):
    monkeypatch.delenv("RAG_INDEX_DIR")
    lm = make_lm("local:qwen-0.5b", cache=False)
    init_dspy(lm, cache=False)
    return lm


@pytest.mark.parametrize("dataset, name", [("xrag_mono:de", "direct"), ("xrag_mono_oracle:zh", "rag")])
def test_bounds_score_with_the_protocol(lm, dataset, name):
    bundle = data.load(dataset)
    examples = data.split(bundle.examples, 0, 1, 0, seed=13).dev
    search = Retriever(bundle.corpora) if programs.spec(name).needs_search else None
    program = programs.build(name, search=search, k=8)
    records, summary = evaluate(program, examples, xrag_metrics(JudgePanel([lm])), groups=bundle.groups)
    assert summary["failed_examples"] == 0 and summary["prompt_tokens"] > 0
    assert {"accuracy", "lang_ok", "judge", "char3_recall"} <= summary.keys()
    if name == "rag":
        assert all(len(r["passages"]) == 1 for r in records)  # the oracle sees the supporting paragraph only


def test_pipeline_on_one_xquad_pair():
    arts = read_xquad(None if not os.environ.get("RAG_DATA_DIR") else data.data_dir(), "en")
    a, b = paragraph(arts, "en", 0, 0), paragraph(arts, "en", 0, 1)
    builder = XRAGBuilder(types=("comparison",))
    out = builder(article_a=a, article_b=b, check_relevance=False)
    stop = out.trace["stop_reason"]
    assert stop in ("built", "no_simple_pairs", "summary_copies")  # the 0.5B often copies the paragraph
    over = [ov > builder.max_overlap for ov in out.trace["overlap"]]
    assert over == ([False] * (len(over) - 1) + [True] if stop == "summary_copies" else [False, False])
    for rec in out.records:
        assert rec["question"] and rec["answer"] and rec["supporting"] == [a, b]
