"""RAG-Critic: taxonomy, critic label snapping, typed plans and their rejection, the dispatcher, the program and
its Self-Refine baseline, and the error profile -- on DummyLM with a scripted search and a made-up taxonomy."""
import re
from pathlib import Path
from types import SimpleNamespace

import dspy
import mlflow
import pytest
from dspy.utils.dummies import DummyLM

import evaluate
import programs
from experiments import cli
from experiments import sessions
from experiments.derived import Derived
from evaluation import error_profile as ep
from programs.rag_critic.error_critic import ErrorCritic, parse_verdict
from programs.rag_critic.executor import PlanExecutor
from programs.rag_critic.plan import REFINE_OPTIONS, PlanError, grammar, parse_plan
from programs.rag_critic.rag_critic import RAGCritic
from programs.rag_critic.self_refine import SelfRefine
from programs.rag_critic.taxonomy import load_taxonomy, snap
from programs.shared.writer import Writer
from retrieval.corpus import Passage
from runtime.roles import Roles, assign_roles
from signatures.planner import ERROR_ACTIONS, FUNCTIONS
from tests.dummies import Queue, routed

FIXTURES = Path(__file__).parent / "fixtures"
TEXTS = {"Blue Fox": "Blue Fox is a 1931 film directed by Ana Berg.",
         "Red Owl": "Red Owl is a 1950 film about an owl.",
         "Ana Berg": "Ana Berg was a film director born in Lyon.",
         "Grey Elk": "Grey Elk is a painting of an elk."}
P = {t: Passage(f"toy:{i}", t, text, corpus="toy", score=1 - i / 10) for i, (t, text) in enumerate(TEXTS.items())}
Q = "Where was the director of Blue Fox born?"


class ScriptedSearch:
    """The first route whose key occurs in the query gives the hits; records every query."""

    def __init__(self, routes=None, default=("Blue Fox", "Red Owl")):
        self.routes, self.default, self.calls = routes or {}, default, []

    def search(self, query, k, corpora=None):
        self.calls.append((query, k))
        titles = next((t for key, t in self.routes.items() if key.lower() in query.lower()), self.default)
        return [P[t] for t in titles][:k]




def prompts(lm, *markers):
    """The last messages of the calls whose prompt holds every marker."""
    return [h["messages"][-1]["content"] for h in lm.history if all(m in h["messages"][-1]["content"] for m in markers)]


# signature markers (an input field unique to the signature, or its first output field)
INSTRUCTED, CRITIC, PLAN, REWRITE, REFINE = ("[[ ## instruction ## ]]\n", "`[[ ## judgement ## ]]`",
                                             "`[[ ## plan ## ]]`", "`[[ ## queries ## ]]`", "`[[ ## rewritten ## ]]`")
REVISE, FEEDBACK, WRITER = "Your previous answer was", "`[[ ## verdict ## ]]`", "`[[ ## answer ## ]]`"
def said(answer):
    """A writer reply with its reasoning (rag_critic's writer reasons; the critic reads it)."""
    return {"reasoning": f"The passages point to {answer}.", "answer": answer}


CORRECT = {"judgement": "Correct", "analysis": "none", "categories": "none", "error_types": "none",
           "specifics": "none"}
ERROR = {"judgement": "Error", "analysis": "It names the film, not the birthplace of its director."}
T1, T2, T3 = (f"[[ ## level ## ]]\n{level}" for level in ErrorCritic.LEVELS)  # the critic's label calls, by tier
LABELS = {T1: {"picks": "5\nIncomplete Informaton"},                          # by number; a typo: snapped
          T2: {"picks": "Wrong Entity\nMade Up Label Xyz"},                    # second: dropped
          T3: {"picks": "2"}}


def executor(search):
    """The dispatcher with its program's writer (rag's plain one)."""
    return PlanExecutor(search, Writer(use_passages=True))


@pytest.fixture
def taxonomy(monkeypatch):
    monkeypatch.setenv("RAG_DATA_DIR", str(FIXTURES))
    return load_taxonomy()


# --- taxonomy and labels --------------------------------------------------------------------------------------

def test_taxonomy_tiers_from_the_data_dir(taxonomy):
    assert taxonomy.tier1[:2] == ("Incomplete Information", "Irrelevant Information") and len(taxonomy.tier1) == 7
    assert taxonomy.tier2_of("Inaccurate Response") == ("Wrong Entity", "Bad Inference")
    assert taxonomy.tier3_parent["Wrong Date"] == "Wrong Entity"
    assert taxonomy.parent["Wrong Entity"] == "Inaccurate Response"
    # a tier-3 label that repeats a tier-2 label does not re-parent the tier-2 label
    assert taxonomy.parent["Partial Answer"] == "Incomplete Response"
    assert taxonomy.tier3_parent["Partial Answer"] == "Bad Inference"
    assert "Inaccurate Response: Bad Inference" in taxonomy.tier2_lines()


def test_missing_taxonomy_is_one_line_naming_the_path(tmp_path, monkeypatch):
    monkeypatch.setenv("RAG_DATA_DIR", str(tmp_path))
    with pytest.raises(FileNotFoundError) as err:
        load_taxonomy()
    message = str(err.value)
    assert "\n" not in message and "rag_critic/all_tags_structure_final.json" in message and "RAG_DATA_DIR" in message


def test_labels_snap_to_the_nearest_valid_one_or_are_dropped(taxonomy):
    assert snap("wrong  entity.", taxonomy.tier2) == "Wrong Entity"
    assert snap("Inaccurate Respons", taxonomy.tier1) == "Inaccurate Response"
    assert snap("Banana", taxonomy.tier1) is None


@pytest.mark.parametrize("text, verdict", [("Correct", "Correct"), ("Error.", "Error"), ("incorrect", "Error"),
                                           ("The answer is not correct", "Error"), ("no errors", "Correct"),
                                           ("maybe", None), ("The answer is correct.", "Correct"),
                                           ("not entirely correct", "Error"), ("isn't fully correct", "Error"),
                                           ("isn\u2019t fully correct", "Error"), ("Partially correct", "Error"),
                                           ("Yes, there is an error", "Error"), ("Yes", None),
                                           ("the passages are correct but the answer is wrong", "Error"),
                                           ("It doesn\u2019t look correct", "Error"),
                                           ("Correct, no mistakes.", "Correct"),
                                           ("mostly correct", "Error"), ("No, there is an error.", "Error")])
def test_verdicts(text, verdict):
    assert parse_verdict(text) == verdict


def test_the_critic_labels_coarse_to_fine_among_each_tiers_children(taxonomy):
    lm = routed({CRITIC: ERROR, **LABELS})
    c = ErrorCritic(taxonomy=taxonomy)(question=Q, passages=[P["Blue Fox"]], prediction="Blue Fox",
                              reasoning="Blue Fox is the film in the first passage.")
    assert c.verdict == "Error" and c.flagged and "Blue Fox is the film in the first passage." in prompts(lm, CRITIC)[0]
    assert c.tier1 == ["Inaccurate Response", "Incomplete Information"] and (c.snapped, c.dropped) == (1, 1)
    tier2 = prompts(lm, T2)[0]                                  # only the chosen categories' error types
    assert all(t in tier2 for t in ("Wrong Entity", "Bad Inference", "Missing Evidence")) and "Rambling" not in tier2
    assert c.tier2 == ["Wrong Entity"]
    tier3 = prompts(lm, T3)[0]                                  # only the chosen type's labels; nothing propagates up
    assert "Confused Two People" in tier3 and "Second Hop Missing" not in tier3 and c.tier3 == ["Wrong Date"]


def test_a_correct_verdict_asks_for_no_labels_and_a_single_option_needs_no_call(taxonomy):
    lm = routed({CRITIC: CORRECT, **LABELS})
    critique = ErrorCritic(taxonomy=taxonomy)(question=Q, passages=[], prediction="Lyon")
    assert critique.tier1 == [] and len(lm.history) == 1
    lm = routed({CRITIC: ERROR, T1: {"picks": "Overly Verbose Response"}})
    c = ErrorCritic(taxonomy=taxonomy)(question=Q, passages=[], prediction="Lyon, which is a city in France, ...")
    assert (c.tier1, c.tier2, c.tier3) == (["Overly Verbose Response"], ["Rambling Answer"], ["Too Long"])
    assert len(lm.history) == 2                                 # verdict + tier 1; tiers 2 and 3 had one option


def test_an_unparsed_verdict_is_not_an_error_and_asks_for_no_labels(taxonomy):
    lm = routed({CRITIC: {"judgement": "Hard to say.", "analysis": "unclear"}, **LABELS})
    c = ErrorCritic(taxonomy=taxonomy)(question=Q, passages=[], prediction="Lyon")
    assert c.verdict is None and not c.flagged and c.tier1 == [] and len(lm.history) == 1


def test_labels_with_commas_and_colons_stay_whole_and_tier3_is_shortlisted_by_similarity():
    from programs.rag_critic.taxonomy import Taxonomy

    labels = ["Misreading dates, names or numbers", "Ratio: wrong units", *(f"Filler label {i}" for i in range(12))]
    tax = Taxonomy.from_entries([{"idx": 0, "tag1": "Inaccurate Response", "tag2": "Wrong Entity", "tag3": labels},
                                 {"idx": 1, "tag1": "Off-Topic Response", "tag2": "Other", "tag3": ["X"]}])
    lm = routed({CRITIC: {"judgement": "Error", "analysis": "It misreads the dates and names in the passage."},
                 T1: {"picks": "1"}, T3: {"picks": "Misreading dates, names or numbers\nRatio: wrong units"}})
    c = ErrorCritic(taxonomy=tax, shortlist=4)(question=Q, passages=[], prediction="1931")
    assert c.tier3 == ["Misreading dates, names or numbers", "Ratio: wrong units"] and c.dropped == 0
    assert "Misreading dates, names or numbers" in prompts(lm, T3)[0]
    assert sum(f"Filler label {i}" in prompts(lm, T3)[0] for i in range(12)) == 2   # 4 of the 14 shown


# --- plans ----------------------------------------------------------------------------------------------------

def test_a_plan_with_references_parses_into_typed_steps():
    text = """Here is the plan:
```python
qs = RewriteQuery(query=question, instruction="expand")
found = Retrieval(qs[0], topk=50)
RefineDoc(question, 0, "delete")
answer = GenerateAnswer(query=question, docs=[found, documents], additional_instruction="Name a city.")
```"""
    plan, truncated = parse_plan(text)
    assert [s.call.function for s in plan.steps] == ["RewriteQuery", "Retrieval", "RefineDoc", "GenerateAnswer"]
    assert plan.steps[1].call.query.name == "qs" and plan.steps[1].call.query.index == 0
    assert plan.steps[1].call.topk == 10                                            # clamped to MAX_TOPK
    assert plan.steps[2].call.instruction == "delete" and not truncated
    assert plan.lines()[1] == "found = Retrieval(query=qs[0], topk=10)"


@pytest.mark.parametrize("text, reason", [
    ("x = Search(query=question)", "unknown function Search"),
    ("x = Retrieval(query=question, k=3)", "unknown argument k of Retrieval"),
    ("x = RewriteQuery(query=question, instruction='shorten')", "instruction"),
    ("x = Retrieval(query=later, topk=3)\nlater = DecomposeQuery(question)", "'later' is used before it is assigned"),
    ("x = GenerateAnswer(query=question, docs=question)", "docs=question passes text"),
    ("x = Retrieval(query=question, topk='many')", "topk"),
    ("import os\nos.system('rm -rf /')", "only 'name = Function(...)' lines"),
    ("x = Retrieval(query=__import__('os').system('ls'))", "only quoted strings, integers and names"),
    ("x = Retrieval(query=question + ' film')", "only quoted strings, integers and names"),
    ("I would search again.", "no function calls"),
])
def test_invalid_plans_are_rejected_with_a_reason(text, reason):
    with pytest.raises(PlanError, match=reason.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        parse_plan(text)


def test_plans_are_cut_at_the_step_cap():
    plan, truncated = parse_plan("\n".join(f"q{i} = DecomposeQuery(question)" for i in range(8)), max_steps=3)
    assert len(plan.steps) == 3 and truncated


def test_a_cut_plan_keeps_its_final_answer_step_and_its_instruction():
    text = ("q0 = DecomposeQuery(question)\nq1 = DecomposeQuery(question)\nfound = Retrieval(query=q1[0])\n"
            "answer = GenerateAnswer(query=question, docs=found, additional_instruction='Name a city.')")
    plan, truncated = parse_plan(text, max_steps=3)
    assert truncated and [s.call.function for s in plan.steps] == ["DecomposeQuery", "DecomposeQuery",
                                                                   "GenerateAnswer"]
    answer = plan.steps[-1].call
    assert answer.additional_instruction == "Name a city." and answer.docs is None  # 'found' was cut: all evidence


def test_the_fallback_parser_keeps_continuation_lines_of_a_multi_line_call():
    text = """I will search for the director first.
found = Retrieval(query="Blue Fox director",
                  topk=2)
Then I answer (with care):
answer = GenerateAnswer(query=question,
    docs=[found, documents],
    additional_instruction="Name a city.")
This should fix it."""
    plan, _ = parse_plan(text)
    assert plan.lines() == ["found = Retrieval(query='Blue Fox director', topk=2)",
                            "answer = GenerateAnswer(query=question, docs=[found, documents], "
                            "additional_instruction='Name a city.')"]


# --- dispatcher -----------------------------------------------------------------------------------------------

def test_executor_runs_steps_in_order_and_resolves_references():
    search = ScriptedSearch({"Ana Berg birthplace": ("Ana Berg",)})
    lm = routed({REWRITE: {"queries": "Ana Berg birthplace\nBlue Fox director"},
                 INSTRUCTED: {"answer": "Lyon"}})
    plan, _ = parse_plan("qs = RewriteQuery(query=question, instruction='expand')\n"
                         "found = Retrieval(query=qs[0], topk=2)\n"
                         "a = GenerateAnswer(query=question, docs=found, additional_instruction='Name a city.')")
    out = executor(search)(plan=plan, question=Q, passages=[P["Blue Fox"], P["Red Owl"]])
    assert search.calls == [("Ana Berg birthplace", 2)]                            # the rewrite's first query
    assert out.answer == "Lyon" and [p.title for p in out.passages] == ["Ana Berg"]
    generate = prompts(lm, INSTRUCTED, WRITER)[0]
    assert "[Ana Berg]" in generate and "[Red Owl]" not in generate and "Name a city." in generate
    assert [s["function"] for s in out.steps] == ["RewriteQuery", "Retrieval", "GenerateAnswer"]
    assert all(s["ok"] for s in out.steps)


def test_a_rewritten_query_is_searched_without_the_format_text_the_lm_echoed():
    search = ScriptedSearch({"Ana Berg birthplace": ("Ana Berg",)})
    routed({REWRITE: {"queries": "Ana Berg birthplace # note: the value you produce must adhere "
                                 "to the JSON schema: {\"type\": \"string\"}\nBlue Fox director"},
            INSTRUCTED: {"answer": "Lyon"}})
    plan, _ = parse_plan("qs = RewriteQuery(query=question, instruction='expand')\n"
                         "found = Retrieval(query=qs, topk=2)\n"
                         "a = GenerateAnswer(query=question, docs=found, additional_instruction='Name a city.')")
    executor(search)(plan=plan, question=Q, passages=[P["Blue Fox"], P["Red Owl"]])
    assert [q for q, _ in search.calls] == ["Ana Berg birthplace", "Blue Fox director"]

def test_executor_edits_evidence_adds_a_final_answer_and_logs_bad_indices():
    lm = routed({REFINE: {"rewritten": "Blue Fox was directed by Ana Berg."}, WRITER: {"answer": "Ana Berg"}})
    plan, _ = parse_plan("RefineDoc(question, 1, 'delete')\nRefineDoc(question, 0, 'summarize')\n"
                         "RefineDoc(question, 7, 'explain')")
    out = executor(ScriptedSearch())(plan=plan, question=Q, passages=[P["Blue Fox"], P["Red Owl"]])
    assert [s["ok"] for s in out.steps] == [True, True, False, True] and "no document 7" in out.steps[2]["error"]
    assert out.steps[-1]["function"] == "GenerateAnswer" and out.steps[-1]["added"]
    assert [p.text for p in out.passages] == ["Blue Fox was directed by Ana Berg."]  # Red Owl deleted
    added = prompts(lm, WRITER)[0]  # the added answer has no instruction: the draft's request on the evidence
    assert "[Red Owl]" not in added and INSTRUCTED not in added and out.answer == "Ana Berg"


def test_a_name_left_unassigned_by_a_failed_step_is_a_step_error_and_the_fallback_answers():
    search = ScriptedSearch()
    lm = routed({REWRITE: {"nothing": "parseable"}, WRITER: {"answer": "Lyon"}})
    plan, _ = parse_plan("qs = RewriteQuery(query=question, instruction='expand')\n"
                         "found = Retrieval(query=qs[0], topk=2)\n"
                         "a = GenerateAnswer(query=question, docs=found, additional_instruction='Name a city.')")
    out = executor(search)(plan=plan, question=Q, passages=[P["Blue Fox"], P["Red Owl"]])
    assert [s["ok"] for s in out.steps] == [False, False, False, True] and search.calls == []
    assert "'qs' has no value" in out.steps[1]["error"] and "'found' has no value" in out.steps[2]["error"]
    assert out.steps[-1]["added"] and out.answer == "Lyon"                      # the fallback: all current evidence
    assert [p.title for p in out.passages] == ["Blue Fox", "Red Owl"]


def test_an_index_out_of_range_is_a_step_error_inside_the_program(taxonomy):
    plan = ("queries = DecomposeQuery(query=question)\nfound = Retrieval(query=queries[2], topk=2)\n"
            "answer = GenerateAnswer(query=question, docs=found, additional_instruction='x')")
    routed({CRITIC: ERROR, PLAN: {"plan": plan}, "`[[ ## sub_questions ## ]]`": {"sub_questions": "Who?\nWhere?"},
            INSTRUCTED: {"answer": "Lyon"}, WRITER: said("Blue Fox")})
    pred = build(taxonomy)(question=Q)
    assert pred.answer == "Blue Fox" and [s["ok"] for s in pred.steps] == [True, False, False, True]  # as drafted
    assert "queries[2] is out of range" in pred.steps[1]["error"]


def test_a_plan_adds_found_evidence_to_the_originals_and_refines_a_found_document():
    search = ScriptedSearch({"Ana Berg": ("Ana Berg", "Grey Elk")})
    lm = routed({REFINE: {"rewritten": "For example, Ana Berg was born in Lyon."}, INSTRUCTED: {"answer": "Lyon"}})
    # the grammar's own spelling of supplementary retrieval and of a RefineDoc on found documents
    plan, _ = parse_plan('found = Retrieval(query="Ana Berg", topk=2)\n'
                         'fixed = RefineDoc(query=question, doc_index=0, instruction="examples", docs=found)\n'
                         'answer = GenerateAnswer(query=question, docs=[documents, found], additional_instruction="x")')
    out = executor(search)(plan=plan, question=Q, passages=[P["Blue Fox"], P["Red Owl"]])
    assert all(s["ok"] for s in out.steps) and out.answer == "Lyon"
    assert [p.title for p in out.passages] == ["Blue Fox", "Red Owl", "Ana Berg", "Grey Elk"]   # originals + found
    assert out.passages[2].text == "For example, Ana Berg was born in Lyon."            # the found one, refined
    assert "concrete examples" in prompts(lm, REFINE)[0]
    value, rules = grammar(3)
    assert 'plan-docs1 ::= "documents" | "found" | "[documents, found]"' in rules
    assert '(", docs=found")?' in rules and '"examples"' in rules and '"refine"' in rules


def test_the_error_action_table_follows_the_papers_rows_in_the_plan_language():
    rows = {"Incomplete Information": ("RewriteQuery expand", "docs=[documents, found]", "RefineDoc refine"),
            "Irrelevant Information": ("Retrieval", "docs=found", "RefineDoc correct"),
            "Erroneous Information": ("RefineDoc correct", "GenerateAnswer"),
            "Incomplete Response": ("Retrieval", "docs=[documents, found]", "RefineDoc examples"),
            "Inaccurate Response": ("GenerateAnswer", "RefineDoc explain"),
            "Off-Topic Response": ("RewriteQuery clarify", "docs=found", "DecomposeQuery"),
            "Overly Verbose Response": ("RefineDoc refine", "without relying on the previous answer")}
    assert set(ERROR_ACTIONS) == set(rows)
    for category, actions in rows.items():
        assert all(a in ERROR_ACTIONS[category] for a in actions), category
    for instruction in re.findall(r"RefineDoc (\w+)", " ".join(ERROR_ACTIONS.values())):
        assert instruction in REFINE_OPTIONS and instruction in FUNCTIONS


# --- the program ----------------------------------------------------------------------------------------------

def build(taxonomy, search=None, **config):
    return RAGCritic(search or ScriptedSearch(), k=2, taxonomy=taxonomy, **config)


def test_correct_verdict_skips_planning_and_execution(taxonomy):
    lm = routed({CRITIC: CORRECT, PLAN: {"plan": "a = GenerateAnswer(question)"}, WRITER: said("Lyon")})
    pred = build(taxonomy)(question=Q)
    assert pred.answer == "Lyon" and pred.plan is None and pred.steps == []
    assert pred.trace["stop_reason"] == "critic_correct" and not pred.trace["flagged"]
    assert len(lm.history) == 2 and not prompts(lm, PLAN)                          # writer + critic only


def test_an_unparsed_verdict_is_counted_and_not_corrected(taxonomy):
    """Issue 61 item 2: the paper corrects on Error only."""
    lm = routed({CRITIC: {"judgement": "Hard to say.", "analysis": "unclear"}, **LABELS,
                 PLAN: {"plan": "answer = GenerateAnswer(question, documents)"}, INSTRUCTED: {"answer": "Paris"},
                 WRITER: said("Lyon")})
    pred = build(taxonomy)(question=Q)
    assert pred.answer == "Lyon" and pred.plan is None and not prompts(lm, PLAN) and len(lm.history) == 2
    assert pred.trace["stop_reason"] == "critic_unparsed" and pred.trace["unparsed_verdicts"] == 1
    assert not pred.trace["flagged"] and pred.critique["verdict"] is None


def test_flagged_answer_is_corrected_by_the_executed_plan(taxonomy):
    search = ScriptedSearch({"Ana Berg": ("Ana Berg",)})
    plan = ("found = Retrieval(query='Ana Berg birthplace', topk=1)\n"
            "answer = GenerateAnswer(question, [found, documents], 'Give the birthplace.')")
    lm = routed({CRITIC: ERROR, **LABELS, PLAN: {"plan": plan}, INSTRUCTED: {"answer": "Lyon"},
                 WRITER: said("Blue Fox")})
    pred = build(taxonomy, search)(question=Q)
    assert pred.answer == "Lyon" and pred.trace["flagged"] and pred.trace["plans_valid"] == 1
    assert [s["function"] for s in pred.steps] == ["Retrieval", "GenerateAnswer"]
    assert [p.title for p in pred.passages] == ["Ana Berg", "Blue Fox", "Red Owl"]
    assert pred.trace["queries"] == [Q, "Ana Berg birthplace"]
    assert pred.trace["plans_supplementary"] == 1 and pred.trace["plans_clean"] == 1  # originals + found, no error
    assert pred.tags["tier1"] == ["Inaccurate Response", "Incomplete Information"]
    assert pred.trace["labels_snapped"] == 1 and pred.trace["labels_dropped"] == 1
    planner_prompt = prompts(lm, PLAN)[0]
    assert "Incomplete Information: rewrite the query" in planner_prompt and "Off-Topic Response:" not in planner_prompt


@pytest.mark.parametrize("instruction, copied", [("what to fix in the Previous answer", 1),
                                                  ("Give the birthplace.", 0)])
def test_an_instruction_copied_from_the_form_example_is_read_as_none(taxonomy, instruction, copied):
    """The planner's example once told the writer "Name the person.": the 0.5B copied it into all 76 of its plans on
    2Wiki, and film questions were answered with their director. A copy of the example's instruction (by normalised
    text) is read as none and counted, and a GenerateAnswer without an instruction asks the writer as the draft did
    (the paper's None: its Prompt A as is); the planner's own instruction reaches the writer as written."""
    plan = f"answer = GenerateAnswer(query=question, docs=documents, additional_instruction='{instruction}')"
    lm = routed({CRITIC: ERROR, **LABELS, PLAN: {"plan": plan}, INSTRUCTED: {"answer": "Lyon"},
                 WRITER: said("Blue Fox")})
    pred = build(taxonomy)(question=Q)
    assert pred.trace["instructions_copied"] == copied and pred.answer == ("Blue Fox" if copied else "Lyon")
    draft, correction = prompts(lm, WRITER)
    assert (draft == correction) is bool(copied) and (instruction in correction) is not bool(copied)
    assert "What to fix in the previous answer." in prompts(lm, PLAN)[0]  # the example the planner reads


def test_invalid_plan_falls_back_to_one_answer_on_the_original_evidence(taxonomy):
    search = ScriptedSearch()
    lm = routed({CRITIC: ERROR, PLAN: {"plan": "x = Search(query=question)"}, INSTRUCTED: {"answer": "Lyon"},
                 WRITER: said("Blue Fox")})
    pred = build(taxonomy, search)(question=Q)
    assert pred.answer == "Lyon" and pred.trace["fallbacks"] == 1 and pred.trace["plans_valid"] == 0
    assert "unknown function Search" in pred.trace["rounds"][0]["plan_error"]
    assert [s["function"] for s in pred.steps] == ["GenerateAnswer"] and len(search.calls) == 1
    assert pred.trace["plans_supplementary"] == 0 and pred.trace["plans_clean"] == 0
    assert "It names the film" in prompts(lm, INSTRUCTED, WRITER)[0]                       # the critique guides it


def test_second_round_critiques_the_corrected_answer(taxonomy):
    lm = routed({CRITIC: Queue(ERROR, CORRECT), PLAN: {"plan": "a = GenerateAnswer(question, documents, 'City?')"},
                 INSTRUCTED: {"answer": "Lyon"}, WRITER: said("Blue Fox")})
    pred = build(taxonomy, rounds=2)(question=Q)
    assert pred.trace["iterations"] == 2 and pred.trace["stop_reason"] == "critic_correct"
    assert [r["answer_in"] for r in pred.trace["rounds"]] == ["Blue Fox", "Lyon"] and len(prompts(lm, CRITIC)) == 2


def test_critic_and_planner_predictors_take_their_role_lms(taxonomy):
    program = build(taxonomy)
    writer, critic, planner = DummyLM([]), DummyLM([]), DummyLM([])
    assign_roles(program, Roles(writer=writer, critic=critic, planner=planner))
    lms = {name: p.lm for name, p in program.named_predictors()}
    assert lms["critic.judge"] is critic and lms["critic.label"] is critic and lms["planner"] is planner
    assert lms["writer.short"] is writer and not any(name.startswith("executor.writer") for name in lms)


def test_registry_builds_rag_critic_and_self_refine(taxonomy):
    assert programs.build("rag_critic_2r", search=ScriptedSearch(), k=3, loops=9).rounds == 2
    assert isinstance(programs.build("self_refine", search=ScriptedSearch(), k=3), SelfRefine)


@pytest.mark.parametrize("lang", [None, "de"])
def test_each_method_drafts_with_its_single_pass_writer(taxonomy, lang):
    """Issue 61 item 3, issue 75 item 1: rag_critic and self_refine draft with rag's plain writer (the paper's
    generator answers directly), their _cot variants with rag_cot's; the question's language reaches each alike."""
    import json

    def first_request(name):
        lm = routed({CRITIC: CORRECT, FEEDBACK: {"verdict": "Correct", "feedback": "none"}, WRITER: said("Lyon")})
        programs.build(name, search=ScriptedSearch(), k=2)(question=Q, lang=lang)
        return json.dumps({key: lm.history[0][key] for key in ("messages", "kwargs")}, sort_keys=True)

    plain, cot = first_request("rag"), first_request("rag_cot")
    assert first_request("self_refine") == plain and first_request("rag_critic") == plain
    assert first_request("self_refine_cot") == cot and first_request("rag_critic_cot") == cot
    assert "[[ ## reasoning ## ]]" in cot and "[[ ## reasoning ## ]]" not in plain


def system(prompt_messages) -> str:
    """A request's system message without its field list: the writer's instructions."""
    return prompt_messages[0]["content"].split("In adhering to this structure, your objective is:")[-1]


@pytest.mark.parametrize("name, cot", [("rag_critic", False), ("rag_critic_cot", True), ("self_refine", False),
                                       ("self_refine_cot", True)])
def test_draft_and_corrections_come_from_one_writer(taxonomy, name, cot):
    """Issue 75 item 1: a correction (RAG-Critic's GenerateAnswer, Self-Refine's revision) is the draft's own
    writer told what to fix: the same predictor, instructions and chain-of-thought setting, so ``rag_critic``
    against ``rag`` (``_cot`` against ``rag_cot``) is the correction alone."""
    lm = routed({CRITIC: ERROR, **LABELS, PLAN: {"plan": "answer = GenerateAnswer(question, documents, 'City?')"},
                 FEEDBACK: Queue({"verdict": "Error", "feedback": "Give the birthplace."},
                                 {"verdict": "Correct", "feedback": "none"}),
                 INSTRUCTED: said("Lyon"), WRITER: said("Blue Fox")})
    program = programs.build(name, search=ScriptedSearch(), k=2)
    assert program(question=Q).answer == "Lyon"
    writes = [h["messages"] for h in lm.history if WRITER in h["messages"][-1]["content"]
              and CRITIC not in h["messages"][-1]["content"] and FEEDBACK not in h["messages"][-1]["content"]]
    draft, correction = writes[0], writes[-1]
    assert INSTRUCTED in correction[-1]["content"] and INSTRUCTED not in draft[-1]["content"]
    assert system(correction) == system(draft)  # one writer's instructions
    assert all(("[[ ## reasoning ## ]]" in w[0]["content"]) is cot for w in (draft, correction))
    assert [n for n, _ in program.named_predictors() if n.startswith(("writer", "executor.writer"))] == [
        "writer.short.predict" if cot else "writer.short", "writer.choice.predict" if cot else "writer.choice"]


# --- Self-Refine ----------------------------------------------------------------------------------------------

def test_self_refine_revises_on_its_own_feedback_and_stops_when_satisfied():
    lm = routed({FEEDBACK: Queue({"verdict": "Error", "feedback": "Give the birthplace."},
                                 {"verdict": "Correct", "feedback": "none"}),
                 REVISE: {"answer": "Lyon"}, WRITER: said("Blue Fox")})
    pred = SelfRefine(ScriptedSearch(), k=2, rounds=3)(question=Q)
    assert pred.answer == "Lyon" and pred.trace["stop_reason"] == "self_correct" and pred.trace["iterations"] == 2
    assert "Give the birthplace." in prompts(lm, REVISE)[0] and len(lm.history) == 4


def test_self_refine_runs_rounds_until_its_feedback_finds_no_error_within_the_budget():
    lm = routed({FEEDBACK: Queue({"verdict": "Error", "feedback": "Give the birthplace."},
                                 {"verdict": "It is not entirely correct", "feedback": "Name the city."},
                                 {"verdict": "Correct", "feedback": "none"}),
                 REVISE: Queue({"answer": "France"}, {"answer": "Lyon"}), WRITER: said("Blue Fox")})
    pred = SelfRefine(ScriptedSearch(), k=2)(question=Q)                                   # the default budget
    assert pred.answer == "Lyon" and pred.trace["stop_reason"] == "self_correct" and pred.trace["iterations"] == 3
    routed({FEEDBACK: {"verdict": "Error", "feedback": "Fix it."}, REVISE: {"answer": "Paris"},
            WRITER: said("Blue Fox")})
    pred = SelfRefine(ScriptedSearch(), k=2)(question=Q)
    assert pred.answer == "Paris" and pred.trace["stop_reason"] == "unchanged" and pred.trace["iterations"] == 2
    args = cli.parser("x").parse_args(["--program", "self_refine", "--rounds", "5"])
    config = Derived(args, "short").config
    assert programs.accepted_config("self_refine", config)["rounds"] == 5


def test_self_refine_does_not_revise_on_an_unparsed_verdict():
    """Issue 75 item 1: as RAG-Critic, Self-Refine revises on an Error only; a verdict it cannot read ends the
    round (it used to revise whenever the feedback text was there)."""
    lm = routed({FEEDBACK: {"verdict": "Hard to say", "feedback": "Name the city."}, REVISE: {"answer": "Lyon"},
                 WRITER: said("Blue Fox")})
    pred = SelfRefine(ScriptedSearch(), k=2)(question=Q)
    assert pred.answer == "Blue Fox" and pred.trace["stop_reason"] == "feedback_unparsed"
    assert not prompts(lm, REVISE) and pred.trace["rounds"][0]["verdict"] is None


def test_self_refine_on_multiple_choice_makes_no_feedback_call():
    lm = routed({FEEDBACK: {"verdict": "Error", "feedback": "x"}, WRITER: said("A")})
    pred = SelfRefine(ScriptedSearch(), k=2)(question=Q, options={"A": "Lyon", "B": "Paris"})
    assert pred.answer == "A" and not prompts(lm, FEEDBACK) and pred.trace["stop_reason"] == "multiple_choice"


# --- error profile --------------------------------------------------------------------------------------------

def records():
    passages = [{"id": p.id, "title": p.title, "score": p.score} for p in (P["Blue Fox"], P["Red Owl"])]
    return [{"id": "a", "question": Q, "answer": "Blue Fox", "gold": ["Lyon"], "f1": 0.0, "failed": False,
             "passages": passages},
            {"id": "b", "question": Q, "answer": "Lyon", "gold": ["Lyon"], "f1": 1.0, "failed": False,
             "passages": passages},
            {"id": "c", "question": Q, "answer": None, "gold": ["Lyon"], "f1": 0.0, "failed": True, "passages": []}]


def test_error_profile_counts_labels_of_wrong_answers_only(taxonomy, tmp_path):
    lm = routed({CRITIC: ERROR, **LABELS})
    recs = records()
    lookup = {p.id: p for p in P.values()}
    result = ep.profile(recs, ErrorCritic(taxonomy=taxonomy), lookup)
    assert result["n_wrong"] == 1 and len(lm.history) == 4                        # verdict + one call per tier
    assert "[Red Owl]" in lm.history[0]["messages"][-1]["content"]                 # evidence rebuilt from ids
    assert result["tier1"] == {"Incomplete Information": 1, "Inaccurate Response": 1}
    md = ep.table(result, taxonomy)
    assert "| **Inaccurate Response** | | 1 | 1.00 |" in md and "| | Wrong Entity | 1 | 1.00 |" in md
    assert "model-made" in md
    ep.chart(result, taxonomy).savefig(tmp_path / "c.png")
    assert (tmp_path / "c.png").stat().st_size > 0


def test_error_profile_counts_an_unparsed_verdict_as_unparsed_not_as_flagged_without_a_label(taxonomy):
    routed({CRITIC: {"judgement": "Hard to say.", "analysis": "unclear"}, **LABELS})
    result = ep.profile(records(), ErrorCritic(taxonomy=taxonomy), {p.id: p for p in P.values()})
    assert (result["unparsed"], result["unlabelled"], result["critic_said_correct"]) == (1, 0, 0)
    assert not +result["tier1"] and not result["rows"][0]["tier1"]  # no labels asked for


def test_evaluate_error_profile_logs_table_and_chart(taxonomy, monkeypatch):
    lm = DummyLM({"`[[ ## judgement ## ]]`": ERROR, "`[[ ## picks ## ]]`": {"picks": "5"},
                  "question": {"answer": "Paris"}})
    monkeypatch.setattr(sessions, "make_lm", lambda *a, **k: lm)
    evaluate.main(["--program", "rag", "--dataset", "demo", "--dev", "2", "--k", "2", "--error-profile"])
    run = mlflow.search_runs(output_format="list")[0]
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(run.info.run_id, "error_profile")}
    assert artifacts == {"error_profile/table.md", "error_profile/chart.png", "error_profile/critiques.json"}
    assert run.data.metrics["error_profile_n_wrong"] == 2                          # "Paris" is wrong on both
    assert run.data.metrics["error_profile_tier1/Inaccurate_Response"] == 1.0


def test_compare_script_runs_the_suite_and_profiles_the_named_program(taxonomy, monkeypatch, capsys):
    import scripts.rag_critic_compare as rag_critic_compare

    lm = DummyLM({"`[[ ## judgement ## ]]`": ERROR, "`[[ ## picks ## ]]`": {"picks": "5"},
                  "question": {"answer": "Paris"}})
    monkeypatch.setattr(sessions, "make_lm", lambda *a, **k: lm)
    summaries = rag_critic_compare.main(["--dataset", "demo", "--train", "0", "--dev", "0", "--test", "2", "--k", "2",
                                         "--programs", "rag", "direct", "--error-profile"])
    assert set(summaries) == {"rag", "direct"} and summaries["rag"]["n"] == 2
    out = capsys.readouterr().out
    assert "| demo | rag | direct | em | 2 |" in out and "### error profile of rag" in out
    runs = mlflow.search_runs(output_format="list")
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    assert parent.data.metrics["error_profile_n_wrong"] == 2 and len(runs) == 3
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(parent.info.run_id)}
    assert {"leaderboard.md", "report.md", "error_profile"} <= artifacts


def test_compare_script_counts_the_critics_confusion_against_the_judge_on_first_answers():
    from types import SimpleNamespace

    import scripts.rag_critic_compare as rag_critic_compare

    def rec(qid, first, verdict):
        return {"id": qid, "trace": {"rounds": [{"answer_in": first, "critique": {"verdict": verdict}}]}}
    examples = [dspy.Example(id=str(i), question=Q, answers=["Lyon"]).with_inputs("question") for i in range(6)]
    session = SimpleNamespace(splits=SimpleNamespace(train=[], dev=[], test=examples),
                              judge=lambda ex, pred: float(pred.answer == "Lyon"))
    recs = [rec("0", "Lyon", "Correct"), rec("1", "Paris", "Error"), rec("2", "Lyon", "Error"),
            rec("3", "Rome", "Correct"), {"id": "4", "trace": {}}, rec("5", "Rome", None)]  # unparsed: not acted on
    assert rag_critic_compare.judge_confusion(recs, session) == {"flagged_wrong": 1, "flagged_right": 1,
                                                                 "passed_wrong": 2, "passed_right": 1}


def test_error_profile_without_taxonomy_stops_before_evaluating(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RAG_DATA_DIR", str(tmp_path))
    monkeypatch.setattr(sessions, "make_lm", lambda *a, **k: DummyLM({"question": {"answer": "Paris"}}))
    with pytest.raises(SystemExit):
        evaluate.main(["--program", "rag", "--dataset", "demo", "--dev", "1", "--error-profile"])
    assert "rag_critic/all_tags_structure_final.json" in capsys.readouterr().err


# --- critic scores and the comparison script -----------------------------------------------------------------

def test_identification_is_balanced_over_both_classes():
    from evaluation.critic_scores import identification, tier1_agreement

    # 3 wrong answers (2 flagged), 1 right answer (flagged): error recall 2/3, correct recall 0
    ident = identification([True, True, False, True], [True, True, True, False])
    assert ident["error_recall"] == pytest.approx(2 / 3) and ident["correct_recall"] == 0.0
    assert ident["balanced_accuracy"] == pytest.approx(1 / 3) and ident["flagged_share"] == 0.75
    agree = tier1_agreement([["A", "B"], ["C"], []], [["B"], ["D"], ["A"]])
    assert agree == {"n_both_labelled": 2, "overlap": 0.5, "same_first": 0.0, "jaccard": 0.25}


def test_compare_script_reads_flags_plans_and_critic_accuracy_from_traces():
    import scripts.critic_eval as critic_eval
    import scripts.rag_critic_compare as rag_critic_compare

    def rec(first, verdict, valid, tier1=(), supplementary=0, copied=0):
        rounds = [{"answer_in": first, "passages_in": [], "critique": {"verdict": verdict, "tier1": list(tier1)}}]
        return {"id": first, "question": Q, "gold": "Lyon", "trace": {
            "flagged": verdict != "Correct", "plans": int(valid is not None), "plans_valid": int(bool(valid)),
            "plans_supplementary": supplementary, "plans_clean": int(bool(valid)), "instructions_copied": copied,
            "rounds": rounds}}
    recs = [rec("Lyon", "Correct", None), rec("Paris", "Error", True, ["Inaccurate Response"], copied=1),
            rec("Rome", "Error", False), rec("Lyon city", "Error", True, supplementary=1)]
    assert rag_critic_compare.behaviour(recs) == {"flagged": 0.75, "plans": 3, "plans_valid": pytest.approx(2 / 3),
                                                  "plans_supplementary": 1, "plans_clean": 2,
                                                  "instructions_copied": 1}
    ident = rag_critic_compare.critic_identification(recs)
    assert ident["error_recall"] == 1.0 and ident["correct_recall"] == 0.5 and ident["n_wrong"] == 2
    items = critic_eval.first_rounds(recs)
    reference = [{"verdict": "Error", "tier1": ["Inaccurate Response", "Off-Topic Response"]}] * 2
    text, metrics = critic_eval.report(items, reference, "0.5b", "1.5b")
    assert metrics["tier1_agreement_overlap"] == 1.0 and metrics["tier1_agreement_n_both_labelled"] == 1
    assert "model-made" in text


def test_multiple_choice_answers_go_through_the_letter_writer():
    lm = routed({"[[ ## options ## ]]": {"answer": "B"}})
    plan, _ = parse_plan("a = GenerateAnswer(question, documents, 'Pick the city.')")
    out = executor(ScriptedSearch())(plan=plan, question=Q, passages=[P["Ana Berg"]],
                                         options={"A": "Paris", "B": "Lyon"})
    assert out.answer == "B" and "B. Lyon" in prompts(lm, "[[ ## options ## ]]")[0]
