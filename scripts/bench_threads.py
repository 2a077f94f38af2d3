"""Speed-up of ``--threads N``: the same questions evaluated once per N, against a local fake OpenAI-compatible server
with a fixed per-request latency (default) or a real endpoint.

``python -m scripts.bench_threads --latency 0.2 --threads 1 4 16 --n 16``
``python -m scripts.bench_threads --lm local:qwen-0.5b --threads 1 2 4 --n 8`` (the embedded server)
``python -m scripts.bench_threads --lm openai/qwen-0.5b --api-base http://127.0.0.1:8090/v1 --threads 1 2 4``
(e.g. llama.cpp's ``llama-server --parallel 4``)
Evaluates ``--program`` (default ``seal``: several LM calls per question) on the first N questions of
``--dataset``'s dev split once per N, uncached, and prints one markdown table: wall seconds, speed-up over the first N,
LM seconds per question, prompt tokens computed, and whether every per-example record (answer, scores, passages,
trace, LM calls, tokens) equals the first N's, timings aside. Time it on an idle machine."""
from __future__ import annotations

import argparse
import contextlib
import time

from tests.fake_openai import FakeOpenAI
from experiments.cli import parser
from experiments.sessions import session
from evaluation.loop import evaluate

TIMINGS = ("seconds", "lm_seconds")


def comparable(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMINGS} for r in records]


def differing(records: list[dict], reference: list[dict]) -> int:
    """Questions whose answer differs from the reference run's."""
    return sum(a["answer"] != b["answer"] for a, b in zip(records, reference))


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--latency", type=float, default=0.2, help="seconds the fake server holds every request")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 4, 16])
    p.add_argument("--n", type=int, default=16, help="dev questions")
    p.add_argument("--program", default="seal")
    p.add_argument("--dataset", default="demo")
    p.add_argument("--lm", help="a real LM (local:... or openai/... with --api-base) instead of the fake server")
    p.add_argument("--api-base")
    args = p.parse_args(argv)
    rows = []
    with contextlib.ExitStack() as stack:
        if args.lm:
            lm = ["--lm", args.lm] + (["--api-base", args.api_base] if args.api_base else [])
            where = f"{args.lm}" + (f" at {args.api_base}" if args.api_base else "")
        else:
            server = stack.enter_context(FakeOpenAI(latency=args.latency))
            lm, where = ["--lm", "openai/fake", "--api-base", server.api_base], \
                f"fake server latency {args.latency} s per request"
        flags = ["--dataset", args.dataset, "--train", "0", "--dev", str(args.n + 1), "--test", "0", "--k", "2",
                 "--loops", "2", *lm, "--no-cache"]
        s = session(parser("bench").parse_args(flags), needs_search=True)
        warm, dev = s.splits.dev[:1], s.splits.dev[1:]
        evaluate(s.build(args.program), warm, s.metrics, k=2, desc="warm-up")  # imports, index, client, server
        reference = None
        for n in args.threads:
            t0 = time.perf_counter()
            records, summary = evaluate(s.build(args.program), dev, s.metrics, k=2, threads=n,
                                        desc=f"threads={n}")
            wall = time.perf_counter() - t0
            reference = reference or (wall, comparable(records))
            rows.append({"threads": n, "wall_s": wall, "speedup": reference[0] / wall,
                         "lm_calls": sum(r["lm_calls"] for r in records), "lm_s_per_q": summary["lm_seconds"],
                         "computed": summary.get("prompt_tokens_computed"), "failed": summary["failed_examples"],
                         "answers_differ": differing(records, reference[1]),
                         "identical": comparable(records) == reference[1]})
    print(f"\n{args.program} on {args.n} {args.dataset} dev questions, {where}\n")
    print("| threads | wall s | speed-up | metered LM calls | LM s/q | prompt tok/q computed | failed "
          "| answers differing from N=1 | records identical to N=1 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        computed = "–" if r["computed"] is None else f"{r['computed']:.0f}"
        print(f"| {r['threads']} | {r['wall_s']:.1f} | {r['speedup']:.2f}x | {r['lm_calls']} | {r['lm_s_per_q']:.2f} | "
              f"{computed} | {r['failed']} | {r['answers_differ']} | {'yes' if r['identical'] else 'NO'} |")
    return rows


if __name__ == "__main__":
    main()
