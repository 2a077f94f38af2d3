"""Critic role: judge evidence and drafts."""
from typing import Literal

import dspy

from runtime.caps import Text


class CritiqueDraft(dspy.Signature):
    """Review a draft answer against the passages it was written from: are the passages on topic, do they back
    the draft, and does the draft answer the question? Suggest a search query that would find what is missing."""

    passages: list[str] = dspy.InputField()
    question: str = dspy.InputField()
    draft: str = dspy.InputField()
    relevant: bool = dspy.OutputField(desc="the passages concern what the question asks")
    support: Literal["full", "partial", "none"] = dspy.OutputField(desc="how far the passages back the draft")
    usefulness: int = dspy.OutputField(desc="1 (does not answer) to 5 (complete, direct answer)")
    next_query: Text[32] = dspy.OutputField(desc="a search query for the missing evidence")


RUBRIC = ("relevance: matches the question's topic and intent; usefulness: helps find the correct answer; "
          "specificity: clear and precise, not vague; compatibility: fits the question's language, culture and "
          "setting")


class RateDocuments(dspy.Signature):
    """Rate every numbered candidate as evidence for the question: one line per candidate,
    'n | relevance | usefulness | specificity | compatibility', each an integer from 0 to 5. Numbers only."""

    question: str = dspy.InputField()
    candidates: list[str] = dspy.InputField(desc="documents, each starting with its number [n]")
    ratings: Text[272] = dspy.OutputField(desc=f"one line per candidate, in order; {RUBRIC}")


class RateDocument(dspy.Signature):
    """Rate the document as evidence for the question, each scale an integer from 0 to 5, plus a critique of a
    few words."""

    question: str = dspy.InputField()
    document: str = dspy.InputField()
    relevance: int = dspy.OutputField(desc="matches the question's topic and intent")
    usefulness: int = dspy.OutputField(desc="helps find the correct answer")
    specificity: int = dspy.OutputField(desc="clear and precise, not vague")
    compatibility: int = dspy.OutputField(desc="fits the question's language, culture and setting")
    critique: Text[64] = dspy.OutputField()


class CheckSufficiency(dspy.Signature):
    """Do these kept documents, on their own, answer the question reliably? If not, say briefly what is missing,
    off-target or contradictory, so the next search can fix it."""

    question: str = dspy.InputField()
    evidence: list[str] = dspy.InputField(desc="kept documents with their critic notes")
    enough: bool = dspy.OutputField()
    reason: Text[64] = dspy.OutputField()


#: The sufficiency reason used, without an LM call, when no candidate passed the critic.
NOTHING_KEPT = "None of the retrieved documents was good enough. Critic notes: "


class GradeRetrieval(dspy.Signature):
    """Grade one retrieved passage for the question: 'correct' if it states a fact the answer needs, 'ambiguous'
    if it is on topic but does not state such a fact, 'incorrect' if it is off topic."""

    question: str = dspy.InputField()
    passage: str = dspy.InputField()
    grade: Literal["correct", "ambiguous", "incorrect"] = dspy.OutputField()
class CheckAnswer(dspy.Signature):
    """You check answers written from retrieved passages; no reference answer is available. Decide whether the
    predicted answer correctly answers the question given the passages and the reasoning that led to it. If it
    does not, explain the mistake."""

    question: str = dspy.InputField()
    passages: list[str] = dspy.InputField(desc="retrieved passages, numbered from 0")
    reasoning: str = dspy.InputField(desc="how the answer was reached; may be empty")
    prediction: str = dspy.InputField(desc="the answer to check")
    judgement: Text[8] = dspy.OutputField(desc="exactly one word: Correct or Error")
    analysis: Text[96] = dspy.OutputField(desc="one or two sentences on what is wrong and why; none if correct")


class PickErrorLabels(dspy.Signature):
    """A checker found the predicted answer wrong, for the reason given. Pick the options that name this mistake
    at the requested level of detail, most fitting first. Use only the listed options."""

    question: str = dspy.InputField()
    prediction: str = dspy.InputField(desc="the wrong answer")
    analysis: str = dspy.InputField(desc="why the answer is wrong")
    level: str = dspy.InputField(desc="what kind of label to pick")
    options: list[str] = dspy.InputField(desc="the valid labels, numbered")
    picks: Text[16] = dspy.OutputField(desc="the numbers of the 1 or 2 fitting options, one per line")


class JudgeRelevance(dspy.Signature):
    """Does the passage state a fact that is needed to answer the question? Reply yes or no."""

    question: str = dspy.InputField()
    passage: str = dspy.InputField()
    relevant: Text[8] = dspy.OutputField(desc="yes or no")


class KnowsAnswer(dspy.Signature):
    """Leave any documents aside: do you yourself know the answer to this question well enough to give it
    reliably? Reply yes or no."""

    question: str = dspy.InputField()
    known: Text[8] = dspy.OutputField(desc="yes or no")


class PassagesSuffice(dspy.Signature):
    """Taken together, do the passages contain every fact needed to answer the question? Reply yes or no."""

    passages: list[str] = dspy.InputField()
    question: str = dspy.InputField()
    enough: Text[8] = dspy.OutputField(desc="yes or no")


class ReasoningLeads(dspy.Signature):
    """Does the answer follow from the reasoning written for it, with no step missing or contradicting it? Reply yes
    or no."""

    question: str = dspy.InputField()
    reasoning: str = dspy.InputField()
    answer: str = dspy.InputField()
    follows: Text[8] = dspy.OutputField(desc="yes or no")
