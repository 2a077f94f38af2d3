"""Query role: turn a gap into one search query."""
import dspy

from runtime.caps import Text


class WriteMicroQuery(dspy.Signature):
    """Write one short keyword search query that would find a passage stating the missing facts. Name the
    missing entity and relation."""

    question: str = dspy.InputField()
    missing_entities: list[str] = dspy.InputField()
    missing_relations: list[str] = dspy.InputField()
    blocked: list[str] = dspy.InputField(desc="queries already searched and titles of pages already read: "
                                              "do not repeat them")
    query: Text[32] = dspy.OutputField(desc="4 to 12 keywords")


class RewriteQuery(dspy.Signature):
    """The passages found for the question were judged off target. Write a new short keyword search query that
    names the entities and facts the question needs, in other words than before."""

    question: str = dspy.InputField()
    earlier_queries: list[str] = dspy.InputField(desc="queries already tried")
    query: Text[32] = dspy.OutputField(desc="4 to 12 keywords")


class QueryForMissing(dspy.Signature):
    """An answer was attempted from the passages, but they lack something the question needs. Write one new short
    keyword search query for the fact that is still missing."""

    question: str = dspy.InputField()
    passages: list[str] = dspy.InputField(desc="passages already read")
    answer: str = dspy.InputField(desc="the answer attempted from them")
    query: Text[32] = dspy.OutputField(desc="4 to 12 keywords")
