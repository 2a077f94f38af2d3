"""The embedded server's prompt cache, and prompt tokens sent against those computed, metered per question."""
from types import SimpleNamespace
from typing import Union

import dspy
import pytest
from fake_openai import FakeOpenAI

from evaluation.loop import evaluate
from runtime import lm as lm_mod
from runtime.lm import LlamaServer
from runtime.roles import init_dspy


def test_the_embedded_server_keeps_a_prompt_cache_unless_turned_off(monkeypatch, tmp_path):
    monkeypatch.setattr(lm_mod.models, "model_path", lambda name: tmp_path / "m.gguf")
    monkeypatch.setattr(lm_mod.models, "fetch", lambda name: tmp_path / "m.gguf")

    def flags() -> dict:
        cmd = LlamaServer("qwen-0.5b").command()
        return {flag: cmd[cmd.index(flag) + 1] for flag in ("--cache", "--cache_type", "--cache_size") if flag in cmd}

    assert flags() == {"--cache": "true", "--cache_type": "ram", "--cache_size": str(1024 * 2**20)}
    monkeypatch.setenv("RAG_PROMPT_CACHE_MB", "64")
    assert flags()["--cache_size"] == str(64 * 2**20)
    monkeypatch.setenv("RAG_PROMPT_CACHE_MB", "0")
    assert flags() == {}


class TwoCalls(dspy.Module):
    def __init__(self):
        super().__init__()
        self.predict = dspy.Predict("question -> answer")

    def forward(self, question):
        self.predict(question=question)
        return dspy.Prediction(answer=self.predict(question=question + "?").answer, passages=[])


@pytest.mark.parametrize("cached", [0, 5])
def test_prompt_tokens_computed_are_those_sent_less_those_the_endpoint_reports_cached(cached):
    examples = [dspy.Example(id=str(i), question=f"question {i}", answer="x").with_inputs("question") for i in range(3)]
    with FakeOpenAI(cached=cached) as server:
        init_dspy(dspy.LM("openai/fake", api_base=server.api_base, api_key="x", cache=False), cache=False)
        records, summary = evaluate(TwoCalls(), examples, {"em": lambda ex, pred: 0.0}, retries=0)
    for r in records:
        assert r["lm_calls"] == 2 and r["prompt_tokens"] > 2 * cached
        assert r["prompt_tokens_computed"] == r["prompt_tokens"] - 2 * cached  # none reported: all computed
    assert summary["prompt_tokens_computed"] == summary["prompt_tokens"] - 2 * cached


def test_the_server_reports_the_prompt_prefix_a_request_resumed_from_as_cached_tokens(monkeypatch):
    """``runtime.llama_serve.report_cached_tokens``: the tokens already evaluated when a request's first ``eval``
    starts, in the usage the server's response model passes on (here llama.cpp's generation is a stand-in)."""
    llama = pytest.importorskip("llama_cpp.llama")
    from llama_cpp import llama_types
    from pydantic import TypeAdapter

    from runtime import llama_serve

    def create_completion(self, prompt, reused):  # llama.cpp's generate: the prompt past its reused prefix, then
        self.n_tokens = reused                     # each generated token
        for tokens in (prompt[reused:], [0], [0]):
            self.eval(tokens)
        return {"usage": {"prompt_tokens": len(prompt), "completion_tokens": 2, "total_tokens": len(prompt) + 2}}

    def eval(self, tokens):
        self.n_tokens += len(tokens)

    class Stub(llama.Llama):
        def __init__(self):
            self.n_tokens = 0

        def __del__(self):
            pass

    usage = llama_types.CompletionUsage
    monkeypatch.setattr(usage, "__annotations__", dict(usage.__annotations__))
    monkeypatch.setattr(usage, "__optional_keys__", usage.__optional_keys__)
    for name, value in (("create_completion", create_completion), ("eval", eval)):
        monkeypatch.setattr(llama.Llama, name, value)
    monkeypatch.setattr(llama.Llama, "_prompt_cached", None, raising=False)
    llama_serve.report_cached_tokens()
    stub, prompt = Stub(), list(range(10))
    assert [stub.create_completion(prompt, reused)["usage"]["prompt_tokens_details"]["cached_tokens"]
            for reused in (0, 7, 10)] == [0, 7, 10]  # none, a prefix, the whole prompt (an eval of no tokens)
    reply = {"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": [],
             "usage": stub.create_completion(prompt, 7)["usage"]}
    served = TypeAdapter(Union[llama_types.ChatCompletion, str])  # the server's response model
    assert served.dump_python(served.validate_python(reply))["usage"]["prompt_tokens_details"] == {"cached_tokens": 7}


def test_the_server_reports_the_seconds_of_a_requests_prompt_and_generated_tokens(monkeypatch):
    """``runtime.llama_serve.report_timings``: the synchronised wall time of the request's evaluations, prompt batches
    apart from single generated tokens, in the usage the server's response model passes on (``runtime.spent`` adds
    them up for the demo's time line)."""
    llama = pytest.importorskip("llama_cpp.llama")
    import time

    import llama_cpp
    from llama_cpp import llama_types
    from pydantic import TypeAdapter

    from runtime import llama_serve

    now, synced = [100.0], []

    class Stub(llama.Llama):
        def __init__(self):
            pass

        def __del__(self):
            pass

        ctx = property(lambda self: self)

    def evaluate(self, tokens):  # a prompt batch takes 250 ms, a generated token 45 ms
        now[0] += 0.25 if len(tokens) > 1 else 0.045

    def create_completion(self, prompt):  # llama.cpp's generate: the prompt in one batch, then two tokens
        for tokens in (prompt, [7], [8]):
            self.eval(tokens)
        return {"usage": {"prompt_tokens": len(prompt), "completion_tokens": 2, "total_tokens": len(prompt) + 2}}

    usage = llama_types.CompletionUsage
    monkeypatch.setattr(usage, "__annotations__", dict(usage.__annotations__))
    monkeypatch.setattr(usage, "__optional_keys__", usage.__optional_keys__)
    monkeypatch.setattr(llama.Llama, "create_completion", create_completion)
    monkeypatch.setattr(llama.Llama, "eval", evaluate)
    monkeypatch.setattr(llama_cpp, "llama_synchronize", synced.append)
    monkeypatch.setattr(time, "perf_counter", lambda: now[0])
    llama_serve.report_timings()
    stub = Stub()
    stub.eval([1, 2])  # outside a request: counted nowhere
    reply = {"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": [],
             "usage": stub.create_completion([1, 2, 3])["usage"]}
    served = TypeAdapter(Union[llama_types.ChatCompletion, str])  # the server's response model
    assert served.dump_python(served.validate_python(reply))["usage"]["timings"] == {"prompt_ms": 250.0,
                                                                                      "predicted_ms": 90.0}
    assert len(synced) == 4  # every evaluation waited for its compute before its time was read
