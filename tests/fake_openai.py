"""A local fake OpenAI-compatible chat endpoint for tests and benchmarks: fixed latency, deterministic answers; with
``context`` (tokens) a prompt that does not fit is refused with llama-cpp-python's HTTP 400; with ``refuse`` (401,
403) every chat request is refused with that status, as an endpoint that does not accept the key.

It reads the output fields DSPy's ChatAdapter asks for and fills each with a value that parses: a choice among a
``Literal``'s options or ``True``/``False`` picked by a hash of the prompt, ``1`` for numbers, ``[]`` for lists,
otherwise a short text derived from the prompt. The same prompt always gets the same reply, and usage is reported
(prompt characters / 4, completion characters / 4; with ``cached`` that many of the prompt's reported cached, as
OpenAI's ``usage.prompt_tokens_details``; with ``timings`` those as ``usage.timings``), so runs can be compared record
for record.

``with FakeOpenAI(latency=0.2) as server: dspy.LM("openai/fake", api_base=server.api_base, api_key="x")``; with
``hold`` each chat request waits for :meth:`FakeOpenAI.release` (a test decides when replies come, and
:meth:`FakeOpenAI.wait_for` waits until requests are in flight)."""
from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FIELD = re.compile(r"`\[\[ ## (\w+) ## \]\]`")


def _value(name: str, system: str, digest: int) -> str:
    note = re.search(r"\{" + re.escape(name) + r"\}\s+# note: the value you produce (.*)", system)
    rule = note.group(1) if note else ""
    if rule.startswith("must be True or False"):
        return ("True", "False")[digest % 2]
    if rule.startswith("must be a single"):
        return "1"
    if "one of:" in rule:
        options = [o.strip() for o in rule.split("one of:", 1)[1].split(";")]
        return options[digest % len(options)]
    if '"array"' in rule:
        return "[]"
    if "JSON schema" in rule:
        return "{}"
    return f"{name} {digest % 997}"


def reply(messages: list[dict]) -> str:
    """The completion for a ChatAdapter prompt: every requested output field, then the completion marker."""
    system = next((m["content"] for m in messages if m["role"] == "system"), "")
    last = messages[-1]["content"] if messages else ""
    text = json.dumps(messages, sort_keys=True)
    digest = int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)
    fields = [f for f in dict.fromkeys(FIELD.findall(last if isinstance(last, str) else "")) if f != "completed"]
    body = "".join(f"[[ ## {f} ## ]]\n{_value(f, system, digest)}\n\n" for f in fields)
    return body + "[[ ## completed ## ]]"


class FakeOpenAI:
    """``/v1/chat/completions`` and ``/v1/models`` on 127.0.0.1 (free port), each request held ``latency`` s."""

    def __init__(self, latency: float = 0.0, context: int | None = None, cached: int = 0, refuse: int = 0,
                 timings: dict | None = None, hold: bool = False):
        self.latency, self.requests, self.context, self.cached, self.refuse = latency, 0, context, cached, refuse
        self.timings = timings  # reported in every reply's usage, as the embedded server does
        self.keys: list[str | None] = []  # each chat request's Authorization header
        self.gate = threading.Semaphore(0) if hold else None
        self.arrived = lock = threading.Condition()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, payload: dict, status: int = 200) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._send({"object": "list", "data": [{"id": "fake", "object": "model"}]})

            def do_POST(self):
                request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                with lock:
                    outer.requests += 1
                    outer.keys.append(self.headers.get("Authorization"))
                    lock.notify_all()
                if outer.refuse:  # OpenAI's reply to a key it does not accept (401) or a model it forbids (403)
                    return self._send({"error": {"code": "invalid_api_key", "type": "invalid_request_error",
                                                 "message": "Incorrect API key provided."}}, status=outer.refuse)
                if outer.gate:
                    outer.gate.acquire()
                time.sleep(outer.latency)
                messages = request.get("messages", [])
                text = reply(messages)
                prompt = sum(len(str(m.get("content", ""))) for m in messages) // 4
                answer = request.get("max_tokens") or request.get("max_completion_tokens") or 0
                if outer.context and prompt + answer > outer.context:  # llama-cpp-python's reply
                    return self._send({"error": {"code": "context_length_exceeded", "type": "invalid_request_error",
                                                 "message": f"This model's maximum context length is {outer.context} "
                                                            f"tokens. However, you requested {prompt + answer} tokens "
                                                            f"({prompt} in the messages, {answer} in the completion). "
                                                            "Please reduce the length of the messages or completion."}},
                                      status=400)
                self._send({"id": "fake", "object": "chat.completion", "created": 0, "model": request.get("model"),
                            "choices": [{"index": 0, "finish_reason": "stop",
                                         "message": {"role": "assistant", "content": text}}],
                            "usage": {"prompt_tokens": prompt, "completion_tokens": len(text) // 4,
                                      "total_tokens": prompt + len(text) // 4,
                                      **({"prompt_tokens_details": {"cached_tokens": min(outer.cached, prompt)}}
                                         if outer.cached else {}),
                                      **({"timings": outer.timings} if outer.timings else {})}})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def wait_for(self, requests: int) -> None:
        """Block until ``requests`` chat requests have arrived."""
        with self.arrived:
            self.arrived.wait_for(lambda: self.requests >= requests)

    def release(self, replies: int) -> None:
        """Let ``replies`` held requests (``hold``) be answered."""
        for _ in range(replies):
            self.gate.release()

    def __enter__(self) -> "FakeOpenAI":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
