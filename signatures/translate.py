"""Translation role (tRAG and crossRAG baselines): bring queries and evidence into English."""
import dspy

from runtime.caps import Text


class TranslateQuery(dspy.Signature):
    """Translate the question into English. Keep names, numbers and any answer options; output only the
    translation."""

    question: str = dspy.InputField()
    source_language: str = dspy.InputField()
    english: Text[96] = dspy.OutputField()


class TranslateDocument(dspy.Signature):
    """Translate the passage into English, faithfully and completely; output only the translation."""

    passage: str = dspy.InputField()
    english: Text[400] = dspy.OutputField()
