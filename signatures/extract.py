"""Extraction role: pull checkable facts out of a passage."""
import dspy


class ExtractFacts(dspy.Signature):
    """List the facts in the passage that help answer the question, one per line as 'head | relation | tail'.
    Copy head and tail exactly as the passage writes them (names, titles, dates, places); keep the relation short."""

    question: str = dspy.InputField()
    passage: str = dspy.InputField()
    triples: list[str] = dspy.OutputField(desc="'head | relation | tail' lines, most useful first")
