"""Failures an evaluation must survive, injected by ``tests/fault_server.py`` behind the embedded-server code path.

The fault server runs as the "llama.cpp server" of a ``LlamaServer`` (same host, leases, restarts), and logs every
chat request, so the tests count calls at the server. DSPy's cache is off throughout."""
import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dspy
import mlflow
import pytest

from dspy.utils.exceptions import LMRateLimitError, LMTransportError

import programs
from fault_host import FAULT_SERVER, FaultHost, comparable
from evaluation.loop import EndpointDown, evaluate, load_checkpoint
from evaluation.metrics import exact_match
from runtime.lm import ATTEMPT, ProjectLM, ServerError, _free_port
from runtime import store
from runtime.roles import init_dspy
from tests.dummies import unreadable

ROOT = Path(__file__).resolve().parent.parent
QUESTIONS = [dspy.Example(id=f"q{i:02d}", question=f"Is {i} a number?", answer="yes", answers=["yes"])
             .with_inputs("question") for i in range(50)]


@pytest.fixture
def faulty(tmp_path, monkeypatch):
    servers = []
    monkeypatch.setenv("RAG_ENDPOINT_BACKOFF", "0.01")

    def start(*flags, restarts: int = 3, timeout: float | None = None):
        server = FaultHost(tmp_path / "requests.jsonl", *flags, restarts=restarts).start()
        servers.append(server)
        lm = ProjectLM("openai/fault", api_base=server.api_base, api_key="local", num_retries=0, cache=False,
                       max_tokens=64, timeout=timeout)
        lm.server = server
        init_dspy(lm, cache=False)
        return server

    yield start
    for server in servers:
        server.stop()


def run(examples, checkpoint=None):
    return evaluate(programs.build("direct"), examples, {"em": exact_match}, retries=1, checkpoint=checkpoint)


def test_fifty_questions_survive_malformed_outputs_and_a_server_death(faulty, tmp_path):
    server = faulty("--malformed", 0.1, "--die-at", 40, "--seed", 3)
    ckpt = tmp_path / "dev.jsonl"
    records, summary = run(QUESTIONS, ckpt)
    requests = server.requests()
    faults = [r["fault"] for r in requests]
    assert server.restarts == 1 and faults.count("die") == 1 and faults.count("malformed") >= 3
    # every question is either scored (the server's answer is right) or counted as failed, none lost
    assert summary["n"] == 50 and all((r["em"] == 1.0) != r["failed"] for r in records)
    assert summary["failed_examples"] == sum(r["failed"] for r in records)
    lines = [json.loads(line) for line in ckpt.read_text().splitlines()]
    assert [r["id"] for r in lines] == [ex.id for ex in QUESTIONS]  # one line per question
    print(f"\nfault run: {len(requests)} requests, {faults.count('malformed')} malformed, 1 server death; "
          f"{50 - summary['failed_examples']} scored, {summary['failed_examples']} failed")

    again, summary_again = run(QUESTIONS, ckpt)
    assert len(server.requests()) == len(requests)  # the re-run made zero calls: every question was finished
    assert summary_again == summary


def test_errors_and_slow_answers_are_retried_or_counted_without_a_restart(faulty):
    # slow: past the client's timeout (a reply slowed by load past it too is one more retried error: same checks)
    server = faulty("--error", 0.3, "--slow", 0.2, "--slow-seconds", 600, "--seed", 5, timeout=5.0)
    records, summary = run(QUESTIONS[:12])
    faults = [r["fault"] for r in server.requests()]
    assert faults.count("error") and faults.count("slow") and server.restarts == 0  # up all along: no restart
    assert summary["n"] == 12 and all((r["em"] == 1.0) != r["failed"] for r in records)
    assert all(r["error"] for r in records if r["failed"])


def test_a_truncated_last_checkpoint_line_is_skipped_and_its_question_rerun(faulty, tmp_path):
    server = faulty()
    ckpt = tmp_path / "dev.jsonl"
    run(QUESTIONS[:5], ckpt)
    text = ckpt.read_text()
    ckpt.write_text(text[: len(text) - len(text.splitlines()[-1]) // 2 - 1])  # killed mid-write of q04
    before = len(server.requests())
    with pytest.warns(RuntimeWarning, match="skipped 1 unreadable line"):
        records, summary = run(QUESTIONS[:5], ckpt)
    rerun = {r["question"] for r in server.requests()[before:]}
    assert rerun == {QUESTIONS[4].question} and summary["n"] == 5 and summary["failed_examples"] == 0
    assert [json.loads(line)["id"] for line in ckpt.read_text().splitlines()] == [ex.id for ex in QUESTIONS[:5]]


def test_a_run_survives_two_server_deaths(faulty):
    server = faulty("--die-at", "8,20")
    records, summary = run(QUESTIONS[:20])
    assert server.restarts == 2 and summary["n"] == 20
    assert summary["failed_examples"] == 0  # the call that hit the death is repeated on the restarted server


def test_past_the_restart_budget_the_run_stops_with_the_server_log(faulty):
    faulty("--die-at", "3,6", restarts=1)
    with pytest.raises(ServerError, match=r"(?s)down again after 1 restarts.*dying abruptly at request 6"):
        run(QUESTIONS[:10])


def test_an_outage_stops_the_run_and_a_rerun_gives_the_records_of_a_run_without_it(faulty, tmp_path):
    """Requests 28-37 get HTTP 503: the questions they hit are recorded as retryable, five in a row stop the run,
    and the re-run asks exactly the unfinished questions, greedily, ending with the undisturbed run's records."""
    answers = tmp_path / "answers.json"  # some right, some wrong, so the scores differ by question
    answers.write_text(json.dumps({ex.question: "yes" if i % 3 else "no" for i, ex in enumerate(QUESTIONS)}))
    server = faulty("--answers", answers, "--outage", "28:37")
    calm, calm_summary = run(QUESTIONS[:20], tmp_path / "calm.jsonl")  # requests 1-20: before the outage
    ckpt = tmp_path / "dev.jsonl"
    with pytest.raises(EndpointDown, match=r"failed 5 questions in a row \(last: LMServerError"):
        run(QUESTIONS[:20], ckpt)  # q00-q06 answered (21-27), q07-q11 hit the outage twice each (28-37)
    lines = [json.loads(line) for line in ckpt.read_text().splitlines()]
    assert [r["id"] for r in lines if r.get("retryable")] == ["q07", "q08", "q09", "q10", "q11"]
    assert set(load_checkpoint(ckpt)) == {ex.id for ex in QUESTIONS[:12]}
    outage = [r for r in server.requests() if r["fault"] == "outage"]
    assert len(outage) == 10 and all(r["temperature"] in (None, 0, 0.0) for r in outage)  # retried greedily
    asked = len(server.requests())

    records, summary = run(QUESTIONS[:20], ckpt)
    again = [r["question"] for r in server.requests()[asked:]]
    assert again == [ex.question for ex in QUESTIONS[7:20]]  # each unfinished question once, no finished one
    assert [comparable(r) for r in records] == [comparable(r) for r in calm]
    assert comparable(summary) == comparable(calm_summary) and 0 < summary["em"] < 1
    assert "retryable_examples" not in summary and summary["failed_examples"] == 0


class Scripted(dspy.Module):
    """Raises the queued errors, one per call, then answers; records the retry attempt each call saw."""

    def __init__(self, *errors):
        super().__init__()
        self.errors, self.attempts = list(errors), []

    def forward(self, question):
        self.attempts.append(ATTEMPT.get())
        if self.errors:
            raise self.errors.pop(0)
        return dspy.Prediction(answer="yes", passages=[])


def test_endpoint_errors_are_retried_greedily_and_parse_failures_sampled(monkeypatch):
    monkeypatch.setenv("RAG_ENDPOINT_BACKOFF", "0")
    program = Scripted(LMTransportError("connection refused"), LMRateLimitError("slow down"))
    (rec,), summary = evaluate(program, QUESTIONS[:1], {"em": exact_match}, retries=2)
    assert rec["answer"] == "yes" and program.attempts == [0, 0, 0]  # greedy: no sampling for a transport error
    program = Scripted(unreadable("garbled output"), LMTransportError("reset"), LMTransportError("reset"))
    with pytest.warns(RuntimeWarning, match="1 question.* ended on transient errors"):
        (rec,), summary = evaluate(program, QUESTIONS[:1], {"em": exact_match}, retries=2)
    assert program.attempts == [0, 1, 1]  # the parse failure samples; the transport errors keep that attempt
    assert rec["retryable"] and rec["failed"] and rec["error"].startswith("LMTransportError")
    assert summary["retryable_examples"] == 1 and summary["failed_examples"] == 1


def test_retry_failed_asks_the_recorded_failures_again(tmp_path):
    ckpt = tmp_path / "dev.jsonl"
    broken = Scripted(*[unreadable("unparseable")] * 6)
    records, _ = evaluate(broken, QUESTIONS[:3], {"em": exact_match}, retries=1, checkpoint=ckpt)
    assert [r["failed"] for r in records] == [True] * 3 and not any(r.get("retryable") for r in records)
    fixed = Scripted()
    evaluate(fixed, QUESTIONS[:3], {"em": exact_match}, checkpoint=ckpt)
    assert fixed.attempts == []  # a parse failure is final: resumed as it is
    records, summary = evaluate(fixed, QUESTIONS[:3], {"em": exact_match}, checkpoint=ckpt, retry_failed=True)
    assert len(fixed.attempts) == 3 and summary["em"] == 1.0 and summary["failed_examples"] == 0
    assert evaluate(Scripted(), QUESTIONS[:3], {"em": exact_match}, checkpoint=ckpt)[0] == records


@pytest.fixture
def fault_endpoint(tmp_path, request):
    """A fault server of its own for a CLI run in a subprocess: request number ``request.param`` stalls (60 s),
    so the run is surely in flight when the signal comes."""
    port, log = _free_port(), tmp_path / "requests.jsonl"
    proc = subprocess.Popen([sys.executable, str(FAULT_SERVER), "--port", str(port), "--log", str(log),
                             "--stall-at", str(request.param), "--slow-seconds", "600", "--max-seconds", "900"],
                            stderr=subprocess.PIPE, text=True)
    assert proc.stderr.readline().startswith("fault server on")  # listening (said once bound, however slowly)
    yield f"http://127.0.0.1:{port}/v1", log
    proc.kill()
    proc.wait()


def _checkpoint_lines(cache: Path, stage: str) -> list[dict]:
    files = list((cache / "evals").glob(f"{stage}-*.jsonl")) if (cache / "evals").exists() else []
    return [json.loads(line) for f in files for line in f.read_text().splitlines()]


@pytest.mark.parametrize("fault_endpoint, script, stage, sig, code", [
    (3, "evaluate.py", "dev", signal.SIGINT, 130),  # Ctrl-C during the 3rd question of an evaluation
    (4, "optimize.py", "test_before", signal.SIGTERM, 143),  # kill in the compile after 3 test questions
], indirect=["fault_endpoint"])
@pytest.mark.timeout(600)  # two CLI processes, each importing DSPy and MLflow
def test_an_interrupted_run_is_killed_flushed_and_resumes(fault_endpoint, tmp_path, script, stage, sig, code):
    """The signal lands while the stalled request is in flight."""
    base, log = fault_endpoint
    args = [sys.executable, str(ROOT / script), "--program", "direct", "--lm", "openai/fault", "--api-base", base,
            "--no-cache", "--experiment", "faults"]
    args += ["--split", "dev", "--dev", "6"] if script == "evaluate.py" else ["--train", "4", "--dev", "0",
                                                                              "--test", "3"]
    cache = Path(os.environ["RAG_PROJECT_CACHE"])
    # as from a terminal: a shell that started pytest in the background may have left SIGINT ignored
    proc = subprocess.Popen(args, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    wanted = 2 if script == "evaluate.py" else 3  # the questions answered before the stalled request
    while not (len(_checkpoint_lines(cache, stage)) >= wanted and log.exists()
               and len(log.read_text().splitlines()) > wanted):
        assert proc.poll() is None, proc.communicate()[1]
        time.sleep(0.05)
    proc.send_signal(sig)
    _, err = proc.communicate()
    assert proc.returncode == code, err
    assert "run the same command again to resume" in err
    client = mlflow.MlflowClient(store.tracking_uri())
    experiment = client.get_experiment_by_name("faults").experiment_id
    assert [r.info.status for r in client.search_runs([experiment])] == ["KILLED"]
    finished = _checkpoint_lines(cache, stage)  # every line is whole JSON (flushed per question)
    assert len(finished) == wanted
    asked = len(log.read_text().splitlines())

    done = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert [r.info.status for r in client.search_runs([experiment])] == ["FINISHED", "KILLED"]
    # no finished question was asked again by the uncompiled program (2 messages: no demos)
    again = [json.loads(line) for line in log.read_text().splitlines()[asked:]]
    assert not {r["question"] for r in again if r["messages"] == 2} & {r["question"] for r in finished}
    assert len(_checkpoint_lines(cache, stage)) == (6 if script == "evaluate.py" else 3)


@pytest.mark.parametrize("grace, recorded", [(600, 2), (0, 0)])
@pytest.mark.timeout(600)  # two CLI processes, each importing DSPy and MLflow
def test_ctrl_c_under_threads_stops_sending_keeps_what_arrives_and_a_second_stops_at_once(tmp_path, grace, recorded):
    """Four questions in flight (``--threads 4``) when Ctrl-C comes: no fifth is asked. With a grace, the two replies
    released after the first Ctrl-C are recorded and a second Ctrl-C exits at once; without one the run exits at
    once. Either way exit 130, only whole records, and a rerun asks just what was not recorded."""
    from fake_openai import FakeOpenAI

    cache = Path(os.environ["RAG_PROJECT_CACHE"])
    with FakeOpenAI(hold=True) as server:
        args = [sys.executable, str(ROOT / "evaluate.py"), "--program", "direct", "--lm", "openai/fake", "--api-base",
                server.api_base, "--no-cache", "--experiment", "ctrl-c", "--split", "dev", "--dev", "6",
                "--threads", "4", "--retries", "0"]
        proc = subprocess.Popen(args, cwd=tmp_path, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                                env={**os.environ, "RAG_INTERRUPT_GRACE": str(grace)},
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        server.wait_for(4)
        proc.send_signal(signal.SIGINT)
        said = ""
        while "stopping:" not in said:
            said = proc.stderr.readline()
            assert said, "the process ended without saying it is stopping"
        if recorded:
            server.release(2)
            while len(_checkpoint_lines(cache, "dev")) < 2:
                assert proc.poll() is None, proc.stderr.read()
                time.sleep(0.05)
            proc.send_signal(signal.SIGINT)
        assert proc.wait() == 130
        err = proc.stderr.read()  # what followed the "stopping" line
        assert server.requests == 4  # nothing asked after the first Ctrl-C
        assert ("still in flight were not recorded" in err) == (not recorded)
        finished = _checkpoint_lines(cache, "dev")  # every line whole JSON
        assert len(finished) == recorded
        client = mlflow.MlflowClient(store.tracking_uri())
        experiment = client.get_experiment_by_name("ctrl-c").experiment_id
        assert [r.info.status for r in client.search_runs([experiment])] == ["KILLED"]
        server.release(100)
        done = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    assert server.requests == 4 + 6 - recorded
    ids = [r["id"] for r in _checkpoint_lines(cache, "dev")]
    assert len(ids) == len(set(ids)) == 6  # each question recorded once


SWALLOWS_SIGTERM = """
import signal, sys, time
from experiments import cli
cli.GRACE_SECONDS = float(sys.argv[1])
signal.signal(signal.SIGTERM, cli.on_sigterm)
ready = False
while True:  # a library that catches BaseException around every request
    try:
        if not ready:
            ready = print("ready", flush=True) or True
        time.sleep(0.05)
    except BaseException:
        print("swallowed", flush=True)
"""


@pytest.mark.parametrize("grace, signals", [(1, 1), (600, 2)])
def test_a_swallowed_sigterm_still_ends_the_run(grace, signals):
    """After the grace period, or at a second SIGTERM, the process exits 143 even if its Terminated was caught."""
    proc = subprocess.Popen([sys.executable, "-c", SWALLOWS_SIGTERM, str(grace)], cwd=ROOT, stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline() == "ready\n"
    for n in range(signals):
        proc.send_signal(signal.SIGTERM)
        if n < signals - 1:  # the next signal only once this one was handled (two pending SIGTERMs are one)
            assert proc.stdout.readline() == "swallowed\n"
    try:
        assert proc.wait() == 143
    finally:
        proc.kill()


def test_two_runs_starting_together_share_a_new_store(tmp_path):
    """Both create the sqlite store at once (the first concurrent evaluations on a fresh clone): neither fails."""
    code = "from evaluation import tracking; tracking.setup('together')"
    procs = [subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    errors = [p.communicate()[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errors


def test_a_judge_that_cannot_reach_its_lm_leaves_the_question_retryable(tmp_path, monkeypatch):
    monkeypatch.setenv("RAG_ENDPOINT_BACKOFF", "0")
    ckpt = tmp_path / "dev.jsonl"

    def unreachable_judge(example, pred, trace=None):
        raise LMTransportError("connection refused")

    with pytest.warns(RuntimeWarning, match="ended on transient errors"):
        (rec,), summary = evaluate(Scripted(), QUESTIONS[:1], {"judge": unreachable_judge}, checkpoint=ckpt)
    assert rec["retryable"] and rec["judge"] is None and load_checkpoint(ckpt)[rec["id"]]["retryable"]
    assert rec["metric_errors"] == {"judge": "LMTransportError: connection refused"} and not rec["failed"]
    assert summary["judge_errors_by_class/LMTransportError"] == 1 and "judge" not in summary  # no score, no 0
    program = Scripted()
    (rec,), _ = evaluate(program, QUESTIONS[:1], {"judge": lambda ex, pred, trace=None: 1.0}, checkpoint=ckpt)
    assert program.attempts == [0] and rec["judge"] == 1.0  # asked again, not resumed as a zero


def test_the_judge_raises_an_endpoint_error_instead_of_scoring_wrong():
    from evaluation.metrics import Judge

    judge = Judge(ProjectLM("openai/judge", api_base=f"http://127.0.0.1:{_free_port()}/v1", api_key="local",
                            num_retries=0, cache=False))
    with pytest.raises(LMTransportError):
        judge(QUESTIONS[0], dspy.Prediction(answer="affirmative"))


def test_a_milvus_outage_is_a_transient_error_and_any_other_milvus_error_is_not():
    import grpc
    import numpy as np
    from pymilvus.exceptions import MilvusException

    from retrieval.corpus import Corpus
    from retrieval.milvus import MilvusIndex, StoreUnavailable

    class Down:
        def __init__(self, error):
            self.error = error

        def search(self, *args, **kwargs):
            raise self.error

    index = MilvusIndex.__new__(MilvusIndex)  # a collection on a server that is down: no client to connect
    index.corpus, index.uri, index.collection = Corpus("en", [{"id": "1", "title": "T", "text": "t"}], "en"), "x", "c"
    index.group_sizes = {}
    index.client = Down(MilvusException(grpc.StatusCode.UNAVAILABLE, "[search] Retry run out of 75 retry times"))
    with pytest.raises(StoreUnavailable, match="Milvus at x is unavailable") as down:
        index.search_vectors(np.ones((1, 4)), 1)
    assert isinstance(down.value, ConnectionError)  # so an evaluation records the question as retryable
    index.client = Down(MilvusException(1100, "collection not loaded"))
    with pytest.raises(MilvusException):
        index.search_vectors(np.ones((1, 4)), 1)


def test_a_run_that_leaves_questions_unanswered_says_so_and_ends_incomplete(tmp_path, monkeypatch, capsys, embedder):
    """Issue 73: against an endpoint that goes down, ``evaluate.py`` logged the unanswered questions' retrieval
    metrics as 0 (title_recall 0.667 where the undisturbed run has 1.000) and ended exit 0, its run FINISHED. Now
    they have no score, the summary says how many were answered of those asked, the run ends FAILED tagged
    ``incomplete`` and the command exits 6; the same command again, with the endpoint back, asks just those."""
    import evaluate
    from experiments import sessions
    from retrieval.retriever import Retriever

    monkeypatch.setenv("RAG_ENDPOINT_BACKOFF", "0")
    monkeypatch.setattr(sessions, "Retriever", lambda corpora, *a, **kw: Retriever(corpora, embedder))
    port, log = _free_port(), tmp_path / "requests.jsonl"
    argv = ["--program", "rag", "--dataset", "demo", "--dev", "6", "--retries", "0", "--lm", "openai/fault",
            "--api-base", f"http://127.0.0.1:{port}/v1", "--no-cache", "--experiment", "faults"]

    def serve(*flags):
        proc = subprocess.Popen([sys.executable, str(FAULT_SERVER), "--port", str(port), "--log", str(log), *flags],
                                stderr=subprocess.PIPE, text=True)
        assert proc.stderr.readline().startswith("fault server on"), "the fault server did not start"
        return proc

    down = serve("--outage", "3:1000")  # the endpoint is down from the 3rd request on
    try:
        with pytest.raises(SystemExit) as stop, pytest.warns(RuntimeWarning, match="transient errors"):
            evaluate.main(argv)
    finally:
        down.kill()
        down.wait()
    out, err = capsys.readouterr()
    assert stop.value.code == 6 and ": 2 answered of 6 asked" in out
    assert err.strip().splitlines()[-1].startswith("incomplete: run ") and "dev: 2 answered of 6 asked" in err
    (run,) = mlflow.search_runs(experiment_names=["faults"], output_format="list")
    assert run.info.status == "FAILED" and run.data.tags["incomplete"] == "dev: 2 answered of 6 asked"
    assert (run.data.metrics["dev_n"], run.data.metrics["dev_answered"]) == (6, 2)
    records = _checkpoint_lines(Path(os.environ["RAG_PROJECT_CACHE"]), "dev")
    answered = [r for r in records if not r.get("retryable")]
    assert len(answered) == 2 and all(r["title_recall"] is None and r["all_pass"] is None and r["ndcg"] is None
                                      for r in records if r.get("retryable"))
    for key in ("title_recall", "all_pass", "ndcg"):  # over the answered questions only
        assert run.data.metrics[f"dev_{key}"] == pytest.approx(sum(r[key] for r in answered) / 2)

    back = serve()
    try:
        summary = evaluate.main(argv)  # the endpoint is back: the 4 unanswered questions are asked, exit 0
    finally:
        back.kill()
        back.wait()
    assert (summary["n"], summary["answered"]) == (6, 6)
    runs = mlflow.search_runs(experiment_names=["faults"], output_format="list")
    assert sorted(r.info.status for r in runs) == ["FAILED", "FINISHED"]


class FullDisk:
    """A checkpoint opened on a disk that fills up: ``writes`` records fit, the next is cut halfway with
    OSError(ENOSPC), as ``write`` on a full file system ends."""

    def __init__(self, path, writes: int):
        self.fh, self.writes = open(path, "ab"), writes

    def write(self, text: str) -> int:
        data = text.encode()
        self.writes -= 1
        self.fh.write(data if self.writes >= 0 else data[:len(data) // 2])
        self.fh.flush()
        if self.writes < 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return len(text)

    def __getattr__(self, name):
        return getattr(self.fh, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.fh.close()


def test_a_full_disk_stops_the_run_in_one_line_and_the_rerun_resumes_what_was_written(monkeypatch, capsys):
    from dspy.utils.dummies import DummyLM

    import evaluate
    from evaluation import loop
    from experiments import sessions

    lm = DummyLM({"question": {"answer": "yes"}})
    monkeypatch.setattr(sessions, "make_lm", lambda *a, **k: lm)
    argv = ["--program", "direct", "--dataset", "demo", "--train", "0", "--dev", "4", "--test", "0"]
    monkeypatch.setattr(loop, "open", lambda path, *a, **k: FullDisk(path, writes=2), raising=False)
    with pytest.raises(SystemExit) as stop:
        evaluate.main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 74 and err[-1] == ("error: no space left on the device: free some and run the same "
                                                 "command again; finished questions are in the checkpoint"), err
    assert not any("Traceback" in line for line in err) and len(lm.history) == 3
    monkeypatch.delattr(loop, "open")  # space freed
    with pytest.warns(RuntimeWarning, match="skipped 1 unreadable line"):  # the line the disk cut
        summary = evaluate.main(argv)
    assert summary["n"] == 4 and len(lm.history) == 5  # the 2 written resumed, the cut one and the last asked


def test_a_full_disk_under_the_sqlite_store_stops_the_run_in_one_line(monkeypatch, capsys, tmp_path):
    """Issue 73: SQLite's "database or disk is full" (MLflow's sqlite store passes it on as an MlflowException) gave a
    traceback where a full disk under the checkpoint stops the run in one line, exit 74."""
    import sqlite3

    from dspy.utils.dummies import DummyLM
    from mlflow.exceptions import MlflowException

    import evaluate
    from evaluation import tracking
    from experiments import sessions

    def full_store(*args, **kwargs):  # the store's file may not grow by a page: SQLite's own error, as MLflow wraps it
        db = sqlite3.connect(tmp_path / "full.db", isolation_level=None)
        db.execute("CREATE TABLE IF NOT EXISTS metrics (value BLOB)")
        db.execute("PRAGMA max_page_count = 1")
        try:
            db.execute("INSERT INTO metrics VALUES (?)", (b"0" * 65536,))
        except sqlite3.OperationalError as err:
            raise MlflowException(f"(sqlite3.OperationalError) {err}") from err
        finally:
            db.close()

    monkeypatch.setattr(sessions, "make_lm", lambda *a, **k: DummyLM({"question": {"answer": "yes"}}))
    monkeypatch.setattr(tracking, "log_metrics", full_store)
    with pytest.raises(SystemExit) as stop:
        evaluate.main(["--program", "direct", "--dataset", "demo", "--train", "0", "--dev", "4", "--test", "0"])
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 74 and err[-1] == ("error: no space left on the device: free some and run the same "
                                                 "command again; finished questions are in the checkpoint"), err
    assert not any("Traceback" in line for line in err)
