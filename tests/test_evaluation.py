import json

import dspy
import pytest

from optimizers.evaluation import evaluate
from optimizers.metrics import exact_match
from runtime.lm import ServerError

EXAMPLES = [dspy.Example(id=f"q{i}", question=f"question {i}", answer="yes", answers=["yes"]).with_inputs("question")
            for i in range(3)]


class Flaky(dspy.Module):
    """Fails the first ``failures`` calls per question, then answers through the configured LM."""

    def __init__(self, failures):
        super().__init__()
        self.failures, self.seen = failures, {}
        self.predict = dspy.Predict("question -> answer")

    def forward(self, question):
        self.seen[question] = self.seen.get(question, 0) + 1
        if self.seen[question] <= self.failures:
            raise ValueError("could not parse the model output")
        return dspy.Prediction(answer=self.predict(question=question).answer, passages=[])


def test_a_failed_parse_is_retried_then_scored(dummy):
    dummy({"question": {"answer": "yes"}})
    records, summary = evaluate(Flaky(failures=1), EXAMPLES, {"em": exact_match}, retries=1)
    assert summary["em"] == 1.0 and summary["failed_examples"] == 0 and all(r["tries"] == 2 for r in records)
    assert summary["lm_calls"] == 1.0  # metered per question


def test_persistent_failures_are_counted_not_fatal(dummy):
    dummy({"question": {"answer": "yes"}})
    records, summary = evaluate(Flaky(failures=5), EXAMPLES, {"em": exact_match}, retries=1)
    assert summary["failed_examples"] == 3 and summary["em"] == 0.0
    assert "could not parse" in records[0]["error"] and records[0]["answer"] is None


def test_checkpoint_resumes_without_rerunning(dummy, tmp_path):
    dummy({"question": {"answer": "yes"}})
    ckpt = tmp_path / "dev.jsonl"
    prog = Flaky(failures=0)
    evaluate(prog, EXAMPLES[:2], {"em": exact_match}, checkpoint=ckpt)
    records, summary = evaluate(prog, EXAMPLES, {"em": exact_match}, checkpoint=ckpt)
    assert prog.seen == {"question 0": 1, "question 1": 1, "question 2": 1}
    assert summary["n"] == 3 and len(ckpt.read_text().splitlines()) == 3
    assert json.loads(ckpt.read_text().splitlines()[0])["id"] == "q0"


def test_dead_server_stops_the_run():
    class Dead(dspy.Module):
        def forward(self, question):
            raise ServerError("llama.cpp server died again")

    with pytest.raises(ServerError):
        evaluate(Dead(), EXAMPLES, {"em": exact_match})


def test_metrics_are_broken_down_by_group_and_iterations_averaged(dummy):
    class Looping(dspy.Module):
        def forward(self, question):
            n = int(question.split()[-1])
            return dspy.Prediction(answer="yes" if n else "no", passages=[], trace={"iterations": n + 1})

    examples = [ex.copy(lang=lang) for ex, lang in zip(EXAMPLES, ["ko", "ko", "es"])]
    _, summary = evaluate(Looping(), examples, {"em": exact_match}, groups=("lang",))
    assert summary["em_by_lang/ko"] == 0.5 and summary["em_by_lang/es"] == 1.0 and summary["n_by_lang/ko"] == 2
    assert summary["iterations"] == 2.0


def test_circular_score_needs_every_copy_right(dummy):
    import data
    from optimizers.metrics import accuracy

    class AlwaysA(dspy.Module):
        def forward(self, question, options, lang):
            return dspy.Prediction(answer="A", passages=[])

    examples = data.circular(data.load("demo_culture").examples[:3])
    records, summary = evaluate(AlwaysA(), examples, {"accuracy": accuracy}, groups=("rotation",))
    assert summary["n"] == 12 and summary["n_questions"] == 3
    assert summary["accuracy"] == 0.25 and summary["circular_accuracy"] == 0.0  # the letter bias shows, and scores 0
    assert {r["base_id"] for r in records} == {ex.id for ex in data.load("demo_culture").examples[:3]}
    assert sum(summary[f"n_by_rotation/{i}"] for i in range(4)) == 12


def test_tier_scores_average_languages_beside_the_pooled_figure():
    from optimizers.evaluation import summarize

    def rec(i, lang, tier, acc):
        return {"id": str(i), "failed": False, "accuracy": acc, "source_lang": lang, "tier": tier}

    # high tier: en 3 of 4 right, es 0 of 1 -> pooled 3/5 = 0.6, language mean (0.75 + 0) / 2 = 0.375
    records = [rec(0, "en", "high", 1), rec(1, "en", "high", 1), rec(2, "en", "high", 1), rec(3, "en", "high", 0),
               rec(4, "es", "high", 0), rec(5, "ko", "mid", 1)]
    s = summarize(records, {"accuracy": None}, ("source_lang", "tier"))
    assert s["accuracy_by_tier/high"] == 0.6 and s["accuracy_by_tier_langmean/high"] == 0.375
    assert s["accuracy_by_tier_langmean/mid"] == 1.0
    assert "accuracy_by_tier_langmean/high" not in summarize(records, {"accuracy": None}, ("tier",))


def test_records_score_retrieval_and_citations_by_paragraph_id_where_the_data_has_ids():
    """XRAG's supporting article (no gold titles) still gets retrieval measures; MuSiQue's paragraphs that share a
    gold title are not gold, for recall nor for citation precision."""
    from optimizers.evaluation import record
    from retrieval.corpus import Passage

    gold_para, same_title = Passage("m:1", "Rome", "Rome is the capital."), Passage("m:2", "Rome", "Rome has a zoo.")
    pred = dspy.Prediction(answer="Rome", passages=[same_title, gold_para], citations=["m:2"])
    musique = dspy.Example(id="q", question="?", answer="Rome", gold_titles=["Rome"], gold_ids=["m:1"])
    rec = record(musique, pred, {}, k=1)
    assert rec["title_recall"] == 0.0 and rec["recall_all"] == 1.0  # the first passage is not the gold paragraph
    assert rec["citation_precision"] == 0.0  # it cites the paragraph that only shares the title
    xrag = dspy.Example(id="x", question="?", answer="Rome", supporting=["m:1"])
    rec = record(xrag, pred, {}, k=2)
    assert rec["title_recall"] == 1.0 and rec["citation_precision"] == 0.0
