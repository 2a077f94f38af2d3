"""Reranker role: grade how useful one retrieved passage is for a question (second-stage retrieval)."""
import dspy

from runtime.caps import Text


class GradePassage(dspy.Signature):
    """Rate how much the passage helps answer the question, as a whole number from 0 to 10: 10 if it states the
    answer or a fact needed to reach it, 5 if it is about an entity the question names but not the asked fact, 0 if
    it is unrelated. Reply with the number only."""

    question: str = dspy.InputField()
    passage: str = dspy.InputField()
    score: Text[8] = dspy.OutputField(desc="an integer from 0 to 10")
