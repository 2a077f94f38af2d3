"""Where a run's time went (``runtime.spent``): the LM's prompt and decode seconds as its server reports them,
retrieval, and the rest, in the closing line ``optimize.py`` prints (``make demo``)."""
from __future__ import annotations

from runtime import spent
from runtime.lm import make_lm
from fake_openai import FakeOpenAI


def test_the_lm_seconds_a_server_reports_add_up_in_the_closing_line(monkeypatch):
    monkeypatch.setattr(spent, "SPENT", spent.Spent())
    with FakeOpenAI(timings={"prompt_ms": 1500.0, "predicted_ms": 250.0}) as server:
        lm = make_lm("openai/fake", api_base=server.api_base, cache=False)
        for question in ("one", "two"):
            lm(messages=[{"role": "user", "content": question}])
    assert (spent.SPENT.prompt, spent.SPENT.decode, spent.SPENT.lm_calls_timed) == (3.0, 0.5, 2)
    line = spent.line()
    assert "LM prompt 3 s + LM decode 0 s + retrieval 0 s + other" in line  # 0.5 s rounds to 0


def test_an_endpoint_without_timings_is_said_to_report_none(monkeypatch):
    monkeypatch.setattr(spent, "SPENT", spent.Spent())
    with FakeOpenAI() as server:
        make_lm("openai/fake", api_base=server.api_base, cache=False)(messages=[{"role": "user", "content": "q"}])
    assert spent.SPENT.lm_calls_timed == 0 and "its server reports no timings" in spent.line()


def test_searches_count_as_retrieval(monkeypatch, embedder):
    from retrieval.corpus import Corpus
    from retrieval.retriever import Retriever

    monkeypatch.setattr(spent, "SPENT", spent.Spent())
    retriever = Retriever([Corpus("en", [{"id": "a", "title": "A", "text": "apples are red"}], "en")], embedder)
    retriever.search("apples", 1)
    assert spent.SPENT.retrieval > 0 and spent.SPENT.prompt == 0
