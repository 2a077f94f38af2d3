"""Tables: declared once, run through the suite, rendered from their runs, stamped and checked against today's code,
estimated before a paid run, exported in the official prediction formats; each dataset's F1 by its official rules."""
import json
import shutil
from dataclasses import replace
from types import SimpleNamespace

import dspy
import mlflow
import pytest

from evaluation import tracking
from evaluation.metrics import f1
from evaluation.official import f1_metric, hotpot_f1
from evaluation.task_metrics import answer_metrics
from experiments import code, suite
from experiments.tables import __main__ as tables, export, render, stamp, stored
from experiments.tables.declared import TABLES, Table
from runtime.paths import PROJECT_ROOT
from tests.conftest import answer_code_copy
from tests.fake_openai import FakeOpenAI
from tests.test_suite import make_hook

SENTENCE = "Yes, both Alvin Lee and Chad Gray were lead vocalists for bands."


def scored(metric, answer, gold):
    return metric(dspy.Example(answer=gold[0], answers=gold), dspy.Prediction(answer=answer))


def test_hotpotqa_and_2wiki_f1_give_no_partial_credit_against_yes_no_and_noanswer():
    assert scored(f1, SENTENCE, ["yes"]) == pytest.approx(0.154, abs=1e-3)  # SQuAD's rule: partial credit
    assert hotpot_f1(SENTENCE, ["yes"]) == 0.0
    assert hotpot_f1("No.", ["no"]) == 1.0 and hotpot_f1("yes", ["no"]) == 0.0
    assert hotpot_f1("yes", ["Paris"]) == 0.0 and hotpot_f1("noanswer", ["noanswer"]) == 1.0
    assert hotpot_f1("Paris, France", ["Paris"]) == pytest.approx(2 / 3)
    for dataset in ("hotpotqa", "2wiki"):
        assert scored(answer_metrics("short", None, dataset)["f1"], SENTENCE, ["yes"]) == 0.0
    assert scored(f1_metric("musique"), SENTENCE, ["yes"]) == pytest.approx(0.154, abs=1e-3)  # MuSiQue: SQuAD's
    assert scored(f1_metric("hotpotqa"), "Paris", ["London", "Paris"]) == 1.0


def stale_after(root, path: str) -> set[str]:
    before = {name: stamp.current(t, root) for name, t in TABLES.items()}
    with open(root / path, "a", encoding="utf-8") as fh:
        fh.write("\n# changed\n")
    code.answer_code.cache_clear()  # the hash is cached per process: this one edits its code
    return {name for name, t in TABLES.items() if stamp.differences(t, before[name], stamp.current(t, root))}


def test_changing_a_program_stales_the_tables_that_run_it_and_only_those(tmp_path):
    root = answer_code_copy(tmp_path)
    assert stale_after(root, "programs/seal/seal.py") == {"seal", "compile"}
    assert stale_after(root, "programs/baselines/self_rag.py") == {"seal", "rag_critic"}
    assert stale_after(root, "programs/par2/par2.py") == {"par2", "compile"}
    assert stale_after(root, "evaluation/metrics.py") == set(TABLES)  # the scoring every answer goes through


def test_check_lists_every_table_without_an_lm(capsys):
    states = tables.main(["check", "--no-data"])
    assert list(states) == list(TABLES) and all(states.values())
    assert capsys.readouterr().out.count("\n") == len(TABLES)


@pytest.fixture
def tiny(monkeypatch):
    table = Table("tiny", "test: rag vs direct", (suite.Entry("rag", ("direct",), ("demo",)),), {"demo": 2},
                  settings={"retriever": "bm25"})
    monkeypatch.setitem(TABLES, "tiny", table)
    return table


@pytest.fixture
def docs(tmp_path, monkeypatch):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "results.md").write_text("# Results\n\n<!-- tables:begin -->\n<!-- tables:end -->\n\nhand text\n")
    monkeypatch.setattr(stored, "DOCS", folder)
    return folder


def test_a_table_runs_renders_and_goes_stale_when_its_program_changes(tiny, docs, monkeypatch, capsys):
    flags = ["--lm", "openai/unused", "--no-cache", "--experiment", "tables"]
    p = tables.run.parser()
    tables.run.run(tiny, p.parse_args(flags), tables.cli.given_flags(p, flags), ["run", "tiny", *flags],
                   hook=make_hook())
    text = render.render(tiny, docs)
    rows = stored.rows(tiny, docs)
    assert [r.result.cell.label for r in rows] == ["rag", "direct"] and all(r.result.summary["n"] == 2 for r in rows)
    assert "current (measured on" in text and "McNemar" in text and "LM calls/q" in text
    assert "| 2 of 2 |" in text and ".0 of 2" not in text  # counts read back from MLflow (floats there) are counts
    assert all(r.result.run_id[:8] in text for r in rows) and "python -m experiments.tables run tiny" in text
    assert (docs / "results" / "tables" / "tiny-demo.png").exists()
    made = json.loads((docs / "results" / "tables" / "tiny.json").read_text())
    assert made["programs"] == stamp.current(tiny)["programs"] and made["data"]["demo"]
    index = (docs / "results.md").read_text()
    assert "[tiny](results/tables/tiny.md)" in index and index.endswith("hand text\n")
    real = stamp.program_code
    monkeypatch.setattr(stamp, "program_code",
                        lambda name, root=PROJECT_ROOT: real(name, root) + "x" * (name == "direct"))
    assert tables.check(write=True, data=True)["tiny"].startswith("**stale since ")
    assert "direct's code differs from today's" in (docs / "results" / "tables" / "tiny.md").read_text()


def test_an_arm_run_at_the_tables_k_is_found_by_render_though_its_own_k_differs(docs, monkeypatch):
    """A table that declares k runs every arm at it, so an arm whose own k differs (self_rag's 3 in rag_critic's
    table at 5) is labelled without a k suffix; render must plan the cells the same way or it never finds the run."""
    table = Table("tinyk", "test: rag at its method's k", (suite.Entry("self_rag", ("rag",), ("demo",)),), {"demo": 2},
                  settings={"retriever": "bm25", "k": 3})
    monkeypatch.setitem(TABLES, "tinyk", table)
    flags = ["--lm", "openai/unused", "--no-cache", "--experiment", "tables", "--arms", "rag"]
    p = tables.run.parser()
    tables.run.run(table, p.parse_args(flags), tables.cli.given_flags(p, flags), ["run", "tinyk", *flags],
                   hook=make_hook())
    rows = stored.rows(table, docs)
    assert [r.result.cell.label for r in rows] == ["rag"] and json.loads(rows[0].params["program_config"])["k"] == 3
    assert "1 of 2 cells run" in render.render(table, docs)


def test_a_table_renders_on_another_machine_from_its_kept_runs_without_the_benchmarks_text(tiny, docs, monkeypatch,
                                                                                            capsys):
    """A session on a new machine lost every table run of the last ten (its MLflow store stayed on the old one): a
    table's cells are kept in the repository, and render reads them alone."""
    flags = ["--lm", "openai/unused", "--no-cache", "--experiment", "tables"]
    p = tables.run.parser()
    tables.run.run(tiny, p.parse_args(flags), tables.cli.given_flags(p, flags), ["run", "tiny", *flags],
                   hook=make_hook())
    files = sorted((docs / "results" / "tables" / "runs" / "tiny").iterdir())
    assert [f.name for f in files] == ["direct@demo.jsonl", "rag@demo.jsonl"]
    mlflow.set_tracking_uri(f"sqlite:///{docs}/elsewhere.db")  # a new process: MLflow's default store, not ours
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)  # which set_tracking_uri also exports
    before = render.render(tiny, docs)
    parent = json.loads(files[0].read_text().splitlines()[0])["parent"]
    assert "plots/tiny-demo.png" in [a.path for a in stored_artifacts(parent, "plots")]  # this machine's runs
    for path in files:  # another machine: none of these parents in its store
        head, *records = path.read_text().splitlines()
        assert len(records) == 2 and all(json.loads(r)["answer"] is not None for r in records)
        assert not any({"question", "gold", "trace"} & set(json.loads(r)) for r in records)
        moved = json.loads(head.replace(json.loads(head)["parent"], "0" * 32))
        if path.name.startswith("direct"):  # and timed on another machine
            moved["params"]["machine"] = "Other CPU, 8 cores, avx512f"
        path.write_text("\n".join([json.dumps(moved), *records]) + "\n")
    monkeypatch.setattr(stored, "search", lambda *a, **k: pytest.fail("render read the MLflow store"))
    capsys.readouterr()
    after = render.render(tiny, docs)
    assert "plots not logged to 1 parent run(s) this machine's MLflow store does not hold (00000000)" \
        in capsys.readouterr().err
    assert f"Seconds timed on one machine: {tracking.machine()}." in before
    assert ("**Seconds timed on 2 machines: compare s/q only between cells of one.** "
            f"{tracking.machine()}: rag@demo; Other CPU, 8 cores, avx512f: direct@demo.") in after
    board = [line for line in before.splitlines() if line.startswith(("| rag | 2 of 2", "| direct | 2 of 2"))]
    assert len(board) == 2 and all(line in after.splitlines() for line in board)  # the rows, from the kept runs


def test_an_estimate_on_a_new_machine_reads_the_cost_of_the_kept_runs(tiny, docs, monkeypatch):
    import pandas

    cell = suite.plan(tiny.entries)[0][0]
    head = {"run": "abcdef1234", "params": {"program": "rag", "dataset": "demo", "lm": "local:qwen-0.5b"},
            "summary": {"lm_calls": 1.0, "prompt_tokens": 1060.0, "completion_tokens": 12.0}}
    path = stored.kept(tiny, cell, docs)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(head) + "\n")
    monkeypatch.setattr(stored, "search", lambda *a, **k: pandas.DataFrame())  # this machine's store: empty
    assert stored.measured(cell, "openai/x") == (head["summary"], "run abcdef12 (demo, local:qwen-0.5b)")
    path.unlink()
    assert stored.measured(cell, "openai/x") == (stored.DEFAULT_COST, "default (no stored run)")


def stored_artifacts(run_id: str, folder: str):
    tracking.setup("Default")
    return mlflow.MlflowClient().list_artifacts(run_id, folder)


def test_a_table_is_stale_since_the_commit_that_changed_a_stale_cells_program_after_that_cell_ran():
    """rag_critic's table said "stale since a5d5038": the commit its rag_critic cell was made on, the first to touch
    any of its programs after its oldest cell (rag, f18a183). The planner change that staled it came in faf2b21; the
    declaration's note (b1dd5a6) and rag's cell, whose code is today's, stale nothing."""
    if stamp.git("cat-file", "-e", "faf2b21^{commit}") is None:
        pytest.skip("a checkout without the project's history")
    table, now = TABLES["rag_critic"], stamp.current(TABLES["rag_critic"])
    made = {"commit": "mixed", "settings": now["settings"], "cells": {
        "rag_critic@2wiki": {"commit": "a5d50380623a", "program": "rag_critic", "code": "before faf2b21"},
        "rag@2wiki": {"commit": "f18a18331ae7", "program": "rag", "code": now["programs"]["rag"]}}}
    assert stamp.git("rev-parse", stamp.stale_since(table, made, now)) == stamp.git("rev-parse", "faf2b21")
    made["cells"]["rag_critic@2wiki"]["code"] = now["programs"]["rag_critic"]
    assert stamp.stale_since(table, made, now) == "uncommitted changes"  # nothing it ran has changed in a commit


def test_pairing_an_arm_anew_re_renders_a_table_a_setting_stales_it(tiny, monkeypatch):
    """What the cells ran with stamps a table; how its arms are paired, its paper and note are rendering (issue 75:
    re-pairing rag_critic's arms must not throw away the runs already made)."""
    made = stamp.current(tiny)
    repaired = replace(tiny, entries=(suite.Entry("rag", ("direct", "rag_cot"), ("demo",)),), note="re-paired")
    assert stamp.differences(repaired, made, stamp.current(repaired)) == []
    moved = replace(tiny, settings={"retriever": "dense"})
    assert stamp.differences(moved, made, stamp.current(moved)) == ["its declaration"]


def test_a_table_made_on_several_commits_is_stale_since_a_commit_not_since_mixed():
    head = stamp.git("rev-parse", "HEAD")
    if head is None:
        pytest.skip("not a git checkout")
    made = {"commit": "mixed", "cells": {"a": {"commit": head}, "b": {"commit": head + "-dirty"}}}
    table = TABLES["rag_critic"]
    assert "mixed" not in stamp.stale_since(table, made, stamp.current(table))


def test_a_table_never_reads_its_answers_from_the_lm_response_cache(tiny):
    """A table measures cost: a cell re-keyed by a rename asked the same prompts and read rag's 110 answers from DSPy's
    cache at 0 prompt tokens and 0.1 s a question."""
    p = tables.run.parser()
    assert tables.run.settle(tiny, p.parse_args([]), set()).no_cache
    assert tables.run.settle(tiny, p.parse_args(["--no-cache"]), {"no_cache"}).no_cache


def test_a_flag_that_changes_a_declared_setting_is_refused(tiny, capsys):
    with pytest.raises(SystemExit) as stop:
        tables.main(["run", "tiny", "--retriever", "dense"])
    assert stop.value.code == 2
    assert "--retriever dense: table tiny runs with retriever bm25" in capsys.readouterr().err


def test_a_run_on_a_remote_lm_is_estimated_and_asks_above_the_threshold(tiny, docs, capsys):
    with FakeOpenAI() as server:
        base = ["run", "tiny", "--lm", "openai/fake", "--api-base", server.api_base, "--no-cache",
                "--experiment", "tables"]
        with pytest.raises(SystemExit) as stop:
            tables.main(base + ["--ask-above-calls", "1"])
        assert stop.value.code == 2 and server.requests == 0
        err = capsys.readouterr()
        assert "| rag | demo | 2 | 4.0 | 3000 | 150 | 8 | 6000 | 300 | default (no stored run) |" in err.out
        assert "estimated at 16 LM calls, above --ask-above-calls 1: pass --yes to run it" in err.err
        tables.main(base + ["--ask-above-calls", "1", "--yes"])
        asked = server.requests
        assert asked > 0
        capsys.readouterr()
        tables.main(base + ["--estimate", "--price-in", "1", "--price-out", "2", "--ask-above-calls", "1"])
        assert server.requests == asked
    out = capsys.readouterr().out
    direct = next(line for line in out.splitlines() if line.startswith("| direct |"))
    assert "| direct | demo | 2 | 1.0 |" in direct and "measured from" not in direct and "(demo, openai/fake)" in direct
    assert "cost: $0.0" in out


def test_export_writes_the_official_prediction_formats(monkeypatch):
    raw = [{"_id": "q1", "context": [["A", ["s0", "s1"]], ["B", ["s0"]]]}]
    monkeypatch.setattr(export, "_raw", lambda files: raw)
    records = [{"id": "q1", "answer": "yes", "passages": [{"id": "1", "title": "A"}, {"id": "2", "title": "B"}],
                "citations": ["1"]}]
    assert export.hotpot_format(records, export.hotpotqa.FILES) == {"answer": {"q1": "yes"},
                                                                     "sp": {"q1": [["A", 0], ["A", 1]]}}
    paragraphs = [{"idx": 0, "title": "A", "paragraph_text": "a", "is_supporting": False},
                  {"idx": 1, "title": "B", "paragraph_text": "b", "is_supporting": True}]
    monkeypatch.setattr(export, "_raw", lambda files: [{"id": "m1", "paragraphs": paragraphs}])
    line = json.loads(export.musique_format([{"id": "m1", "answer": "x",
                                               "passages": [{"id": "musique:00001", "title": "B"}]}]))
    assert line == {"id": "m1", "predicted_answer": "x", "predicted_support_idxs": [1], "predicted_answerable": True}


def test_export_writes_the_gold_of_the_exported_questions_only(monkeypatch):
    """The official scripts average over every gold question: a gold file holding questions the run did not answer
    would score them as misses."""
    raw = [{"_id": "q1", "answer": "x"}, {"_id": "q2", "answer": "y"}, {"_id": "q3", "answer": "z"}]
    monkeypatch.setattr(export, "_raw", lambda files: raw)
    text, suffix = export.gold("2wiki", {"q1", "q3"})
    assert suffix == ".gold.json" and [r["_id"] for r in json.loads(text)] == ["q1", "q3"]
    monkeypatch.setattr(export, "_raw", lambda files: [{"id": "m1"}, {"id": "m2"}])
    text, suffix = export.gold("musique", {"m2"})
    assert suffix == ".gold.jsonl" and [json.loads(line)["id"] for line in text.splitlines()] == ["m2"]


def test_export_prints_our_scores_on_the_exported_questions_beside_the_official_command(monkeypatch, tmp_path,
                                                                                         capsys):
    """The official script averages over the exported questions: ours is set beside it on the same ones, an
    unanswered question in neither."""
    raw = [{"_id": q, "answer": "x", "context": [["A", ["s0"]]]} for q in ("q1", "q2", "q3")]
    monkeypatch.setattr(export, "_raw", lambda files: raw)
    records = [{"id": "q1", "answer": "x", "em": 1.0, "f1": 1.0, "passages": []},
               {"id": "q2", "answer": "x y", "em": 0.0, "f1": 0.5, "passages": []},
               {"id": "q3", "answer": None, "em": 0.0, "f1": 0.0, "retryable": True, "passages": []}]
    cell = SimpleNamespace(label="rag", dataset="hotpotqa")
    row = SimpleNamespace(result=SimpleNamespace(cell=cell, records=records, run_id="abcdef0123"))
    monkeypatch.setattr(stored, "rows", lambda table: [row])
    export.export(TABLES["hotpot_smoke"], tmp_path)
    out, err = capsys.readouterr()
    assert "(2 predictions, run abcdef01); ours on them: EM 0.5000, F1 0.7500; score it: python hotpot_evaluate_v1.py" \
        in out
    assert "rag@hotpotqa: 1 unanswered question(s) left out" in err
    assert [r["_id"] for r in json.loads((tmp_path / "hotpot_smoke-rag-hotpotqa.gold.json").read_text())] == ["q1", "q2"]
