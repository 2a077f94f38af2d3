"""docs/extending.md, followed step by step: a toy sixth method (``echo_rag``: search once, keep the passages its
relevance gate passes, write) is written, registered, evaluated by ``evaluate.py``, run in a suite, compiled by
``optimize.py --optimizer bootstrap`` and loaded back, on the bundled demo set and a DummyLM. The guide's file
paths and dotted names are checked to exist, so a renamed file or helper breaks this test before it misleads a
reader."""
from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import dspy
import mlflow
import pytest
from dspy.utils.dummies import DummyLM

import evaluate
import optimize
import programs
from decoding.choice import MCScoring
from decoding.decisions import rest_note
from experiments import cli, sessions, suite
from programs.registry import DECISIONS, K, MAX_CHARS, ORACLE, REGISTRY, TAKES, ProgramSpec
from programs.shared.gates import LabelGate
from programs.shared.oracle import check_roles
from programs.shared.writer import Writer
from retrieval.retriever import Retriever
from runtime.caps import output_cap
from signatures.critic import JudgeRelevance

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "extending.md"


# Step 2 of "Add a method": the program (in the project it is a file, programs/<paper>/<name>.py).
class EchoRAG(dspy.Module):
    """Search once, keep the passages the relevance gate passes, write the answer from them.

    Args:
        search: the retriever.
        k: passages retrieved.
        max_chars: each passage shown to the LM cut after this many characters (None: whole).
        decisions: the decision mode of the relevance gate (``--decisions``).
        oracle: the oracle roles (``--oracle``).
        mc: how the writer picks multiple-choice letters.
    """

    ROLES = {"keep": "critic"}  # predictor-name prefix -> role (runtime.roles); the rest are writers
    ORACLE_ROLES = ("relevance",)  # the decisions --oracle may answer from gold labels

    def __init__(self, search: Retriever, *, k: int = 3, max_chars: int | None = None, decisions: str = "generate",
                 oracle: str = "", mc: MCScoring | None = None):
        super().__init__()
        self.oracle = check_roles(oracle, self.ORACLE_ROLES, "echo_rag")
        self.search, self.k, self.max_chars = search, k, max_chars
        self.keep = dspy.Predict(JudgeRelevance)
        self.keep_gate = LabelGate(self.keep, "relevant", ("yes", "no"), kind="passage", mode=decisions,
                                   roles=self.oracle, role="relevance")
        self.writer = Writer(use_passages=True, max_chars=max_chars, mc=mc)

    def resting(self) -> str | None:
        return rest_note("keep", self.keep_gate, "rag")

    def forward(self, question: str, options: dict[str, str] | None = None,
                lang: str | None = None) -> dspy.Prediction:
        retrieved = self.search.search(question, self.k)
        rulings = [self.keep_gate({"question": question, "passage": p.format(self.max_chars)}, gold=p, passages=[p])
                   for p in retrieved]
        kept = [p for p, r in zip(retrieved, rulings) if r.label == "yes"]
        out = self.writer(question=question, passages=kept, options=options, lang=lang)
        trace = {"iterations": 1, "queries": [question], "stop_reason": "single_pass",
                 "kept": [p.title for p in kept], "decisions": [r.trace("p_relevant") for r in rulings],
                 "parse_failures": sum(r.failures for r in rulings)}
        return dspy.Prediction(answer=out.answer, passages=kept, retrieved=retrieved, trace=trace)


@pytest.fixture
def echo_rag(monkeypatch):
    """Step 3 of "Add a method": declare its settings in ``TAKES`` and name it in ``REGISTRY`` (here through the
    same dicts, for this test only). Step 6: every LM built from flags is a DummyLM whose relevance verdicts say yes
    and whose writer answers Paris."""
    monkeypatch.setitem(TAKES, EchoRAG, (K.at(3), MAX_CHARS, DECISIONS, ORACLE))
    monkeypatch.setitem(REGISTRY, "echo_rag", ProgramSpec(EchoRAG, "search once, keep what the gate passes, write"))
    monkeypatch.setattr(sessions, "make_lm", lambda *a, **k: DummyLM({"## relevant ##": {"relevant": "yes"},
                                                                 "question": {"answer": "Paris"}}))
    return "echo_rag"


SIZES = ["--dataset", "demo", "--train", "2", "--dev", "1", "--test", "2", "--no-trace"]


PACKAGES = ("scripts", "experiments", "optimizers", "evaluation", "construction", "programs", "decoding", "data",
            "retrieval", "signatures", "runtime")


def has(module: str, attr: str | None = None) -> bool:
    """Whether ``module`` imports (and has ``attr``)."""
    try:
        found = importlib.import_module(module)
    except ImportError:
        return False
    return attr is None or hasattr(found, attr)


def test_the_guide_names_files_and_helpers_that_exist():
    """Every path (``dir/file.py``, ``dir/``) and every dotted name of a project package the guide gives in
    backticks exists; the retrieval guide it replaced is gone and README.md and docs/cli.md link to it."""
    text = GUIDE.read_text(encoding="utf-8")
    paths = set(re.findall(r"`((?:[\w.-]+/)+[\w.-]*|README\.md|pyproject\.toml)`", text))
    missing = [p for p in paths if not (ROOT / p).exists()]
    assert paths and not missing, f"docs/extending.md names files that do not exist: {missing}"
    dotted = set(re.findall(r"`((?:%s)(?:\.\w+)+)`" % "|".join(PACKAGES), text))
    for name in sorted(dotted):
        module, _, attr = name.rpartition(".")
        assert has(module, attr) or has(name), f"docs/extending.md names {name}, which does not exist"
    assert len(dotted) > 30 and not (ROOT / "docs" / "extending-retrieval.md").exists()
    assert "(docs/extending.md)" in (ROOT / "README.md").read_text(encoding="utf-8")
    assert "(extending.md" in (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")


def test_a_registered_method_keeps_the_house_rules(echo_rag, embedder, monkeypatch):
    """What the suite-wide tests check of every registered program holds for the new one: its declared settings are
    its constructor's, every predictor has a capped output, its writers take the run's ``mc``, it takes ``lang``,
    and its decisions and oracle roles are read by the registry."""
    from retrieval.corpus import Corpus

    names = {s.name for s in programs.registry.SETTINGS}
    assert {s.name for s in TAKES[EchoRAG]} == names & set(inspect.signature(EchoRAG.__init__).parameters)
    assert echo_rag in programs.names() and programs.oracle_roles(echo_rag) == ("relevance",)
    assert programs.spec(echo_rag).compiled == ["k", "max_chars", "decisions"]
    own = inspect.signature(EchoRAG.__init__).parameters
    assert all(own[s.name].default == s.default for s in TAKES[EchoRAG] if s.default is not None)
    search = Retriever([Corpus("toy", [{"id": "1", "title": "Paris", "text": "Paris is in France."}])], embedder)
    scoring = MCScoring("logprob")
    program = programs.build(echo_rag, search=search, mc=scoring, decisions="fused", oracle="")
    assert program.k == 3 and program.keep_gate.mode.name == "fused"
    assert all(output_cap(p.signature) is not None for _, p in program.named_predictors())
    assert [w.mc for _, w in program.named_sub_modules(Writer)] == [scoring]
    assert "lang" in inspect.signature(EchoRAG.forward).parameters
    assert "--oracle" in " ".join(a for action in cli.parser("t")._actions for a in action.option_strings)


def test_evaluate_runs_the_new_method_on_the_demo_set(echo_rag):
    summary = evaluate.main(["--program", echo_rag, "--split", "test", *SIZES])
    assert summary["n"] == 2 and summary["failed_examples"] == 0 and summary["iterations"] == 1
    assert summary["lm_calls"] == 4  # three relevance verdicts (--k left out: the method's own k, 3), a write
    run = mlflow.search_runs(experiment_names=["agentic-rag"]).iloc[0]
    assert run["params.program"] == echo_rag and '"k": 3' in run["params.program_config"]
    oracle = evaluate.main(["--program", echo_rag, "--split", "test", "--oracle", "relevance", *SIZES])
    assert oracle["n"] == 2 and oracle["lm_calls"] < summary["lm_calls"]  # gold labels kept or dropped each passage


def test_the_new_method_runs_in_a_suite_with_its_baselines(echo_rag, monkeypatch):
    ad_hoc = evaluate.main(["--suite", f"{echo_rag},rag", *SIZES])
    assert [r.cell.program for r in ad_hoc["results"]] == [echo_rag, "rag"]
    monkeypatch.setitem(suite.SUITES, "toy", (suite.Entry(echo_rag, ("rag", "direct"), ("demo",)),))
    named = evaluate.main(["--suite", "toy", *SIZES])
    assert [r.cell.program for r in named["results"]] == [echo_rag, "rag", "direct"]
    assert echo_rag in named["leaderboard"].markdown and all(r.summary["n"] == 2 for r in named["results"])


def test_bootstrap_compiles_the_new_method_and_its_artifact_loads_back(echo_rag, tmp_path):
    out = tmp_path / "program.json"
    run_id = optimize.main(["--program", echo_rag, "--optimizer", "bootstrap", "--out", str(out), *SIZES])
    assert mlflow.get_run(run_id).data.params["program"] == echo_rag
    for source in (str(out), run_id):
        loaded = programs.load_compiled(source)
        assert isinstance(loaded, EchoRAG) and loaded.k == 3 and loaded.writer.short.demos
        assert set(programs.portable_state(loaded)) >= {"keep", "keep_gate", "writer.short"}
    summary = evaluate.main(["--compiled", str(out), "--split", "test", *SIZES])
    assert summary["n"] == 2 and summary["failed_examples"] == 0



def test_a_fused_compile_fits_the_new_gate_with_nothing_more_registered(echo_rag, tmp_path, capsys):
    """``--decisions fused`` fits the program's gate on dev (found as a parameter of the program) and saves it: on
    the DummyLM every passage is kept, so the fitted gate rests and the compiled program runs as ``rag``."""
    out = tmp_path / "program.json"
    run_id = optimize.main(["--program", echo_rag, "--decisions", "fused", "--out", str(out), *SIZES])
    assert "calibration before compile keep_gate: dev AUC" in capsys.readouterr().err
    loaded = programs.load_compiled(str(out))
    assert loaded.keep_gate.mode.name == "fused" and loaded.resting() == "keep at rest = rag"
    assert mlflow.get_run(run_id).data.tags["effective_program"] == "echo_rag (keep at rest = rag)"  # resting()
