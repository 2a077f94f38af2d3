"""Planner role: choose where to search (language corpora) and what to search for (the query)."""
import dspy

from runtime.caps import Items, Text

#: The re-planners' optional output that lets them leave out the corpus in the question's language (the paper's
#: re-planner keeps it "unless the system's reasoning explicitly shows it is consistently low-relevance"): a reply
#: without it, or with none, keeps that corpus (``programs.coral.coral.stated``).
DROPPED_BECAUSE = ("only if your corpora leave out the corpus in the question's language: why its documents were "
                   "off-topic; else none")
#: ``dropped_because`` as an oracle plan's demo gives it: none when the corpus in the question's language stays, else
#: where the missing evidence is (the planner oracle names the corpora holding it).
KEPT, ELSEWHERE = "none", "the missing evidence is in the other corpora"


class SelectCorpora(dspy.Signature):
    """Pick at most three language corpora to search for evidence on this question. Always include the corpus in
    the language the question is written in; add the corpus of another language only when the question is about a
    country, region or culture where that language is spoken (its places, customs, institutions or people). Never
    add one just in case; use only codes from the available list."""

    question: str = dspy.InputField()
    question_language: str = dspy.InputField()
    available: list[str] = dspy.InputField(desc="'code: language' of each corpus, in no particular order "
                                                 "(some list each corpus's best-matching passage title and score)")
    corpora: Items[32] = dspy.OutputField(desc="chosen corpus codes")


class ReplanSearch(dspy.Signature):
    """The previous search did not find enough good evidence, for the reason given. Plan the next search: change
    the corpora, rewrite the query, or both, guided by the reason. Keep the corpus in the question's language
    unless the reason shows its documents were off-topic (then say why); add or swap in the corpus of a country or
    culture the question is about. Keep the question's meaning and add the missing names, places or terms. Use only
    codes from the available list."""

    question: str = dspy.InputField(desc="the original question")
    previous_query: str = dspy.InputField()
    previous_corpora: list[str] = dspy.InputField()
    reason: str = dspy.InputField(desc="why the evidence was not enough")
    available: list[str] = dspy.InputField(desc="'code: language' of each corpus, in no particular order "
                                                 "(some list each corpus's best-matching passage title and score)")
    corpora: Items[32] = dspy.OutputField(desc="corpus codes for the next search")
    dropped_because: Text[32] = dspy.OutputField(default="", desc=DROPPED_BECAUSE)
    query: Text[32] = dspy.OutputField(desc="the new search query")


class ReselectCorpora(dspy.Signature):
    """The previous search did not find enough good evidence, for the reason given. Pick a different set of
    language corpora for the next search: keep the corpus in the question's language unless the reason shows its
    documents were off-topic (then say why); add or swap in the corpus of a country or culture the question is
    about. Use only codes from the available list."""

    question: str = dspy.InputField()
    previous_corpora: list[str] = dspy.InputField()
    reason: str = dspy.InputField(desc="why the evidence was not enough")
    available: list[str] = dspy.InputField(desc="'code: language' of each corpus, in no particular order "
                                                 "(some list each corpus's best-matching passage title and score)")
    corpora: Items[32] = dspy.OutputField(desc="corpus codes for the next search")
    dropped_because: Text[32] = dspy.OutputField(default="", desc=DROPPED_BECAUSE)


class RewriteQuery(dspy.Signature):
    """The previous search query did not find enough good evidence, for the reason given. Write a different
    query with the same meaning that adds the missing names, places or terms."""

    question: str = dspy.InputField(desc="the original question")
    previous_query: str = dspy.InputField()
    reason: str = dspy.InputField(desc="why the evidence was not enough")
    query: Text[32] = dspy.OutputField(desc="the new search query")


class PlanSearches(dspy.Signature):
    """List the separate searches that together would find every fact needed to answer the question, each aimed
    at a different part of it (for a question with several steps, one search per step and per entity named).
    Write exactly the requested number of lines, one search per line, as: search terms | why it is needed."""

    question: str = dspy.InputField()
    count: int = dspy.InputField(desc="how many searches to list")
    searches: Text[160] = dspy.OutputField(desc="one line per search: 'search terms | reason'")
# RAG-Critic's correction planner. The function menu and the error -> action table (after the paper's Table 11)
# are inputs of the planner, written here so that every word the LM reads lives in signatures/.
FUNCTIONS = """\
Retrieval(query, topk) -> documents: search the corpus; the documents are added to the evidence.
RewriteQuery(query, instruction) -> queries: instruction "clarify" (more specific) or "expand" (more terms).
DecomposeQuery(query) -> queries: split a multi-step question into sub-questions.
RefineDoc(query, doc_index, instruction, docs) -> text: change document number doc_index of docs (documents, the
  default, or the output of a Retrieval); instruction "explain", "refine" (keep what the query needs), "correct"
  (fix it against the other documents), "delete" (drop an off-topic one), "examples" or "summarize".
GenerateAnswer(query, docs, additional_instruction) -> answer: answer from docs: documents (the original ones),
  found (a Retrieval's output: replacement retrieval) or [documents, found] (both: supplementary retrieval),
  following additional_instruction (what to fix in the previous answer).
Values: quoted strings, integers, names assigned on earlier lines (queries[0] is the first query).
Predefined names: question (the question), documents (the retrieved documents)."""

#: The example plan's instruction: a placeholder for the planner's own, content-free so that a copy misleads nobody
#: (a copy is read as no instruction: ``programs.rag_critic.rag_critic.own_instructions``).
EXAMPLE_INSTRUCTION = "What to fix in the previous answer."
PLAN_EXAMPLE = f"""\
queries = RewriteQuery(query=question, instruction="expand")
found = Retrieval(query=queries[0], topk=3)
answer = GenerateAnswer(query=question, docs=[documents, found], additional_instruction="{EXAMPLE_INSTRUCTION}")"""

#: Tier-1 error category -> suggested corrective actions (function calls named as in FUNCTIONS), row by row after
#: the paper's error -> action table (its Table 11), with supplementary retrieval as docs=[documents, found] and
#: replacement retrieval as docs=found.
ERROR_ACTIONS = {
    "Incomplete Information": ("rewrite the query and search to add the missing facts (RewriteQuery expand, "
                               "Retrieval, then GenerateAnswer with docs=[documents, found]); refine the retrieved "
                               "documents (RefineDoc refine)"),
    "Irrelevant Information": ("search again for the question itself and answer from what it finds instead "
                               "(Retrieval, then GenerateAnswer with docs=found); correct the retrieved documents "
                               "(RefineDoc correct)"),
    "Erroneous Information": ("correct the document that states something false (RefineDoc correct); answer again "
                              "with an instruction that corrects the faulty reasoning (GenerateAnswer)"),
    "Incomplete Response": ("search again for the question to add evidence (Retrieval, then GenerateAnswer with "
                            "docs=[documents, found]); give examples of the key documents (RefineDoc examples)"),
    "Inaccurate Response": ("answer again with an instruction that names the wrong step (GenerateAnswer); explain "
                            "the key documents first (RefineDoc explain)"),
    "Off-Topic Response": ("rewrite the query and answer from what it finds instead (RewriteQuery clarify, "
                           "Retrieval, then GenerateAnswer with docs=found); or split the question into "
                           "sub-questions (DecomposeQuery)"),
    "Overly Verbose Response": ("refine the documents (RefineDoc refine); answer again briefly, without relying on "
                                "the previous answer (GenerateAnswer)"),
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
    plan: Text[200] = dspy.OutputField(desc="the program: at most 5 lines, no comments, no loops")
