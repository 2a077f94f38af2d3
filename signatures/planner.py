"""Planner role: choose where to search (language corpora) and what to search for (the query)."""
import dspy


class SelectCorpora(dspy.Signature):
    """Pick the language corpora to search for evidence on this question: the question's own language, plus the
    languages of the country or culture it is about. Pick few; use only codes from the available list."""

    question: str = dspy.InputField()
    question_language: str = dspy.InputField()
    available: list[str] = dspy.InputField(desc="'code: language' of each corpus")
    corpora: list[str] = dspy.OutputField(desc="chosen corpus codes")


class ReplanSearch(dspy.Signature):
    """The previous search did not find enough good evidence, for the reason given. Plan the next search: change
    the corpora, rewrite the query, or both, guided by the reason. Keep the question's meaning and add the
    missing names, places or terms. Use only codes from the available list."""

    question: str = dspy.InputField(desc="the original question")
    previous_query: str = dspy.InputField()
    previous_corpora: list[str] = dspy.InputField()
    reason: str = dspy.InputField(desc="why the evidence was not enough")
    available: list[str] = dspy.InputField(desc="'code: language' of each corpus")
    corpora: list[str] = dspy.OutputField(desc="corpus codes for the next search")
    query: str = dspy.OutputField(desc="the new search query")


class ReselectCorpora(dspy.Signature):
    """The previous search did not find enough good evidence, for the reason given. Pick a different set of
    language corpora for the next search. Use only codes from the available list."""

    question: str = dspy.InputField()
    previous_corpora: list[str] = dspy.InputField()
    reason: str = dspy.InputField(desc="why the evidence was not enough")
    available: list[str] = dspy.InputField(desc="'code: language' of each corpus")
    corpora: list[str] = dspy.OutputField(desc="corpus codes for the next search")


class RewriteQuery(dspy.Signature):
    """The previous search query did not find enough good evidence, for the reason given. Write a different
    query with the same meaning that adds the missing names, places or terms."""

    question: str = dspy.InputField(desc="the original question")
    previous_query: str = dspy.InputField()
    reason: str = dspy.InputField(desc="why the evidence was not enough")
    query: str = dspy.OutputField(desc="the new search query")


class PlanSearches(dspy.Signature):
    """List the separate searches that together would find every fact needed to answer the question, each aimed
    at a different part of it (for a question with several steps, one search per step and per entity named).
    Write exactly the requested number of lines, one search per line, as: search terms | why it is needed."""

    question: str = dspy.InputField()
    count: int = dspy.InputField(desc="how many searches to list")
    searches: str = dspy.OutputField(desc="one line per search: 'search terms | reason'")
