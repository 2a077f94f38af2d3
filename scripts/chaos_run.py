"""Chaos run: an evaluation disturbed every way at once must end with the records of an undisturbed one.

``python -m scripts.chaos_run --n 200`` evaluates N questions (the bundled ``demo`` questions, numbered copies of
them past 20) with ``--program`` (default ``rag``) on EM, F1 and an LLM judge (``evaluation.metrics.Judge``), against
``tests/fault_server.py`` run as the embedded LM server (``tests/fault_host.py``: the project's host, leases and
restarts around it). The server answers from a question -> answer table (a third right, a third "unknown", a third
"probably <right>", which the judge decides), so scores differ by question; a sampled request (temperature > 0: a
retry after an unreadable reply) gets its answer marked (``fault_server.SAMPLED``). Twice, each in fresh caches:

- calm: no faults;
- chaos: 10% malformed replies, and every greedy reply about one question in ten (so those are retried sampled);
  two server deaths (the project restarts the server); an endpoint outage (HTTP 503 for 12 requests: five questions
  in a row fail, the run stops with exit 3); a judge outage (503 to the verdicts among 16 requests: those questions
  are left retryable); a vector-store outage (6 searches raise ``StoreUnavailable``: retryable); a retriever bug
  (from one search on, searches raise ``ZeroDivisionError``: the run stops with exit 4 naming the question, and the
  processes after it run without the bug, as after a fix); a SIGTERM while a request is in flight; a SIGKILL of the
  writer halfway through a checkpoint line (that process writes the line in two synced halves with a pause between,
  as on a slow disk; the kill comes in the pause), while it holds the checkpoint a second writer is refused (exit 75)
  and a third waits for it (``wait=True``), then resumes.

Then the faults a user meets at the command line, each an ``evaluate.py`` run of its own against a fault server:
an endpoint that answers HTTP 401 (expected: it stops at once, one line, exit 2 or 4, nothing recorded); a data file
replaced with its modification time kept, as ``cp -p`` does (expected: the run asks its questions again, with the new
gold); a Ctrl-C with 4 questions in flight under ``--threads 4``, their replies never coming (expected: no question
asked after it, the finished ones kept, a second Ctrl-C exits 130 at once, and the rerun asks only the rest); a
two-cell suite under ``--ray`` whose workers are SIGKILLed mid-cell (expected: Ray runs the cells again, each question
once in its checkpoint, every run FINISHED).

Every evaluation is a process of its own (``--child``) resuming the same checkpoint, started again until one ends
with every question final. Then every final chaos record is compared with the calm one (answer, scores, passages,
trace; not cost and timing): where the request log shows that the program's greedy call came back unreadable in the
process that wrote the record (two malformed replies in a row: DSPy's chat format, then its JSON fallback), the
expected record is the calm one with the sampled answer, after 2 tries. Each logged request is checked: its question
is one of the run's (else *unmatched*), no process asks a question finished by an earlier one (*repeated*), and a
sampled request follows a malformed reply to the same question and role (else *stray*). Prints a table and exits 1
on any lost, duplicated, different, repeated, unmatched or stray, a calm EM of 0, or a planned fault that did not
happen.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from tests.fault_host import FAULT_SERVER, FaultHost, comparable
from tests.fault_server import SAMPLED

SESSIONS = 12  # at most this many evaluation processes per phase
PATIENCE = 600  # seconds a process may take to reach a point the run waits for


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
    """When the faults come, on the request log's clock (requests), the search log's (searches) or the checkpoint's
    (lines); spread over a run of ~1.5 n requests and n searches."""
    outage, judge, death2 = int(0.3 * n) + 2, int(0.45 * n) + 5, int(0.55 * n) + 12
    return {"deaths": [n // 6 + 1, death2], "outage": (outage, outage + 11), "judge_outage": (judge, judge + 15),
            "sigterm": death2 + max(3, n // 5), "store_down": (n // 10 + 2, n // 10 + 7),
            "store_bug": int(0.75 * n), "cut": int(0.85 * n)}


def records(path: Path) -> list[dict]:
    """The JSON lines of ``path`` that parse (a line cut by a kill does not)."""
    out = []
    for line in path.read_bytes().split(b"\n") if path.exists() else ():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def faulty_search(search, log: Path, down: range, bug: int):
    """``search`` logging each call to ``log`` (numbered over processes), and failing as scheduled: calls in ``down``
    raise ``StoreUnavailable`` (the vector store is out), call ``bug`` and later ``ZeroDivisionError`` (a bug)."""
    from retrieval.milvus import StoreUnavailable

    def search_(query, k, corpora=None):
        n = len(records(log)) + 1
        fault = "down" if n in down else "bug" if bug and n >= bug else "ok"
        with open(log, "a") as fh:
            fh.write(json.dumps({"n": n, "query": query, "fault": fault}) + "\n")
        if fault == "down":
            raise StoreUnavailable(f"injected: the vector store is unavailable (search {n})")
        if fault == "bug":
            raise ZeroDivisionError(f"injected retriever bug (search {n})")
        return search(query, k, corpora)
    return search_


def cut_write(checkpoint: Path, at: int, marker: Path) -> None:
    """Write the first record appended once ``checkpoint`` holds ``at`` lines in two halves, each synced, and pause
    between them (a slow disk) after naming its question in ``marker``: the parent SIGKILLs this process there."""
    from evaluation.loop import Checkpoint

    whole = Checkpoint.append

    def append(self, rec: dict) -> None:
        if len(checkpoint.read_bytes().splitlines()) < at:
            return whole(self, rec)
        line = json.dumps(rec, ensure_ascii=False, default=str) + "\n"
        for part in (line[:len(line) // 2], line[len(line) // 2:]):
            self.sink.write(part)
            self.sink.flush()
            os.fsync(self.sink.fileno())
            if not marker.exists():
                marker.write_text(rec["id"])
                time.sleep(PATIENCE)
    Checkpoint.append = append


def child(args: argparse.Namespace) -> int:
    """One evaluation process: resume ``--checkpoint``; exit 0 done, 3 endpoint down, 4 a question's error, 6
    questions left unanswered (retryable), 75 the checkpoint is busy, 143 on SIGTERM (as ``evaluate.py`` exits)."""
    import programs
    from data import demo
    from experiments.cli import INCOMPLETE, on_sigterm
    from evaluation.loop import RunStopped, evaluate
    from evaluation.metrics import Judge, exact_match, f1
    from retrieval.retriever import Retriever
    from runtime.files import Busy
    from runtime.lm import ProjectLM
    from runtime.roles import init_dspy

    signal.signal(signal.SIGTERM, on_sigterm)
    server = FaultHost(Path(args.log), *args.flags.split(), restarts=5, max_seconds=3600).start()
    code = 0
    try:
        lm = ProjectLM("openai/fault", api_base=server.api_base, api_key="local", num_retries=0, cache=False,
                       max_tokens=64)  # no timeout: a reply slowed by load is a reply
        lm.server = server
        init_dspy(lm, cache=False)
        retriever = Retriever(demo.load_multihop().corpora, args.embedder)
        first, _, last = args.store_down.partition(":")
        retriever.search = faulty_search(retriever.search, Path(args.searches),
                                         range(int(first), int(last) + 1) if first else range(0), args.store_bug)
        checkpoint = Path(args.checkpoint)
        if args.cut:
            cut_write(checkpoint, args.cut, checkpoint.with_name("cutting"))
        program = programs.build(args.program, search=retriever, k=3)
        metrics = {"em": exact_match, "f1": f1, "judge": Judge(lm, with_question=True)}
        records, _ = evaluate(program, questions(args.n), metrics, k=3, retries=1, checkpoint=checkpoint,
                              desc=args.program, wait=args.wait)
        code = INCOMPLETE if any(r.get("retryable") for r in records) else 0
    except (RunStopped, Busy) as err:
        print(f"error: {err}", file=sys.stderr)
        code = 75 if isinstance(err, Busy) else err.code
    except KeyboardInterrupt:
        code = 143
    finally:
        print(json.dumps({"restarts": server.restarts}), flush=True)
        server.stop()
    return code


class Child:
    """One evaluation process, its output going to files (read while it runs)."""

    def __init__(self, cmd: list[str], env: dict, home: Path, tag: str):
        self.out, self.err = home / f"{tag}.out", home / f"{tag}.err"
        with open(self.out, "w") as out, open(self.err, "w") as err:  # Ctrl-C as from a terminal
            self.proc = subprocess.Popen(cmd, env=env, cwd=home, stdout=out, stderr=err,
                                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))

    def stderr(self) -> str:
        return self.err.read_text(errors="replace")

    def restarts(self) -> int:
        return sum(json.loads(x)["restarts"] for x in self.out.read_text().splitlines() if x.startswith("{"))

    def until(self, ready, what: str) -> None:
        """Wait for ``ready()`` while this process runs; stop the chaos run if it ends or times out first."""
        deadline = time.monotonic() + PATIENCE
        while not ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"waiting for {what}: the process exited {self.proc.poll()}:\n{self.stderr()[-3000:]}")
            time.sleep(0.05)


class Phase:
    """Evaluation processes on one checkpoint until one ends with every question final, with the one-shot faults of
    ``plan`` (``sigterm``: a request number; ``store_bug``: a search number; ``cut``: a checkpoint line count).
    Each process that writes is a *segment*: the questions finished before it, and its stretch of the request log."""

    def __init__(self, name: str, args: argparse.Namespace, work: Path, flags: list[str], plan: dict):
        self.home = work / name
        self.home.mkdir(parents=True, exist_ok=True)
        self.env = {**os.environ, "RAG_PROJECT_CACHE": str(self.home / "cache"),
                    "RAG_SERVER_DIR": str(self.home / "servers"), "RAG_INDEX_DIR": str(work / "indexes"),
                    "RAG_ENDPOINT_BACKOFF": "0.05", "PYTHONPATH": str(ROOT)}
        self.checkpoint, self.log = self.home / "eval.jsonl", self.home / "requests.jsonl"
        self.searches, self.marker = self.home / "searches.jsonl", self.home / "cutting"
        self.cmd = [sys.executable, "-m", "scripts.chaos_run", "--child", "--n", str(args.n), "--program",
                    args.program, "--embedder", args.embedder, "--checkpoint", str(self.checkpoint), "--log",
                    str(self.log), "--searches", str(self.searches), "--flags", " ".join(flags)]
        self.pending, self.n = dict(plan), args.n
        self.segments: list[dict] = []
        self.exits: list[int] = []
        self.restarts, self.refused, self.waited, self.most = 0, 0, 0, Counter()
        self.left: set[tuple[str, str]] = set()  # (question, error class) of each record left retryable
        self.cut, self.bug_line, self.skipped, self.spawned = None, None, 0, 0

    def finished(self) -> Counter:
        """Final records on disk per question (a duplicate counts twice)."""
        return Counter(r["id"] for r in records(self.checkpoint) if not r.get("retryable"))

    def begin(self) -> None:
        done = self.finished()
        self.segments.append({"before": set(done), "start": len(records(self.log))})

    def end(self) -> None:
        done, last = self.finished(), {r["id"]: r for r in records(self.checkpoint)}
        self.most |= done
        self.segments[-1] |= {"after": set(done), "end": len(records(self.log))}
        self.left |= {(i, r.get("error_class") or "judge " + r["metric_errors"]["judge"].split(":")[0])
                      for i, r in last.items() if r.get("retryable")}

    def spawn(self, *extra: str) -> Child:
        flags = [*extra]
        if "store_bug" in self.pending:
            flags += ["--store-bug", str(self.pending["store_bug"])]
        if "cut" in self.pending:
            flags += ["--cut", str(self.pending["cut"])]
        self.spawned += 1
        return Child(self.cmd + flags, self.env, self.home, f"p{self.spawned}")

    def run(self, store_down: str = "") -> "Phase":
        extra = ["--store-down", store_down] if store_down else []
        for _ in range(SESSIONS):
            self.begin()
            child = self.spawn(*extra)
            while child.proc.poll() is None:
                if self.marker.exists():
                    child = self.two_writers(child, extra)
                elif "sigterm" in self.pending and len(records(self.log)) >= self.pending["sigterm"]:
                    child.proc.send_signal(signal.SIGTERM)
                    self.pending.pop("sigterm")
                time.sleep(0.05)
            code = child.proc.wait()
            self.end()
            self.exits.append(code)
            self.restarts += child.restarts()
            expected = {0, 3, 6} | ({4} if "store_bug" in self.pending else set()) | ({143} if "sigterm" not in
                                                                                      self.pending else set())
            if code not in expected:
                sys.exit(f"evaluation exited {code}:\n{child.stderr()[-3000:]}")
            if code == 4:
                self.bug_stopped(child)
            if code == 0 and len(self.finished()) == self.n:
                return self
        sys.exit(f"not finished after {SESSIONS} evaluation processes")

    def two_writers(self, writer: Child, extra: list[str]) -> Child:
        """``writer`` is paused halfway through a line: a second writer is refused (75) without asking anything, a
        third waits for the checkpoint; then ``writer`` is SIGKILLed and the waiting one goes on."""
        self.cut = (self.marker.read_text(), len(self.segments))  # the question, and the segments after the cut
        self.marker.unlink()
        self.pending.pop("cut")
        asked = len(records(self.log))
        second = self.spawn(*extra)
        code = second.proc.wait(timeout=PATIENCE)
        if code != 75 or f"pid {writer.proc.pid}" not in second.stderr() or len(records(self.log)) != asked:
            sys.exit(f"a second writer exited {code} (not refused while pid {writer.proc.pid} held the checkpoint):\n"
                     f"{second.stderr()[-3000:]}")
        self.refused += 1
        self.exits.append(code)
        third = self.spawn(*extra, "--wait")
        third.until(lambda: "waiting for another run" in third.stderr(), "the third writer to wait")
        self.end()  # of the paused writer's segment, and the start of the waiting one's: nothing moves until the kill
        self.begin()
        writer.proc.kill()
        self.exits.append(writer.proc.wait())
        self.waited += 1
        third.until(lambda: "skipped 1 unreadable line" in third.stderr(), "the cut line to be skipped")
        self.skipped += 1
        return third

    def bug_stopped(self, child: Child) -> None:
        """The retriever bug stopped the run: one line naming the question; the processes after this one run
        without it (the fix)."""
        hit = next(s["query"] for s in records(self.searches) if s["fault"] == "bug")
        bug = next(ex.id for ex in questions(self.n) if ex.question == hit)
        errors = [line for line in child.stderr().splitlines() if line.startswith("error:")]
        if len(errors) != 1 or f"question {bug}: " not in errors[0] or "Traceback" in child.stderr():
            sys.exit(f"the retriever bug did not stop the run with one line naming question {bug}:\n"
                     f"{child.stderr()[-3000:]}")
        self.bug_line = errors[0]
        self.pending.pop("store_bug")


def serve(home: Path, *flags: str) -> tuple[subprocess.Popen, str, Path]:
    """A fault server of its own for command-line runs: its process, API base and request log."""
    home.mkdir(parents=True, exist_ok=True)
    log = home / "requests.jsonl"
    proc = subprocess.Popen([sys.executable, str(FAULT_SERVER), "--log", str(log), "--max-seconds", "3600", *flags],
                            stderr=subprocess.PIPE, text=True)
    said = proc.stderr.readline()  # "fault server on 127.0.0.1:PORT" once it listens
    return proc, f"http://{said.split()[-1]}/v1", log


class Cli:
    """``evaluate.py`` runs of one scenario, with the scenario's own caches and MLflow store."""

    def __init__(self, work: Path, name: str, **env: str):
        self.home = work / name
        self.home.mkdir(parents=True, exist_ok=True)
        self.env = {**os.environ, "RAG_PROJECT_CACHE": str(self.home / "cache"),
                    "RAG_MLRUNS": str(self.home / "mlruns"), "RAG_SERVER_DIR": str(self.home / "servers"),
                    "RAG_ENDPOINT_BACKOFF": "0.05", **env}
        self.spawned = 0

    def start(self, api_base: str, *flags: str) -> Child:
        self.spawned += 1
        return Child([sys.executable, str(ROOT / "evaluate.py"), "--lm", "openai/fault", "--api-base", api_base,
                      "--no-cache", "--no-trace", "--experiment", "chaos", "--train", "0", *flags],
                     self.env, self.home, f"p{self.spawned}")

    def run(self, api_base: str, *flags: str) -> Child:
        child = self.start(api_base, *flags)
        child.proc.wait(PATIENCE)
        return child

    def records(self) -> list[dict]:
        return [r for f in sorted((self.home / "cache" / "evals").glob("*.jsonl")) for r in records(f)]

    def statuses(self) -> Counter:
        """The MLflow runs' statuses in this scenario's store."""
        with sqlite3.connect(self.home / "mlruns" / "mlflow.db") as db:
            return Counter(status for (status,) in db.execute("SELECT status FROM runs"))


DIRECT = ("--program", "direct", "--dataset", "demo", "--split", "dev", "--test", "0")


def wrong_key(work: Path) -> tuple[str, bool]:
    """An endpoint that answers 401: the run stops at once in one line, nothing recorded."""
    cli = Cli(work, "wrong-key")
    server, base, log = serve(cli.home, "--status", "401")
    try:
        child = cli.run(base, *DIRECT, "--dev", "3")
    finally:
        server.kill()
    err, code = child.stderr(), child.proc.returncode
    lines, asked, kept = [x for x in err.splitlines() if x.startswith("error:")], len(records(log)), len(cli.records())
    return (f"exit {code}, {len(lines)} error line(s), {asked} request(s), {kept} record(s)",
            code in (2, 4) and len(lines) == 1 and "Traceback" not in err and asked <= 1 and kept == 0)


def replaced_data(work: Path) -> tuple[str, bool]:
    """A HotpotQA file replaced by one with other gold answers and the old modification time (``cp -p``): the
    rerun asks the questions again and records the new gold."""
    cli = Cli(work, "replaced-data", RAG_DATA_DIR=str(work / "replaced-data" / "data"))
    path = cli.home / "data" / "hotpotqa" / "dev_distractor_sample.json"
    path.parent.mkdir(parents=True, exist_ok=True)

    def write(answer: str) -> None:
        path.write_text(json.dumps([{"_id": f"h{i}", "question": f"Which word names item {i}?", "answer": answer,
                                     "supporting_facts": [[f"Item {i}", 0]], "context": [[f"Item {i}", ["A word."]]],
                                     "type": "bridge", "level": "easy"} for i in range(4)]))
    write("alpha")
    server, base, log = serve(cli.home)
    try:
        flags = ("--program", "direct", "--dataset", "hotpotqa", "--split", "dev", "--dev", "4", "--test", "0")
        first = cli.run(base, *flags)
        before, stat = len(records(log)), path.stat()
        write("omega")  # same size
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        second = cli.run(base, *flags)
    finally:
        server.kill()
    again = len(records(log)) - before
    new = len({r["id"] for r in cli.records() if r.get("gold") == "omega"})
    codes = (first.proc.returncode, second.proc.returncode)
    return f"exits {codes}, asked again {again} of 4, new gold in {new} of 4", codes == (0, 0) and again == new == 4


def ctrl_c_threads(work: Path) -> tuple[str, bool]:
    """Ctrl-C with 4 questions in flight under ``--threads 4`` whose replies never come: nothing asked after it, the
    4 finished kept, a second Ctrl-C exits 130 at once; the rerun asks only the 4 others."""
    cli = Cli(work, "ctrl-c")
    server, base, log = serve(cli.home, "--hold", "5:8")  # one endpoint for both runs (it keys their checkpoint)
    try:
        child = cli.start(base, *DIRECT, "--dev", "8", "--threads", "4")
        child.until(lambda: len(records(log)) >= 8, "4 answered and 4 held requests")
        child.proc.send_signal(signal.SIGINT)
        child.until(lambda: "stopping:" in child.stderr(), "the first Ctrl-C to stop sending")
        child.proc.send_signal(signal.SIGINT)
        code = child.proc.wait(PATIENCE)
        asked, kept = len(records(log)), len(cli.records())
        rerun = cli.run(base, *DIRECT, "--dev", "8", "--threads", "4")
    finally:
        server.kill()
    ids, again = Counter(r["id"] for r in cli.records()), len(records(log)) - asked
    return (f"exit {code}, {asked} asked, {kept} of 8 kept; rerun exit {rerun.proc.returncode} asked {again}, "
            f"{len(ids)} questions, {sum(c > 1 for c in ids.values())} duplicated",
            code == 130 and asked == 8 and kept == 4 and rerun.proc.returncode == 0 and again == 4
            and len(ids) == 8 and max(ids.values()) == 1)


def descendants(root: int) -> set[int]:
    """The processes below ``root`` (from ``/proc``)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        try:
            parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (ValueError, OSError):
            continue
    below, grew = {root}, True
    while grew:
        more = {pid for pid, parent in parents.items() if parent in below} - below
        below, grew = below | more, bool(more)
    return below - {root}


def cell_workers(root: int) -> list[int]:
    """Ray workers below ``root`` running a suite cell (process title ``ray::_remote_cell``)."""
    out = []
    for pid in descendants(root):
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"ray::_remote_cell"):
                out.append(pid)
        except OSError:
            continue
    return out


def ray_worker_killed(work: Path) -> tuple[str, bool]:
    """A two-cell suite under ``--ray``: when a cell's second request stalls, its workers are SIGKILLed; Ray runs
    those cells again and the suite ends with each question once in its cell's checkpoint, every run FINISHED."""
    cli = Cli(work, "ray")
    server, base, log = serve(cli.home, "--stall-at", "2", "--slow-seconds", "3600")
    killed = []
    try:
        child = cli.start(base, "--suite", "cot,direct", "--dataset", "demo", "--dev", "0", "--test", "3", "--ray")
        child.until(lambda: len(records(log)) >= 2 and cell_workers(child.proc.pid), "a cell's request to stall")
        for pid in cell_workers(child.proc.pid):
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        code = child.proc.wait(PATIENCE)
    finally:
        server.kill()
    files = [[r["id"] for r in records(f)] for f in (cli.home / "cache" / "evals").glob("test-*.jsonl")]
    runs = cli.statuses()
    return (f"exit {code}, {len(killed)} worker(s) killed, records per cell {sorted(map(len, files))}, "
            f"{sum(len(ids) - len(set(ids)) for ids in files)} duplicated, runs {dict(runs)}",
            code == 0 and killed and sorted(map(len, files)) == [3, 3] and all(len(set(i)) == 3 for i in files)
            and runs == Counter(FINISHED=3))


#: The command-line faults (see the module docstring), each run once after the chaos phases.
SCENARIOS = {"401 endpoint": wrong_key, "data file replaced, mtime kept": replaced_data,
             "Ctrl-C under --threads 4": ctrl_c_threads, "Ray workers killed mid-cell": ray_worker_killed}


def replies(requests: list[dict], question: str, judge: bool) -> list[dict]:
    """The requests about ``question`` by the program, or by the judge (a request for its verdict, ``same``)."""
    return [r for r in requests if r["question"] == question and ("same" in r.get("fields", ())) == judge]


def expected(calm: dict, asked: list[dict]) -> dict:
    """What a question's final record must hold, given the program's requests about it in the process that wrote it:
    the calm record (cost and timing aside); after an unreadable greedy call (two malformed replies in a row, a dead
    server's resent request not counted), that with the sampled answer after 2 tries, or a failure after 2 tries if
    no sampled reply was answered."""
    greedy = [r["fault"] for r in asked if not r["temperature"] and r["fault"] != "die"]
    if not any(a == b == "malformed" for a, b in zip(greedy, greedy[1:])):
        return comparable(calm)
    if any(r["temperature"] and r["fault"] in ("ok", "slow") for r in asked):
        return comparable(calm) | {"answer": calm["answer"] + SAMPLED, "tries": 2}
    return {"failed": True, "error_class": "AdapterParseError", "tries": 2}


def matches(record: dict, expect: dict) -> bool:
    """Whether ``record`` holds what ``expect`` says, and nothing more (cost and timing aside) when that is a whole
    record."""
    extra = set(comparable(record)) - set(expect) if "id" in expect else set()
    return not extra and all(record.get(k) == v for k, v in expect.items())


def stray(requests: list[dict]) -> int:
    """Sampled requests whose question and role's last greedy request before them did not get a malformed reply."""
    last, count = {}, 0
    for r in requests:
        key = (r["question"], "same" in r.get("fields", ()))
        if not r["temperature"]:
            last[key] = r["fault"]
        elif last.get(key) != "malformed":
            count += 1
    return count


def compare(n: int, calm: Phase, chaos: Phase) -> dict:
    """Counts of the chaos run against the calm one (see the module docstring)."""
    text = {ex.id: ex.question for ex in questions(n)}
    ids = {q: i for i, q in text.items()}
    reference = {r["id"]: r for r in records(calm.checkpoint)}
    final = {r["id"]: r for r in records(chaos.checkpoint) if not r.get("retryable")}
    requests, calm_requests = records(chaos.log), records(calm.log)
    repeated, writers = 0, {}
    for seg in chaos.segments:
        repeated += sum(ids.get(q["question"]) in seg["before"] for q in requests[seg["start"]:seg["end"]])
        writers |= {i: requests[seg["start"]:seg["end"]] for i in seg["after"] - seg["before"]}
    expect = {i: expected(reference[i], replies(writers.get(i, []), text[i], False)) for i in final}
    same = [i for i in final if matches(final[i], expect[i])]
    different = sorted(set(final) - set(same))
    faults, searches = Counter(q["fault"] for q in requests), Counter(s["fault"] for s in records(chaos.searches))
    cut, after = chaos.cut or (None, len(chaos.segments))
    cut_asked = sum(bool(replies(requests[s["start"]:s["end"]], text[cut], False)) for s in chaos.segments[after:])
    exits = Counter(chaos.exits)
    planned = {"malformed replies": faults["malformed"], "sampled retries": sum(expect[i].get("tries") == 2
                                                                                for i in same),
               "server deaths": faults["die"] == 2, "endpoint outage (exit 3)": faults["outage"] == 12 and exits[3],
               "judge outage": faults["judge-outage"], "store outage": searches["down"],
               "retriever bug (exit 4)": chaos.bug_line, "SIGTERM (143)": exits[143],
               "SIGKILL mid-line (-9)": exits[-9] and chaos.skipped, "refused writer (75)": chaos.refused,
               "waiting writer": chaos.waited}
    em = ["{:.3f}".format(sum(r["em"] for r in rs) / n) for rs in (reference.values(), final.values())]
    judge = ["{:.3f}".format(sum(r["judge"] for r in rs) / n) for rs in (reference.values(), final.values())]
    return {"questions": n, "scored": sum(not r["failed"] for r in final.values()),
            "failed by class": dict(Counter(r.get("error_class") for r in final.values() if r["failed"])),
            "identical records": len(same), "different records": len(different),
            "different": different[:10] or "-",
            "sampled retries": planned["sampled retries"],
            "stray sampled requests": stray(requests), "repeated requests": repeated,
            "unmatched requests": sum(q["question"] not in ids for q in requests + calm_requests),
            "lost": len(set(text) - set(final)), "duplicated": sum(c > 1 for c in chaos.most.values()),
            "left retryable, by class": dict(Counter(kind for _, kind in chaos.left)), "restarts": chaos.restarts,
            "refused writers": chaos.refused, "waiting writers": chaos.waited,
            "cut question": cut or "-", "cut question asked again by": f"{cut_asked} process(es)" if cut else "-",
            "stops by exit code": dict(sorted(exits.items())), "evaluation processes": len(chaos.exits),
            "bug stop line": chaos.bug_line or "-",
            "requests (calm / chaos)": f"{len(calm_requests)} / {len(requests)}",
            "faults logged": dict(faults - Counter(ok=faults["ok"])),
            "searches failed": dict(searches - Counter(ok=searches["ok"])),
            "em (calm / chaos)": " / ".join(em), "judge (calm / chaos)": " / ".join(judge),
            "faults that did not happen": [name for name, happened in planned.items() if not happened] or "none"}


def failed(counts: dict) -> bool:
    """Whether the chaos run shows a loss, a difference, a repeated, unmatched or stray request, a calm EM of 0 or a
    planned fault that did not happen."""
    return bool(counts["lost"] or counts["duplicated"] or counts["different records"] or counts["repeated requests"]
                or counts["unmatched requests"] or counts["stray sampled requests"]
                or float(counts["em (calm / chaos)"].split(" / ")[0]) == 0
                or counts["faults that did not happen"] != "none"
                or counts["cut question asked again by"] != "1 process(es)"
                or counts.get("command-line faults not as expected", "none") != "none")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=200, help="questions")
    p.add_argument("--program", default="rag")
    p.add_argument("--embedder", default="usem3")
    p.add_argument("--seed", type=int, default=0, help="fault server seed (which replies are malformed)")
    p.add_argument("--workdir", help="caches, checkpoints and request logs (default: a new temp dir)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--wait", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--store-bug", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--cut", type=int, default=0, help=argparse.SUPPRESS)
    for hidden in ("--checkpoint", "--log", "--searches", "--flags", "--store-down"):
        p.add_argument(hidden, default="", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return child(args)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="chaos-"))
    work.mkdir(parents=True, exist_ok=True)
    answers, unreadable = work / "answers.json", work / "unreadable.json"
    table = {ex.question: ("unknown", ex.answer, f"probably {ex.answer}")[i % 3]
             for i, ex in enumerate(questions(args.n))}
    answers.write_text(json.dumps(table))
    unreadable.write_text(json.dumps([q for i, q in enumerate(table) if i % 10 == 5]))
    plan = schedule(args.n)
    calm = Phase("calm", args, work, ["--answers", str(answers)], {}).run()
    chaos = Phase("chaos", args, work, ["--answers", str(answers), "--unreadable", str(unreadable),
                                        "--malformed", "0.1", "--seed", str(args.seed),
                                        "--die-at", ",".join(map(str, plan["deaths"])),
                                        "--outage", "{}:{}".format(*plan["outage"]),
                                        "--judge-outage", "{}:{}".format(*plan["judge_outage"]),
                                        "--stall-at", str(plan["sigterm"]), "--slow-seconds", "60"],
                  {k: plan[k] for k in ("sigterm", "store_bug", "cut")}).run("{}:{}".format(*plan["store_down"]))
    counts = compare(args.n, calm, chaos)
    seen = {name: scenario(work) for name, scenario in SCENARIOS.items()}
    counts |= {name: line for name, (line, _) in seen.items()}
    counts["command-line faults not as expected"] = [name for name, (_, ok) in seen.items() if not ok] or "none"
    width = max(map(len, counts))
    print(f"chaos run: {args.n} questions, program {args.program}, work dir {work}")
    print("\n".join(f"  {k:<{width}}  {v}" for k, v in counts.items()))
    print(json.dumps(counts), file=sys.stderr)
    return 1 if failed(counts) else 0


if __name__ == "__main__":
    sys.exit(main())
