"""A decision is one object (programs.shared.gates): each way of asking, the oracle, the rest state, the trace entry."""
import json
import math

import dspy
import pytest
from dspy.utils.dummies import DummyLM

import programs
from decoding.decisions import ONE_CLASS, REST, decide_all, gates, recorded_decisions
from programs.shared.gates import DecisionMode, LabelGate, Ruling
from programs.shared.oracle import Gold, gold_labels
from retrieval.corpus import Passage
from runtime.roles import init_dspy
from tests.test_decisions import BareLM, PayloadLM, field

ENOUGH = dspy.Signature("question -> enough: bool, reason: str")
HELD = [Passage("en:a", "A", "x", "en", "en")]


def gate(mode="generate", **kwargs) -> LabelGate:
    return LabelGate(dspy.Predict(ENOUGH), "enough", ("True", "False"), kind="set", mode=mode, **kwargs)


def p_true(p):
    return field("enough", [("True", math.log(p)), ("False", math.log(1 - p))])


def test_written_the_label_is_parsed_and_no_probability_is_recorded():
    init_dspy(DummyLM([{"enough": "True", "reason": "all there"}]), cache=False)
    with recorded_decisions() as calls:
        ruling = gate()({"question": "Q?"}, passages=HELD)
    assert ruling.label == "True" and ruling.output.reason == "all there" and ruling.prob is None
    assert ruling.called and ruling.trace("p_enough") == {} and calls == []


@pytest.mark.parametrize("mode", ["logprob", "fused"])  # fused: no retriever score to fuse with one set
def test_scored_the_label_probability_decides_against_the_fitted_threshold_and_is_recorded(mode):
    lm = PayloadLM([{"enough": "True", "reason": "r"}] * 2, p_true(0.3))
    init_dspy(lm, cache=False)
    g = gate(mode)
    with recorded_decisions() as calls:
        ruling = g({"question": "Q?"}, passages=HELD)
    assert ruling.label == "False" and ruling.prob == pytest.approx(0.3, abs=1e-4)  # the written "True" is not used
    assert ruling.trace("p_enough") == {"p_enough": ruling.prob}
    assert [(c.gate, c.passages) for c in calls] == [(g, tuple(HELD))] and lm.history[-1]["kwargs"]["logprobs"]
    g.thresholds["threshold"] = 0.25  # a fit on dev
    assert g({"question": "Q?"}).label == "True"


def test_at_rest_the_gate_answers_without_a_call_and_says_so_in_the_trace():
    init_dspy(BareLM([]), cache=False)  # any call would fail: it has no reply
    g = gate("logprob")
    decide_all(g, True)  # a fit: every dev decision "enough"
    ruling = g({"question": "Q?"})
    assert ruling == Ruling("True", dspy.Prediction(enough="True"), decided=REST) and not ruling.called
    assert ruling.trace("p_enough") == {"decided": REST}


def test_a_one_class_gate_still_asks_and_names_how_it_decided():
    init_dspy(PayloadLM([{"enough": "True", "reason": "r"}], p_true(0.9)), cache=False)
    g = gate("logprob")
    decide_all(g, False)  # every dev decision "not enough": the other label, whatever the probability
    ruling = g({"question": "Q?"})
    assert ruling.label == "False" and ruling.decided == ONE_CLASS and ruling.called


def test_the_oracle_answers_from_the_gold_labels_without_a_call():
    init_dspy(BareLM([]), cache=False)
    g = gate("logprob", roles=frozenset({"sufficiency"}), role="sufficiency")
    with gold_labels(Gold(keys=frozenset({"A"}))):
        assert g({"question": "Q?"}, gold=HELD) == Ruling("True", oracle=True)
        assert g({"question": "Q?"}, gold=[]) == Ruling("False", oracle=True)
    assert not gate("logprob").from_gold  # a program built without the role asks the LM


def test_an_oracle_that_asks_keeps_the_reply_and_overrides_its_label():
    init_dspy(DummyLM([{"enough": "True", "reason": "looks fine"}]), cache=False)
    g = gate(roles=frozenset({"sufficiency"}), role="sufficiency", oracle_asks=True)
    with gold_labels(Gold(keys=frozenset({"B"}))):
        ruling = g({"question": "Q?"}, gold=HELD)
    assert ruling.label == "False" and ruling.output.reason == "looks fine" and not ruling.decided


def test_a_written_path_with_tries_samples_again_until_the_reply_reads():
    lm = DummyLM([{"enough": "True", "reason": "-"}, {"enough": "False", "reason": "again"}])
    init_dspy(lm, cache=False)
    refuses_no_reason = lambda out, label=None: None if out.reason == "-" else label or str(out.enough)  # noqa: E731
    ruling = gate(parse=refuses_no_reason, tries=2)({"question": "Q?"})
    assert (ruling.label, ruling.output.reason, ruling.failures) == ("False", "again", 1)
    assert lm.history[-1]["kwargs"]["rollout_id"] == 1 and lm.history[-1]["kwargs"]["temperature"] == 0.7


def test_asking_reads_scales_as_written_numbers_clamped_or_as_expected_values():
    from signatures.critic import RateDocument
    scales, digits = ("relevance", "usefulness"), tuple("012345")
    init_dspy(DummyLM([{"relevance": "7", "usefulness": "-1", "specificity": "3", "compatibility": "3",
                        "critique": "ok"}]), cache=False)
    out, values = DecisionMode().scales(dspy.Predict(RateDocument), scales, digits, {}, question="Q", document="D")
    assert values == [5, 0] and out.critique == "ok"
    payload = (field("relevance", [("2", math.log(0.5)), ("3", math.log(0.5))])
               + field("usefulness", [("4", math.log(1 - 1e-9))]))
    init_dspy(PayloadLM([{"relevance": "2", "usefulness": "4", "specificity": "3", "compatibility": "3",
                          "critique": "ok"}], payload), cache=False)
    _, values = DecisionMode("logprob").scales(dspy.Predict(RateDocument), scales, digits, {}, question="Q",
                                               document="D")
    assert values == pytest.approx([2.5, 4.0], abs=1e-4)
    with pytest.raises(ValueError, match="unknown --decisions 'votes'"):
        DecisionMode("votes")


def test_a_fused_grade_gate_fitted_to_the_retriever_alone_asks_no_lm():
    from programs.baselines.crag import CRAG
    from tests.test_seal import ScriptedSearch

    init_dspy(BareLM([]), cache=False)
    crag = CRAG(ScriptedSearch({}), k=2, decisions="fused")
    crag.grade_gate.weights = [0.0, 0.0, 10.0]  # the LM's weight 0: the retrieval score alone
    grades = {}
    a, b = Passage("en:a", "A", "x", "en", "en", 0.9), Passage("en:b", "B", "x", "en", "en", 0.5)
    assert crag.grade_gate("Q?", [a, b], grades) == 0 and grades == {"en:a": "ambiguous", "en:b": "incorrect"}


def test_every_program_has_its_gates_in_every_mode_and_a_copy_asks_through_its_own_predictors(monkeypatch):
    from tests.test_rag_critic import FIXTURES
    from tests.test_seal import ScriptedSearch

    monkeypatch.setenv("RAG_DATA_DIR", str(FIXTURES))  # RAG-Critic's taxonomy

    for name in ("seal", "crag", "self_rag", "par2", "rag_critic", "self_refine"):
        found = {mode: sorted(gates(programs.build(name, search=ScriptedSearch({}), decisions=mode)))
                 for mode in ("generate", "logprob", "fused")}
        assert found["generate"] == found["logprob"] == found["fused"] and found["generate"], name
    seal = programs.build("seal", search=ScriptedSearch({}))
    copy = seal.deepcopy()
    assert copy.assess_gate.predictor is copy.assess and copy.assess is not seal.assess


def test_an_artifact_saved_without_gates_loads_them_unfitted(tmp_path):
    from tests.test_seal import ScriptedSearch

    search = ScriptedSearch({})
    program = programs.build("seal", search=search)
    path = tmp_path / "program.json"
    artifact = programs.save_compiled(program, path, "seal", {}, {"dataset": "demo"})
    del artifact["state"]["assess_gate"]  # as written before gates always existed (--decisions generate)
    path.write_text(json.dumps(artifact))
    loaded = programs.load_compiled(str(path), search=search)
    assert loaded.assess_gate.dump_state() == {"thresholds": {"threshold": 0.5}, "weights": None}


def test_coral_is_built_from_keyword_settings_into_its_config():
    from tests.test_seal import ScriptedSearch

    coral = programs.build("coral", search=ScriptedSearch({}), k=2, loops=1, decisions="fused", oracle="relevance")
    assert (coral.k, coral.loops, coral.keep_gate.from_gold, coral.keep_gate.weighs_retrieval) == (2, 1, True, False)
    assert programs.build("coral_select", search=ScriptedSearch({})).rewrite is False  # a variant's fixed setting
    with pytest.raises(ValueError, match="unknown scope 'moon'"):
        programs.spec("coral").construct(search=ScriptedSearch({}), scope="moon")  # its Config checks it
