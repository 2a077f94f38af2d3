"""Speed-up of ``--threads N``: the same questions evaluated once per N, each N in its own process against a server
started afresh (a cold prompt cache: no N reads prompts an earlier N computed), greedy and uncached.

``python -m scripts.bench_threads --latency 0.2 --threads 1 4 16 --n 16`` (a local fake server, fixed latency)
``python -m scripts.bench_threads --lm local:qwen-0.5b --threads 1 2 4 --n 8`` (the embedded server, a private one)
``python -m scripts.bench_threads --lm openai/qwen-0.5b --threads 1 2 4 --serve "llama-server -m M.gguf --port {port}
--parallel 4"`` (any OpenAI-compatible server the command starts, on 127.0.0.1:{port})
Evaluates ``--program`` (default ``seal``: several LM calls per question) on the first N questions of
``--dataset``'s dev split (after one warm-up question) and prints one markdown table: wall seconds, speed-up over the
first N, LM seconds per question, prompt tokens computed, and whether every per-example record (answer, scores,
passages, trace, LM calls, tokens) equals the first N's, timings aside. Time it on an idle machine."""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from tests.fake_openai import FakeOpenAI

COST = ("prompt_tokens_computed",)  # depends on what the server had cached, not on the answer


def comparable(records: list[dict]) -> list[dict]:
    from evaluation.loop import TIMINGS

    return [{k: v for k, v in r.items() if k not in TIMINGS + COST} for r in records]


def one(args) -> None:
    """A child: ``args.one`` threads over the dev questions, the records, summary and wall time to ``args.out``."""
    from evaluation.loop import evaluate
    from experiments.cli import parser
    from experiments.sessions import session

    flags = ["--dataset", args.dataset, "--train", "0", "--dev", str(args.n + 1), "--test", "0", "--k", "2",
             "--loops", "2", "--lm", args.lm, "--no-cache"] + (["--api-base", args.api_base] if args.api_base else [])
    s = session(parser("bench").parse_args(flags), needs_search=True)
    warm, dev = s.splits.dev[:1], s.splits.dev[1:]
    evaluate(s.build(args.program), warm, s.metrics, k=2, desc="warm-up")  # imports, index, client, server
    t0 = time.perf_counter()
    records, summary = evaluate(s.build(args.program), dev, s.metrics, k=2, threads=args.one,
                                desc=f"threads={args.one}")
    Path(args.out).write_text(json.dumps({"wall": time.perf_counter() - t0, "records": records,
                                          "summary": summary}, default=str))


def ready(api_base: str, timeout: float = 300) -> None:
    """Wait until the server at ``api_base`` lists its models."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"{api_base}/models", timeout=5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit(f"error: the --serve server did not answer {api_base}/models in {timeout:.0f} s")
            time.sleep(1)


@contextlib.contextmanager
def served(command: str | None, port: int):
    """The ``--serve`` command started on ``port`` for one setting and stopped after it (nothing when None)."""
    if command is None:
        yield
        return
    with open(os.devnull, "w") as quiet:
        server = subprocess.Popen(shlex.split(command.replace("{port}", str(port))), stdout=quiet, stderr=quiet)
    try:
        ready(f"http://127.0.0.1:{port}/v1")
        yield
    finally:
        server.terminate()
        server.wait(timeout=60)


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--latency", type=float, default=0.2, help="seconds the fake server holds every request")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 4, 16])
    p.add_argument("--n", type=int, default=16, help="dev questions")
    p.add_argument("--program", default="seal")
    p.add_argument("--dataset", default="demo")
    p.add_argument("--lm", help="a real LM (local:... or openai/... with --serve or --api-base) instead of the fake")
    p.add_argument("--api-base", help="the endpoint of --lm (set by --serve)")
    p.add_argument("--serve", help="a command serving --lm on 127.0.0.1:{port}, started afresh for each N")
    p.add_argument("--port", type=int, default=8090, help="the --serve server's port")
    p.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a child: one N
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.one:
        return one(args)
    rows, reference = [], None
    with contextlib.ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        if args.serve:
            lm, where = ["--lm", args.lm, "--api-base", f"http://127.0.0.1:{args.port}/v1"], f"`{args.serve}`"
        elif args.lm:
            lm, where = ["--lm", args.lm] + (["--api-base", args.api_base] if args.api_base else []), args.lm
        else:
            server = stack.enter_context(FakeOpenAI(latency=args.latency))
            lm = ["--lm", "openai/fake", "--api-base", server.api_base]
            where = f"fake server, {args.latency} s a request"
        for n in args.threads:
            out = Path(tmp) / f"{n}.json"
            child = [sys.executable, "-m", "scripts.bench_threads", "--program", args.program, "--dataset",
                     args.dataset, "--n", str(args.n), *lm, "--one", str(n), "--out", str(out)]
            with served(args.serve, args.port):
                subprocess.run(child, env=os.environ | {"RAG_SHARED_SERVER": "0"}, check=True)
            run = json.loads(out.read_text())
            records, summary = run["records"], run["summary"]
            reference = reference or (run["wall"], comparable(records), records)
            rows.append({"threads": n, "wall_s": run["wall"], "speedup": reference[0] / run["wall"],
                         "lm_calls": sum(r["lm_calls"] for r in records), "lm_s_per_q": summary["lm_seconds"],
                         "computed": summary.get("prompt_tokens_computed"), "failed": summary["failed_examples"],
                         "answers_differ": sum(a["answer"] != b["answer"] for a, b in zip(records, reference[2])),
                         "identical": comparable(records) == reference[1]})
    print(f"\n{args.program} on {args.n} {args.dataset} dev questions, {where}; each N in its own process and a "
          "fresh server\n")
    print("| threads | wall s | speed-up | metered LM calls | LM s/q | prompt tok/q computed | failed "
          "| answers differing from the first N | records identical to the first N |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        computed = "–" if r["computed"] is None else f"{r['computed']:.0f}"
        print(f"| {r['threads']} | {r['wall_s']:.1f} | {r['speedup']:.2f}x | {r['lm_calls']} | {r['lm_s_per_q']:.2f} | "
              f"{computed} | {r['failed']} | {r['answers_differ']} | {'yes' if r['identical'] else 'NO'} |")
    return rows


if __name__ == "__main__":
    main()
