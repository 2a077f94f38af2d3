"""Judge role: grade an answer against the references."""
import dspy


class JudgeAnswer(dspy.Signature):
    """Decide whether the predicted answer is correct for the question, given the reference answers. Different
    wording, spelling, abbreviation or extra detail is fine when it names the same thing; a different entity,
    date or number, a refusal, or "I don't know" is incorrect."""

    question: str = dspy.InputField()
    reference_answers: list[str] = dspy.InputField()
    predicted_answer: str = dspy.InputField()
    correct: bool = dspy.OutputField()
