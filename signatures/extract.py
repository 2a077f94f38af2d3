"""Extraction role: pull checkable facts out of a passage."""
import dspy

from runtime.caps import Text


class ExtractFacts(dspy.Signature):
    """List the facts in the passage that help answer the question, one per line as 'head | relation | tail'.
    Copy head and tail exactly as the passage writes them (names, titles, dates, places); keep the relation short.
    Write only triples, never whole sentences. Line format, with words taken from the passage:
    <name from the passage> | <short relation> | <name, date or place from the passage>"""

    question: str = dspy.InputField()
    passage: str = dspy.InputField()
    triples: Text[192] = dspy.OutputField(desc="one 'head | relation | tail' per line, most useful first")
