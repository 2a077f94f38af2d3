"""Planner role: choose where to search (language corpora) and what to search for (the query)."""
import dspy


class SelectCorpora(dspy.Signature):
    """Pick the language corpora to search for evidence on this question: the question's own language, plus the
    languages of the country or culture it is about. Pick few; use only codes from the available list."""

    question: str = dspy.InputField()
    question_language: str = dspy.InputField()
    available: list[str] = dspy.InputField(desc="'code: language' of each corpus, in no particular order "
                                                 "(some list each corpus's best-matching passage title and score)")
    corpora: list[str] = dspy.OutputField(desc="chosen corpus codes")


class ReplanSearch(dspy.Signature):
    """The previous search did not find enough good evidence, for the reason given. Plan the next search: change
    the corpora, rewrite the query, or both, guided by the reason. Keep the question's meaning and add the
    missing names, places or terms. Use only codes from the available list."""

    question: str = dspy.InputField(desc="the original question")
    previous_query: str = dspy.InputField()
    previous_corpora: list[str] = dspy.InputField()
    reason: str = dspy.InputField(desc="why the evidence was not enough")
    available: list[str] = dspy.InputField(desc="'code: language' of each corpus, in no particular order "
                                                 "(some list each corpus's best-matching passage title and score)")
    corpora: list[str] = dspy.OutputField(desc="corpus codes for the next search")
    query: str = dspy.OutputField(desc="the new search query")


class ReselectCorpora(dspy.Signature):
    """The previous search did not find enough good evidence, for the reason given. Pick a different set of
    language corpora for the next search. Use only codes from the available list."""

    question: str = dspy.InputField()
    previous_corpora: list[str] = dspy.InputField()
    reason: str = dspy.InputField(desc="why the evidence was not enough")
    available: list[str] = dspy.InputField(desc="'code: language' of each corpus, in no particular order "
                                                 "(some list each corpus's best-matching passage title and score)")
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
# RAG-Critic's correction planner. The function menu and the error -> action table (after the paper's Table 11)
# are inputs of the planner, written here so that every word the LM reads lives in signatures/.
FUNCTIONS = """\
Retrieval(query, topk) -> documents: search the corpus; the documents are added to the evidence.
RewriteQuery(query, instruction) -> queries: instruction "clarify" (more specific) or "expand" (more terms).
DecomposeQuery(query) -> queries: split a multi-step question into sub-questions.
RefineDoc(query, doc_index, instruction) -> text: change evidence document number doc_index; instruction
  "explain", "summarize", "correct" (fix it against the other documents) or "delete" (drop an off-topic one).
GenerateAnswer(query, docs, additional_instruction) -> answer: answer from docs (default: all evidence),
  following additional_instruction (what to fix in the previous answer).
Values: quoted strings, integers, names assigned on earlier lines (queries[0] is the first query).
Predefined names: question (the question), documents (the retrieved documents)."""

PLAN_EXAMPLE = """\
queries = RewriteQuery(query=question, instruction="expand")
found = Retrieval(query=queries[0], topk=3)
answer = GenerateAnswer(query=question, docs=found, additional_instruction="Name the person, not the film.")"""

#: Tier-1 error category -> suggested corrective actions (function calls named as in FUNCTIONS).
ERROR_ACTIONS = {
    "Incomplete Information": ("search again with an expanded query (RewriteQuery expand, then Retrieval) to add "
                               "the missing facts; summarize long documents (RefineDoc summarize)"),
    "Irrelevant Information": ("search again for the question itself to replace the off-topic documents "
                               "(Retrieval); drop or correct documents that do not concern the question (RefineDoc "
                               "delete or correct)"),
    "Erroneous Information": ("fix the document that states something false (RefineDoc correct); answer again "
                              "with an instruction that names the faulty reasoning (GenerateAnswer)"),
    "Incomplete Response": ("search again for the question to add evidence (Retrieval); explain the documents "
                            "(RefineDoc explain) and answer again covering every part of the question"),
    "Inaccurate Response": ("answer again with an instruction that names the wrong step (GenerateAnswer); explain "
                            "the key documents first (RefineDoc explain)"),
    "Off-Topic Response": ("split the question into sub-questions (DecomposeQuery) or clarify it (RewriteQuery "
                           "clarify) and search for them (Retrieval), replacing the off-topic evidence"),
    "Overly Verbose Response": ("summarize the documents (RefineDoc summarize); answer again briefly, without "
                                "reusing the previous answer (GenerateAnswer)"),
}


class PlanCorrection(dspy.Signature):
    """A critic found an error in the predicted answer. Write a short program that fixes it, one call per line,
    in the form `name = Function(argument=value, ...)`, using only the listed functions and arguments. Follow the
    suggested actions for the flagged errors. The last line must call GenerateAnswer."""

    question: str = dspy.InputField()
    passages: list[str] = dspy.InputField(desc="the evidence documents, numbered from 0 (their doc_index)")
    prediction: str = dspy.InputField(desc="the answer the critic flagged")
    critique: str = dspy.InputField(desc="the critic's analysis and error labels")
    suggested_actions: list[str] = dspy.InputField(desc="'error category: actions' for the flagged errors")
    functions: str = dspy.InputField(desc="the available functions")
    example: str = dspy.InputField(desc="a valid program, for the form only")
    plan: str = dspy.OutputField(desc="the program: at most 5 lines, no comments, no loops")
