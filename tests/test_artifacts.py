"""A damaged or outdated compiled program is refused with its file, the cause and the fix named."""
import json
from dataclasses import replace

import pytest

import evaluate
import programs


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
    from optimizers import cli

    monkeypatch.setattr(cli, "make_lm", lambda *a, **k: DummyLM({"question": {"answer": "Paris"}}))
    run_id = optimize.main(["--program", "direct", "--train", "2", "--dev", "0", "--test", "1"])
    out = capsys.readouterr().out
    stored = re.search(r"compiled program: (\S+) \(MLflow run (\w+)", out)
    assert stored and stored.group(2) == run_id
    assert programs.read_artifact(stored.group(1))["program"] == "direct"  # a lasting file, not a temp copy
    assert "mlruns" in stored.group(1) and "mlflow ui --backend-store-uri sqlite:///" in out
