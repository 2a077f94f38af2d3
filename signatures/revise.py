"""Reviser role: the writer model rewrites queries, documents and answers on feedback (RAG-Critic's action
functions and the Self-Refine baseline)."""
import dspy

from runtime.caps import Text


class RewriteForSearch(dspy.Signature):
    """Rewrite the search query as instructed: "clarify" makes it more specific, "expand" adds related names and
    terms. Keep its meaning."""

    query: str = dspy.InputField()
    instruction: str = dspy.InputField()
    queries: Text[64] = dspy.OutputField(desc="1 to 3 rewritten queries, one per line")


class DecomposeQuestion(dspy.Signature):
    """Split the question into the simpler sub-questions that must be answered, in order, to answer it."""

    question: str = dspy.InputField()
    sub_questions: Text[96] = dspy.OutputField(desc="2 to 4 sub-questions, one per line")


REFINE_INSTRUCTIONS = {
    "explain": "explain what the document says that bears on the query",
    "refine": "rewrite the document keeping only the facts the query needs, stated plainly",
    "correct": "rewrite the document keeping only statements that fit the query and the other evidence",
    "examples": "restate the document's facts that bear on the query as concrete examples",
    "summarize": "summarize the document in two sentences, keeping the facts the query needs",
}


class RefineDocument(dspy.Signature):
    """Rewrite the document for the query as the instruction says. Keep names, dates and numbers exact."""

    query: str = dspy.InputField()
    document: str = dspy.InputField()
    instruction: str = dspy.InputField()
    rewritten: Text[160] = dspy.OutputField(desc="the rewritten document, at most four sentences")


class AnswerWithInstruction(dspy.Signature):
    """Answer the question using the passages, following the additional instruction about what to fix. Reply
    with a short phrase of a few words taken from or supported by the passages."""

    passages: list[str] = dspy.InputField(desc="evidence passages")
    question: str = dspy.InputField()
    instruction: str = dspy.InputField(desc="what to fix or watch for; may be empty")
    answer: Text[32] = dspy.OutputField(desc="a short phrase, usually 1-5 words")


#: MetaRAG's plans: what the writer is told when it answers again, by the fix its evaluation chose.
REGULATION = {
    "rethink": "Check your final answer against the question: give exactly what it asks for, with nothing added.",
    "multi_step": "Your reasoning did not arrive at your answer. Reason again, one fact per step, and answer with "
                  "what the last step concludes.",
    "own_knowledge": "New passages were added. Where no passage gives what is needed, answer from what you know.",
    "passages_only": "Answer only from what the passages say, not from your own memory.",
    "decompose": "New passages were added. Split the question into simpler sub-questions, answer each from the "
                 "passages, then combine them.",
}


class GiveFeedback(dspy.Signature):
    """Review your own answer to the question against the passages. Say whether it is Correct or has an Error, and
    give specific, actionable feedback on how to fix it."""

    passages: list[str] = dspy.InputField(desc="evidence passages")
    question: str = dspy.InputField()
    answer: str = dspy.InputField()
    verdict: Text[8] = dspy.OutputField(desc="exactly one word: Correct or Error")
    feedback: Text[96] = dspy.OutputField(desc="what is wrong and how to fix it; none if correct")


#: Self-Refine's revision: what its writer is told when it answers again on its own feedback.
REVISION = "Your previous answer was: {answer}\nFeedback on it: {feedback}\nImprove the answer using the feedback."
