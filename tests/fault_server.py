"""A fault-injecting OpenAI-compatible chat endpoint for tests, on 127.0.0.1.

``python tests/fault_server.py --port P --log requests.jsonl --malformed 0.1 --die-at 40`` answers
``/v1/chat/completions`` in DSPy's chat format (every requested output field filled with ``--answer``; JSON when
the request asks for a JSON response, as DSPy's JSONAdapter does) and injects faults, drawn per request from
``--seed``: a share of completions without any field markers (``--malformed``), of HTTP 500s (``--error``) and of
answers delayed by ``--slow-seconds`` (``--slow``; ``--stall-at N``: the N-th request only). ``--die-at N,M`` exits
the process abruptly on the N-th and M-th request (counted over restarts through ``--log``), as a crashing server
would; ``--outage N:M`` answers requests N to M with HTTP 503, as an endpoint that is down; ``--hold N:M`` never
answers requests N to M (the client gives up or is stopped); ``--status CODE`` answers every request with that HTTP
status (401: a wrong key); ``--judge-outage N:M``
does so for the verdicts among them only (a request for a ``bool`` output field, as a judge's). ``--answers FILE``
(a JSON object question -> answer) picks the answer by the prompt's question; ``--unreadable FILE`` (a JSON list of
questions) answers every greedy request about those questions malformed.

A ``bool`` output field gets a verdict: whether one of the prompt's ``reference_answers`` occurs in its
``predicted_answer`` (any case). A sampled request (temperature > 0, as a retry after an unreadable reply) gets
each text field with :data:`SAMPLED` appended, so a sampled answer shows in the records; answer metrics that drop
punctuation (EM, F1) score it as the greedy one.

Every request is appended to ``--log`` as one JSON line (``n``, the ``question`` field of the prompt, the output
fields asked for, the number of messages, the temperature, the fault), which is how tests count calls. Bounded: it
exits after ``--max-requests`` requests or ``--max-seconds`` seconds.
"""
from __future__ import annotations

import argparse
import http.server
import json
import os
import random
import re
import sys
import threading
import time
from pathlib import Path

OUTPUTS = re.compile(r"Your output fields are:(.*?)(?:All interactions|$)", re.S)
#: Appended to every text field of a sampled reply.
SAMPLED = "!"


def requested_fields(messages: list[dict]) -> dict[str, str]:
    """The output fields the system prompt asks for, name -> type (``answer: str`` when it names none)."""
    system = next((m["content"] for m in messages if m["role"] == "system"), "")
    block = OUTPUTS.search(system)
    return dict(re.findall(r"`(\w+)` \(([^)]*)\)", block.group(1))) if block else {"answer": "str"}


def field_of(messages: list[dict], name: str) -> str:
    """The value of input field ``name`` in the last user message ('' when it has none)."""
    user = [m["content"] for m in messages if m["role"] == "user"]
    found = re.findall(rf"\[\[ ## {name} ## \]\]\n(.*?)(?:\n\n|\n\[\[|$)", user[-1], re.S) if user else []
    return found[-1].strip() if found else ""


def question_of(messages: list[dict]) -> str:
    return field_of(messages, "question")


def verdict(messages: list[dict]) -> bool:
    """Whether a reference answer occurs in the predicted answer (the judge this server plays)."""
    try:
        references = json.loads(field_of(messages, "reference_answers") or "[]")
    except ValueError:
        return False
    predicted = field_of(messages, "predicted_answer").casefold()
    return any(str(ref).casefold() in predicted for ref in references)


def completion(content: str) -> bytes:
    return json.dumps({"id": "fault", "object": "chat.completion", "created": int(time.time()), "model": "fault",
                       "choices": [{"index": 0, "finish_reason": "stop",
                                    "message": {"role": "assistant", "content": content}}],
                       "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}).encode()


class FaultServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, args: argparse.Namespace):
        super().__init__(("127.0.0.1", args.port), Handler)
        self.args, self.lock = args, threading.Lock()
        self.log = Path(args.log)
        self.n = len(self.log.read_text().splitlines()) if self.log.exists() else 0
        self.die_at = {int(x) for x in args.die_at.split(",") if x}
        self.outage, self.judge_outage, self.hold = span(args.outage), span(args.judge_outage), span(args.hold)
        self.answers = json.loads(Path(args.answers).read_text()) if args.answers else {}
        self.unreadable = set(json.loads(Path(args.unreadable).read_text())) if args.unreadable else set()

    def draw(self, question: str, fields: dict[str, str], messages: int, temperature) -> tuple[int, str]:
        """The request's number and fault (``ok | malformed | error | slow | die | outage | judge-outage | hold |
        status N``); logged before answering."""
        with self.lock:
            self.n += 1
            rng, a = random.Random(f"{self.args.seed}:{self.n}"), self.args
            roll = rng.random()
            fault = ("die" if self.n in self.die_at else "outage" if self.n in self.outage
                     else "hold" if self.n in self.hold else f"status {a.status}" if a.status
                     else "judge-outage" if self.n in self.judge_outage and "bool" in fields.values()
                     else "slow" if self.n == a.stall_at
                     else "malformed" if roll < a.malformed or (question in self.unreadable and not temperature)
                     else "error" if roll < a.malformed + a.error else "slow" if roll < a.malformed + a.error + a.slow
                     else "ok")
            with open(self.log, "a") as fh:
                fh.write(json.dumps({"n": self.n, "question": question, "fields": list(fields), "messages": messages,
                                     "temperature": temperature, "fault": fault, "pid": os.getpid()}) + "\n")
            return self.n, fault


def span(text: str) -> range:
    """``N:M`` (or ``N``) as the request numbers N to M; '' as none."""
    first, _, last = text.partition(":")
    return range(int(first), int(last or first) + 1) if first else range(0)


class Handler(http.server.BaseHTTPRequestHandler):
    server: FaultServer

    def do_GET(self):
        self.reply(200, json.dumps({"object": "list", "data": [{"id": self.server.args.alias,
                                                                 "object": "model"}]}).encode())

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        messages, temperature = body.get("messages", []), body.get("temperature")
        question, fields = question_of(messages), requested_fields(messages)
        n, fault = self.server.draw(question, fields, len(messages), temperature)
        args = self.server.args
        if fault == "die":
            print(f"fault server: dying abruptly at request {n}", file=sys.stderr, flush=True)
            os._exit(1)
        if fault == "error":
            return self.reply(500, b'{"error": {"message": "injected server error"}}')
        if fault in ("outage", "judge-outage"):
            return self.reply(503, b'{"error": {"message": "injected outage: service unavailable"}}')
        if fault == "hold":
            threading.Event().wait()  # never answered (a daemon thread: it ends with the server)
        if fault.startswith("status"):
            return self.reply(args.status, b'{"error": {"message": "injected: invalid API key"}}')
        if fault == "slow":
            time.sleep(args.slow_seconds)
        answer = self.server.answers.get(question, args.answer) + (SAMPLED if temperature else "")
        values = {f: verdict(messages) if kind == "bool" else answer for f, kind in fields.items()}
        if fault == "malformed":
            content = "Sorry, I am not sure what you mean."
        elif body.get("response_format") or "Respond with a JSON object" in str(messages[-1:]):  # JSONAdapter
            content = json.dumps(values)
        else:
            content = "".join(f"[[ ## {f} ## ]]\n{v}\n\n" for f, v in values.items()) + "[[ ## completed ## ]]"
        self.reply(200, completion(content))
        if n >= args.max_requests:
            threading.Thread(target=self.server.shutdown, daemon=True).start()

    def reply(self, status: int, payload: bytes):
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except OSError:  # the client gave up (timeout) before a slow answer
            pass

    def log_message(self, *args):
        pass


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--alias", default="fault", help="the model id /v1/models lists (what a client waits for)")
    p.add_argument("--log", required=True, help="request log (JSONL), appended")
    p.add_argument("--answer", default="yes", help="text put in every output field")
    p.add_argument("--malformed", type=float, default=0.0)
    p.add_argument("--error", type=float, default=0.0)
    p.add_argument("--slow", type=float, default=0.0)
    p.add_argument("--slow-seconds", type=float, default=5.0)
    p.add_argument("--stall-at", type=int, default=0, help="request number answered after --slow-seconds")
    p.add_argument("--die-at", default="", help="request numbers at which the process exits abruptly")
    p.add_argument("--outage", default="", help="N:M -- requests N to M get HTTP 503")
    p.add_argument("--judge-outage", default="", help="N:M -- the verdict requests among N to M get HTTP 503")
    p.add_argument("--hold", default="", help="N:M -- requests N to M are never answered")
    p.add_argument("--status", type=int, default=0, help="answer every request with this HTTP status (e.g. 401)")
    p.add_argument("--answers", help="JSON file: question -> answer (default --answer)")
    p.add_argument("--unreadable", help="JSON file: a list of questions whose greedy replies are all malformed")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-requests", type=int, default=5000)
    p.add_argument("--max-seconds", type=float, default=300)
    return p.parse_args(argv)


def main(argv=None) -> None:
    server = FaultServer(parse(argv))
    threading.Timer(server.args.max_seconds, lambda: os._exit(0)).start()
    print(f"fault server on 127.0.0.1:{server.server_port}", file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
