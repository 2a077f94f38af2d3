"""MLflow tracking in the project's sqlite store: ``mlflow ui --backend-store-uri sqlite:///mlruns/mlflow.db``."""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import platform
import re
import subprocess
import tempfile
import warnings
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlencode, urlparse, urlsplit, urlunsplit

import mlflow
from mlflow.entities import AssessmentSource, AssessmentSourceType

from evaluation.callers import Asked, asking
from runtime.paths import PROJECT_ROOT
from runtime.store import mlruns, tracking_uri

MAX_PARAM = 6000
#: What each open run (by id) left unanswered (:func:`unanswered`), tagged when it ends (:func:`run`).
_LEFT: dict[str, list[str]] = {}
#: The incomplete top-level runs of the command running (:func:`incomplete_runs`).
_INCOMPLETE: ContextVar[list[str] | None] = ContextVar("incomplete_runs", default=None)


def git_commit() -> str:
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=PROJECT_ROOT, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=PROJECT_ROOT,
                               capture_output=True, text=True).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def machine() -> str:
    """Where a run's seconds were taken: the CPU's model, its cores and its widest vector instructions (seconds a
    question compare only between runs on one machine)."""
    info = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace") if Path("/proc/cpuinfo").exists() \
        else ""
    model = re.search(r"^model name\s*:\s*(.+)$", info, re.M)
    flags = set(re.findall(r"\b(avx512f|avx2|avx|neon|asimd)\b", info))
    widest = next((f for f in ("avx512f", "avx2", "avx", "asimd", "neon") if f in flags), "")
    name = model.group(1).strip() if model else platform.processor() or platform.machine()
    return ", ".join(x for x in (name, f"{os.cpu_count()} cores", widest) if x)


def setup(experiment: str) -> None:
    """Point MLflow at the store and select ``experiment``, under a file lock: two runs starting together would
    otherwise both create the sqlite tables (one fails) or the experiment. A tracking server keeps its own
    artifacts."""
    with open(mlruns() / ".setup.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        mlflow.set_tracking_uri(tracking_uri())
        if mlflow.get_experiment_by_name(experiment) is None:
            served = tracking_uri().startswith(("http://", "https://"))
            mlflow.create_experiment(experiment, artifact_location=None if served else
                                     (mlruns() / "artifacts" / experiment).as_uri())
        mlflow.set_experiment(experiment)


@contextmanager
def run(experiment: str, run_name: str, tags: dict | None = None, **start):
    """An MLflow run, ended FINISHED, FAILED on an error, or KILLED on Ctrl-C / SIGTERM (see ``sessions.session``);
    ``start``: more ``mlflow.start_run`` arguments (``parent_run_id``, ``nested`` for a suite's child run). A run
    that left questions unanswered (:func:`unanswered`, or a child run that did) ends FAILED with the tag
    ``incomplete`` saying what it left, and its parent with it; a top-level one is listed by :func:`incomplete_runs`."""
    setup(experiment)
    with mlflow.start_run(run_name=run_name, tags={"git_commit": git_commit(), **(tags or {})}, **start) as active:
        try:
            yield active
        except KeyboardInterrupt:
            mlflow.end_run("KILLED")
            raise
        else:
            if left := _LEFT.pop(active.info.run_id, None):
                mlflow.set_tag("incomplete", "; ".join(left))
                mlflow.end_run("FAILED")
                if start.get("parent_run_id"):
                    _LEFT.setdefault(start["parent_run_id"], []).append(f"{run_name} " + "; ".join(left))
                elif (found := _INCOMPLETE.get()) is not None:
                    found.append(f"run {active.info.run_id} ({run_name}): " + "; ".join(left))
        finally:
            mlflow.flush_trace_async_logging()  # the run's question traces are in the store when it ends


def unanswered(summary: dict, what: str) -> None:
    """Note what an evaluation in the active run (``what``: its split, a suite's cell) left unanswered, if anything
    (``summary``: ``evaluation.loop.summarize``'s): the run ends incomplete (:func:`run`)."""
    n = summary.get("n", 0)
    if (done := summary.get("answered", n)) < n:
        _LEFT.setdefault(mlflow.active_run().info.run_id, []).append(f"{what}: {done} answered of {n} asked")


@contextmanager
def incomplete_runs():
    """The top-level runs started in the block that ended incomplete (:func:`run`), each as
    ``run <id> (<name>): <what it left unanswered>``; the CLIs exit with their own code when there are any."""
    token = _INCOMPLETE.set(found := [])
    try:
        yield found
    finally:
        _INCOMPLETE.reset(token)


def effective(program, name: str) -> str:
    """``name`` as what ``program`` runs: with the program's ``resting()`` note while a gate of it decides whatever
    the probability ("par2 (controller at rest = par2_anchor)"), else ``name`` itself."""
    note = program.resting() if hasattr(program, "resting") else None
    return f"{name} ({note})" if note else name


def tag_effective(program, name: str) -> str:
    """:func:`effective`, set as the active run's ``effective_program`` tag."""
    shown = effective(program, name)
    mlflow.set_tag("effective_program", shown)
    return shown


def redact(text: str) -> str:
    """``text`` without credentials if it is a URL: ``user:password@`` and every query value become ``***``."""
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not ("@" in parts.netloc or parts.query):
        return text
    netloc = "***@" + parts.netloc.rsplit("@", 1)[1] if "@" in parts.netloc else parts.netloc
    query = urlencode([(k, "***") for k, _ in parse_qsl(parts.query, keep_blank_values=True)], safe="*")
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def log_params(params: dict) -> None:
    """Log flat params, URLs without their credentials (:func:`redact`, e.g. an ``--api-base`` with a key); values
    too long for an MLflow param are logged as JSON artifacts instead."""
    flat = {}
    for key, value in params.items():
        text = redact(value) if isinstance(value, str) else json.dumps(value, default=str)
        if len(text) > MAX_PARAM:
            log_json(f"params/{key}.json", value)
            text = f"see artifact params/{key}.json"
        flat[key] = text
    mlflow.log_params(flat)


def log_metrics(summary: dict, prefix: str) -> None:
    mlflow.log_metrics({f"{prefix}_{k}": float(v) for k, v in summary.items() if isinstance(v, (int, float))})


#: Per-question columns of the records table (the full records, with traces, stay in ``predictions/*.jsonl``).
TABLE_COLUMNS = ("id", "question", "gold", "answer", "failed", "error", "lm_calls", "prompt_tokens",
                 "completion_tokens", "seconds")


def log_evaluation(stage: str, records: list[dict], summary: dict, metrics, dataset: "EvalData") -> None:
    """Everything one evaluated split leaves in the active run: metrics ``<stage>_<name>``, the per-question
    records (``predictions/<stage>.jsonl``), the same as a table the artifact viewer shows
    (``predictions/<stage>_table.json``: question, gold, answer, scores, cost, failed) and the examples as an
    MLflow dataset input, so the runs list shows and filters by the data each run saw. A split with questions left
    unanswered ends the run incomplete (:func:`unanswered`)."""
    log_metrics(summary, stage)
    unanswered(summary, stage)
    log_jsonl(f"predictions/{stage}.jsonl", records)
    columns = [c for c in TABLE_COLUMNS[:5] + tuple(metrics) + TABLE_COLUMNS[5:] if any(c in r for r in records)]
    if records:
        mlflow.log_table({c: [_cell(r.get(c)) for r in records] for c in columns},
                         artifact_file=f"predictions/{stage}_table.json")
    dataset.log()


def _cell(value):
    """A table cell: scalars as they are, anything else (gold lists, option dicts) as JSON text."""
    return value if value is None or isinstance(value, (str, int, float, bool)) else json.dumps(value, default=str)


@dataclass(frozen=True)
class EvalData:
    """The examples of one evaluation as an MLflow dataset: ``name`` (dataset, split, seed), ``context``
    (train / dev / test), ``digest`` (a content hash of these examples: two slices differ), ``source`` (the file or
    bundled set they were read from) and the tag ``data_fingerprint`` (the whole dataset's, as checkpoints key it)."""

    name: str
    context: str
    examples: tuple
    source: str
    fingerprint: str = ""  # the whole dataset's (``Bundle.fingerprint``), which result checkpoints are keyed by

    @property
    def digest(self) -> str:
        return examples_digest(self.examples)

    def log(self) -> None:
        import pandas as pd
        from mlflow.data.pandas_dataset import from_pandas

        frame = pd.DataFrame([{"id": ex.id, "question": ex.question, "answer": _cell(ex.answer)}
                              for ex in self.examples], columns=["id", "question", "answer"])
        with warnings.catch_warnings():  # a local path matches two equivalent source types; MLflow picks one
            warnings.filterwarnings("ignore", message="The specified dataset source can be interpreted")
            dataset = from_pandas(frame, source=_source(self.source), name=self.name, targets="answer",
                                  digest=self.digest)
        tags = {"data_fingerprint": self.fingerprint[:12]} if self.fingerprint else None
        try:
            mlflow.log_input(dataset, context=self.context, tags=tags)
        except mlflow.exceptions.MlflowException as error:
            # The store inserts a new dataset after a lookup, not atomically: two runs logging the same data at
            # once (Ray cells) make one insert fail on the (experiment, name, digest) key. The dataset now
            # exists, so logging again links it.
            if "UNIQUE constraint" not in str(error) and "Duplicate entry" not in str(error):
                raise
            mlflow.log_input(dataset, context=self.context, tags=tags)


def examples_digest(examples) -> str:
    """A short content hash of examples (id, question, gold answer), the same for the same data wherever read."""
    digest = hashlib.sha256()
    for ex in examples:
        digest.update(json.dumps([ex.id, ex.question, ex.answer], ensure_ascii=False, default=str).encode())
        digest.update(b"\n")
    return digest.hexdigest()[:12]


def _source(text: str) -> str:
    """MLflow resolves a dataset source by its URI scheme; a description with a colon (``context=oracle``) is not
    a URI, so it is given as a plain local path-like string."""
    return text.replace(":", "=") if urlparse(text).scheme not in ("", "file") else text


#: Record fields logged as feedback on a question's trace besides its metrics: retrieval recall at k and over
#: everything retrieved (``evaluation.metrics.retrieval_record``).
RETRIEVAL_FEEDBACK = ("title_recall", "recall_all")


class QuestionTraces:
    """One MLflow trace per evaluated question, linked to ``run_id`` (also from evaluation threads, where no run
    is active): a ``question`` span around the program call (DSPy autologging nests its module and LM spans in
    it, ``evaluation.callers.asking`` names each LM call's predictor and role), tagged with the question id,
    whether it failed and each metric's score, with the program's own trace (iterations, queries, kept/dropped
    passages, verdicts, stop reason) as span attributes, so the UI's trace search can filter e.g.
    ``tags.em = '0'``. Each score is also a feedback assessment on the trace (:meth:`assess`), logged with it when
    the question ends: a resumed run, which does not ask its checkpoint's questions again, logs none for them."""

    def __init__(self, run_id: str, metrics):
        self.run_id, self.metrics = run_id, tuple(metrics)
        trace_dspy(True)

    @contextmanager
    def __call__(self, example, program=None):
        with asking(program) as asked:
            with mlflow.start_span(name="question", span_type="CHAIN", run_id=self.run_id,
                                   attributes={"question_id": example.id, "question": example.question}) as span:
                span.set_inputs({"question": example.question})

                def finish(rec: dict) -> None:
                    span.set_outputs({"answer": rec.get("answer"), "gold": rec.get("gold"),
                                      **{m: rec[m] for m in self.metrics if m in rec}, "decisions": rec.get("trace")})
                    span.set_attributes({"answer": _cell(rec.get("answer")), "gold": _cell(rec.get("gold")),
                                         "decisions": _cell(rec.get("trace")),
                                         "passages": _cell([p["title"] for p in rec.get("passages") or []])})
                    mlflow.update_current_trace(tags={"question_id": str(rec["id"]), "failed": str(rec["failed"]),
                                                      **{m: f"{rec[m]:g}" for m in self.metrics
                                                         if rec.get(m) is not None}})  # None: not scored
                    self.assess(span.trace_id, rec, asked)
                yield finish

    def assess(self, trace_id: str, rec: dict, asked: "Asked") -> None:
        """Each score of ``rec`` (its metrics, then :data:`RETRIEVAL_FEEDBACK`; None: not scored) as a feedback
        assessment named as the record names it, from code; the ``judge`` verdict from the judge's model when
        one was asked, its rationale what the judges replied and how the metrics decided (``noted``)."""
        for name in (*self.metrics, *RETRIEVAL_FEEDBACK):
            if rec.get(name) is None:
                continue
            judged = name == "judge" and asked.judges
            source = AssessmentSource(AssessmentSourceType.LLM_JUDGE, ", ".join(sorted(asked.judges))) if judged \
                else AssessmentSource(AssessmentSourceType.CODE, f"evaluation:{name}")
            mlflow.log_feedback(trace_id=trace_id, name=name, value=float(rec[name]), source=source,
                                rationale=asked.rationale(rec) if name == "judge" else None)


def trace_dspy(on: bool) -> None:
    """DSPy's autologging (module, adapter and LM spans) on or off."""
    mlflow.dspy.autolog(disable=not on)


def question_traces(run_id: str, metrics, enabled: bool) -> QuestionTraces | None:
    """The per-question tracer of a run (``--trace``), or None with DSPy autologging off (``--no-trace``)."""
    if enabled:
        return QuestionTraces(run_id, metrics)
    trace_dspy(False)
    return None


@contextmanager
def untraced():
    """DSPy autologging off for a block (a compile's thousands of calls), on again after if it was on."""
    from mlflow.utils.autologging_utils import autologging_is_disabled

    was_on = not autologging_is_disabled("dspy")
    trace_dspy(False)
    try:
        yield
    finally:
        if was_on:
            trace_dspy(True)


def register_prompts(program, program_name: str, tags: dict) -> list[str]:
    """Register each predictor's compiled instructions and demos as a version of the prompt
    ``<program>.<predictor>`` in MLflow's prompt registry (plain text, for reading and diffing versions in the UI),
    linked to the active run (its page lists them under "Registered prompts"). Loading stays with the program's
    JSON state."""
    names, run_id, client = [], mlflow.active_run().info.run_id, mlflow.MlflowClient()
    for path, predictor in program.named_predictors():
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{program_name}.{path}")
        demos = "\n\n".join("\n".join(f"{k}: {v}" for k, v in dict(demo).items() if not k.startswith("_"))
                             for demo in predictor.demos)
        template = predictor.signature.instructions + (f"\n\n--- {len(predictor.demos)} demos ---\n\n{demos}"
                                                        if predictor.demos else "")
        version = mlflow.genai.register_prompt(name, template.replace("{{", "{ {"),
                                               commit_message=f"compiled in run {run_id}",
                                               tags={k: str(v) for k, v in tags.items()})
        client.link_prompt_version_to_run(run_id, version)
        names.append(f"{name}/{version.version}")
    return names


def log_json(name: str, obj) -> None:
    mlflow.log_text(json.dumps(obj, ensure_ascii=False, indent=1, default=str), name)


def log_jsonl(name: str, records: list[dict]) -> None:
    mlflow.log_text("\n".join(json.dumps(r, ensure_ascii=False, default=str) for r in records) + "\n", name)


def artifact_path(name: str) -> str:
    """Where artifact ``name`` of the active run is stored: a local path for this project's file store."""
    uri = mlflow.get_artifact_uri(name)
    parsed = urlparse(uri)
    return unquote(parsed.path) if parsed.scheme == "file" else uri


@contextmanager
def server(backend_uri: str | None = None, artifacts: Path | None = None, timeout: float = 600):
    """A local ``mlflow server`` on 127.0.0.1 (free port) over ``backend_uri`` (default: the project's sqlite
    store); yields its URL and stops it on exit, its log (``server.log`` meanwhile) removed. Concurrent writers
    (Ray cells) log through one such server."""
    import socket
    import sys
    import time
    import urllib.request

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    backend_uri = backend_uri or f"sqlite:///{mlruns() / 'mlflow.db'}"
    cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", backend_uri, "--host", "127.0.0.1",
           "--port", str(port), "--workers", "1"]
    cmd += ["--artifacts-destination", str(artifacts)] if artifacts else []
    log = tempfile.NamedTemporaryFile("w+", prefix="mlflow-server-", suffix=".log", delete=False)
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("mlflow server did not start; the end of its log:\n"
                                       + Path(log.name).read_text()[-2000:])
                time.sleep(0.5)
        server.log = log.name
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        Path(log.name).unlink(missing_ok=True)
