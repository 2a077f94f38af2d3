import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest

from runtime import lm as lm_mod
from runtime import server_host
from runtime.lm import LlamaServer, RestartBudget, ServerError, _reachable, _running, make_lm
from tests.fake_openai import FakeOpenAI

# A stand-in for llama_cpp.server: on the given port, GET /v1/models lists the given model alias.
FAKE_SERVER = """
import http.server, json, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers()
        self.wfile.write(json.dumps({"data": [{"id": sys.argv[2]}]}).encode())
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


class FakeServer(LlamaServer):
    script = FAKE_SERVER

    def command(self):
        return [sys.executable, "-c", self.script, str(self.port), self.spec.alias]


def fake(**kwargs) -> FakeServer:
    return FakeServer("qwen-0.5b", startup_timeout=30, budget=RestartBudget(2, 600, backoff=0.01), **kwargs)


def test_server_restarts_on_its_port_within_the_budget_then_stops_with_the_log_tail():
    server = fake().start()
    try:
        assert server.alive() and server.api_base.startswith("http://127.0.0.1:")
        port = server.port
        for _ in range(2):
            server.proc.kill()
            server.proc.wait()
            server.restart()
            assert server.alive() and server.port == port
        server.proc.kill()
        server.proc.wait()
        with pytest.raises(ServerError, match=r"(?s)down again after 2 restarts within 600s.*log .*server\.log"):
            server.restart()
    finally:
        server.stop()
    assert not server.alive()


@contextmanager
def foreign(kind: str):
    """Another local process's listener on a free port (yielded): an HTTP server listing another model, one
    answering 404, or a socket that accepts and never answers."""
    if kind == "silent":
        with socket.create_server(("127.0.0.1", 0)) as sock:
            yield sock.getsockname()[1]
        return
    status, body = {"other model": (200, b'{"data": [{"id": "gpt-4o"}]}'), "404": (404, b"not found"),
                    "loading": (503, b'{"error": {"code": 503, "message": "Loading model"}}')}[kind]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(status)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield httpd.server_port
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_server_still_loading_its_model_is_waited_for_not_taken_for_another_process():
    """llama.cpp's llama-server binds its port first and answers 503 "Loading model" until the model is in memory:
    not yet ready (None), where any other error status is someone else's server (False)."""
    with foreign("loading") as loading, foreign("404") as other:
        assert lm_mod._serves(loading, "m") is None and lm_mod._serves(other, "m") is False


@pytest.mark.parametrize("kind", ["other model", "404", "silent"])
def test_a_port_another_process_took_is_not_taken_for_our_server(kind, monkeypatch, capsys):
    """The port is chosen free, released, and bound by our server only once its model is loaded, so another process
    can take it in between: its answer (any HTTP 200 counted as ready) is not our server; ours moves to another."""
    free = lm_mod._free_port
    with foreign(kind) as taken:
        ports = iter([taken])
        monkeypatch.setattr(lm_mod, "_free_port", lambda: next(ports, None) or free())
        server = fake().start()
        try:
            assert server.port != taken and lm_mod._serves(server.port, server.spec.alias) and server.alive()
            assert json.loads((server.home / "server.json").read_text())["port"] == server.port
        finally:
            server.stop()
    assert f"warning: port {taken} answers for another process" in capsys.readouterr().err


def test_ports_taken_again_and_again_stop_the_start_with_one_line(monkeypatch):
    with foreign("other model") as taken:
        monkeypatch.setattr(lm_mod, "_free_port", lambda: taken)
        with pytest.raises(ServerError, match=f"ports {taken}, {taken}, {taken} on 127.0.0.1 were each taken by "
                                              "another process"):
            fake().start()


def test_an_api_base_gets_only_the_key_named_for_it(monkeypatch):
    """OPENAI_API_KEY went to any --api-base; an endpoint gets $RAG_API_KEY, else a placeholder."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-provider-secret")
    monkeypatch.delenv("RAG_API_KEY", raising=False)
    with FakeOpenAI() as endpoint:
        make_lm("openai/fake", endpoint.api_base, cache=False)("hello")
        monkeypatch.setenv("RAG_API_KEY", "endpoint-key")
        make_lm("openai/fake", endpoint.api_base, cache=False)("hello")
    assert endpoint.keys == ["Bearer local", "Bearer endpoint-key"]
    assert "api_key" not in make_lm("openai/gpt-4o-mini").kwargs  # a provider: LiteLLM's own default (its variable)


def test_restart_budget_is_per_window_with_growing_backoff():
    budget = RestartBudget(2, window=0.3, backoff=1.0)
    assert [budget.spend(), budget.spend(), budget.spend()] == [1.0, 2.0, None]
    time.sleep(0.35)
    assert budget.spend() == 1.0  # the window has passed: the budget is back


def test_processes_share_one_server_and_the_last_user_stops_it():
    first = fake().start()
    second = fake().start()
    try:
        assert (second.port, second.pid, second.proc) == (first.port, first.pid, None)  # attached, not started
        first.stop()
        assert second.alive() and _reachable(second.port)  # still leased by the second user
    finally:
        second.stop()
    assert not _running(first.pid) and not (second.home / "server.json").exists()


def test_private_servers_are_not_shared():
    first, second = fake(shared=False).start(), fake(shared=False).start()
    try:
        assert first.pid != second.pid and first.port != second.port and second.proc is not None
    finally:
        first.stop()
        second.stop()
    assert not _running(first.pid) and not _running(second.pid) and not first.home.exists()


def test_a_dead_owners_port_file_is_detected_and_replaced():
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    server = fake()
    server.home.mkdir(parents=True)
    (server.home / "server.json").write_text(json.dumps({"pid": dead.pid, "port": lm_mod._free_port()}))
    server.start()
    try:
        assert server.proc is not None and server.alive()
        assert json.loads((server.home / "server.json").read_text())["pid"] == server.pid != dead.pid
    finally:
        server.stop()


@pytest.mark.parametrize("answering", [True, False])
@pytest.mark.parametrize("identity", [{}, {"pid_start": "1"}])  # an older record; a pid since reused
def test_a_port_file_naming_an_unrelated_live_process_is_neither_attached_nor_signalled(answering, identity):
    """A stale ``server.json`` whose pid now names someone else's process (a ``sleep``), on a port that answers or
    not: the server is started afresh and the process is left alone."""
    unrelated = subprocess.Popen(["sleep", "60"])
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1] if answering else lm_mod._free_port()
    server = fake()
    server.home.mkdir(parents=True)
    (server.home / "server.json").write_text(json.dumps({"pid": unrelated.pid, "port": port, **identity}))
    try:
        server.start()
        assert server.pid != unrelated.pid and server.proc is not None and server.port != port
        server.stop()
        assert unrelated.poll() is None  # never signalled
    finally:
        listener.close()
        unrelated.kill()
        unrelated.wait()


def test_a_pid_we_may_not_signal_is_not_ours_and_a_reused_lease_pid_is_stale(monkeypatch, tmp_path):
    unrelated = subprocess.Popen(["sleep", "60"])
    try:
        (tmp_path / f"{unrelated.pid}-x.lease").write_text("1")  # its owner started at another time
        (tmp_path / f"{os.getpid()}-y.lease").write_text(server_host.start_time(os.getpid()))
        assert [p.name for p in server_host.live_leases(tmp_path)] == [f"{os.getpid()}-y.lease"]

        def denied(pid, sig):
            raise PermissionError(1, "Operation not permitted")

        with monkeypatch.context() as m:
            m.setattr(os, "kill", denied)  # another user's process
            assert not server_host.pid_alive(unrelated.pid)
    finally:
        unrelated.kill()
        unrelated.wait()


def test_the_shared_server_outlives_its_starter_while_another_process_uses_it():
    tests = Path(__file__).resolve().parent
    code = ("from test_lm import FakeServer; s = FakeServer('qwen-0.5b', startup_timeout=30).start(); "
            "print(s.pid, flush=True); import time; time.sleep(60)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tests.parent), str(tests)])}
    starter = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
    host = int(starter.stdout.readline())
    ours = fake().start()
    try:
        assert ours.pid == host and ours.proc is None
        starter.kill()
        starter.wait()
        time.sleep(1.5)  # the host polls leases every 0.5 s
        assert ours.alive() and _reachable(ours.port)
    finally:
        ours.stop()
    assert not _running(host)


def test_startup_failure_shows_the_log_tail():
    class Broken(FakeServer):
        script = "import sys; print('error: model file is corrupt'); sys.exit(3)"

    with pytest.raises(ServerError, match="(?s)exited with code 3.*model file is corrupt"):
        Broken("qwen-0.5b", startup_timeout=30).start()


def test_embedded_server_command_uses_all_cores_and_loopback(monkeypatch, tmp_path):
    monkeypatch.setattr(lm_mod.models, "model_path", lambda name: tmp_path / "m.gguf")
    monkeypatch.setattr(lm_mod.models, "fetch", lambda name: tmp_path / "m.gguf")
    cmd = LlamaServer("qwen-0.5b", n_threads=2).command()
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1" and cmd[cmd.index("--n_threads") + 1] == "2"


@pytest.mark.parametrize("name, message", [("local:gpt-9", "local:qwen-0.5b, local:qwen-1.5b"),
                                           ("gpt4", "provider/model|DSPy/LiteLLM model string")])
def test_unknown_lm_names_the_choices(name, message):
    with pytest.raises(ValueError, match=message):
        make_lm(name)


def test_remote_lm_takes_an_openai_compatible_base():
    lm = make_lm("openai/my-model", api_base="http://127.0.0.1:9/v1")
    assert lm.model == "openai/my-model" and lm.kwargs["api_base"] == "http://127.0.0.1:9/v1"


@pytest.fixture
def chat_server():
    """An in-process OpenAI-style chat endpoint that records each request body and answers a fixed completion."""
    bodies = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            out = json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                              "choices": [{"index": 0, "finish_reason": "stop",
                                           "message": {"role": "assistant", "content": "hi"}}],
                              "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/v1", bodies
    server.shutdown()


def test_token_cap_reaches_llama_cpp_as_max_tokens(chat_server, monkeypatch):
    """llama.cpp ignores ``max_completion_tokens``: without ``max_tokens`` a looping model ran to the context size."""
    base, bodies = chat_server
    monkeypatch.setattr(lm_mod, "local_server", lambda key: SimpleNamespace(spec=SimpleNamespace(alias=key),
                                                                              api_base=base, generation=0))
    for lm in (make_lm("local:qwen-0.5b", max_tokens=64, cache=False), make_lm("openai/m", base, max_tokens=64,
                                                                                cache=False)):
        lm("hello")
        lm("hello", max_tokens=16)  # a predictor's own cap must reach the server too
    assert [b.get("max_tokens") for b in bodies] == [64, 16, 64, 16]
    bodies.clear()
    lm("hello", max_tokens=8, extra_body={"grammar": "root ::= \"A\""})  # a capped call keeps its own grammar
    assert bodies[0]["max_tokens"] == 8 and bodies[0]["grammar"] == 'root ::= "A"'


def test_lm_call_revives_a_dead_embedded_server():
    server = fake().start()
    try:
        lm = lm_mod.ProjectLM("openai/fake", api_base=server.api_base, api_key="local", num_retries=0, cache=False)
        lm.server = server
        server.proc.kill()
        server.proc.wait()
        with pytest.raises(Exception):  # the stand-in cannot complete chats, but it must be back up
            lm("hello")
        assert server.restarts == 1 and server.alive()
    finally:
        server.stop()


def test_server_dies_with_its_parent_process():
    """A killed parent (no atexit) must not leave an orphaned server holding the cores."""
    tests = Path(__file__).resolve().parent
    code = ("from test_lm import FakeServer; s = FakeServer('qwen-0.5b', startup_timeout=30).start(); "
            "print(s.proc.pid, flush=True); import time; time.sleep(60)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tests.parent), str(tests)])}
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
    child = int(parent.stdout.readline())  # the server host, which stops when no live process leases it
    parent.kill()
    parent.wait()
    for _ in range(50):
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(child, 9)
    pytest.fail("server outlived its parent")


def test_the_server_does_not_read_our_environment_as_its_settings(monkeypatch):
    pytest.importorskip("llama_cpp.server.settings")
    from runtime.lm import server_env

    monkeypatch.setenv("CACHE", "/tmp/somewhere")  # `make demo CACHE=...` crashed the server: cache is a bool there
    monkeypatch.setenv("PORT", "1")
    env = server_env()
    assert "CACHE" not in env and "PORT" not in env and env["PATH"] == os.environ["PATH"]


def test_the_served_top_logprobs_are_the_full_sorts_first_alternatives_ties_included():
    """runtime.llama_serve swaps llama_cpp.llama's O(V log V) sort of the vocabulary for a top-TOP selection."""
    pytest.importorskip("llama_cpp.llama")
    import random

    import llama_cpp.llama

    from runtime import llama_serve

    rng = random.Random(3)
    logprobs = [round(rng.gauss(-8, 3), 1) for _ in range(5000)]  # rounded: many ties, broken by token id
    pairs = lambda: zip(logprobs, range(len(logprobs)))  # noqa: E731  (the library's call, a fresh iterator each)
    assert llama_serve.top_sorted(pairs(), reverse=True) == sorted(pairs(), reverse=True)[:llama_serve.TOP]
    assert llama_serve.top_sorted(pairs()) == sorted(pairs())  # an ascending sort stays whole
    try:
        llama_serve.select_top_logprobs()
        assert llama_cpp.llama.sorted is llama_serve.top_sorted
    finally:
        del llama_cpp.llama.sorted  # the builtin again for the rest of this process


@pytest.mark.real_lm
def test_prompt_logits_kept_only_when_asked_change_neither_text_nor_logprobs(monkeypatch):
    """runtime.llama_serve keeps every prompt token's logits only for logprobs requests; a logprobs request whose
    whole prompt an earlier request left cached (its last row not kept) replays that token instead of reading the row
    another prompt left there."""
    from llama_cpp import Llama

    from runtime import llama_serve, models

    llm = Llama(str(models.verify("qwen-0.5b")), n_ctx=1024, n_threads=os.cpu_count(), logits_all=True,
                verbose=False)
    asked = "Answer Yes or No.\nQuestion: Is the Rhine a river in Europe?\nAnswer:"
    other = "Complete the sentence with one word, the name of a city.\nThe capital city of the country France is"
    assert len(llm.tokenize(other.encode())) > len(llm.tokenize(asked.encode()))  # it overwrites the asked one's rows

    def ask(prompt, logprobs=None, tokens=6):
        out = llm.create_completion(prompt, max_tokens=tokens, temperature=0, logprobs=logprobs)["choices"][0]
        return out["logprobs"]["top_logprobs"][0] if logprobs else out["text"]

    def cached_then_asked():
        """Another prompt with logprobs, then the asked one without and with (one token each: the last call finds
        the whole prompt cached)."""
        llm.reset()
        ask(other, logprobs=5, tokens=1)
        ask(asked, tokens=1)
        return ask(asked, logprobs=5, tokens=1)

    llm.reset()
    text, library = ask(asked), cached_then_asked()
    monkeypatch.setattr(Llama, "create_completion", Llama.create_completion)  # restored after the test
    llama_serve.keep_logits_when_asked()
    llm.reset()
    assert ask(asked) == text and not llm._logits_all  # the same text, without keeping the prompt's rows
    served = cached_then_asked()
    assert list(served) == list(library)  # the asked prompt's alternatives, not the other prompt's
    assert list(served.values()) == pytest.approx(list(library.values()), abs=0.1)  # replayed in a batch of one
