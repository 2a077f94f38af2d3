"""What a trace per question costs: the same evaluation with ``--no-trace`` and with ``--trace`` (the default).

``python -m scripts.bench_tracing [--program seal --n 10] [--latency 0.5 | --lm local:qwen-0.5b]``
Runs ``evaluate.py`` on the bundled demo set twice, uncached, each into a fresh MLflow store and checkpoint folder
(so neither resumes the other), against a local fake OpenAI-compatible server with a fixed latency per request, or
``--lm`` (a real model: time it on an idle machine). Prints wall seconds and store bytes per question of each run and
their ratios, and checks that both runs gave the same records."""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import tempfile
import time
from pathlib import Path

import programs
from experiments.sessions import session
from experiments.eval_run import evaluate_program, parser
from tests.fake_openai import FakeOpenAI


def store_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def fresh_home() -> Path:
    """A new MLflow store and checkpoint folder for the next evaluation (MLflow keeps its URI in the environment)."""
    home = Path(tempfile.mkdtemp(prefix="bench-tracing-"))
    os.environ["RAG_MLRUNS"], os.environ["RAG_PROJECT_CACHE"] = str(home / "mlruns"), str(home / "cache")
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{home / 'mlruns' / 'mlflow.db'}"
    return home


def evaluated(flags: list[str]) -> None:
    """One program evaluated on ``--split`` as ``evaluate.py`` does with ``flags``."""
    args = parser(__doc__.splitlines()[0]).parse_args(flags)
    evaluate_program(session(args, programs.spec(args.program).needs_search), None, {})


def one_run(flags: list[str], trace: bool, n: int) -> dict:
    """Evaluate into a fresh store; wall seconds and store bytes per question, and the answers."""
    home = fresh_home()
    t0 = time.perf_counter()
    evaluated(flags + ["--trace" if trace else "--no-trace"])
    seconds = time.perf_counter() - t0
    checkpoint = next((home / "cache" / "evals").glob("*.jsonl"))
    answers = [json.loads(line)["answer"] for line in checkpoint.read_text().splitlines()]
    return {"trace": trace, "s_per_q": seconds / n, "bytes_per_q": store_bytes(home / "mlruns") / n,
            "answers": answers}


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--program", default="seal")
    p.add_argument("--n", type=int, default=10, help="demo questions (at most 20)")
    p.add_argument("--latency", type=float, default=0.5, help="seconds the fake server holds every request")
    p.add_argument("--lm", help="a real LM instead of the fake server (e.g. local:qwen-0.5b)")
    args = p.parse_args(argv)
    flags = ["--program", args.program, "--dataset", "demo", "--split", "dev", "--train", "0", "--dev", str(args.n),
             "--test", "0", "--k", "2", "--loops", "2", "--no-cache", "--experiment", "bench-tracing"]
    with (contextlib.nullcontext() if args.lm else FakeOpenAI(latency=args.latency)) as server:
        flags += ["--lm", args.lm] if args.lm else ["--lm", "openai/fake", "--api-base", server.api_base]
        warm = flags.copy()
        warm[warm.index("--dev") + 1] = "1"
        fresh_home()
        evaluated(warm + ["--no-trace"])  # warm-up: imports, index, client
        off, on = one_run(flags, False, args.n), one_run(flags, True, args.n)
    print(f"\n| run | s/question | store KB/question |\n|---|---|---|\n"
          f"| --no-trace | {off['s_per_q']:.3f} | {off['bytes_per_q'] / 1024:.1f} |\n"
          f"| --trace | {on['s_per_q']:.3f} | {on['bytes_per_q'] / 1024:.1f} |\n"
          f"| ratio | {on['s_per_q'] / off['s_per_q']:.3f} | {on['bytes_per_q'] / off['bytes_per_q']:.2f} |\n"
          f"\n{args.program}, {args.n} demo questions, " + (args.lm or f"fake server at {args.latency} s/request")
          + f"; same answers: {off['answers'] == on['answers']}")
    return [off, on]


if __name__ == "__main__":
    main()
