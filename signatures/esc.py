"""Evidence-sufficiency controller (ESC) role: decide whether the gathered evidence is enough to answer."""
from typing import Literal

import dspy

from runtime.caps import Text


class AssessSufficiency(dspy.Signature):
    """Check, criterion by criterion, whether the facts gathered so far are enough to answer the question."""

    question: str = dspy.InputField()
    facts: list[str] = dspy.InputField(desc="'[source] head | relation | tail' facts found so far")
    coverage: float = dspy.OutputField(desc="share (0-1) of what the question asks about that the facts state")
    bridge: Literal["linked", "missing", "not_needed"] = dspy.OutputField(
        desc="'linked' if the facts join each step of a multi-step question through a named entity of the right kind")
    corroboration: Literal["corroborated", "single_source", "contradicted"] = dspy.OutputField(
        desc="do separate sources agree, does only one state the key facts, or do they conflict")
    answerability: float = dspy.OutputField(desc="confidence (0-1) that the answer can be read off the facts")
    sufficient: bool = dspy.OutputField(desc="True only if the facts answer the question")


class DecideNextStep(dspy.Signature):
    """Judge whether the passages back the draft answer to the whole question. Reply STOP when they do. Reply
    CONTINUE when a fact on the way to the answer is still missing from them, and write one short search query
    for exactly that missing fact (name the entity found so far, not the words of the question)."""

    question: str = dspy.InputField()
    passages: list[str] = dspy.InputField(desc="evidence gathered so far")
    draft_answer: str = dspy.InputField()
    decision: Text[8] = dspy.OutputField(desc="STOP or CONTINUE")
    next_query: Text[32] = dspy.OutputField(desc="the search for the missing fact; empty when STOP")
