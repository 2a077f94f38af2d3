"""Writer role: produce the final answer."""
import dspy

from runtime.caps import Text


class AnswerDirectly(dspy.Signature):
    """Answer the question from your own knowledge with a short phrase of a few words. No explanation."""

    question: str = dspy.InputField()
    answer: Text[32] = dspy.OutputField(desc="a short phrase, usually 1-5 words")


def in_language(signature: type[dspy.Signature]) -> type[dspy.Signature]:
    """``signature`` with an ``answer_language`` input: the writer answers in the question's language (XRAG),
    whatever language the passages are in."""
    field = dspy.InputField(desc="write the answer in this language, even when the passages are in another one")
    return signature.insert(-1, "answer_language", field, type_=str)


def with_instruction(signature: type[dspy.Signature]) -> type[dspy.Signature]:
    """``signature`` with an ``instruction`` input: the same writer answering again, told what to fix (RAG-Critic's
    GenerateAnswer with its additional instruction, Self-Refine's revision on its feedback)."""
    field = dspy.InputField(desc="what to fix or watch for in this answer; may be empty")
    return signature.insert(-1, "instruction", field, type_=str)


class AnswerFromPassages(dspy.Signature):
    """Answer the question using the passages. Reply with a short phrase of a few words taken from or
    supported by the passages; combine facts across passages when the question needs several steps."""

    passages: list[str] = dspy.InputField(desc="retrieved passages, most relevant first")
    question: str = dspy.InputField()
    answer: Text[32] = dspy.OutputField(desc="a short phrase, usually 1-5 words")


class ChooseOption(dspy.Signature):
    """Pick the option that best answers the question, judged by what the passages say. Only when no passages
    are given, judge by what you know about the place or culture the question names."""

    passages: list[str] = dspy.InputField(desc="checked evidence passages; empty when none was found")
    question: str = dspy.InputField()
    options: str = dspy.InputField(desc="one option per line as 'LETTER. text'")
    answer: Text[8] = dspy.OutputField(desc="only the letter of the chosen option")


class AnswerWithCitations(dspy.Signature):
    """Answer the question in 2-4 words using only the numbered passages, then the numbers of the passages that
    support the answer in brackets, e.g. "Lansing [2]" or "Ann Arbor [1, 3]". If the passages do not give the
    answer, reply exactly: I don't know"""

    passages: list[str] = dspy.InputField(desc="evidence passages, each starting with its number [n]")
    question: str = dspy.InputField()
    answer: Text[48] = dspy.OutputField(desc="2-4 words and [passage numbers], or I don't know")


#: The same answer with the verified ledger facts as an extra input (SEAL's ``ledger_to_writer`` option).
AnswerWithCitationsAndFacts = AnswerWithCitations.prepend(
    "facts", dspy.InputField(desc="'[source] head | relation | tail' facts checked against their passages; "
                                  "may be empty"), list[str])
