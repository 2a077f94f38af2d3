"""Engine bake-off: the same prompts and questions against each candidate LM server build, one at a time.

``python -m scripts.bench_engines --engine today=lcp:.venv/bin/python --engine avx512=lcp:/venvs/x/bin/python
--engine server=server:/builds/llama-server --models qwen-0.5b qwen-1.5b --rounds 3 --sq-n 3``
An engine is ``NAME=lcp:PYTHON`` (llama-cpp-python's server, as the project runs it: ``runtime.llama_serve`` under that
interpreter) or ``NAME=server:BINARY`` (llama.cpp's ``llama-server``, one slot), both with the project's context,
threads and prompt cache (``RAG_PROMPT_CACHE_MB``). Per model and round, each engine in turn (the order rotating) is
started afresh and sent a ~1,500-token prompt: once for one token (prompt tokens/s), then again for up to 128 tokens
(the prompt already in its context: decode tokens/s). The first round also checks the features the toolkit uses, each
by a request: OpenAI chat, top-k logprobs, a GBNF ``grammar``, a JSON schema (OpenAI's ``json_schema`` form), the
prompt-prefix cache (a prompt sharing the long prefix, after another request: tokens reported cached and its time
against the first) and greedy determinism (the 128-token reply identical in every round, each on a fresh server).
Then, with ``--sq-programs``, each engine answers the same ``--sq-n`` demo dev questions with each program (greedy,
DSPy cache off, prompt cache on; the engine in its own child process, served as the embedded server is): s/q and
prompt tokens computed per question. Prints markdown tables with ratios to the first engine. Time it on an idle
machine."""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from runtime import models
from runtime.lm import _free_port, prompt_cache, prompt_cache_mb
from scripts.bench_threads import ready

N_CTX = 8192
DECODE = 128
#: The long prompt: numbered notes, then an instruction that keeps a greedy reply going for DECODE tokens.
NOTES = " ".join(f"Note {i}: the archive lists box {i * 7919 % 1000} on shelf {i % 37} of room {i % 11}."
                 for i in range(1, 81))
TASK = "\n\nCount from 1 to 300, one number per line, nothing else."
GRAMMAR = 'root ::= "xyzzy" [0-9]'
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


def engine_command(kind: str, path: str, model_file: str, alias: str, port: int, threads: int) -> list[str]:
    """The command serving ``model_file`` as ``alias`` on 127.0.0.1:``port`` with engine ``kind`` (``lcp``: the
    project's llama-cpp-python server under interpreter ``path``; ``server``: the ``llama-server`` binary ``path``)."""
    t = str(threads)
    if kind == "lcp":
        return [path, "-m", "runtime.llama_serve", "--model", model_file, "--model_alias", alias, "--host",
                "127.0.0.1", "--port", str(port), "--n_ctx", str(N_CTX), "--n_threads", t, "--n_threads_batch", t,
                *prompt_cache()]
    return [path, "-m", model_file, "--alias", alias, "--host", "127.0.0.1", "--port", str(port), "-c", str(N_CTX),
            "-np", "1", "-t", t, "-tb", t, "--cache-ram", str(prompt_cache_mb())]


def parse_engine(text: str) -> tuple[str, str, str]:
    name, _, spec = text.partition("=")
    kind, _, path = spec.partition(":")
    if not name or kind not in ("lcp", "server") or not Path(path).exists():
        raise argparse.ArgumentTypeError(f"{text!r}: give NAME=lcp:PYTHON or NAME=server:BINARY (an existing file)")
    return name, kind, path


def chat(port: int, alias: str, content: str, max_tokens: int, **extra) -> tuple[dict, float]:
    """One greedy chat completion: the reply and its wall seconds."""
    body = {"model": alias, "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
            "temperature": 0.0, **extra}
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=600) as resp:
            reply = json.loads(resp.read())
    except urllib.error.HTTPError as err:  # a refused feature: the reply says why
        reply = {"error": err.read().decode(errors="replace")[:200]}
    return reply, time.perf_counter() - t0


def text(reply: dict) -> str:
    return ((reply.get("choices") or [{}])[0].get("message") or {}).get("content") or ""


def cached(reply: dict) -> int:
    return ((reply.get("usage") or {}).get("prompt_tokens_details") or {}).get("cached_tokens") or 0


def schema_kept(reply: str) -> bool:
    try:
        return isinstance(json.loads(reply).get("n"), int)
    except (ValueError, AttributeError):
        return False


def features(port: int, alias: str, first: tuple[dict, float]) -> dict:
    """Each feature checked by a request (see the module docstring); ``first``: the long prompt's one-token reply."""
    out = {}
    reply, _ = chat(port, alias, "Name the capital of France.", 3, logprobs=True, top_logprobs=5)
    content = ((reply.get("choices") or [{}])[0].get("logprobs") or {}).get("content") or [{}]
    out["top-5 logprobs"] = len(content[0].get("top_logprobs") or []) == 5
    out["GBNF grammar"] = re.fullmatch(r"xyzzy\d", text(chat(port, alias, "Say hello.", 8, grammar=GRAMMAR)[0]))
    forms = {"yes": {"type": "json_schema", "json_schema": {"name": "n", "schema": SCHEMA}},
             "as json_object + schema only": {"type": "json_object", "schema": SCHEMA}}
    out["JSON schema"] = next((said for said, fmt in forms.items()
                               if schema_kept(text(chat(port, alias, "Give a number as JSON.", 16,
                                                        response_format=fmt)[0]))), False)
    chat(port, alias, "Say hello.", 4)  # another prompt in between: the prefix must come back from the cache
    again, seconds = chat(port, alias, NOTES + "\n\nWhich room holds box 7?", 1)
    out["prefix cache"] = (f"{cached(again)}/{again['usage']['prompt_tokens']} cached, "
                           f"{seconds / first[1]:.2f}x the first's time")
    return {k: ("yes" if v is True or (v and not isinstance(v, str)) else v or "no") for k, v in out.items()}


def speed_round(name: str, kind: str, path: str, model: str, threads: int, check: bool, log: Path) -> dict:
    """One fresh server of engine ``name`` for ``model``: prompt and decode tokens/s (and its features if
    ``check``)."""
    spec, port = models.spec(model), _free_port()
    cmd = engine_command(kind, path, str(models.verify(model)), spec.alias, port, threads)
    with open(log, "ab") as out:
        server = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        ready(f"http://127.0.0.1:{port}/v1")
        chat(port, spec.alias, "Hi", 1)  # warm: first-request allocations
        first = chat(port, spec.alias, NOTES + TASK, 1)
        decoded, seconds = chat(port, spec.alias, NOTES + TASK, DECODE)
        usage = first[0]["usage"]
        row = {"prompt_tokens": usage["prompt_tokens"],
               "pp": (usage["prompt_tokens"] - cached(first[0])) / first[1],
               "tg": decoded["usage"]["completion_tokens"] / seconds, "reply": text(decoded)}
        if check:
            row["features"] = features(port, spec.alias, first)
        return row
    finally:
        server.terminate()
        server.wait(timeout=60)


def answer_child(args) -> None:
    """A child: the demo dev questions answered by each program on engine ``args.child`` (served as the embedded
    server is), summaries to ``args.out``."""
    from evaluation.loop import evaluate
    from experiments.cli import parser
    from experiments.sessions import session
    from runtime import lm

    name, kind, path = args.child
    lm.LlamaServer.command = lambda self: engine_command(kind, path, str(models.verify(self.model)), self.spec.alias,
                                                        self.port, self.n_threads)
    flags = ["--dataset", "demo", "--train", "0", "--dev", str(args.sq_n + 1), "--test", "0", "--lm",
             f"local:{args.model}", "--no-cache"]
    s = session(parser("bench").parse_args(flags), needs_search=True)
    warm, dev = s.splits.dev[:1], s.splits.dev[1:]
    evaluate(s.build("rag"), warm, s.metrics, retries=0, desc="warm-up")  # server, embedder and index up
    out = {}
    for program in args.sq_programs:
        records, summary = evaluate(s.build(program), dev, s.metrics, retries=0, desc=f"{program} {name}")
        out[program] = {"s_q": summary["seconds"], "computed": summary["prompt_tokens_computed"],
                        "sent": summary["prompt_tokens"], "failed": summary["failed_examples"],
                        "answers": [r["answer"] for r in records]}
    Path(args.out).write_text(json.dumps(out))


def ratio(value: float, base: float) -> str:
    return f"{value / base:.2f}x" if base else "-"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--engine", type=parse_engine, action="append", required=True,
                   help="NAME=lcp:PYTHON or NAME=server:BINARY; the first is the reference of the ratios")
    p.add_argument("--models", nargs="+", default=["qwen-0.5b"], choices=list(models.MODELS))
    p.add_argument("--rounds", type=int, default=3, help="fresh servers per engine and model for the tokens/s")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--sq-programs", nargs="*", default=[], help="programs timed on the demo dev questions")
    p.add_argument("--sq-n", type=int, default=3, help="demo dev questions per program")
    p.add_argument("--child", type=parse_engine, help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return answer_child(args)
    engines = args.engine
    log = Path(tempfile.mkdtemp(prefix="bench_engines-")) / "servers.log"
    print(f"server logs: {log}", file=sys.stderr)
    for model in args.models:
        if args.rounds:
            speed(args, engines, model, log)
        if args.sq_programs:
            sq(args, engines, model)


def speed(args, engines, model: str, log: Path) -> None:
    """The tokens/s and features table: ``args.rounds`` fresh servers per engine, the order rotating."""
    runs = {name: [] for name, _, _ in engines}
    for r in range(args.rounds):
        for name, kind, path in engines[r % len(engines):] + engines[:r % len(engines)]:
            runs[name].append(speed_round(name, kind, path, model, args.threads, r == 0, log))
            print(f"{model} round {r + 1} {name}: pp {runs[name][-1]['pp']:.1f} tg {runs[name][-1]['tg']:.1f}",
                  file=sys.stderr)
    base = engines[0][0]
    med = {name: {k: statistics.median(run[k] for run in rs) for k in ("pp", "tg")} for name, rs in runs.items()}
    print(f"\n{model}, {runs[base][0]['prompt_tokens']}-token prompt, {args.threads} threads, {args.rounds} fresh "
          f"servers per engine (median, min-max)\n")
    names = list(runs[base][0]["features"])
    print("| engine | prompt tok/s | vs " + base + " | decode tok/s | vs " + base + " | "
          + " | ".join(names) + " | greedy reply identical across runs |")
    print("|---" * (6 + len(names)) + "|")
    for name, rs in runs.items():
        pp, tg = [r["pp"] for r in rs], [r["tg"] for r in rs]
        print(f"| {name} | {med[name]['pp']:.1f} ({min(pp):.1f}-{max(pp):.1f}) | "
              f"{ratio(med[name]['pp'], med[base]['pp'])} | {med[name]['tg']:.1f} ({min(tg):.1f}-{max(tg):.1f}) | "
              f"{ratio(med[name]['tg'], med[base]['tg'])} | "
              + " | ".join(str(rs[0]["features"][n]) for n in names)
              + f" | {'yes' if len({r['reply'] for r in rs}) == 1 else 'NO'} |")


def sq(args, engines, model: str) -> None:
    """The s/q table: each engine in its own child process (``answer_child``), one after the other."""
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, kind, path in engines:
            out = Path(tmp) / f"{name}.json"
            child = [sys.executable, "-m", "scripts.bench_engines", "--engine", f"{name}={kind}:{path}", "--child",
                     f"{name}={kind}:{path}", "--model", model, "--out", str(out), "--sq-n", str(args.sq_n),
                     "--sq-programs", *args.sq_programs]
            subprocess.run(child, env=os.environ | {"RAG_SHARED_SERVER": "0"}, check=True)
            results[name] = json.loads(out.read_text())
    base = engines[0][0]
    print(f"\n{model}, {args.sq_n} demo dev questions per program (after one warm-up question), greedy, DSPy cache "
          "off, prompt cache "
          f"{prompt_cache_mb()} MB\n")
    print(f"| program | engine | s/q | vs {base} | prompt tok/q sent | computed | failed | answers as {base}'s |")
    print("|---|---|---|---|---|---|---|---|")
    for program in args.sq_programs:
        ref = results[base][program]
        for name, _, _ in engines:
            r = results[name][program]
            same = sum(a == b for a, b in zip(r["answers"], ref["answers"]))
            print(f"| {program} | {name} | {r['s_q']:.1f} | {ratio(r['s_q'], ref['s_q'])} | {r['sent']:.0f} | "
                  f"{r['computed']:.0f} | {r['failed']} | {same}/{len(ref['answers'])} |")


if __name__ == "__main__":
    main()
