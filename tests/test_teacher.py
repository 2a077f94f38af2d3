"""``optimize.py --teacher oracle`` (issue 62 item 5): BootstrapFewShot's demos made from the program built with every
oracle role, whose answers stand in for its predictors' calls (``programs.shared.oracle.taught``), for the same
program making LM calls; ``--teacher self`` (the default) bootstraps from the program's own runs as before."""
import dspy
import mlflow
import pytest
from dspy.utils.dummies import DummyLM

import optimize
import programs
from evaluation.metrics import f1, gold_of
from experiments import sessions
from optimizers.compile import compile_program
from programs.shared.gates import LabelGate
from programs.shared.oracle import gold_labels, taught, teaching
from programs.shared.writer import READ
from retrieval.corpus import Corpus, Passage
from retrieval.retriever import Retriever
from runtime.roles import init_dspy
from tests.dummies import routed
from tests.test_oracle_roles import DOCS, GERMAN, TWO_HOP, NoCalls, sessions_config


@pytest.fixture
def search(embedder):
    return Retriever([Corpus("musique", DOCS, "en"), Corpus("de", GERMAN, "de")], embedder)


def pair(name: str, search):
    """(student, teacher): ``name`` as a session builds it without oracle roles and with ``--oracle all``."""
    config = sessions_config(name)
    return (programs.build(name, search=search, **{k: v for k, v in config.items() if k != "oracle"}),
            programs.build(name, search=search, **config))


def oracle_compiled(name: str, search):
    """The student compiled on TWO_HOP with the oracle teacher (no LM may be called), and the teacher's own
    prediction for TWO_HOP (what its trace reports it searched and answered)."""
    student, teacher = pair(name, search)
    init_dspy(NoCalls(), cache=False)
    with gold_labels(gold_of(TWO_HOP)):
        told = teacher.deepcopy()(question=TWO_HOP.question)
    compiled = compile_program(student, "bootstrap", [TWO_HOP], [], f1, max_demos=1, teacher=teacher)
    demos = {n: [d for d in p.demos if d.get("augmented")] for n, p in compiled.named_predictors()}
    return compiled, demos, told


def test_par2_learns_the_oracle_plan_next_query_and_answer(search):
    compiled, demos, told = oracle_compiled("par2", search)
    assert told.answer == "Keturah"
    assert [d.searches for d in demos["planner"]] == [gold_of(TWO_HOP).query([])] == [told.trace["queries"][0]]
    assert [(d.decision, d.next_query) for d in demos["esc"]] == [("CONTINUE", told.trace["queries"][1])]
    assert [(d.answer, d.reasoning) for d in demos["writer.short.predict"]] == [("Keturah", READ[True])]


def test_seal_learns_the_oracle_micro_query_and_a_cited_answer(search):
    compiled, demos, told = oracle_compiled("seal", search)
    assert told.answer == "Keturah" and len(told.queries) == 2
    assert [d.query for d in demos["micro_query"]] == told.queries[1:]
    (answer,) = demos["writer.short"]
    cited = [i for i, p in enumerate(answer.passages, 1) if "Keturah" in p]
    assert cited and answer.answer == f"Keturah [{', '.join(map(str, cited))}]"


def test_coral_learns_the_oracle_corpora_and_rewrite(search):
    compiled, demos, told = oracle_compiled("coral", search)
    assert told.answer == "Keturah"
    assert [d.corpora for d in demos["planner"]] == [["musique"]]
    assert [d.query for d in demos["replanner"]] == [told.trace["queries"][-1]]
    assert [d.answer for d in demos["writer.short"]] == ["Keturah"]


def test_the_student_is_no_oracle_and_asks_the_lm_with_the_oracle_demos(search):
    compiled, demos, _ = oracle_compiled("par2", search)
    assert not compiled.oracle and not compiled.writer.oracle
    lm = routed({"next_query": {"decision": "STOP", "next_query": ""},
                 "searches": {"searches": "Hagar spouse | first hop"},
                 "answer": {"reasoning": "read", "answer": "Keturah"}})
    with gold_labels(gold_of(TWO_HOP)):  # as the evaluation sets them: the student reads none
        assert compiled(question=TWO_HOP.question).answer == "Keturah"
    prompts = ["\n".join(m["content"] for m in call["messages"]) for call in lm.history]
    assert any("[[ ## searches ## ]]\nspouse of Hagar" in p for p in prompts)  # the planner's oracle demo, shown
    assert len(prompts) >= 3  # plan, write, decide


def test_an_answer_that_leaves_an_output_field_out_is_not_recorded():
    predictor = dspy.Predict("question -> decision, next_query")
    with dspy.context(trace=[]), teaching():
        taught(predictor, {"question": "q"}, decision="STOP")
        taught(predictor, {"question": "q"}, decision="STOP", next_query="", extra="x")
        trace = list(dspy.settings.trace)
    assert [(p, i, dict(o)) for p, i, o in trace] == [(predictor, {"question": "q"},
                                                       {"decision": "STOP", "next_query": ""})]


def test_an_oracle_evaluation_records_nothing(search):
    # outside a teacher's call (an evaluation under --oracle all, DSPy's trace on by default) nothing is recorded
    _, teacher = pair("par2", search)
    init_dspy(NoCalls(), cache=False)
    with gold_labels(gold_of(TWO_HOP)), dspy.context(trace=[]):
        assert teacher(question=TWO_HOP.question).answer == "Keturah"
        assert dspy.settings.trace == []


@pytest.mark.parametrize("outputs, recorded", [("enough", True), ("enough, reason", False)])
def test_a_decision_oracle_is_recorded_as_its_gates_call_when_the_label_is_the_whole_answer(outputs, recorded):
    predictor = dspy.Predict(f"question, evidence -> {outputs}")
    gate = LabelGate(predictor, "enough", ("yes", "no"), kind="set", roles=frozenset({"sufficiency"}),
                     role="sufficiency")
    inputs = {"question": TWO_HOP.question, "evidence": ["Hagar was the spouse of Abraham."]}
    held = [Passage("musique:00001", "Hagar (disambiguation)", "Hagar was the spouse of Abraham.")]
    with gold_labels(gold_of(TWO_HOP)), dspy.context(trace=[]), teaching():
        assert gate(inputs, gold=held).label == "no"  # hop 2's paragraph is not held
        trace = list(dspy.settings.trace)
    assert [(p, i, dict(o)) for p, i, o in trace] == ([(predictor, inputs, {"enough": "no"})] if recorded else [])


@pytest.mark.parametrize("k, answers", [(2, 0), (4, 1)])
def test_an_oracle_teacher_that_abstains_teaches_no_demo(search, k, answers):
    # rag_cited's one pass over the question's top 2 never holds hop 2's paragraph: the perfect reader abstains, and
    # the metric keeps no demo of it; over all 4 passages it answers, citing the one that states the answer
    student, teacher = (programs.build("rag_cited", search=search, k=k, **oracle) for oracle in ({}, {"oracle": "all"}))
    init_dspy(NoCalls(), cache=False)
    compiled = compile_program(student, "bootstrap", [TWO_HOP], [], f1, max_demos=1, teacher=teacher)
    demos = [d for d in compiled.writer.short.demos if d.get("augmented")]
    assert len(demos) == answers
    for demo in demos:  # the one passage that names Keturah is cited
        (n,) = [i for i, p in enumerate(demo.passages, 1) if "Keturah" in p]
        assert demo.answer == f"Keturah [{n}]"


@pytest.fixture
def scripted_lm(monkeypatch):
    """Every LM built from flags is a DummyLM that answers 'Paris' (with a reasoning)."""
    monkeypatch.setattr(sessions, "make_lm",
                        lambda *a, **k: DummyLM({"question": {"reasoning": "read", "answer": "Paris"}}))


def test_optimize_names_and_logs_its_teacher(scripted_lm):
    argv = ["--program", "rag_cot", "--dataset", "demo", "--train", "3", "--dev", "0", "--test", "2", "--k", "3"]
    own = mlflow.get_run(optimize.main(argv))
    oracle = mlflow.get_run(optimize.main(argv + ["--teacher", "oracle"]))
    assert own.info.run_name == "rag_cot-demo-bootstrap" and own.data.params["teacher"] == "self"
    assert oracle.info.run_name == "rag_cot-demo-bootstrap-teacher=oracle"
    assert oracle.data.params["teacher"] == oracle.data.tags["teacher"] == "oracle"
    assert oracle.data.metrics["test_after_lm_calls"] >= 1  # the compiled program is asked, not the oracle
    taught_demos = [d for d in programs.load_compiled(oracle.info.run_id).writer.short.predict.demos
                    if d.get("augmented")]
    assert taught_demos and {d["reasoning"] for d in taught_demos} == {READ[True]}
    assert "Paris" not in {d["answer"] for d in taught_demos}  # the oracle's gold answers, not the LM's


def test_an_oracle_teacher_is_for_bootstrap(capsys):
    with pytest.raises(SystemExit) as stop:
        optimize.main(["--program", "rag", "--optimizer", "mipro", "--teacher", "oracle"])
    assert stop.value.code == 2
    assert ("error: --teacher does not apply to optimize.py --optimizer mipro (only to optimize.py --optimizer "
            "bootstrap): leave it out") in capsys.readouterr().err


def test_an_oracle_teacher_needs_every_roles_labels_in_train(scripted_lm, capsys):
    # the bundled multi-hop questions name no culture's language: CORAL's planner oracle has no label for them
    with pytest.raises(SystemExit) as stop:
        optimize.main(["--program", "coral", "--dataset", "demo", "--train", "2", "--dev", "0", "--test", "1",
                       "--teacher", "oracle"])
    assert stop.value.code == 2
    assert ("error: --teacher oracle builds the program with --oracle all: --oracle planner needs"
            in capsys.readouterr().err)
