"""Judge role: grade an answer against the references."""
import dspy


class JudgeAnswer(dspy.Signature):
    """Does the predicted answer state the same entity, value or yes/no as one of the reference answers? Extra
    words are fine; naming anything else, or not naming the reference at all, is not."""

    reference_answers: list[str] = dspy.InputField()
    predicted_answer: str = dspy.InputField()
    same: bool = dspy.OutputField()


class JudgeAnswerToQuestion(dspy.Signature):
    """Is the predicted answer a correct answer to the question: does it state the same fact as one of the
    reference answers, in the language the question is asked in? An answer in another language is wrong even when
    its fact is right (names and numbers written the same way in both languages are fine). Extra words are fine; a
    different or missing fact is not, and repeating or rephrasing the question without the fact is not an answer."""

    question: str = dspy.InputField()
    reference_answers: list[str] = dspy.InputField()
    predicted_answer: str = dspy.InputField()
    same: bool = dspy.OutputField()


class JudgeAnswerLanguage(dspy.Signature):
    """Is the answer written in the given language? Names, numbers and dates spelled the same way in that language
    count as written in it; words of another language (an English phrase answering a German question) do not."""

    language: str = dspy.InputField()
    question: str = dspy.InputField(desc="asked in that language")
    answer: str = dspy.InputField()
    in_language: bool = dspy.OutputField()
