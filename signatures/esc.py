"""Evidence-sufficiency controller (ESC) role: decide whether the gathered evidence is enough to answer."""
from typing import Literal

import dspy


class AssessSufficiency(dspy.Signature):
    """Check, criterion by criterion, whether the facts gathered so far are enough to answer the question."""

    question: str = dspy.InputField()
    facts: list[str] = dspy.InputField(desc="'[source] head | relation | tail' facts found so far")
    coverage: float = dspy.OutputField(desc="share (0 to 1) of the entities and attributes the question asks "
                                            "about that the facts state")
    bridge: Literal["linked", "missing", "not_needed"] = dspy.OutputField(
        desc="for a multi-step question, 'linked' if the facts join every step through a named entity of the "
             "expected kind (person, place, work...), 'missing' if a step is open")
    corroboration: Literal["corroborated", "single_source", "contradicted"] = dspy.OutputField(
        desc="whether separate sources agree on the key facts, only one states them, or they conflict")
    answerability: float = dspy.OutputField(desc="confidence (0 to 1) that the answer can be read off the facts")
    sufficient: bool = dspy.OutputField(desc="True only if the facts answer the question")
