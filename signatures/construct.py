"""Construction role: build cross-document question-answer items from a pair of related articles (XRAG §4)."""
import dspy

from runtime.caps import Text

# the four cross-document question types, in this project's words
QUESTION_TYPES = {
    "aggregation": "combine a number or fact stated in one article with one from the other (a total, a "
                   "difference, a count) to reach a value that neither article states alone",
    "comparison": "ask which of two things, one described in each article, is larger, earlier, longer or "
                  "otherwise ranks higher on one attribute",
    "multi-hop": "chain two facts: the answer to a first step, found in one article, is needed to look up "
                 "the final answer in the other article",
    "set": "ask for the members shared by, or differing between, two groups that the articles describe "
           "(e.g. which places appear in both)",
}


class MainEntities(dspy.Signature):
    """List the named entities the text is mainly about: people, places, organisations, events, works, named
    things. Copy each name as it is written in the text."""

    text: str = dspy.InputField()
    entities: Text[48] = dspy.OutputField(desc="one line: up to 6 names separated by commas, the most central first")


class RelatedArticles(dspy.Signature):
    """Decide whether two texts share a broad topic: the same person, place, organisation, event or subject (a
    war, a sport, a film, a country). Judge the main subject of each text, not its details: two texts about
    different aspects of one subject are related; two texts whose main subjects differ are not."""

    article_a: str = dspy.InputField()
    article_b: str = dspy.InputField()
    related: bool = dspy.OutputField()


class SummarizeArticle(dspy.Signature):
    """Summarize the article accurately and briefly, covering its main points. Use your own wording: reuse as
    few of the article's phrases as possible."""

    article: str = dspy.InputField()
    summary: Text[200] = dspy.OutputField(desc="3-5 sentences")


class SimpleQuestions(dspy.Signature):
    """Write simple question-answer pairs about the summary. Each question must be answerable from the summary
    in one step, with a short answer."""

    summary: str = dspy.InputField()
    qa_pairs: Text[240] = dspy.OutputField(desc="3-5 lines, each exactly 'Q: <question> A: <answer>'")


class CrossDocumentQuestion(dspy.Signature):
    """Two sets of simple question-answer pairs come from two different articles. Find what connects them, pick
    related pairs (at least one from each set), and write ONE new natural question of the requested type that
    can only be answered with information from both articles. Do not just join two questions with 'and'. Name
    the people, places and things themselves: a reader who never saw the articles must understand the question,
    so never say 'the article' or 'both texts'."""

    qa_pairs_a: str = dspy.InputField(desc="pairs from article A")
    qa_pairs_b: str = dspy.InputField(desc="pairs from article B")
    question_type: str = dspy.InputField(desc="the type and its definition")
    connection: Text[64] = dspy.OutputField(desc="what links the chosen pairs, one sentence")
    question: Text[80] = dspy.OutputField(desc="the new question")


class AnswerFromSummaries(dspy.Signature):
    """Answer the question using the two summaries and the selected facts. Give a short answer of one phrase or
    sentence."""

    summary_a: str = dspy.InputField()
    summary_b: str = dspy.InputField()
    facts: str = dspy.InputField(desc="the question-answer pairs the question was built from")
    question: str = dspy.InputField()
    answer: Text[48] = dspy.OutputField()


class TranslateQA(dspy.Signature):
    """Translate the question and its answer into the target language, keeping names, numbers and dates exact."""

    question: str = dspy.InputField()
    answer: str = dspy.InputField()
    target_language: str = dspy.InputField()
    translated_question: Text[120] = dspy.OutputField()
    translated_answer: Text[48] = dspy.OutputField()
