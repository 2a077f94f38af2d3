"""What a run leaves in MLflow for the UI: dataset inputs that tell runs on different data apart, the
per-question records as a table, a trace per question, compiled prompts -- and never an --api-base credential."""
from __future__ import annotations

import json
import threading
import time

import mlflow
import pytest
from dspy.utils.dummies import DummyLM

import evaluate
import optimize
from experiments import cli
from experiments import sessions
from evaluation import tracking
from runtime import store


def _run(run_id: str):
    mlflow.set_tracking_uri(store.tracking_uri())
    return mlflow.get_run(run_id)


def _inputs(run) -> dict[str, tuple[str, str]]:
    """context -> (dataset name, digest) of a run's dataset inputs."""
    return {next(t.value for t in d.tags if t.key == "mlflow.data.context"): (d.dataset.name, d.dataset.digest)
            for d in run.inputs.dataset_inputs}


def _last_run_id() -> str:
    mlflow.set_tracking_uri(store.tracking_uri())
    return mlflow.search_runs(search_all_experiments=True, order_by=["start_time DESC"]).iloc[0].run_id


def test_an_evaluation_logs_its_questions_as_a_dataset_and_a_table(monkeypatch):
    lm = DummyLM({"question": {"answer": "Paris"}})
    monkeypatch.setattr(sessions, "make_lm", lambda *a, **k: lm)
    argv = ["--program", "direct", "--dataset", "demo", "--split", "dev", "--train", "0", "--test", "0"]
    evaluate.main(argv + ["--dev", "2"])
    first = _run(_last_run_id())
    evaluate.main(argv + ["--dev", "3"])
    second = _run(_last_run_id())
    (name, digest), = _inputs(first).values()
    assert _inputs(first).keys() == {"dev"} and name == "demo/dev/seed13"
    tags = {t.key: t.value for t in first.inputs.dataset_inputs[0].tags}
    assert tags["data_fingerprint"] == first.data.params["data_fingerprint"][:12]  # what checkpoints are keyed by
    assert _inputs(second)["dev"][0] == name and _inputs(second)["dev"][1] != digest  # other questions, other digest
    table = json.loads(open(store.download(first.info.run_id, "predictions/dev_table.json")).read())
    rows = [dict(zip(table["columns"], row)) for row in table["data"]]
    assert [r["answer"] for r in rows] == ["Paris", "Paris"]
    assert {"question", "gold", "em", "failed", "lm_calls"} <= set(table["columns"])


def test_the_same_examples_have_the_same_digest_wherever_they_are_read():
    argv = ["--program", "direct", "--dataset", "demo", "--train", "1", "--dev", "2", "--lm", "openai/unused"]
    s = sessions.session(cli.parser("t").parse_args(argv), needs_search=False)
    again = sessions.session(cli.parser("t").parse_args(list(argv)), needs_search=False)
    assert s.eval_data("dev", s.splits.dev).digest == again.eval_data("dev", again.splits.dev).digest
    assert s.eval_data("dev", s.splits.dev).digest != s.eval_data("train", s.splits.train).digest


def test_a_compile_logs_train_dev_and_test_inputs(monkeypatch):
    lm = DummyLM({"question": {"answer": "Paris"}})
    monkeypatch.setattr(sessions, "make_lm", lambda *a, **k: lm)
    run_id = optimize.main(["--program", "direct", "--dataset", "demo", "--train", "2", "--dev", "1", "--test", "1"])
    assert set(_inputs(_run(run_id))) == {"train", "dev", "test"}
    traces = _traces(run_id)  # one per evaluated question of the 4 stages, each with DSPy's spans; none of compile
    assert len(traces) == 4 and all("question_id" in t.info.tags and len(t.data.spans) > 1 for t in traces)


def _traces(run_id: str):
    mlflow.set_tracking_uri(store.tracking_uri())
    return mlflow.search_traces(run_id=run_id, return_type="list")


def test_every_question_is_a_trace_of_its_run_with_its_score_and_decisions(monkeypatch):
    lm = DummyLM({"question": {"answer": "Paris"}})
    monkeypatch.setattr(sessions, "make_lm", lambda *a, **k: lm)
    argv = ["--program", "direct", "--dataset", "demo", "--split", "dev", "--train", "0", "--test", "0", "--dev", "2"]
    evaluate.main(argv)
    traces = _traces(_last_run_id())
    records = [json.loads(line) for line in
               open(store.download(_last_run_id(), "predictions/dev.jsonl")).read().splitlines()]
    assert sorted(t.info.tags["question_id"] for t in traces) == sorted(r["id"] for r in records)
    by_id = {t.info.tags["question_id"]: t for t in traces}
    for r in records:
        assert by_id[r["id"]].info.tags["em"] == f"{r['em']:g}"
        root = by_id[r["id"]].data.spans[0]
        assert root.name == "question" and root.attributes["answer"] == "Paris"
        assert any(s.parent_id == root.span_id for s in by_id[r["id"]].data.spans)  # DSPy's spans nest inside


def test_a_run_ends_with_its_questions_traces_in_the_store_when_mlflow_writes_them_in_the_background(
        monkeypatch, async_traces):
    """As outside the tests, MLflow writes each trace from a background thread (here held 0.5 s): the run waits for
    them before it ends, so whoever reads it then finds every question's trace."""
    from mlflow.tracing.export.mlflow_v3 import MlflowV3SpanExporter

    write, writers = MlflowV3SpanExporter._log_trace, []

    def slow_write(self, *args, **kwargs):
        writers.append(threading.current_thread())
        time.sleep(0.5)
        return write(self, *args, **kwargs)

    monkeypatch.setattr(MlflowV3SpanExporter, "_log_trace", slow_write)
    monkeypatch.setattr(sessions, "make_lm", lambda *a, **k: DummyLM({"question": {"answer": "Paris"}}))
    evaluate.main(["--program", "direct", "--dataset", "demo", "--split", "dev", "--train", "0", "--test", "0",
                   "--dev", "2"])
    assert len(_traces(_last_run_id())) == 2
    assert len(writers) == 2 and threading.main_thread() not in writers  # written in the background


def test_no_trace_leaves_no_traces(monkeypatch):
    lm = DummyLM({"question": {"answer": "Paris"}})
    monkeypatch.setattr(sessions, "make_lm", lambda *a, **k: lm)
    evaluate.main(["--program", "direct", "--dataset", "demo", "--split", "dev", "--train", "0", "--test", "0",
                   "--dev", "2", "--no-trace"])
    assert _traces(_last_run_id()) == []


def test_a_compile_registers_each_predictors_instructions_and_demos_as_a_prompt_version(monkeypatch):
    lm = DummyLM({"question": {"answer": "Paris"}})
    monkeypatch.setattr(sessions, "make_lm", lambda *a, **k: lm)
    run_id = optimize.main(["--program", "direct", "--dataset", "demo", "--train", "2", "--dev", "1", "--test", "1"])
    artifact = json.loads(open(store.download(run_id, "program.json")).read())
    for path, state in artifact["state"].items():
        prompt = mlflow.genai.load_prompt(f"prompts:/direct.{path}/1")
        assert prompt.template.startswith(state["signature"]["instructions"]) and run_id in prompt.commit_message
        assert (f"--- {len(state['demos'])} demos ---" in prompt.template) == bool(state["demos"])
        for demo in state["demos"]:
            assert f"answer: {demo['answer']}" in prompt.template
    assert any(state["demos"] for state in artifact["state"].values())  # bootstrap kept a demo to show


def test_api_base_credentials_are_not_logged_as_params():
    with tracking.run("redact", "r") as run:
        tracking.log_params({"api_base": "https://user:s3cret@llm.example.org:8443/v1?api-key=k3y&deployment=x",
                             "lm": "openai/gpt-4o-mini", "plain": "http://127.0.0.1:8080/v1"})
    params = mlflow.get_run(run.info.run_id).data.params
    assert params["api_base"] == "https://***@llm.example.org:8443/v1?api-key=***&deployment=***"
    assert params["plain"] == "http://127.0.0.1:8080/v1" and params["lm"] == "openai/gpt-4o-mini"


def test_a_dataset_logged_by_two_runs_at_once_is_linked_not_a_crash(monkeypatch):
    """The tracking store looks a dataset up, then inserts it: a second run inserting the same one in between
    fails on the unique key (seen in CI with two Ray cells). The retry links the dataset that now exists; any
    other store error still raises."""
    argv = ["--program", "direct", "--dataset", "demo", "--train", "0", "--dev", "2", "--lm", "openai/unused"]
    examples = tuple(sessions.session(cli.parser("t").parse_args(argv), needs_search=False).splits.dev)
    data = tracking.EvalData("demo/dev/seed13", "dev", examples, "demo")
    real, calls = mlflow.log_input, []

    def racing(error):
        def log_input(*args, **kwargs):
            calls.append(error)
            if len(calls) == 1:
                raise mlflow.exceptions.MlflowException(error)
            return real(*args, **kwargs)
        return log_input

    tracking.setup("race")  # its artifacts in the test's store (set_experiment would put them in ./mlruns)
    monkeypatch.setattr(mlflow, "log_input", racing("UNIQUE constraint failed: datasets.experiment_id, "
                                                    "datasets.name, datasets.digest"))
    with mlflow.start_run() as run:
        data.log()
    assert len(calls) == 2 and _inputs(mlflow.get_run(run.info.run_id)) == {"dev": ("demo/dev/seed13", data.digest)}
    calls.clear()
    monkeypatch.setattr(mlflow, "log_input", racing("RESOURCE_DOES_NOT_EXIST: run"))
    with mlflow.start_run(), pytest.raises(mlflow.exceptions.MlflowException, match="RESOURCE_DOES_NOT_EXIST"):
        data.log()
    assert len(calls) == 1
