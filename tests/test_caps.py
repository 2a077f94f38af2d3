"""Output-token caps (runtime.caps): every predictor of every program has a capped signature, and each call goes out
with that cap unless the program set its own."""
from __future__ import annotations

import logging
from pathlib import Path

import dspy
import pytest
from dspy.utils.dummies import DummyLM

import programs
from runtime.caps import FIELD_TOKENS, Text, output_cap
from runtime.roles import init_dspy
from signatures.writer import AnswerFromPassages


@pytest.mark.parametrize("decisions", ["generate", "fused"])
def test_every_predictor_of_every_program_has_a_capped_output(decisions, monkeypatch):
    """No free-text output field without a cap, in any program's predictors (ChainOfThought's reasoning included):
    an uncapped field lets a looping small model write to the LM's global max_tokens."""
    monkeypatch.setenv("RAG_DATA_DIR", str(Path(__file__).parent / "fixtures"))  # RAG-Critic's taxonomy
    uncapped = []
    for name in programs.names():
        program = programs.build(name, search=object(), **programs.accepted_config(name, {"decisions": decisions}))
        uncapped += [f"{name}.{p}: {sorted(pred.signature.output_fields)}" for p, pred in program.named_predictors()
                     if output_cap(pred.signature) is None]
    assert not uncapped, "output fields without a cap (annotate them Text[n] / Items[n]):\n" + "\n".join(uncapped)


def test_an_uncapped_text_field_has_no_cap():
    class Loose(dspy.Signature):
        question: str = dspy.InputField()
        verdict: bool = dspy.OutputField()
        essay: str = dspy.OutputField()

    assert output_cap(Loose) is None
    assert output_cap(Loose.with_updated_fields("essay", type_=Text[40])) == 8 + 40 + 3 * FIELD_TOKENS


def test_each_call_carries_its_signatures_cap_unless_the_program_set_one():
    lm = DummyLM([{"answer": "Paris"}] * 3)
    lm.kwargs["max_tokens"] = 512
    init_dspy(lm, cache=False)
    predict = dspy.Predict(AnswerFromPassages)
    predict(question="Capital of France?", passages=["[1] Paris is the capital."])
    assert lm.history[-1]["kwargs"]["max_tokens"] == output_cap(AnswerFromPassages) == 32 + 2 * FIELD_TOKENS
    predict(question="Capital of France?", passages=[], config={"max_tokens": 5})
    assert lm.history[-1]["kwargs"]["max_tokens"] == 5  # the program's own per-call cap wins
    lm.kwargs["max_tokens"] = 20
    predict(question="Capital of France?", passages=[])
    assert lm.history[-1]["kwargs"]["max_tokens"] == 20  # never above the LM's own limit


def test_dspys_truncation_warning_names_the_calls_own_cap(caplog):
    """DSPy words a reply cut at max_tokens with the LM's global limit (512), though the call ran under its
    signature's cap: the line a user reads must name the cap that cut the reply."""
    class Truncating(DummyLM):
        def __call__(self, *args, **kwargs):
            logging.getLogger("dspy.clients.lm").warning(
                f"LM response was truncated due to exceeding max_tokens={self.kwargs['max_tokens']}.")
            return super().__call__(*args, **kwargs)

    lm = Truncating([{"answer": "Paris"}])
    lm.kwargs["max_tokens"] = 512
    init_dspy(lm, cache=False)
    with caplog.at_level(logging.WARNING, logger="dspy.clients.lm"):
        dspy.Predict(AnswerFromPassages)(question="Capital of France?", passages=[])
    (line,) = [r.getMessage() for r in caplog.records if r.name == "dspy.clients.lm"]
    assert f"max_tokens={output_cap(AnswerFromPassages)}," in line and "512" not in line
