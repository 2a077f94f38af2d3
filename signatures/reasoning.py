"""Reasoning role for the iterative baselines: one chain-of-thought sentence at a time (IRCoT), and the task
given to a tool-using agent (ReAct)."""
import dspy

from runtime.caps import Text


class NextThought(dspy.Signature):
    """Continue the step-by-step reasoning towards the answer of the question with exactly one new sentence,
    using the passages. State one fact you can read in them or the next thing you need to find. When the
    reasoning reaches the answer, the sentence must be: So the answer is: <short answer>."""

    passages: list[str] = dspy.InputField(desc="retrieved passages")
    question: str = dspy.InputField()
    thoughts: str = dspy.InputField(desc="the reasoning sentences written so far; may be empty")
    next_sentence: Text[64] = dspy.OutputField(desc="one sentence")


class AnswerWithSearch(dspy.Signature):
    """Answer the question, which may take several steps, by searching a text collection: search for one fact
    at a time, read the results, then search for the next fact. The answer is a short phrase of a few words."""

    question: str = dspy.InputField()
    answer: Text[32] = dspy.OutputField(desc="a short phrase, usually 1-5 words")


SEARCH_TOOL = "Search the text collection. Give a short query about one fact; returns the best matching passages."
