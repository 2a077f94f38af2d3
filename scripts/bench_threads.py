"""Speed-up of ``--threads N`` against a local fake OpenAI-compatible server with a fixed per-request latency.

``python -m scripts.bench_threads --latency 0.2 --threads 1 4 16 --n 16``
Evaluates ``seal`` (several LM calls per question) on the bundled demo set once per N, uncached, and prints one
markdown table: wall seconds, speed-up over the first N, LM seconds per question, and whether every per-example
record (answer, scores, passages, trace, LM calls, tokens) equals the first N's, timings aside."""
from __future__ import annotations

import argparse
import time

from tests.fake_openai import FakeOpenAI
from experiments.cli import parser
from experiments.sessions import session
from evaluation.loop import evaluate

TIMINGS = ("seconds", "lm_seconds")


def comparable(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMINGS} for r in records]


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--latency", type=float, default=0.2, help="seconds the fake server holds every request")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 4, 16])
    p.add_argument("--n", type=int, default=16, help="demo questions (at most 20)")
    p.add_argument("--program", default="seal")
    args = p.parse_args(argv)
    rows = []
    with FakeOpenAI(latency=args.latency) as server:
        flags = ["--dataset", "demo", "--train", "0", "--dev", str(args.n), "--test", "0", "--k", "2", "--loops", "2",
                 "--lm", "openai/fake", "--api-base", server.api_base, "--no-cache"]
        s = session(parser("bench").parse_args(flags), needs_search=True)
        evaluate(s.build(args.program), s.splits.dev[:1], s.metrics, k=2, desc="warm-up")  # imports, index, client
        reference = None
        for n in args.threads:
            requests0, t0 = server.requests, time.perf_counter()
            records, summary = evaluate(s.build(args.program), s.splits.dev, s.metrics, k=2, threads=n,
                                        desc=f"threads={n}")
            wall = time.perf_counter() - t0
            reference = reference or (wall, comparable(records))
            rows.append({"threads": n, "wall_s": wall, "speedup": reference[0] / wall,
                         "requests": server.requests - requests0, "lm_calls": sum(r["lm_calls"] for r in records),
                         "lm_s_per_q": summary["lm_seconds"], "identical": comparable(records) == reference[1]})
    print(f"\n{args.program} on {args.n} demo questions, fake server latency {args.latency} s per request\n")
    print("| threads | wall s | speed-up | server requests | metered LM calls | LM s/q | records identical to N=1 |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['threads']} | {r['wall_s']:.1f} | {r['speedup']:.1f}x | {r['requests']} | {r['lm_calls']} | "
              f"{r['lm_s_per_q']:.2f} | {'yes' if r['identical'] else 'NO'} |")
    return rows


if __name__ == "__main__":
    main()
