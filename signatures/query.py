"""Query role: turn a gap into one search query."""
import dspy


class WriteMicroQuery(dspy.Signature):
    """Write one short keyword search query that would find a passage stating the missing facts. Name the
    missing entity and relation; leave out the avoided terms."""

    question: str = dspy.InputField()
    missing_entities: list[str] = dspy.InputField()
    missing_relations: list[str] = dspy.InputField()
    avoid: list[str] = dspy.InputField(desc="titles already read; searching them again finds nothing new")
    query: str = dspy.OutputField(desc="4 to 12 keywords")
