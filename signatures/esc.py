"""Evidence-sufficiency controller (ESC) role: decide whether the gathered evidence is enough to answer."""
from typing import Literal

import dspy


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
