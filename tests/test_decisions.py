"""Scored decisions: label distributions and expected scores from logprobs, threshold and fusion fitting, fallback."""
import json
import math

import dspy
import numpy as np
import pytest
from dspy.utils.dummies import DummyLM
from sklearn.metrics import roc_auc_score

from decoding.decisions import (SCALE, YES_NO, Gate, LabelAdapter, check_mode, decide, decide_all, describe, features,
                                fit_fusion, fit_gate, recall_threshold, written_label, youden_threshold)
from runtime.roles import init_dspy
from signatures.critic import JudgeRelevance, RateDocument
from tests.dummies import Overflowing, Queue, unreadable
from tests.test_seal import ANSWER, Q, ScriptedSearch


def token(text, logprob=0.0, alternatives=()):
    return {"token": text, "logprob": logprob, "top_logprobs": [{"token": t, "logprob": lp} for t, lp in alternatives]}


def field(name, alternatives):
    """The tokens of one ChatAdapter output field: its header, then the label token with ``alternatives`` and a
    filler alternative of probability 1e-6 (as among the 20 an endpoint returns: labels missing from them get it)."""
    first = max(alternatives, key=lambda a: a[1])
    return [token("[["), token(f" ## {name} ## ]]"), token("\n"),
            token(first[0], first[1], [*alternatives, ("\u2026", math.log(1e-6))]), token("\n\n")]


class BareLM(DummyLM):
    """Replies ``replies`` in turn as written (a bare label prompt's replies), with no logprobs."""

    def __init__(self, replies):
        super().__init__([])
        self.replies = list(replies)

    def __call__(self, prompt=None, messages=None, **kwargs):
        self.history.append({"messages": messages, "kwargs": kwargs})
        return [self.replies.pop(0)]


class PayloadLM(DummyLM):
    """A DummyLM whose replies carry a fixed OpenAI-format logprobs payload."""

    def __init__(self, answers, content):
        super().__init__(answers)
        self.content = content

    def __call__(self, prompt=None, messages=None, **kwargs):
        outputs = super().__call__(prompt=prompt, messages=messages, **kwargs)
        return [{"text": text, "logprobs": {"content": self.content}} for text in outputs]


def test_yes_no_decision_is_read_from_the_label_token():
    # at the label token: "yes" 0.5 + " Yes" 0.2 = 0.7, "no" 0.2, "Sure" starts no label
    alternatives = [("yes", math.log(0.5)), (" Yes", math.log(0.2)), ("no", math.log(0.2)), ("Sure", math.log(0.1))]
    lm = PayloadLM([{"relevant": "no"}], field("relevant", alternatives))
    init_dspy(lm, cache=False)
    d = decide(dspy.Predict(JudgeRelevance), {"relevant": YES_NO}, chat=True, question="Q?", passage="P.")
    assert d.prob("relevant", "yes") == pytest.approx(0.7 / 0.9)
    assert d.prob("relevant", "no") == pytest.approx(0.2 / 0.9)
    assert d.output.relevant == "no"  # the written label is kept for the generate reading
    assert lm.history[-1]["kwargs"]["logprobs"] is True


def test_the_label_prompt_asks_for_the_label_alone_and_reads_it_at_the_first_token():
    # a bare reply (no field header): its first token is the label, here written "No" with P(yes) = 1/3
    lm = RelevanceLM({}, {"T": 1 / 3}, written="No")
    init_dspy(lm, cache=False)
    demo = dspy.Example(question="Who wrote Emma?", passage="[Emma] A novel by Jane Austen.", relevant="yes")
    predictor = dspy.Predict(JudgeRelevance)
    predictor.demos = [demo]
    d = decide(predictor, {"relevant": YES_NO}, {"max_tokens": 32}, question="Q?", passage="[T] P.")
    assert d.prob("relevant", "yes") == pytest.approx(1 / 3) and d.output.relevant == "No"
    messages = lm.history[-1]["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[0]["content"] == JudgeRelevance.instructions and messages[2]["content"] == "yes"
    assert messages[3]["content"] == "Question: Q?\n\nPassage: [T] P.\n\nAnswer with one word: yes or no."
    assert "[[ ##" not in "".join(m["content"] for m in messages)
    assert lm.history[-1]["kwargs"]["max_tokens"] == 1
    # chat=True (the table's comparison row) keeps the ChatAdapter's field layout
    lm = PayloadLM([{"relevant": "no"}], field("relevant", [("no", math.log(0.6)), ("yes", math.log(0.3))]))
    init_dspy(lm, cache=False)
    d = decide(dspy.Predict(JudgeRelevance), {"relevant": YES_NO}, chat=True, question="Q?", passage="[T] P.")
    assert d.prob("relevant", "yes") == pytest.approx(1 / 3) and "[[ ## relevant ## ]]" in str(lm.history[-1])


def test_the_label_prompt_refuses_a_signature_with_more_than_one_output():
    with pytest.raises(ValueError, match="one output field"):
        LabelAdapter(SCALE).format(RateDocument, [], {"question": "Q?", "document": "D."})


def test_graded_scales_are_read_as_expected_values():
    # relevance: 4 (0.5), 5 (0.3), 2 (0.2) -> 2.0 + 1.5 + 0.4 = 3.9; usefulness: 1 (0.25), 3 (0.75) -> 2.5;
    # specificity: "5" and "**" (no label) -> 5; compatibility: "0" and "ok" (no label) -> 0
    content = (field("relevance", [("4", math.log(0.5)), ("5", math.log(0.3)), ("2", math.log(0.2))])
               + field("usefulness", [("3", math.log(0.75)), ("1", math.log(0.25))])
               + field("specificity", [("5", math.log(0.9)), ("**", math.log(0.1))])
               + field("compatibility", [("0", math.log(0.6)), ("ok", math.log(0.4))]))
    answers = [{"relevance": 4, "usefulness": 3, "specificity": 5, "compatibility": 0, "critique": "fine"}]
    init_dspy(PayloadLM(answers, content), cache=False)
    d = decide(dspy.Predict(RateDocument), dict.fromkeys(("relevance", "usefulness", "specificity", "compatibility"),
                                                         SCALE), question="Q?", document="D.")
    # labels missing from the alternatives get the smallest returned probability (1e-6): off by < 1e-4 here
    assert d.expected("relevance") == pytest.approx(3.9, abs=1e-4)
    assert d.expected("usefulness") == pytest.approx(2.5, abs=1e-4)
    assert d.expected("specificity") == pytest.approx(5.0, abs=1e-4)
    assert d.expected("compatibility") == pytest.approx(0.0, abs=1e-4)


def test_written_labels_are_matched_whole_and_case_blind():
    assert written_label(" Yes.", YES_NO) == "yes" and written_label("(no)", YES_NO) == "no"
    assert written_label("Not really", YES_NO) is None and written_label("yesterday", YES_NO) is None
    assert written_label("3", SCALE) == "3" and written_label(None, YES_NO) is None
    with pytest.raises(ValueError, match="unknown --decisions"):
        check_mode("vote")


def test_no_logprobs_falls_back_to_the_written_label_with_one_warning(capsys, monkeypatch):
    monkeypatch.setattr("decoding.choice._WARNED", set())
    init_dspy(BareLM(["Yes", "Yes."]), cache=False)
    predictor = dspy.Predict(JudgeRelevance)
    first = decide(predictor, {"relevant": YES_NO}, question="Q?", passage="P.")
    second = decide(predictor, {"relevant": YES_NO}, question="Q2?", passage="P2.")
    assert first.probs == {"relevant": None} and first.prob("relevant", "yes") == second.prob("relevant", "yes") == 1.0
    assert capsys.readouterr().err.count("returned no token logprobs; decisions fall back") == 1


def test_thresholds_fitted_on_a_hand_made_label_set():
    scores = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2]
    gold = [True, True, True, False, False, True, False, False]
    # cut 0.7: TPR 3/4, FPR 0 -> J 0.75; cut 0.4: TPR 1, FPR 2/4 -> J 0.5; every other cut is lower
    assert youden_threshold(scores, gold) == pytest.approx(0.7)
    # keeping >= 95% of the 4 positives needs all 4: the lowest positive, 0.4
    assert recall_threshold(scores, gold, 0.95) == pytest.approx(0.4)
    gate = Gate(lower=0.25, upper=0.75)
    info = fit_gate(gate, scores, None, gold)
    assert gate.thresholds == {"lower": pytest.approx(0.4), "upper": pytest.approx(0.7)}
    assert info["auc"] == pytest.approx(14 / 16) and info["positives"] == 4 and gate.weights is None
    gate.unfit()
    assert gate.thresholds == {"lower": 0.25, "upper": 0.75}
    with pytest.raises(ValueError, match="both positive and negative"):
        youden_threshold([0.1, 0.2], [True, True])


def test_a_fitted_gate_survives_the_reset_copy_every_dspy_optimizer_starts_from():
    """BootstrapFewShot, random search and MIPROv2 compile ``student.reset_copy()``: the demos go, the gate's fit
    on dev stays, so the compile runs the program as it will run (it reset to the unfitted mix before)."""
    from programs.baselines.crag import CRAG

    crag = CRAG(ScriptedSearch({Q: ["Blue Fox"]}), k=1, loops=0, decisions="fused")
    fitted = {"thresholds": {"lower": 0.1, "upper": 0.4}, "weights": [0.2, 0.0, 43.0]}
    crag.grade_gate.load_state(fitted)
    crag.writer.short.demos = [dspy.Example(question="Q?", answer="A")]
    copy = crag.reset_copy()
    assert copy.grade_gate.dump_state() == fitted and copy.writer.short.demos == []


def test_a_gate_whose_dev_decisions_all_carry_one_label_decides_every_decision_that_way():
    # CORAL's sufficiency on XRAG full: every dev set held the gold passage, yet the LM's P(True) was low; the fixed
    # threshold 0.5 would say "not enough" to all of them, the one-class fit says "enough" to any probability
    gate = Gate("set", threshold=0.5)
    info = fit_gate(gate, [0.1, 0.3, 0.2], [0.8, 0.7, 0.9], [True, True, True])
    assert info["one_class"] == "positive" and info["auc"] is None and info["n"] == 3 and gate.weights is None
    assert all(p >= gate.thresholds["threshold"] for p in [0.0, 0.3, 1.0])
    assert "all 3 dev decisions positive" in describe(info)
    # all negative: no probability reaches the threshold, 1.0 included; the fit survives the state's JSON round-trip
    crag = Gate(lower=1 / 3, upper=2 / 3)
    info = fit_gate(crag, [0.9, 0.6], None, [False, False])
    loaded = Gate(lower=1 / 3, upper=2 / 3).load_state(json.loads(json.dumps(crag.dump_state())))
    assert info["one_class"] == "negative" and loaded.thresholds == crag.thresholds
    assert all(1.0 < value for value in loaded.thresholds.values())
    # no labelled decision at all is still no fit
    with pytest.raises(ValueError, match="both positive and negative"):
        fit_gate(Gate(threshold=0.5), [], None, [])


def test_fusion_weights_follow_the_feature_that_separates():
    # the retriever separates, the LM is noise: the retriever's weight is positive and the fused order is perfect
    lm_noise = [0.3, 0.7, 0.5, 0.6, 0.4, 0.5, 0.7, 0.3]
    retrieval = [0.9, 0.85, 0.8, 0.75, 0.3, 0.25, 0.2, 0.15]
    gold = [True] * 4 + [False] * 4
    def influence(lm, ret):  # each weight times its feature's spread: raw weights depend on the units
        bias, w_lm, w_ret = fit_fusion(list(zip(lm, ret)), gold)
        spread = np.array([features(p, r) for p, r in zip(lm, ret)]).std(axis=0)
        return [bias, w_lm, w_ret], w_lm * spread[0], w_ret * spread[1]

    (bias, w_lm, w_ret), lm_part, ret_part = influence(lm_noise, retrieval)
    assert ret_part > 0 and abs(lm_part) < ret_part
    gate = Gate(threshold=0.5)
    gate.weights = [bias, w_lm, w_ret]
    fused = gate.fuse(lm_noise, retrieval)
    assert min(fused[:4]) > max(fused[4:])
    # the other way round: the LM separates, the retriever is noise
    _, lm_part, ret_part = influence(retrieval, lm_noise)
    assert lm_part > 0 and abs(ret_part) < lm_part


def test_unfitted_fusion_is_an_even_mix_with_the_min_max_scaled_retriever_score():
    assert Gate(threshold=0.5).fuse([0.2, 0.8, 0.5], [1.0, 3.0, 2.0]) == pytest.approx([0.1, 0.9, 0.5])
    assert Gate(threshold=0.5).fuse([0.4], [7.0]) == pytest.approx([0.7])  # one passage: its score scales to 1


def test_gate_state_round_trips_and_rejects_bad_state():
    gate = Gate(lower=0.25, upper=0.75)
    gate.thresholds["upper"], gate.weights = 0.6, [0.1, 1.0, 2.0]
    fresh = Gate(lower=0.25, upper=0.75).load_state(gate.dump_state())
    assert fresh.thresholds == {"lower": 0.25, "upper": 0.6} and fresh.weights == [0.1, 1.0, 2.0]
    with pytest.raises(ValueError, match="do not fit"):
        Gate(threshold=0.5).load_state({"thresholds": {"upper": 0.5}, "weights": None})
    with pytest.raises(ValueError, match="three numbers"):
        Gate(threshold=0.5).load_state({"thresholds": {"threshold": 0.5}, "weights": ["import os"]})


class RelevanceLM(DummyLM):
    """Routed DummyLM answers for everything but the relevance decisions, which (asked bare, as ``decide`` asks a
    one-label decision) get the reply ``written`` and logprobs with P(yes) = ``p_yes[title]`` of the passage."""

    def __init__(self, routes, p_yes, written="yes"):
        super().__init__({k: v if isinstance(v, Queue) else Queue(v) for k, v in routes.items()})
        self.p_yes, self.written = p_yes, written

    def __call__(self, prompt=None, messages=None, **kwargs):
        text = messages[-1]["content"]
        title = next((t for t in self.p_yes if f"Passage: [{t}]" in text), None)
        if title is None or not text.endswith("Answer with one word: yes or no."):
            return super().__call__(prompt=prompt, messages=messages, **kwargs)
        self.history.append({"messages": messages, "kwargs": kwargs})
        p = self.p_yes[title]
        return [{"text": self.written, "logprobs": {"content": [
            token(self.written, 0.0, [("yes", math.log(p)), ("no", math.log(1 - p))])]}}]


def test_crag_grades_by_thresholds_on_p_yes_and_saves_them_as_program_state():
    import programs
    from programs.baselines.crag import CRAG

    search = ScriptedSearch({Q: ["Blue Fox", "Red Owl", "Green Cat"]})
    lm = RelevanceLM({ANSWER: {"answer": "Lyon [1]"}}, {"Blue Fox": 0.9, "Red Owl": 0.5, "Green Cat": 0.1},
                     written="no")
    init_dspy(lm, cache=False)
    crag = CRAG(search, k=3, loops=0, decisions="logprob")
    pred = crag(question=Q)
    # fixed thresholds 1/3 and 2/3: 0.9 correct, 0.5 ambiguous, 0.1 incorrect (the written "no" is not used); the
    # correct action passes on the passages not graded incorrect
    assert pred.trace["actions"] == ["correct"] and pred.trace["grades"] == ["correct", "ambiguous"]
    assert [p.title for p in pred.passages] == ["Blue Fox", "Red Owl"]
    # compiled thresholds travel in the program's state and change the grade
    crag.grade_gate.thresholds.update(upper=0.95, lower=0.4)
    state = programs.portable_state(crag)
    assert state["grade_gate"] == {"thresholds": {"lower": 0.4, "upper": 0.95}, "weights": None}
    loaded = CRAG(search, k=3, loops=0, decisions="logprob")
    loaded.load_state(state)
    assert loaded(question=Q).trace["grades"] == ["ambiguous", "ambiguous", "incorrect"]
    # generate mode keeps today's predictors (no relevance predictor); its gate is in its state, unfitted
    written = CRAG(search, k=3, loops=0)
    assert "grade_relevance" not in dict(written.named_predictors())
    assert programs.portable_state(written)["grade_gate"] == {"thresholds": {"lower": 1 / 3, "upper": 2 / 3},
                                                              "weights": None}


def test_crag_fused_grade_weighs_the_retrieval_score():
    from programs.baselines.crag import CRAG

    search = ScriptedSearch({Q: ["Blue Fox", "Red Owl", "Green Cat"]})
    init_dspy(RelevanceLM({ANSWER: {"answer": "Lyon [1]"}}, {"Blue Fox": 0.5, "Red Owl": 0.5, "Green Cat": 0.5},
                          written="no"), cache=False)
    crag = CRAG(search, k=3, loops=0, decisions="fused")
    # the LM says 0.5 for all; unfitted fusion: 0.5 * 0.5 + 0.5 * min-max retrieval score (1.0, 0.8, 0.7 -> 1, 1/3, 0)
    assert crag(question=Q).trace["grades"] == ["correct", "ambiguous"]  # Green Cat, incorrect, is dropped


class MarkedLM(DummyLM):
    """Routed DummyLM answers; a prompt holding a marker of ``payloads`` also gets that logprobs content (a queue:
    one payload per call, the last repeating)."""

    def __init__(self, routes, payloads):
        super().__init__({k: v if isinstance(v, Queue) else Queue(v) for k, v in routes.items()})
        self.payloads = payloads

    def __call__(self, prompt=None, messages=None, **kwargs):
        outputs = super().__call__(prompt=prompt, messages=messages, **kwargs)
        marker = next((m for m in self.payloads if m in messages[-1]["content"]), None)
        if marker is None:
            return outputs
        queue = self.payloads[marker]
        content = queue.pop(0) if len(queue) > 1 else queue[0]
        return [{"text": out, "logprobs": {"content": content}} for out in outputs]


def logs(probs: dict):
    return [(label, math.log(p)) for label, p in probs.items()]


def reflection_payload(relevant, full, partial, useful5):
    return (field("relevant", logs({"True": relevant, "False": 1 - relevant}))
            + field("support", logs({"full": full, "partial": partial, "none": 1 - full - partial}))
            + field("usefulness", [("5", math.log(useful5)), ("4", math.log(1 - useful5))]))


def test_self_rag_accepts_a_draft_on_reflection_probabilities():
    from programs.baselines.self_rag import SelfRAG
    from tests.test_seal import CRITIC

    search = ScriptedSearch({Q: ["Blue Fox"], "ana berg": ["Ana Berg"]})
    written = {"relevant": "False", "support": "none", "usefulness": "1", "next_query": "Ana Berg birthplace"}
    # round 1: P(full) 0.4 < 0.5 -> search again; round 2: P(relevant) 0.9, P(full) 0.6, E[usefulness] 4.7 -> accept
    init_dspy(MarkedLM({CRITIC: written, ANSWER: {"answer": "Lyon [1]"}},
                       {CRITIC: [reflection_payload(0.9, 0.4, 0.5, 0.7), reflection_payload(0.9, 0.6, 0.3, 0.7)]}),
              cache=False)
    pred = SelfRAG(search, k=1, loops=2, decisions="logprob")(question=Q)
    assert pred.stop_reason == "accepted" and pred.loops_used == 1  # the written "False"/"none" would never accept
    second = pred.trace["critiques"][1]
    assert second["relevant"] == pytest.approx(0.9, abs=1e-4) and second["support_full"] == pytest.approx(0.6, abs=1e-4)
    assert second["support"] == pytest.approx(0.6 + 0.5 * 0.3, abs=1e-4)
    assert second["usefulness"] == pytest.approx(5 * 0.7 + 4 * 0.3, abs=1e-4)


def test_seal_gate_reads_the_verdict_as_p_sufficient():
    from programs.seal.seal import SEAL
    from tests.test_seal import ASSESS, FILM_FACTS, GAP, GAP_BERG, QUERY, SUFFICIENT, extract

    written = {**SUFFICIENT, "sufficient": "False"}  # every other criterion holds; the written verdict says no
    routes = {extract("Blue Fox"): FILM_FACTS, ASSESS: written, GAP: GAP_BERG, QUERY: {"query": "Ana Berg"},
              ANSWER: {"answer": "I don't know"}}
    payload = {ASSESS: [field("sufficient", logs({"True": 0.8, "False": 0.2}))]}
    init_dspy(MarkedLM(routes, payload), cache=False)
    search = ScriptedSearch({Q: ["Blue Fox"], "ana berg": ["Ana Berg"]})
    pred = SEAL(search, k=1, loops=1, decisions="logprob")(question=Q)
    assert pred.stop_reason == "sufficient" and pred.trace["assessments"][0]["p_sufficient"] == pytest.approx(0.8)
    init_dspy(MarkedLM(routes, payload), cache=False)
    assert SEAL(search, k=1, loops=1)(question=Q).stop_reason != "sufficient"  # generate: the written "False"


def test_coral_keep_rule_and_sufficiency_apply_to_expected_scores_and_p_enough(embedder):
    from programs.coral.coral import CORAL, Trace
    from programs.coral.critics import passes
    from retrieval.corpus import Corpus, Passage
    from retrieval.retriever import Retriever

    single, enough = "[[ ## document ## ]]", "[[ ## evidence ## ]]"
    written = {"relevance": 3, "usefulness": 2, "specificity": 3, "compatibility": 3, "critique": "ok"}
    # expected: relevance 2.5, usefulness 1.5 (< 2: dropped, though the written 3 | 2 | 3 | 3 passes), 3, 3
    scores = (field("relevance", logs({"2": 0.5, "3": 0.5})) + field("usefulness", logs({"1": 0.5, "2": 0.5}))
              + field("specificity", logs({"3": 1.0 - 1e-9})) + field("compatibility", logs({"3": 1.0 - 1e-9})))
    lm = MarkedLM({single: written, enough: {"enough": "True", "reason": "all there"}},
                  {single: [scores], enough: [field("enough", logs({"True": 0.3, "False": 0.7}))]})
    init_dspy(lm, cache=False)
    coral = CORAL(Retriever([Corpus("en", [{"id": "e1", "title": "T", "text": "x"}], "en")], embedder),
                  decisions="logprob")
    passage = Passage("en:e1", "T", "x", "en", "en")
    rated = coral.keep_gate.critic.rate_one(passage, "Q?", Trace())
    assert rated.scores == pytest.approx((2.5, 1.5, 3.0, 3.0), abs=1e-4) and not passes(rated)
    assert rated.total == pytest.approx(2.5 + 0.5 * 7.5, abs=1e-4)
    trace = Trace()
    assert coral.check("Q?", [rated], [rated], trace).enough is False  # P(True) 0.3 < 0.5; written "True"
    coral.sufficiency_gate.thresholds["threshold"] = 0.25  # a compiled threshold
    assert coral.check("Q?", [rated], [rated], trace).enough is True


def test_coral_fused_keep_weighs_the_retrieval_score_within_each_corpus(embedder):
    from programs.coral.coral import CORAL, Rated
    from decoding.decisions import recorded_decisions
    from retrieval.corpus import Corpus, Passage
    from retrieval.retriever import Retriever

    search = Retriever([Corpus("en", [{"id": "e1", "title": "T", "text": "x"}], "en")], embedder)
    a, b = Passage("en:a", "A", "x", "en", "en", 0.9), Passage("en:b", "B", "x", "en", "en", 0.5)
    c = Passage("de:c", "C", "x", "de", "de", 0.4)  # the best of its corpus, below both English scores
    rated = [Rated(p, 2.5, 2.5, 2.5, 2.5) for p in (a, b, c)]  # s_tot 6.25: the paper's rule keeps all three
    assert len(CORAL(search, decisions="logprob").keep_gate.keep(rated, [a, b, c])) == 3
    fused = CORAL(search, decisions="fused")
    with recorded_decisions() as calls:
        kept = fused.keep_gate.keep(rated, [a, b, c])
    # unfitted: 0.5 * 6.25/12.5 + 0.5 * min-max of the score relative to its corpus's best (A 0, B -0.4, C 0)
    assert [r.passage.title for r in kept] == ["A", "C"]
    assert [(round(x.prob, 3), round(x.score, 3), x.passages) for x in calls] == [
        (0.5, 0.0, (a,)), (0.5, -0.4, (b,)), (0.5, 0.0, (c,))]
    fused.keep_gate.thresholds["threshold"] = 0.2  # a calibrated threshold travels as program state
    assert len(fused.keep_gate.keep(rated, [a, b, c])) == 3 and "keep_gate" in dict(fused.named_parameters())


@pytest.mark.parametrize("mode", ["logprob", "fused"])
def test_calibration_fits_the_crag_gate_on_dev_gold_titles(mode):
    from optimizers.calibration import calibrate_decisions
    from programs.baselines.crag import CRAG

    search = ScriptedSearch({Q: ["Blue Fox", "Red Owl", "Green Cat"]})
    init_dspy(RelevanceLM({ANSWER: {"answer": "Lyon [1]"}}, {"Blue Fox": 0.9, "Red Owl": 0.6, "Green Cat": 0.2},
                          written="no"), cache=False)
    crag = CRAG(search, k=3, loops=0, decisions=mode)
    dev = [dspy.Example(id="d1", question=Q, answer="Lyon", gold_titles=["Blue Fox"]).with_inputs("question"),
           dspy.Example(id="d2", question=Q, answer="Lyon", gold_titles=[]).with_inputs("question")]  # unlabelled
    fits = calibrate_decisions(crag, dev, fused=mode == "fused", retries=0)
    fit = fits["grade_gate"]
    assert fit["n"] == 3 and fit["positives"] == 1 and fit["auc"] == 1.0
    if mode == "logprob":  # the one gold passage at 0.9 is the Youden point; keeping 95% of gold needs 0.9 too
        assert crag.grade_gate.thresholds == {"lower": pytest.approx(0.9), "upper": pytest.approx(0.9)}
        assert fit["weights"] is None
    else:
        assert len(crag.grade_gate.weights) == 3 and crag.grade_gate.dump_state()["weights"] == fit["weights"]
    assert crag(question=Q).trace["grades"][0] == "correct"


def test_an_interrupted_calibration_resumes_from_its_journal_without_asking_again(tmp_path):
    from optimizers.calibration import calibrate_decisions
    from programs.baselines.crag import CRAG

    class Counted(RelevanceLM):
        """Counts calls; raises Ctrl-C at call ``stop_at`` (1-based), as an interrupted run would."""
        def __init__(self, stop_at=None):
            super().__init__({ANSWER: {"answer": "Lyon [1]"}}, {"Blue Fox": 0.9, "Red Owl": 0.6, "Green Cat": 0.2})
            self.calls, self.stop_at = 0, stop_at

        def __call__(self, *args, **kwargs):
            self.calls += 1
            if self.calls == self.stop_at:
                raise KeyboardInterrupt
            return super().__call__(*args, **kwargs)

    search = ScriptedSearch({Q: ["Blue Fox", "Red Owl", "Green Cat"]})
    dev = [dspy.Example(id=f"d{i}", question=Q, answer="Lyon", gold_titles=[gold]).with_inputs("question")
           for i, gold in enumerate(["Blue Fox", "Red Owl"])]
    whole = Counted()  # 3 grades + 1 answer per question, no journal
    init_dspy(whole, cache=False)
    expected = calibrate_decisions(CRAG(search, k=3, loops=0, decisions="fused"), dev, fused=True, retries=0)
    assert whole.calls == 8 and expected["grade_gate"]["n"] == 6 and expected["grade_gate"]["positives"] == 2

    journal = tmp_path / "gates.jsonl"
    init_dspy(Counted(stop_at=6), cache=False)  # Ctrl-C at the second question's second grade
    with pytest.raises(KeyboardInterrupt):
        calibrate_decisions(CRAG(search, k=3, loops=0, decisions="fused"), dev, fused=True, retries=0,
                            journal=journal)
    assert [json.loads(line)["id"] for line in journal.read_text().splitlines()] == ["d0"]
    resumed = Counted()
    init_dspy(resumed, cache=False)
    crag = CRAG(search, k=3, loops=0, decisions="fused")
    assert calibrate_decisions(crag, dev, fused=True, retries=0, journal=journal) == expected
    assert resumed.calls == 4  # only d1 was asked
    again = Counted(stop_at=1)  # a finished journal asks nothing at all
    init_dspy(again, cache=False)
    assert calibrate_decisions(CRAG(search, k=3, loops=0, decisions="fused"), dev, fused=True, retries=0,
                               journal=journal) == expected
    assert again.calls == 0


def test_a_calibration_journal_has_one_writer(tmp_path):
    # another process writing the journal: the fit stops before asking anything, as a second run on a checkpoint does
    from optimizers.calibration import calibrate_decisions
    from programs.baselines.crag import CRAG
    from runtime.files import Busy, locked

    lm = RelevanceLM({ANSWER: {"answer": "Lyon [1]"}}, {"Blue Fox": 0.9})
    init_dspy(lm, cache=False)
    dev = [dspy.Example(id="d0", question=Q, answer="Lyon", gold_titles=["Blue Fox"]).with_inputs("question")]
    crag = CRAG(ScriptedSearch({Q: ["Blue Fox"]}), k=1, loops=0, decisions="logprob")
    journal = tmp_path / "gates.jsonl"
    with locked(journal), pytest.raises(Busy, match="gates.jsonl is in use by another run"):
        calibrate_decisions(crag, dev, fused=False, retries=0, journal=journal)
    assert not lm.history
    calibrate_decisions(crag, dev, fused=False, retries=0, journal=journal)
    assert [json.loads(line)["id"] for line in journal.read_text().splitlines()] == ["d0"]


def test_calibration_labels_passages_by_paragraph_id_where_the_data_has_ids():
    """MuSiQue's ``gold_ids`` (paragraphs share titles) and XRAG's ``supporting`` article (no gold titles at all)
    label the decisions as the oracle does -- by id, not by title."""
    from optimizers.calibration import calibrate_decisions
    from programs.baselines.crag import CRAG
    from tests.test_seal import P

    search = ScriptedSearch({Q: ["Blue Fox", "Red Owl", "Green Cat"]})
    init_dspy(RelevanceLM({ANSWER: {"answer": "Lyon [1]"}}, {"Blue Fox": 0.9, "Red Owl": 0.6, "Green Cat": 0.2}),
              cache=False)
    crag = CRAG(search, k=3, loops=0, decisions="logprob")
    musique = dspy.Example(id="m", question=Q, answer="Lyon", gold_titles=["Blue Fox"],
                           gold_ids=[P["Green Cat"].id]).with_inputs("question")
    fit = calibrate_decisions(crag, [musique], fused=False, retries=0)["grade_gate"]
    assert fit["n"] == 3 and fit["positives"] == 1 and fit["auc"] == 0.0  # the gold id is the least likely passage
    xrag = dspy.Example(id="x", question=Q, answer="Lyon", supporting=[P["Red Owl"].id]).with_inputs("question")
    fit = calibrate_decisions(crag, [xrag], fused=False, retries=0)["grade_gate"]
    assert fit["n"] == 3 and fit["positives"] == 1 and fit["auc"] == 0.5  # P(yes) 0.6: above one, below one


def test_sufficiency_decisions_are_labelled_by_whether_the_set_holds_every_gold_title():
    from optimizers.calibration import calibrate_decisions
    from programs.seal.seal import SEAL
    from tests.test_seal import ASSESS, FILM_FACTS, GAP, GAP_BERG, QUERY, SUFFICIENT, extract

    routes = {extract("Blue Fox"): FILM_FACTS, ASSESS: SUFFICIENT, GAP: GAP_BERG, QUERY: {"query": "Ana Berg"},
              ANSWER: {"answer": "I don't know"}}
    payloads = {ASSESS: [field("sufficient", logs({"True": 0.8, "False": 0.2})),
                         field("sufficient", logs({"True": 0.3, "False": 0.7}))]}
    init_dspy(MarkedLM(routes, payloads), cache=False)
    seal = SEAL(ScriptedSearch({Q: ["Blue Fox"]}), k=1, loops=1, decisions="logprob")
    dev = [dspy.Example(id="held", question=Q, answer="x", gold_titles=["Blue Fox"]).with_inputs("question"),
           dspy.Example(id="missing", question=Q, answer="x", gold_titles=["Blue Fox", "Ana Berg"])
           .with_inputs("question")]
    fit = calibrate_decisions(seal, dev, fused=False, retries=0)["assess_gate"]
    # facts from Blue Fox only: sufficient (gold) for the first question at 0.8, not for the second at 0.3
    assert fit["n"] == 2 and fit["positives"] == 1 and fit["auc"] == 1.0
    assert seal.assess_gate.thresholds == {"threshold": pytest.approx(0.8)}


def test_label_tokens_are_matched_by_prefix_without_taking_other_words():
    from decoding.choice import label_logprobs

    alternatives = [(" Not", math.log(0.3)), ("No", math.log(0.2)), ("Nope", math.log(0.1)), ("**yes", math.log(0.2)),
                    ("Y", math.log(0.1)), ("\u201cno", math.log(0.05))]
    logps = label_logprobs({"content": field("relevant", alternatives)}, YES_NO, "relevant")
    # "Not" and "Nope" start no label; "No" + curly-quoted "no" -> no (0.25); "**yes" + "Y" -> yes (0.3)
    assert math.exp(logps["no"]) == pytest.approx(0.25)
    assert math.exp(logps["yes"]) == pytest.approx(0.3)
    grades = [("in", math.log(0.5)), ("c", math.log(0.3)), ("a", math.log(0.1)), ("am", math.log(0.1))]
    logps = label_logprobs({"content": field("grade", grades)}, ("correct", "ambiguous", "incorrect"), "grade")
    assert [round(math.exp(logps[g]), 6) for g in ("incorrect", "correct", "ambiguous")] == [0.5, 0.3, 0.2]
    # the label is read in its own field: a "yes" in an earlier field's header line does not count
    two = field("reason", [("yes", math.log(0.9))]) + field("relevant", [("no", math.log(0.8)), ("yes", math.log(0.2))])
    assert math.exp(label_logprobs({"content": two}, YES_NO, "relevant")["yes"]) == pytest.approx(0.2)


def test_fusion_is_not_drowned_by_the_lm_logits_scale_when_the_retriever_separates_on_a_narrow_range():
    # dense cosines of one pool span a few hundredths while LM logits span +-9: unscaled, the L2 penalty shrinks
    # the retriever's weight and the noisy LM decides the order
    rng = np.random.default_rng(0)
    gold = [True] * 40 + [False] * 40
    retrieval = [0.84 + 0.02 * rng.random() if g else 0.81 + 0.02 * rng.random() for g in gold]
    lm_noise = list(rng.choice([0.0001, 0.02, 0.5, 0.98, 0.9999], size=80))
    gate = Gate(threshold=0.5)
    gate.weights = fit_fusion(list(zip(lm_noise, retrieval)), gold)
    fused = gate.fuse(lm_noise, retrieval)
    assert roc_auc_score(gold, fused) > 0.95


def candidates(lm_of_gold, rng):
    """12 questions x 5 retrieved candidates (the first gold): the retriever ranks gold first on 9 of 12, and
    ``lm_of_gold(gold)`` gives each candidate's LM probability. Returns (probs, relative scores, gold, question)."""
    rows = []
    for q in range(12):
        scores = sorted(rng.uniform(-0.1, 0.0, size=5), reverse=True)
        gold_at = 0 if q % 4 else 2  # every fourth question: a distractor outranks the gold passage
        for i, score in enumerate(scores):
            rows.append((lm_of_gold(i == gold_at), score - scores[0], i == gold_at, f"q{q}"))
    return [list(column) for column in zip(*rows)]


def test_the_lm_feature_is_kept_only_where_it_lowers_the_out_of_fold_loss():
    rng = np.random.default_rng(3)
    # an LM at chance (CORAL's 0.5B critic on XRAG zh): the gate decides by the retriever alone, so no call is needed
    probs, scores, gold, questions = candidates(lambda g: rng.uniform(0.05, 0.95), rng)
    gate = Gate(threshold=0.5)
    info = fit_gate(gate, probs, scores, gold, questions)
    assert info["lm_feature"]["kept"] is False and gate.weights[1] == 0 and not gate.reads_lm
    assert info["lm_feature"]["gain"] <= info["lm_feature"]["gain_se"] and "LM feature dropped" in describe(info)
    assert gate.fuse([0.01] * 3, scores[:3]) == gate.fuse([0.99] * 3, scores[:3])
    assert info["decisions"]["groups"] == questions and info["decisions"]["probs"] == probs  # refittable offline
    # an LM that knows which passage is gold where the retriever does not: kept, with a positive weight
    probs, scores, gold, questions = candidates(lambda g: rng.uniform(0.7, 0.95) if g else rng.uniform(0.05, 0.5), rng)
    info = fit_gate(gate, probs, scores, gold, questions)
    assert info["lm_feature"]["kept"] is True and gate.weights[1] > 0 and gate.reads_lm
    assert "LM feature kept" in describe(info)
    # without question ids there is no grouped cross-validation: both features, and the log says why
    info = fit_gate(gate, probs, scores, gold)
    assert info["lm_feature"] == {"kept": True, "why": "no question ids"} and gate.reads_lm
    assert Gate(threshold=0.5).reads_lm  # unfitted: the even mix reads the LM


def test_an_answer_level_gate_whose_probability_tells_nothing_on_dev_lets_the_answer_stand():
    # RAG-Critic's P(Error) on HotpotQA: 30 dev decisions (19 answers wrong); a Youden point on noise flags by chance
    rng = np.random.default_rng(5)
    wrong = [bool(w) for w in rng.random(30) < 0.6]
    questions = [f"q{i}" for i in range(30)]
    noise = list(rng.uniform(0.05, 0.95, size=30))
    verdict = Gate("error", threshold=0.5)
    info = fit_gate(verdict, noise, None, wrong, questions)
    assert info["lm_feature"]["kept"] is False and info["at_rest"] == "negative" and verdict.at_rest
    assert not any(p >= verdict.thresholds["threshold"] for p in (0.0, 0.5, 1.0))  # no answer is ever flagged
    assert "decides every one negative" in describe(info) and "with the base rate alone" in describe(info)
    assert info["decisions"]["probs"] == noise  # refittable offline
    # a stop on the same noise stops at once: the draft stands
    stop = Gate("correct", threshold=0.5)
    info = fit_gate(stop, noise, None, [not w for w in wrong], questions)
    assert info["at_rest"] == "positive" and stop.at_rest and stop.thresholds == {"threshold": 0.0}
    # a probability that knows which answers are wrong is kept, at the operating point between the classes
    knows = [rng.uniform(0.6, 0.95) if w else rng.uniform(0.05, 0.5) for w in wrong]
    info = fit_gate(verdict, knows, None, wrong, questions)
    assert info["lm_feature"]["kept"] is True and "at_rest" not in info and not verdict.at_rest
    assert verdict.thresholds["threshold"] == pytest.approx(min(p for p, w in zip(knows, wrong) if w))
    assert "LM feature kept" in describe(info)


def test_programs_ask_no_verdict_or_stop_from_a_gate_at_rest(monkeypatch):
    import programs
    from programs.rag_critic.rag_critic import RAGCritic
    from programs.rag_critic.taxonomy import load_taxonomy
    from tests.test_par2 import ANSWER as WRITE, ESC, PLAN as PAR2_PLAN, ROUTES, TWO_SEARCHES, said
    from tests.test_par2 import ScriptedSearch as Par2Search
    from tests.test_rag_critic import CRITIC, ERROR, FIXTURES, LABELS, PLAN, WRITER, ScriptedSearch as CriticSearch

    monkeypatch.setenv("RAG_DATA_DIR", str(FIXTURES))
    lm = MarkedLM({CRITIC: ERROR, **LABELS, PLAN: {"plan": "answer = GenerateAnswer(question, documents)"},
                   WRITER: said("Lyon")}, {CRITIC: [field("judgement", logs({"Correct": 0.1, "Error": 0.9}))]})
    init_dspy(lm, cache=False)
    program = RAGCritic(CriticSearch(), k=2, taxonomy=load_taxonomy(), decisions="logprob")
    decide_all(program.critic.verdict_gate, False)  # fitted at rest: never an error
    pred = program(question=Q)
    assert not pred.trace["flagged"] and pred.trace["rounds"][0]["critique"]["verdict"] == "Correct"
    assert not any(CRITIC in h["messages"][-1]["content"] for h in lm.history) and lm.history
    # PAR2's controller at rest stops after the first draft without asking; the written label would go on
    lm = MarkedLM({PAR2_PLAN: TWO_SEARCHES, ESC: {"decision": "CONTINUE", "next_query": "Ana Berg birthplace"},
                   WRITE: said("Lyon")}, {ESC: [field("decision", logs({"STOP": 0.1, "CONTINUE": 0.9}))]})
    init_dspy(lm, cache=False)
    par2 = programs.build("par2", search=Par2Search(ROUTES), search_rerank="none", decisions="logprob")
    decide_all(par2.esc_gate, True)
    pred = par2(question=Q)
    assert pred.trace["stop_reason"] == "esc_at_rest" and pred.answer == "Lyon"
    assert not any(ESC in h["messages"][-1]["content"] for h in lm.history)


def test_a_gate_deciding_whatever_the_probability_is_named_in_the_trace_and_by_what_the_program_runs_as(monkeypatch):
    """Issue 61 item 1: a resting gate's decision says "at rest (no call)", and the program names what it ran as."""
    import programs
    from decoding.decisions import ONE_CLASS, REST
    from programs.rag_critic.rag_critic import RAGCritic
    from programs.rag_critic.self_refine import SelfRefine
    from programs.rag_critic.taxonomy import load_taxonomy
    from tests.test_par2 import ANSWER as WRITE, ESC, PLAN as PAR2_PLAN, ROUTES, TWO_SEARCHES, said
    from tests.test_par2 import ScriptedSearch as Par2Search
    from tests.test_rag_critic import CRITIC, ERROR, FEEDBACK, FIXTURES, LABELS, WRITER
    from tests.test_rag_critic import ScriptedSearch as CriticSearch

    gate = Gate("error", threshold=0.5)
    assert gate.state is None and decide_all(gate, False) and gate.state == REST  # never an error: at rest
    decide_all(gate, True)
    assert gate.state == ONE_CLASS and not gate.at_rest  # every answer an error: a one-class fit
    # PAR2: at rest it stops after the first write, as par2_anchor
    lm = MarkedLM({PAR2_PLAN: TWO_SEARCHES, ESC: {"decision": "CONTINUE", "next_query": "Ana Berg birthplace"},
                   WRITE: said("Lyon")}, {ESC: [field("decision", logs({"STOP": 0.9, "CONTINUE": 0.1}))]})
    init_dspy(lm, cache=False)
    par2 = programs.build("par2", search=Par2Search(ROUTES), search_rerank="none", decisions="logprob")
    assert par2.resting() is None  # the paper's threshold: P(STOP) decides
    decide_all(par2.esc_gate, True)
    trace = par2(question=Q).trace
    assert trace["steps"][0]["decided"] == REST and trace["stop_reason"] == "esc_at_rest" and trace["at_rest"] == 1
    assert par2.resting() == "controller at rest = par2_anchor"
    decide_all(par2.esc_gate, False)
    trace = par2(question=Q).trace
    assert trace["steps"][0]["decided"] == ONE_CLASS and trace["steps"][0]["action"] == "CONTINUE"
    assert par2.resting() == "controller one-class" and trace["at_rest"] == 0
    anchor = programs.build("par2_anchor", search=Par2Search(ROUTES), search_rerank="none", decisions="logprob")
    decide_all(anchor.esc_gate, True)
    assert anchor.resting() is None  # no controller: it runs as itself
    assert programs.build("par2", search=Par2Search(ROUTES), search_rerank="none").resting() is None  # generate
    # RAG-Critic: at rest its first draft stands, as rag (issue 75: it drafts with rag's writer)
    monkeypatch.setenv("RAG_DATA_DIR", str(FIXTURES))
    init_dspy(MarkedLM({CRITIC: ERROR, **LABELS, WRITER: said("Lyon")}, {}), cache=False)
    critic = RAGCritic(CriticSearch(), k=2, taxonomy=load_taxonomy(), decisions="logprob")
    decide_all(critic.critic.verdict_gate, False)
    pred = critic(question=Q)
    assert pred.trace["stop_reason"] == "critic_at_rest" and pred.critique["decided"] == REST
    assert pred.trace["at_rest"] == 1 and critic.resting() == "verdict at rest = rag"
    # Self-Refine: at rest its first draft stands, as rag
    init_dspy(MarkedLM({FEEDBACK: {"verdict": "Error", "feedback": "x"}, WRITER: said("Lyon")}, {}), cache=False)
    refine = SelfRefine(CriticSearch(), k=2, decisions="logprob")
    decide_all(refine.stop_gate, True)
    trace = refine(question=Q).trace
    assert trace["stop_reason"] == "feedback_at_rest" and trace["rounds"][0]["decided"] == REST
    assert trace["at_rest"] == 1 and refine.resting() == "stop at rest = rag"


def test_every_resting_or_one_class_decision_is_named_in_its_trace(embedder):
    """Issue 75 item 6: SEAL's sufficiency, CRAG's grader, Self-RAG's acceptance and CORAL's keep and sufficiency
    gates, fitted to decide whatever the probability, say so in their trace entries (``decided``): "at rest (asked)"
    where the LM is still asked for the rest of its reply, "at rest (no call)" where it is not, "one-class"."""
    from decoding.decisions import ONE_CLASS, REST, RESTING
    from programs.baselines.crag import CRAG
    from programs.baselines.self_rag import SelfRAG
    from programs.coral.coral import CORAL, Rated, Trace
    from programs.seal.seal import SEAL
    from retrieval.corpus import Corpus, Passage
    from retrieval.retriever import Retriever
    from tests.test_seal import ASSESS, CRITIC, FILM_FACTS, GAP, GAP_BERG, QUERY, SUFFICIENT, extract

    # SEAL: the verdict at rest passes every assessment (the other criteria decide); one-class fails every one
    routes = {extract("Blue Fox"): FILM_FACTS, ASSESS: SUFFICIENT, GAP: GAP_BERG, QUERY: {"query": "Ana Berg"},
              ANSWER: {"answer": "I don't know"}}
    search = ScriptedSearch({Q: ["Blue Fox"], "ana berg": ["Ana Berg"]})
    for positive, decided in ((True, RESTING), (False, ONE_CLASS)):
        init_dspy(MarkedLM(routes, {ASSESS: [field("sufficient", logs({"True": 0.2, "False": 0.8}))]}), cache=False)
        seal = SEAL(search, k=1, loops=1, decisions="logprob")
        decide_all(seal.assess_gate, positive)
        first = seal(question=Q).trace["assessments"][0]
        assert first["decided"] == decided and ("verdict" in first["failed"]) is not positive
    init_dspy(MarkedLM(routes, {}), cache=False)
    seal = SEAL(search, k=1, loops=1)  # written verdicts: a fit decides none of them
    decide_all(seal.assess_gate, True)
    assert "decided" not in seal(question=Q).trace["assessments"][0]
    # CRAG: at rest every passage is graded correct; a fused fit without the LM grades without asking it
    search = ScriptedSearch({Q: ["Blue Fox", "Red Owl", "Green Cat"]})
    init_dspy(RelevanceLM({ANSWER: {"answer": "Lyon [1]"}}, {"Blue Fox": 0.1, "Red Owl": 0.1, "Green Cat": 0.1}),
              cache=False)
    crag = CRAG(search, k=3, loops=0, decisions="logprob")
    assert "grader_decided" not in crag(question=Q).trace
    decide_all(crag.grade_gate, True)
    trace = crag(question=Q).trace
    assert trace["grader_decided"] == RESTING and trace["grades"] == ["correct"] * 3
    fused = CRAG(search, k=3, loops=0, decisions="fused")
    decide_all(fused.grade_gate, True)
    fused.grade_gate.weights = [0.0, 0.0, 0.0]  # no LM weight: not asked
    assert fused(question=Q).trace["grader_decided"] == REST
    # Self-RAG: at rest relevance and support pass every draft, usefulness still read
    search = ScriptedSearch({Q: ["Blue Fox"], "ana berg": ["Ana Berg"]})
    written = {"relevant": "False", "support": "none", "usefulness": "1", "next_query": "Ana Berg birthplace"}
    init_dspy(MarkedLM({CRITIC: written, ANSWER: {"answer": "Lyon [1]"}},
                       {CRITIC: [reflection_payload(0.1, 0.1, 0.1, 0.9)]}), cache=False)
    self_rag = SelfRAG(search, k=1, loops=1, decisions="logprob")
    assert "decided" not in self_rag(question=Q).trace["critiques"][0]
    decide_all(self_rag.critic_gate, True)
    pred = self_rag(question=Q)
    assert pred.trace["critiques"][0]["decided"] == RESTING and pred.stop_reason == "accepted"
    # CORAL: the fused keep gate at rest keeps every rated candidate; a one-class sufficiency is never "enough"
    init_dspy(MarkedLM({"[[ ## evidence ## ]]": {"enough": "True", "reason": "all there"},
                        "[[ ## passages ## ]]": {"answer": "x"}},
                       {"[[ ## evidence ## ]]": [field("enough", logs({"True": 0.9, "False": 0.1}))]}), cache=False)
    pool = Retriever([Corpus("en", [{"id": "e1", "title": "T", "text": "x"}], "en")], embedder)
    coral = CORAL(pool, decisions="fused")
    decide_all(coral.keep_gate, True)
    rated = Rated(Passage("en:e1", "T", "x", "en", "en"), 1, 1, 1, 1)
    assert coral.keep_gate.keep([rated], [rated.passage]) == [rated] and coral.keep_gate.decided == RESTING
    assert CORAL(pool, decisions="logprob").keep_gate.decided is None  # the paper's rule: no fit decides it
    coral.keep_gate.weights = [0.0, 0.0, 0.0]  # no critic weight: no candidate is rated
    trace = coral(question="Q?", lang="en").trace
    assert trace["keep_decided"] == REST and trace["unrated"] == 1 and trace["kept"] == ["en:e1"]
    decide_all(coral.sufficiency_gate, False)
    trace = Trace()
    assert coral.check("Q?", [rated], [rated], trace).enough is False  # P(True) 0.9, one-class: not enough
    assert trace.sufficiency == [{"enough": False, "reason": "all there", "parsed": True, "decided": ONE_CLASS}]
    decide_all(coral.sufficiency_gate, True)
    coral.check("Q?", [rated], [rated], trace)
    assert trace.sufficiency[-1] == {"enough": True, "reason": REST, "parsed": True, "decided": REST}


def test_crag_grades_by_retrieval_alone_without_a_call_when_its_gate_gave_the_lm_no_weight():
    from programs.baselines.crag import CRAG

    search = ScriptedSearch({Q: ["Blue Fox", "Red Owl", "Green Cat"]})
    lm = RelevanceLM({ANSWER: {"answer": "Lyon [1]"}}, {"Blue Fox": 0.1, "Red Owl": 0.1, "Green Cat": 0.9})
    init_dspy(lm, cache=False)
    crag = CRAG(search, k=3, loops=0, decisions="fused")
    crag.grade_gate.weights = [2.0, 0.0, 10.0]  # relative scores 0, -0.2, -0.3 -> 0.88, 0.5, 0.27
    pred = crag(question=Q)
    assert pred.trace["grades"] == ["correct", "ambiguous"]  # Green Cat, incorrect by retrieval, is dropped
    asked = [h["messages"][-1]["content"] for h in lm.history]
    assert not any(text.endswith("Answer with one word: yes or no.") for text in asked) and len(asked) == 1


def test_coral_asks_no_critic_when_its_keep_gate_decides_by_retrieval_and_no_verdict_when_dev_was_one_class(embedder):
    from programs.coral.coral import CORAL, Trace
    from retrieval.corpus import Corpus, Passage
    from retrieval.retriever import Retriever

    init_dspy(BareLM([]), cache=False)  # any LM call would fail: it has no reply
    coral = CORAL(Retriever([Corpus("en", [{"id": "e1", "title": "T", "text": "x"}], "en")], embedder),
                  decisions="fused")
    a, b = Passage("en:a", "A", "x", "en", "en", 0.9), Passage("en:b", "B", "x", "en", "en", 0.5)
    coral.keep_gate.weights, coral.keep_gate.thresholds["threshold"] = [1.0, 0.0, 10.0], 0.5
    coral.sufficiency_gate.thresholds["threshold"] = 0.0  # a one-class positive fit
    trace = Trace()
    rated = coral.keep_gate.rate([a, b], "Q?", trace)
    assert [r.rated for r in rated] == [False, False] and trace.unrated == 2 and not trace.calls["critic"]
    kept = coral.keep_gate.keep(rated, [a, b])
    assert [r.passage.title for r in kept] == ["A"]  # sigmoid(1 + 0) passes, sigmoid(1 - 4) does not
    verdict = coral.check("Q?", kept, rated, trace)
    assert verdict.enough is True and trace.sure_sufficiency == 1 and not trace.calls["sufficiency"]
    assert verdict.reason == "at rest (no call)" and coral.resting() == "sufficiency at rest = one round, no replanning"


# --- answer-level decisions: PAR2's controller, RAG-Critic's verdict, Self-Refine's stop --------------------------

def test_par2_controller_stops_on_p_stop_against_its_gate():
    import programs
    from tests.test_par2 import ANSWER as WRITE, ESC, PLAN, ROUTES, TWO_SEARCHES, ScriptedSearch as Par2Search, said

    written = {"decision": "CONTINUE", "next_query": "Ana Berg birthplace"}  # the written label says go on
    payload = {ESC: [field("decision", logs({"STOP": 0.7, "CONTINUE": 0.3}))]}
    routes = {PLAN: TWO_SEARCHES, ESC: written, WRITE: said("Lyon")}
    init_dspy(MarkedLM(routes, payload), cache=False)
    par2 = programs.build("par2", search=Par2Search(ROUTES), search_rerank="none", decisions="logprob")
    pred = par2(question=Q)
    assert pred.trace["stop_reason"] == "esc_stop" and pred.trace["steps"][0]["p_stop"] == pytest.approx(0.7)
    par2.esc_gate.thresholds["threshold"] = 0.8  # a compiled threshold: P(STOP) 0.7 now means CONTINUE
    assert programs.portable_state(par2)["esc_gate"] == {"thresholds": {"threshold": 0.8}, "weights": None}
    init_dspy(MarkedLM(routes, payload), cache=False)
    assert par2(question=Q).trace["steps"][0]["action"] == "CONTINUE"
    # no logprobs: the written reply is parsed as in generate mode ("Don't continue" is STOP)
    init_dspy(MarkedLM({**routes, ESC: {"decision": "Don't continue", "next_query": ""}}, {}), cache=False)
    assert par2(question=Q).trace["stop_reason"] == "esc_stop"
    # generate mode: the gate is in the state, unfitted
    assert programs.portable_state(programs.build("par2", search=Par2Search(ROUTES)))["esc_gate"] == {
        "thresholds": {"threshold": 0.5}, "weights": None}


def test_rag_critic_verdict_is_flagged_on_p_error_against_its_gate(monkeypatch):
    import programs
    from programs.rag_critic.rag_critic import RAGCritic
    from programs.rag_critic.taxonomy import load_taxonomy
    from tests.test_rag_critic import CRITIC, ERROR, FIXTURES, LABELS, PLAN, WRITER, ScriptedSearch as CriticSearch
    from tests.test_rag_critic import said

    monkeypatch.setenv("RAG_DATA_DIR", str(FIXTURES))
    routes = {CRITIC: ERROR, **LABELS, PLAN: {"plan": "answer = GenerateAnswer(question, documents)"},
              WRITER: said("Lyon")}
    payload = {CRITIC: [field("judgement", logs({"Correct": 0.7, "Error": 0.3}))]}
    init_dspy(MarkedLM(routes, payload), cache=False)
    program = RAGCritic(CriticSearch(), k=2, taxonomy=load_taxonomy(), decisions="logprob")
    pred = program(question=Q)
    critique = pred.trace["rounds"][0]["critique"]  # the written "Error" is not what decides
    assert not pred.trace["flagged"] and critique["verdict"] == "Correct" and critique["p_error"] == pytest.approx(0.3)
    program.critic.verdict_gate.thresholds["threshold"] = 0.25
    assert programs.portable_state(program)["critic.verdict_gate"]["thresholds"] == {"threshold": 0.25}
    init_dspy(MarkedLM(routes, payload), cache=False)
    assert program(question=Q).trace["flagged"]


def test_self_refine_stops_on_p_correct_against_its_gate():
    import programs
    from programs.rag_critic.self_refine import SelfRefine
    from tests.test_rag_critic import FEEDBACK, REVISE, WRITER, ScriptedSearch as CriticSearch, said

    routes = {FEEDBACK: {"verdict": "Error", "feedback": "Name the city."}, REVISE: {"answer": "Lyon"},
              WRITER: said("Blue Fox")}
    payload = {FEEDBACK: [field("verdict", logs({"Correct": 0.6, "Error": 0.4}))]}
    init_dspy(MarkedLM(routes, payload), cache=False)
    refine = SelfRefine(CriticSearch(), k=2, decisions="logprob")
    pred = refine(question=Q)
    assert pred.answer == "Blue Fox" and pred.trace["stop_reason"] == "self_correct"
    assert pred.trace["rounds"][0]["p_correct"] == pytest.approx(0.6)
    refine.stop_gate.thresholds["threshold"] = 0.9
    assert programs.portable_state(refine)["stop_gate"]["thresholds"] == {"threshold": 0.9}
    init_dspy(MarkedLM(routes, payload), cache=False)
    assert refine(question=Q).answer == "Lyon"  # P(Correct) 0.6 < 0.9: revised


def test_answer_level_decisions_are_labelled_by_the_correctness_of_the_answer_they_judged():
    from decoding.decisions import Recorded

    from programs.shared.oracle import Gold
    from retrieval.corpus import Passage

    gold = Gold(correct={"Lyon"}.__contains__)  # no gold passages
    stop, flag = Gate("correct", threshold=0.5), Gate("error", threshold=0.5)
    assert Recorded(stop, 0.9, None, (), "Lyon").gold(gold) is True   # stopping on a right draft
    assert Recorded(stop, 0.9, None, (), "Paris").gold(gold) is False
    assert Recorded(flag, 0.9, None, (), "Paris").gold(gold) is True  # flagging a wrong answer
    assert Recorded(flag, 0.9, None, (), "Lyon").gold(gold) is False
    assert Recorded(Gate(), 0.9, 0.1, (Passage("t:1", "T", "x"),)).gold(gold) is None  # a passage, no gold passages
    spans = Gold(answers=("rice",), span=True)  # BLEnD: answers only, which the oracle roles read by span
    assert not spans.missing("relevance") and spans.relevance(Passage("t:2", "T", "fried rice"))
    held = (Passage("t:2", "T", "fried rice"),)
    assert Recorded(Gate(), 0.9, 0.1, held).gold(spans) is None  # the ceiling's loose bound is never a fitted label
    assert Recorded(Gate("set", threshold=0.5), 0.9, 0.1, held).gold(spans) is None
    with pytest.raises(ValueError, match="unknown gate kind"):
        Gate("draft", threshold=0.5)


def test_calibration_fits_an_answer_level_gate_on_the_task_metric_without_gold_titles():
    from optimizers.calibration import calibrate_decisions
    from programs.rag_critic.self_refine import SelfRefine
    from tests.test_rag_critic import FEEDBACK, REVISE, WRITER, ScriptedSearch as CriticSearch, said

    routes = {FEEDBACK: {"verdict": "Error", "feedback": "Check it."}, REVISE: {"answer": "Lyon"},
              WRITER: said("Lyon")}
    def payload():  # one P(Correct) per question (a queue, consumed by the calls)
        return {FEEDBACK: [field("verdict", logs({"Correct": 0.8, "Error": 0.2})),
                           field("verdict", logs({"Correct": 0.3, "Error": 0.7}))]}

    init_dspy(MarkedLM(routes, payload()), cache=False)
    refine = SelfRefine(CriticSearch(), k=2, rounds=1, decisions="logprob")
    # no gold titles: the draft "Lyon" is right for the first question (F1 1) and wrong for the second (F1 0)
    dev = [dspy.Example(id="right", question=Q, answer="Lyon", answers=["Lyon"]).with_inputs("question"),
           dspy.Example(id="wrong", question=Q, answer="Paris", answers=["Paris"]).with_inputs("question")]
    fit = calibrate_decisions(refine, dev, fused=False, retries=0)["stop_gate"]
    assert fit["n"] == 2 and fit["positives"] == 1 and fit["auc"] == 1.0
    assert refine.stop_gate.thresholds == {"threshold": pytest.approx(0.8)}
    # a custom correctness (e.g. EM, or a judge) labels the same decisions the other way round
    init_dspy(MarkedLM(routes, payload()), cache=False)
    fit = calibrate_decisions(refine, dev, fused=False, retries=0, correct=lambda ex, answer: ex.id == "wrong")
    assert fit["stop_gate"]["positives"] == 1 and fit["stop_gate"]["auc"] == 0.0


def test_self_rag_acceptance_is_recorded_as_the_smaller_of_its_two_probabilities():
    from decoding.decisions import recorded_decisions
    from programs.baselines.self_rag import SelfRAG
    from tests.test_seal import CRITIC

    search = ScriptedSearch({Q: ["Blue Fox"]})
    written = {"relevant": "True", "support": "full", "usefulness": "5", "next_query": "Ana Berg"}
    init_dspy(MarkedLM({CRITIC: written, ANSWER: {"answer": "Lyon [1]"}},
                       {CRITIC: [reflection_payload(0.9, 0.6, 0.3, 0.7)]}), cache=False)
    program = SelfRAG(search, k=1, loops=1, decisions="logprob")
    with recorded_decisions() as calls:
        program(question=Q)
    assert [(c.gate, c.answer) for c in calls] == [(program.critic_gate, "Lyon")]
    assert calls[0].prob == pytest.approx(0.6, abs=1e-4) and program.critic_gate.kind == "correct"


def test_only_an_unreadable_reply_reads_as_an_unreadable_decision():
    # a prompt past the context window (a ValueError) is no unreadable decision: it propagates and stops the run
    from programs.shared.gates import LabelGate, Ruling
    from runtime.lm import ContextOverflow

    init_dspy(Overflowing({}, marker="TOO LONG"), cache=False)
    judge = dspy.Predict(JudgeRelevance)
    with pytest.raises(ContextOverflow):
        decide(judge, {"relevant": YES_NO}, question="Q?", passage="TOO LONG")
    with pytest.raises(ContextOverflow):
        LabelGate(judge, "relevant", YES_NO, kind="passage")({"question": "Q?", "passage": "TOO LONG"})

    class Unreadable(dspy.Predict):
        def __call__(self, **kwargs):
            raise unreadable()

    assert decide(Unreadable(JudgeRelevance), {"relevant": YES_NO}, question="Q?", passage="P.").output is None
    assert LabelGate(Unreadable(JudgeRelevance), "relevant", YES_NO, kind="passage")(
        {"question": "Q?", "passage": "P."}) == Ruling(None, failures=1)


def test_self_rags_next_query_is_searched_without_the_echoed_format_note():
    from programs.baselines.self_rag import SelfRAG

    critique = dspy.Prediction(next_query='Ana Berg birthplace # note: the value you produce must adhere to the JSON '
                                          'schema: {"type": "string"}')
    program = SelfRAG(ScriptedSearch({Q: ["Blue Fox"]}), k=1, loops=2)
    assert program._next_query(Q, "Lyon", critique, [Q]) == "Ana Berg birthplace"


@pytest.mark.parametrize("null", ["None", "N/A", "null", "No further search needed."])
def test_self_rags_critic_saying_none_is_no_query_the_question_with_the_draft_is_searched(null):
    """In 25 of 110 2Wiki questions the 0.5B critic's next query was "None", and Self-RAG searched the word."""
    from programs.baselines.self_rag import SelfRAG

    program = SelfRAG(ScriptedSearch({Q: ["Blue Fox"]}), k=1, loops=2)
    assert program._next_query(Q, "Lyon", dspy.Prediction(next_query=null), [Q]) == f"{Q} Lyon"
    assert program._next_query(Q, "I don't know", dspy.Prediction(next_query=null), [Q]) is None
