"""scripts/optimizer_table.py on the fake OpenAI server (deterministic replies that depend on the whole prompt, with
usage): one row per optimizer plus uncompiled, each paired with uncompiled, its compile cost in its row, one child run
per cell holding its compiled program (which evaluate.py --compiled reproduces), and a re-run that asks nothing."""
import json

import dspy
import mlflow
import pytest
from dspy.utils.callback import BaseCallback
from dspy.utils.dummies import DummyLM
from fake_openai import FakeOpenAI

import evaluate
import programs
from data import Splits
from experiments import sessions
from optimizers import fitting
from optimizers.settings import CompileOptions
from runtime.paths import project_cache
from runtime.roles import Roles
from tests.test_decision_ladder import ladder_lm  # noqa: F401 (a fixture)

SPLIT = ["--dataset", "demo", "--k", "2", "--train", "3", "--dev", "2", "--test", "3"]
COMPILE_COLUMNS = ("compile LM calls", "compile prompt tok", "compile compl tok", "compile min", "demo tok/predictor",
                   "budget stop")


@pytest.fixture
def table(embedder, monkeypatch):
    import scripts.optimizer_table as table

    real = sessions.Retriever  # wherever the retriever lives (programs/ or retrieval/), with the test embedder
    monkeypatch.setattr(sessions, "Retriever", lambda corpora, *a, **kw: real(corpora, embedder))
    return table


@pytest.fixture
def server():
    with FakeOpenAI() as fake:
        yield fake


def lm(server) -> list[str]:
    return ["--lm", "openai/fake", "--api-base", server.api_base]


def cell_rows(markdown: str) -> dict[str, dict[str, str]]:
    """The leaderboard's cell table as {program label: {column: cell}}."""
    lines = [line for line in markdown.split("## demo")[1].split("\n\n")[1].splitlines()]
    head = [h.strip() for h in lines[0].strip("|").split("|")]
    return {row[0]: dict(zip(head, row)) for row in ([c.strip() for c in line.strip("|").split("|")]
                                                     for line in lines[2:])}


def test_every_optimizer_is_a_child_run_paired_with_uncompiled_with_its_compile_cost(table, server):
    out = table.main(["--program", "rag", *SPLIT, *lm(server), "--optimizers", "bootstrap", "random_search",
                      "--candidates", "1"])
    labels = [r.cell.label for r in out["results"]]
    assert labels == ["rag_k2_uncompiled", "rag_k2_bootstrap", "rag_k2_random_search"]
    board = out["leaderboard"]
    assert sorted((p["method"], p["baseline"], p["metric"]) for p in board.pairs) == sorted(
        (method, "rag_k2_uncompiled", metric) for method in labels[1:] for metric in ("em", "f1"))
    rows = cell_rows(board.markdown)
    assert all(rows["rag_k2_uncompiled"][c] == "-" for c in COMPILE_COLUMNS)  # nothing compiled
    for label in labels[1:]:
        assert int(rows[label]["compile LM calls"]) > 0 and int(rows[label]["compile prompt tok"]) > 0
        assert rows[label]["budget stop"] == "no" and float(rows[label]["compile min"]) >= 0
    assert rows["rag_k2_bootstrap"]["demo tok/predictor"].startswith("writer.short ")  # its labeled demos

    runs = mlflow.search_runs(experiment_names=["agentic-rag"], output_format="list")
    children = {r.data.tags["cell"]: r for r in runs if r.data.tags.get("mlflow.parentRunId") == out["run_id"]}
    assert sorted(children) == sorted(labels) and len(runs) == 1 + len(labels)  # compile and test in one run
    for result in out["results"][1:]:
        child = children[result.cell.label]
        assert child.info.run_id == result.run_id and {"test_f1", "compile_lm_calls"} <= child.data.metrics.keys()
        assert child.data.params["optimizer"] == result.cell.variant
        programs.load_compiled(result.run_id)
    boot = out["results"][1]
    assert programs.load_compiled(boot.run_id).writer.short.demos

    # the child run's program.json reproduces its test row (asked again: --no-cache, usage reported)
    again = evaluate.main(["--compiled", boot.run_id, "--split", "test", *SPLIT, *lm(server), "--no-cache"])
    assert again["prompt_tokens"] == boot.summary["prompt_tokens"] > out["results"][0].summary["prompt_tokens"]
    assert again["f1"] == boot.summary["f1"] and again["n"] == 3


def test_a_rerun_reads_the_compile_from_the_lm_cache_and_the_test_answers_from_checkpoints(table, server):
    argv = ["--program", "rag", *SPLIT, *lm(server), "--optimizers", "bootstrap"]
    first = table.main(argv)
    asked = server.requests
    assert asked > 0
    again = table.main(argv)
    assert server.requests == asked  # nothing asked again
    assert [r.records for r in again["results"]] == [r.records for r in first["results"]]
    cost = ("compile_lm_calls", "compile_prompt_tokens", "compile_completion_tokens", "compile_minutes")
    # the row still shows what the compile cost, though the LM cache answered it (no tokens, no time)
    assert [again["results"][1].summary[k] for k in cost] == [first["results"][1].summary[k] for k in cost]
    assert first["results"][1].summary["compile_prompt_tokens"] > 0
    # without the LM cache the compile asks again, but the finished test questions still come from checkpoints
    third = table.main(argv + ["--no-cache"])
    compile_calls = third["results"][1].summary["compile_lm_calls"]
    assert compile_calls > 0 and server.requests - asked == compile_calls


class Interrupt(BaseCallback):
    """Ctrl-C at the LM call after the first ``calls``."""

    def __init__(self, calls: int):
        self.left = calls

    def on_lm_start(self, call_id, instance, inputs):
        self.left -= 1
        if self.left < 0:
            raise KeyboardInterrupt


def test_an_interrupted_compile_resumes_and_its_row_counts_both_attempts(table, server, monkeypatch, tmp_path):
    argv = ["--program", "rag", *SPLIT, *lm(server), "--optimizers", "bootstrap"]
    real = fitting.compile_program

    def interrupted(*args, **kwargs):
        with dspy.context(callbacks=[*dspy.settings.callbacks, Interrupt(2)]):
            return real(*args, **kwargs)

    monkeypatch.setattr(fitting, "compile_program", interrupted)
    with pytest.raises(SystemExit) as stop:
        table.main(argv)
    assert stop.value.code == 130
    monkeypatch.setattr(fitting, "compile_program", real)
    resumed = table.main(argv)["results"][1].summary
    monkeypatch.setenv("RAG_PROJECT_CACHE", str(tmp_path / "fresh"))  # no LM cache, no checkpoints, no ledger
    whole = table.main(argv)["results"][1].summary
    for key in ("compile_lm_calls", "compile_prompt_tokens", "compile_completion_tokens"):
        assert resumed[key] == whole[key] > 0  # the 2 calls before the interrupt are counted once


@pytest.mark.parametrize("proposer", [[], ["--proposer-lm", "openai/fake"]], ids=["writer", "own-proposer"])
def test_under_no_cache_an_interrupted_compile_resumes_from_its_own_answers(table, server, monkeypatch, tmp_path,
                                                                             proposer):
    """With a proposer LM of its own (as every real table has), the writer's answers are kept too: the LMs whose
    answers are kept are the program's own, not copies of them."""
    argv = ["--program", "rag", *SPLIT, *lm(server), "--optimizers", "bootstrap", "--no-cache", *proposer]
    monkeypatch.setenv("RAG_PROJECT_CACHE", str(tmp_path / "whole"))
    whole = table.main(argv)["results"][1]
    real = fitting.compile_program

    def interrupted(*args, **kwargs):
        with dspy.context(callbacks=[*dspy.settings.callbacks, Interrupt(2)]):
            return real(*args, **kwargs)

    monkeypatch.setenv("RAG_PROJECT_CACHE", str(tmp_path / "resumed"))
    monkeypatch.setattr(fitting, "compile_program", interrupted)
    with pytest.raises(SystemExit):
        table.main(argv)
    kept = list((tmp_path / "resumed").rglob("*.answers"))
    assert len(kept) == 1 and kept[0].is_dir()  # the interrupted compile's answers, beside its ledger
    monkeypatch.setattr(fitting, "compile_program", real)
    before = server.requests
    resumed = table.main(argv)["results"][1]
    test_calls = round(resumed.summary["lm_calls"] * resumed.summary["n"])  # uncompiled's test: checkpointed
    assert server.requests - before == whole.summary["compile_lm_calls"] - 2 + test_calls  # the 2 not asked again
    assert resumed.summary["compile_lm_calls"] == whole.summary["compile_lm_calls"]
    assert resumed.summary["compile_prompt_tokens"] == whole.summary["compile_prompt_tokens"] > 0  # counted once
    assert (programs.load_compiled(resumed.run_id).dump_state()
            == programs.load_compiled(whole.run_id).dump_state())
    before = server.requests
    again = table.main(argv)["results"][1]  # the finished compile re-read from its own answers, the test from checkpoints
    assert server.requests == before and again.records == resumed.records


def test_the_resume_cache_serves_only_what_an_earlier_run_stored(tmp_path):
    request = {"model": "m", "messages": [{"role": "user", "content": "Q?"}]}
    first = fitting.ResumeCache(tmp_path / "answers")
    first.put(request, {"text": "A"})
    assert first.get(request) is None  # within one run: asked as --no-cache asks
    first.disk_cache.close()
    assert fitting.ResumeCache(tmp_path / "answers").get(request) == {"text": "A"}


def test_the_compile_runs_the_program_with_its_gates_fitted_on_dev(ladder_lm, table, monkeypatch):
    """CRAG with fused decisions: the program the optimizer compiles already has the uncompiled row's fitted gate
    (so its demos and dev scores come from the program as it will run); that fit is the uncompiled row's, read
    from its journal, not asked again."""
    seen, real = [], fitting.compile_program

    def compile_program(program, *args, **kwargs):  # the real compile, noting the gate of every program it runs
        run = type(program).forward

        def forward(self, *a, **kw):
            seen.append(self.grade_gate.dump_state())
            return run(self, *a, **kw)
        monkeypatch.setattr(type(program), "forward", forward)
        try:
            return real(program, *args, **kwargs)
        finally:
            monkeypatch.setattr(type(program), "forward", run)
    monkeypatch.setattr(fitting, "compile_program", compile_program)
    out = table.main(["--program", "crag", "--dataset", "demo", "--k", "2", "--loops", "1", "--train", "2",
                      "--dev", "4", "--test", "2", "--decisions", "fused", "--optimizers", "bootstrap"])
    fit = json.loads(open(mlflow.artifacts.download_artifacts(
        run_id=out["results"][0].run_id, artifact_path="calibration/grade_gate.json")).read())
    assert fit["n"] > 0 and fit["weights"] is not None
    # every program the bootstrap ran (its reset_copy included) went through the dev fit, not the unfitted mix
    assert seen and all(state == {"thresholds": fit["thresholds"], "weights": fit["weights"]} for state in seen)
    journals = [[json.loads(line)["id"] for line in p.read_text().splitlines()]
                for p in (project_cache() / "evals").glob("gates-*.jsonl")]
    # the uncompiled program's (read again before the compile: each dev question once) and the compiled one's
    assert len(journals) == 2 and all(len(ids) == len(set(ids)) == 4 for ids in journals)


def test_mipro_and_gepa_get_the_proposer_lm_while_the_program_runs_on_lm(table, monkeypatch):
    lms, seen = {}, {}
    make = lambda name, *a, **kw: lms.setdefault(name, DummyLM({"question": {"answer": "Paris"}}))  # noqa: E731
    for module in (sessions, table):  # the session's LMs and the script's proposer
        monkeypatch.setattr(module, "make_lm", make)

    def compile_program(program, optimizer, trainset, devset, metric, *, reflection_lm=None, **kwargs):
        seen[optimizer] = reflection_lm
        return program.deepcopy()

    monkeypatch.setattr(fitting, "compile_program", compile_program)
    out = table.main(["--program", "direct", "--train", "2", "--dev", "1", "--test", "1",
                      "--proposer-lm", "fake:proposer"])
    assert [r.cell.label for r in out["results"]] == ["direct_uncompiled", "direct_bootstrap",
                                                       "direct_random_search", "direct_mipro", "direct_gepa"]
    assert seen["mipro"] is lms["fake:proposer"] and seen["gepa"] is lms["fake:proposer"]
    assert lms["local:qwen-0.5b"].history and not lms["fake:proposer"].history  # the program runs on --lm
    params = {r.cell.variant: mlflow.get_run(r.run_id).data.params for r in out["results"][1:]}
    assert params["mipro"]["proposer"] == params["gepa"]["proposer"] == "fake:proposer"
    assert params["bootstrap"]["proposer"] == "" and params["mipro"]["lm"] == "local:qwen-0.5b"


def test_the_table_needs_its_splits(table, capsys, monkeypatch):
    monkeypatch.setattr(sessions, "make_lm", lambda *a, **kw: DummyLM([]))
    with pytest.raises(SystemExit) as stop:
        table.main(["--program", "direct", "--train", "2", "--dev", "0", "--test", "1", "--optimizers", "bootstrap",
                    "mipro"])
    assert stop.value.code == 2 and "--dev (for mipro)" in capsys.readouterr().err


def ledger_session(tmp_path, train=("q1", "q2"), dev=("q3",), seed=13):
    """What :func:`fitting.compile_ledger` reads of a compile's input: its checkpoint (one file whatever the split:
    checkpoints are keyed by the program, not by the questions), its split and its seed."""
    def examples(ids):
        return [dspy.Example(id=i) for i in ids]
    options = CompileOptions(program="rag", demos=2, candidates=4, budget=None, compile_budget=None,
                             compile_minutes=None, demo_tokens=None, metric=None, seed=seed, decisions="generate",
                             retries=1, no_cache=False)
    return fitting.CompileInput(options, Roles(writer=None), Splits(examples(train), examples(dev), examples(["q9"]), seed),
                                lambda *key: tmp_path / "compile-abc.jsonl", {}, {})


def ledger_of(s, params: dict):
    return fitting.compile_ledger(s, "rag_k2_mipro", None, params)


def test_a_compile_ledger_is_keyed_by_the_questions_and_the_seed_that_made_it(tmp_path):
    """A compile on other train or dev questions, or with another seed, is another compile: it does not report the
    earlier one's seconds and calls (nor resume its kept answers)."""
    ledger = ledger_of(ledger_session(tmp_path), {"optimizer": "mipro"})
    assert ledger == ledger_of(ledger_session(tmp_path), {"optimizer": "mipro"})
    for other in (ledger_session(tmp_path, train=("q1", "q4")), ledger_session(tmp_path, dev=("q4",)),
                  ledger_session(tmp_path, seed=14)):
        assert ledger_of(other, {"optimizer": "mipro"}) != ledger


def test_a_compile_ledger_is_keyed_by_the_compile_code(tmp_path, monkeypatch):
    """A changed optimizer (optimizers/compile.py) is another compile: its cost and kept answers start anew."""
    s = ledger_session(tmp_path)
    ledger = ledger_of(s, {"optimizer": "mipro"})
    assert ledger == ledger_of(s, {"optimizer": "mipro"})
    assert ledger != ledger_of(s, {"optimizer": "gepa"})
    real = fitting.inspect.getsource
    monkeypatch.setattr(fitting.inspect, "getsource",
                        lambda obj: real(obj) + "# edited" if obj is fitting.compile_module else real(obj))
    assert ledger != ledger_of(s, {"optimizer": "mipro"})
