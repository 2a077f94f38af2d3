"""Judge role: grade an answer against the references."""
import dspy


class JudgeAnswer(dspy.Signature):
    """Does the predicted answer state the same entity, value or yes/no as one of the reference answers? Extra
    words are fine; naming anything else, or not naming the reference at all, is not."""

    reference_answers: list[str] = dspy.InputField()
    predicted_answer: str = dspy.InputField()
    same: bool = dspy.OutputField()


class JudgeAnswerToQuestion(dspy.Signature):
    """Is the predicted answer a correct answer to the question, i.e. does it state the same fact as one of the
    reference answers? Judge the meaning, whatever language each is written in; extra words are fine, a
    different or missing fact is not, and repeating or rephrasing the question without the fact is not an answer."""

    question: str = dspy.InputField()
    reference_answers: list[str] = dspy.InputField()
    predicted_answer: str = dspy.InputField()
    same: bool = dspy.OutputField()
