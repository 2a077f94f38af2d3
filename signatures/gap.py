"""Gap role: say what evidence is still missing."""
import dspy

from runtime.caps import Items


class SpecifyGap(dspy.Signature):
    """Name what is still missing to answer the question: the entities whose facts are absent and the
    attributes or links to look up for them."""

    question: str = dspy.InputField()
    facts: list[str] = dspy.InputField(desc="'[source] head | relation | tail' facts found so far")
    blocked: list[str] = dspy.InputField(desc="queries already searched and titles of pages already read: "
                                              "name what they did not give")
    missing_entities: Items[48] = dspy.OutputField(desc="names the question depends on that the facts do not cover")
    missing_relations: Items[48] = dspy.OutputField(desc="attributes or links still unknown, e.g. 'birthplace'")
