"""PAR2-RAG, its ablations and its ReAct / IRCoT baselines on DummyLM with a scripted search."""
import dspy
import pytest
from dspy.utils.dummies import DummyLM

import programs
from programs.baselines.iterative import first_sentence
from programs.par2.par2 import controller_reply, esc_decision, interleave, plan_lines
from retrieval.corpus import Corpus, Passage
from retrieval.retriever import Retriever
from programs.shared.text import approx_tokens
from tests.dummies import Queue, routed
from tests.test_seal import P, Q, TEXTS  # the shared made-up toy world

PLAN, ESC, ANSWER, THOUGHT, REACT, EXTRACT = ("`[[ ## searches ## ]]`", "`[[ ## decision ## ]]`", "`[[ ## answer ## ]]`",
                                              "`[[ ## next_sentence ## ]]`", "`[[ ## next_thought ## ]]`",
                                              "`[[ ## reasoning ## ]]`")


class ScriptedSearch:
    """Stands in for the Retriever: the first route whose key occurs in the query gives the hits (top-k)."""

    def __init__(self, routes: dict[str, list[str]], default=("Red Owl", "Green Cat", "Grey Elk")):
        self.routes, self.default, self.calls = routes, default, []

    def search(self, query, k, corpora=None):
        self.calls.append(query)
        titles = next((t for key, t in self.routes.items() if key.lower() in query.lower()), self.default)
        return [P[t] for t in titles][:k]


class BatchSearch(ScriptedSearch):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.batches = []

    def search_many(self, queries, k, corpora=None):
        self.batches.append(list(queries))
        return [self.search(q, k) for q in queries]




def calls(lm, key):
    return sum(key in h["messages"][-1]["content"] for h in lm.history)


ROUTES = {"blue fox film": ["Blue Fox", "Red Owl"], "director": ["Ana Berg", "Blue Fox"],
          "ana berg": ["Ana Berg"], "where was": ["Red Owl", "Blue Fox"]}
TWO_SEARCHES = {"searches": "1. Blue Fox film | find the film\n- director of Blue Fox | the person to look up"}


def build(name, search, **config):
    return programs.build(name, search=search, search_rerank="none", **config)


def said(answer):
    """A PAR2 step response: the writer's reasoning and its short answer."""
    return {"reasoning": f"The passages lead to {answer}.", "answer": answer}


# --- parsing ------------------------------------------------------------------------------------------------------

def test_plan_lines_strip_bullets_split_reasons_drop_repeats_and_cap_m():
    text = '1. Blue Fox film | find the film\n- "director of Blue Fox"\nSearch 3: blue fox FILM | again\n\nthe | x\nC | d'
    assert [(s.query, s.reason) for s in plan_lines(text, 5)] == [
        ("Blue Fox film", "find the film"), ("director of Blue Fox", ""), ("C", "d")]
    assert [s.query for s in plan_lines(text, 1)] == ["Blue Fox film"]
    assert plan_lines("", 5) is None and plan_lines("the of\n - \n", 5) is None


def test_plan_lines_skip_preambles_echoed_format_lines_and_json_keys():
    text = """Here are 3 searches for the question:
search terms | why it is needed
```json
{
  "searches": [
    {"query": "Blue Fox film director", "reason": "Identify the director"},
    {
      "query": "Ana Berg birthplace",
      "reason": "Identify where she was born"
    }
  ]
}
```"""
    assert [s.query for s in plan_lines(text, 5)] == ["Blue Fox film director", "Ana Berg birthplace"]
    assert [s.query for s in plan_lines("Sure, here they are.\nSearches:\n1. Blue Fox | film", 5)] == ["Blue Fox"]


def test_esc_decision_is_a_closed_set():
    assert esc_decision("STOP") == "STOP" and esc_decision("continue.") == "CONTINUE"
    assert esc_decision("STOP or CONTINUE") is None and esc_decision("unstoppable") is None
    assert esc_decision("") is None


@pytest.mark.parametrize("text, decision", [("Don't continue", "STOP"), ("Don\u2019t CONTINUE.", "STOP"),
                                            ("do not continue; STOP", "STOP"), ("no need to continue", "STOP"),
                                            ("Do not stop", "CONTINUE"), ("CONTINUE, not stop", "CONTINUE")])
def test_a_negated_decision_is_the_other_one(text, decision):
    assert esc_decision(text) == decision


@pytest.mark.parametrize("text, decision", [
    ("It is not necessary to continue", "STOP"), ("We cannot continue.", "STOP"), ("Dont continue", "STOP"),
    ("Don\u2019t continue", "STOP"), ("[[ ## decision ## ]]\nDont continue", "STOP"),
    ("No need to continue.", "STOP"), ("Continue? No.", "STOP"), ("I don't think we should continue", "STOP"),
    ("There is no reason not to stop", "STOP"), ("No more search is needed - STOP", "STOP"),
    ("STOP or CONTINUE: STOP", "STOP"), ("[[ ## decision ## ]]\ncontinue", "CONTINUE"),
    ("We must continue", "CONTINUE"), ("Not enough evidence, continue", "CONTINUE"),
    ("I cannot stop yet", "CONTINUE"), ("The evidence is not sufficient so continue", "CONTINUE"),
    ("Continue? Yes.", "CONTINUE"), ("Unable to continue", "STOP"), ("I am unable to continue.", "STOP"),
    ("It is impossible to continue", "STOP"), ("It is unnecessary to continue", "STOP"),
    ("Needless to continue: STOP", "STOP"), ("It is pointless to continue", "STOP"), ("I refuse to continue", "STOP"),
    ("Unable to stop yet", "CONTINUE"), ("Not unable to continue", "CONTINUE")])
def test_the_controller_reads_what_a_phrasing_means(text, decision):
    """Issue 61 item 9: negations a word or more away, without an apostrophe, in "cannot", answered after a
    question mark; echoed headers and the echoed choice are not a decision; another clause's "not" is not. Issue 75
    item 9: "Unable to continue" and its relatives (impossible, unnecessary, needless, pointless, refuse) stop."""
    assert esc_decision(text) == decision


def test_interleave_takes_each_lists_best_first_and_keeps_each_passage_once():
    a, b, c = P["Blue Fox"], P["Red Owl"], P["Ana Berg"]
    assert interleave([[a, b], [c, a], [b]]) == [a, c, b]


# --- PAR2 ---------------------------------------------------------------------------------------------------------

def test_stop_ends_the_chain_after_one_write_and_the_anchor_is_deduplicated():
    lm = routed({PLAN: TWO_SEARCHES, ESC: {"decision": "STOP", "next_query": ""}, ANSWER: said("Lyon")})
    search = ScriptedSearch(ROUTES)
    pred = build("par2", search, k=2, loops=5)(question=Q)
    assert pred.answer == "Lyon" and search.calls == ["Blue Fox film", "director of Blue Fox"]
    assert [p.title for p in pred.passages] == ["Blue Fox", "Ana Berg", "Red Owl"]  # round robin, each once
    assert (calls(lm, PLAN), calls(lm, ANSWER), calls(lm, ESC)) == (1, 1, 1)
    assert pred.trace["stop_reason"] == "esc_stop" and pred.trace["iterations"] == 1
    assert pred.trace["plan"][1] == {"query": "director of Blue Fox", "reason": "the person to look up"}
    assert pred.trace["fallbacks"] == {"plan": 0, "esc": 0}


def test_the_hop_budget_caps_writes_and_each_continue_extends_the_context_at_t_equal_h_too():
    """Issue 75 item 7: as Algorithm 1, the controller is asked after the last write (t = H) too, and its CONTINUE
    there retrieves once more: C_{H+1} is held (scored as retrieved), the answer stays r_H."""
    esc = Queue({"decision": "CONTINUE", "next_query": "Ana Berg birthplace"},
                {"decision": "CONTINUE", "next_query": "Grey Elk painting"},
                {"decision": "CONTINUE", "next_query": "Green Cat"})
    lm = routed({PLAN: {"searches": "Blue Fox film | film"}, ESC: esc,
                 ANSWER: Queue(said("1931"), said("Ana Berg"), said("Lyon"))})
    search = ScriptedSearch({**ROUTES, "grey elk": ["Grey Elk"], "green cat": ["Green Cat"]})
    pred = build("par2", search, k=2, loops=3)(question=Q)
    assert (calls(lm, ANSWER), calls(lm, ESC)) == (3, 3)  # the last write is followed by a decision too
    assert pred.answer == "Lyon" and pred.trace["stop_reason"] == "loop_budget"
    assert search.calls == ["Blue Fox film", "Ana Berg birthplace", "Grey Elk painting", "Green Cat"]
    assert [s["answer"] for s in pred.trace["steps"]] == ["1931", "Ana Berg", "Lyon"]
    # the writer sees all of C_t, every search's best first; retrieval is scored on C_t by first retrieval
    assert [p.title for p in pred.passages] == ["Blue Fox", "Ana Berg", "Grey Elk", "Red Owl"]
    assert [p.title for p in pred.retrieved] == ["Blue Fox", "Red Owl", "Ana Berg", "Grey Elk", "Green Cat"]
    assert [s["context"] for s in pred.trace["steps"]] == [2, 3, 4] and pred.trace["continued"]


class ManySearch:
    """Distinct made-up passages for every query: '<query> #<rank>' (so no two searches share a passage)."""

    def __init__(self):
        self.calls = []

    def search(self, query, k, corpora=None):
        self.calls.append(query)
        return [Passage(f"toy:{query}:{i}", f"{query} #{i}", f"{query} fact {i}. " + "filler " * 40, corpus="toy")
                for i in range(1, k + 1)]


def prompts(lm, key):
    return [h["messages"][-1]["content"] for h in lm.history if key in h["messages"][-1]["content"]]


FIVE = {"searches": "\n".join(f"topic{i} | part {i}" for i in range(1, 6))}


def test_writer_and_controller_see_the_whole_anchor_and_every_continue_adds_to_it():
    lm = routed({PLAN: FIVE, ESC: Queue({"decision": "CONTINUE", "next_query": "bridge fact"},
                                        {"decision": "STOP", "next_query": ""}), ANSWER: said("Lyon")})
    pred = build("par2", ManySearch(), k=5, loops=5, subqueries=5, context_tokens=100_000)(question=Q)
    first, second = prompts(lm, ANSWER)
    assert all(f"[topic{i} #{r}]" in first for i in range(1, 6) for r in range(1, 6))      # all 25, not 8
    assert all(f"[topic{i} #{r}]" in second for i in range(1, 6) for r in range(1, 6)) and "[bridge fact #5]" in second
    assert all(f"[topic{i} #5]" in prompts(lm, ESC)[1] for i in range(1, 6))
    assert pred.trace["context_size"] == 30 and pred.trace["context_tokens"] == 100_000
    assert [s["shown"] for s in pred.trace["steps"]] == [25, 30]


def test_the_context_budget_drops_the_lowest_ranked_passages_of_every_search_first():
    lm = routed({PLAN: FIVE, ESC: Queue({"decision": "CONTINUE", "next_query": "bridge fact"},
                                        {"decision": "STOP", "next_query": ""}), ANSWER: said("Lyon")})
    per_passage = approx_tokens(ManySearch().search("topic1", 1)[0].format(600))
    pred = build("par2", ManySearch(), k=5, subqueries=5, context_tokens=8 * per_passage)(question=Q)
    second = prompts(lm, ANSWER)[1]
    assert all(f"[topic{i} #1]" in second for i in range(1, 6)) and "[bridge fact #1]" in second  # every search's best
    assert "[topic1 #3]" not in second and "[bridge fact #2]" not in second                   # ranks 3+ cut
    assert pred.trace["steps"][0]["shown"] == 8 and pred.trace["context_size"] == 30


def test_the_controller_judges_the_step_response_and_the_short_answer_is_scored():
    lm = routed({PLAN: TWO_SEARCHES, ESC: {"decision": "STOP", "next_query": ""},
                 ANSWER: {"reasoning": "Blue Fox was directed by Ana Berg, who was born in Lyon.", "answer": "Lyon"}})
    pred = build("par2", ScriptedSearch(ROUTES), k=2)(question=Q)
    assert pred.answer == "Lyon"
    assert "Blue Fox was directed by Ana Berg, who was born in Lyon. So the answer is: Lyon" in prompts(lm, ESC)[0]
    assert pred.trace["steps"][0]["response"].startswith("Blue Fox was directed by Ana Berg")


def test_a_search_that_adds_nothing_new_ends_the_chain():
    lm = routed({PLAN: TWO_SEARCHES, ESC: {"decision": "CONTINUE", "next_query": "Blue Fox film again"},
                 ANSWER: said("Lyon")})
    pred = build("par2", ScriptedSearch(ROUTES), k=2, loops=5)(question=Q)
    assert pred.trace["stop_reason"] == "no_new_evidence" and calls(lm, ANSWER) == 1


def test_unreadable_plan_is_retried_then_the_question_is_the_only_subquery():
    lm = routed({PLAN: {"searches": "the of\n-"}, ESC: {"decision": "STOP", "next_query": ""},
                 ANSWER: said("Lyon")})
    search = ScriptedSearch(ROUTES)
    pred = build("par2", search, k=2)(question=Q)
    assert calls(lm, PLAN) == 2 and search.calls == [Q]
    assert pred.trace["fallbacks"]["plan"] == 1 and pred.trace["parse_failures"] == 2
    assert pred.trace["plan"][0]["query"] == Q and pred.answer == "Lyon"


def test_unreadable_esc_is_retried_then_means_stop():
    lm = routed({PLAN: TWO_SEARCHES, ESC: Queue({"decision": "maybe", "next_query": "x"},
                                                 {"decision": "CONTINUE", "next_query": "the"}),
                 ANSWER: said("Lyon")})
    pred = build("par2", ScriptedSearch(ROUTES), k=2, loops=4)(question=Q)
    assert calls(lm, ESC) == 2 and calls(lm, ANSWER) == 1  # CONTINUE without a searchable query is unreadable
    assert pred.trace["fallbacks"] == {"plan": 0, "esc": 1} and pred.trace["stop_reason"] == "esc_stop"


def test_anchor_ablation_writes_once_and_chain_ablation_starts_from_the_question():
    lm = routed({PLAN: TWO_SEARCHES, ESC: {"decision": "STOP", "next_query": ""}, ANSWER: said("Lyon")})
    search = ScriptedSearch(ROUTES)
    pred = build("par2_anchor", search, k=2, loops=5)(question=Q)
    assert (calls(lm, PLAN), calls(lm, ANSWER), calls(lm, ESC)) == (1, 1, 0)
    assert pred.trace["stop_reason"] == "single_write" and len(search.calls) == 2

    lm = routed({PLAN: TWO_SEARCHES, ESC: Queue({"decision": "CONTINUE", "next_query": "Red Owl"},
                                                 {"decision": "STOP", "next_query": ""}),
                 ANSWER: said("Lyon")})
    search = ScriptedSearch(ROUTES)
    pred = build("par2_chain", search, k=2, loops=5)(question=Q)
    assert calls(lm, PLAN) == 0 and search.calls == [Q, "Red Owl"]
    assert pred.trace["plan"] == [] and (calls(lm, ANSWER), calls(lm, ESC)) == (2, 2)


def test_subqueries_go_to_search_many_in_one_batch_when_the_retriever_has_it():
    routed({PLAN: TWO_SEARCHES, ESC: {"decision": "STOP", "next_query": ""}, ANSWER: said("Lyon")})
    search = BatchSearch(ROUTES)
    build("par2", search, k=2)(question=Q)
    assert search.batches == [["Blue Fox film", "director of Blue Fox"]]


def test_par2_runs_on_the_real_retriever_with_the_embedding_reranker(embedder):
    docs = [{"id": str(i), "title": t, "text": x} for i, (t, x) in enumerate(TEXTS.items())]
    search = Retriever([Corpus("toy", docs)], embedder=embedder)
    lm = routed({PLAN: TWO_SEARCHES, ESC: {"decision": "STOP", "next_query": ""}, ANSWER: said("Lyon")})
    pred = programs.build("par2", search=search, k=2, search_depth=4, search_rerank="embed")(question=Q)
    assert pred.answer == "Lyon" and len({p.id for p in pred.passages}) == len(pred.passages) <= 4
    assert "Blue Fox" in [p.title for p in pred.passages] and calls(lm, ESC) == 1
    with pytest.raises(ValueError, match="loops, subqueries, k and context_tokens >= 1"):
        programs.build("par2", search=search, loops=0)


# --- baselines ----------------------------------------------------------------------------------------------------

def test_react_tool_calls_reach_the_retriever_and_their_hits_are_the_passages():
    lm = routed({REACT: Queue({"next_thought": "Find the director.", "next_tool_name": "search",
                               "next_tool_args": '{"query": "Blue Fox director"}'},
                              {"next_thought": "Done.", "next_tool_name": "finish", "next_tool_args": "{}"}),
                 EXTRACT: {"reasoning": "Ana Berg was born in Lyon.", "answer": "Lyon"}})
    search = ScriptedSearch(ROUTES)
    pred = programs.build("react", search=search, k=2, loops=4)(question=Q)
    assert search.calls == ["Blue Fox director"] and pred.answer == "Lyon"
    assert [p.title for p in pred.passages] == ["Ana Berg", "Blue Fox"]
    assert pred.trace["stop_reason"] == "finish" and pred.trace["queries"] == ["Blue Fox director"]
    assert calls(lm, REACT) == 2 and pred.trace["parse_failures"] == 0


def test_react_counts_tool_calls_whose_arguments_fail_the_schema():
    # what the 0.5B model does on MuSiQue: it copies the tool's argument schema instead of a query
    lm = routed({REACT: Queue({"next_thought": "Search.", "next_tool_name": "search",
                               "next_tool_args": '{"query": {"type": "string"}}'},
                              {"next_thought": "Find the director.", "next_tool_name": "search",
                               "next_tool_args": '{"query": "Blue Fox director"}'},
                              {"next_thought": "Done.", "next_tool_name": "finish", "next_tool_args": "{}"}),
                 EXTRACT: {"reasoning": "Ana Berg was born in Lyon.", "answer": "Lyon"}})
    search = ScriptedSearch(ROUTES)
    pred = programs.build("react", search=search, k=2, loops=4)(question=Q)
    assert search.calls == ["Blue Fox director"] and calls(lm, REACT) == 3
    assert pred.trace["tool_errors"] == 1 and pred.trace["parse_failures"] == 1


def test_react_respects_the_step_budget_and_an_unreadable_answer_falls_back_to_the_writer():
    lm = routed({REACT: {"next_thought": "Search.", "next_tool_name": "search", "next_tool_args": '{"query": "ana berg"}'},
                 EXTRACT: {"reasoning": "no answer field"}, ANSWER: {"answer": "Lyon"}})
    search = ScriptedSearch(ROUTES)
    pred = programs.build("react", search=search, k=2, loops=3)(question=Q)
    assert calls(lm, REACT) == 3 and search.calls == ["ana berg"] * 3
    assert pred.answer == "Lyon" and pred.trace["fallbacks"] == {"answer": 1}


def test_ircot_searches_each_thought_until_one_states_the_answer():
    lm = routed({THOUGHT: Queue({"next_sentence": "The Blue Fox film was made by Ana Berg. She was born in Lyon."},
                                {"next_sentence": "So the answer is: Lyon."}),
                 ANSWER: said("Lyon")})
    search = ScriptedSearch(ROUTES)
    pred = programs.build("ircot", search=search, k=2, loops=5)(question=Q)
    assert search.calls == [Q, "The Blue Fox film was made by Ana Berg."]  # one sentence is one query
    assert pred.trace["stop_reason"] == "answered" and pred.trace["iterations"] == 2
    assert pred.answer == "Lyon" and calls(lm, ANSWER) == 1
    assert [p.title for p in pred.passages] == ["Blue Fox", "Red Owl", "Ana Berg"]  # newest hits first
    assert [p.title for p in pred.retrieved] == ["Ana Berg", "Blue Fox", "Red Owl"]  # by first retrieval


@pytest.mark.parametrize("text, sentence", [
    ("The U.S. President in 1931 was Hoover. Next.", "The U.S. President in 1931 was Hoover."),
    ("Dr. Ana Berg directed it. She was born in Lyon.", "Dr. Ana Berg directed it."),
    ("J. R. R. Tolkien wrote it! Then more.", "J. R. R. Tolkien wrote it!"),
    ("So the answer is: U.S.", "So the answer is: U.S."), ("No period here", "No period here"),
    ('Ana Berg was born in Lyon # note: the value you produce must adhere to the JSON schema: {"type": "string"}',
     "Ana Berg was born in Lyon")])
def test_ircot_thoughts_are_not_cut_at_abbreviations(text, sentence):
    assert first_sentence(text) == sentence


def test_react_on_multiple_choice_records_the_agents_steps_and_no_parse_failure():
    lm = routed({REACT: Queue({"next_thought": "Find the director.", "next_tool_name": "search",
                               "next_tool_args": '{"query": "Blue Fox director"}'},
                              {"next_thought": "Done.", "next_tool_name": "finish", "next_tool_args": "{}"}),
                 EXTRACT: {"reasoning": "Ana Berg was born in Lyon.", "answer": "Lyon"}, ANSWER: {"answer": "A"}})
    pred = programs.build("react", search=ScriptedSearch(ROUTES), k=2, loops=4)(
        question=Q, options={"A": "Lyon", "B": "Paris"})
    assert pred.answer == "A" and pred.trace["stop_reason"] == "finish" and pred.trace["tools"] == ["search", "finish"]
    assert pred.trace["parse_failures"] == 0


def test_ircot_respects_the_budget_and_counts_unusable_thoughts():
    lm = routed({THOUGHT: Queue({"next_sentence": "I need the director."}, {"next_sentence": "Look for Ana Berg."},
                                {"next_sentence": "Still looking."}), ANSWER: said("Lyon")})
    search = ScriptedSearch(ROUTES)
    pred = programs.build("ircot", search=search, k=2, loops=3)(question=Q)
    assert calls(lm, THOUGHT) == 3 and len(search.calls) == 3  # the question, then 2 of the 3 thoughts
    assert pred.trace["stop_reason"] == "loop_budget"
    routed({THOUGHT: {"next_sentence": "..."}, ANSWER: said("Lyon")})
    pred = programs.build("ircot", search=ScriptedSearch(ROUTES), k=2, loops=3)(question=Q)
    assert pred.trace["fallbacks"] == {"thought": 1} and pred.trace["stop_reason"] == "unusable_thought"


def test_ircot_reads_with_par2s_chain_of_thought_writer_within_the_context_budget():
    """Issue 61 item 3: IRCoT's reader is PAR2's writer (not a plain one over at most 8 passages): everything
    collected, newest search first, cut to ``context_tokens``."""
    from programs.shared.writer import writer_form

    def thoughts():
        return Queue({"next_sentence": "First fact."}, {"next_sentence": "Second fact."}, {"next_sentence": "Third."})
    per_passage = approx_tokens(ManySearch().search("First fact.", 1)[0].format(600))
    lm = routed({THOUGHT: thoughts(), ANSWER: said("Lyon")})
    pred = programs.build("ircot", search=ManySearch(), k=5, loops=3, context_tokens=4 * per_passage)(question=Q)
    (read,) = [h for h in lm.history if ANSWER in h["messages"][-1]["content"]]
    assert "[[ ## reasoning ## ]]" in read["messages"][0]["content"]  # a chain of thought
    prompt = read["messages"][-1]["content"]
    assert all(f"[Second fact. #{r}]" in prompt for r in range(1, 5)) and "[Second fact. #5]" not in prompt
    assert "First fact." not in prompt and pred.trace["shown"] == 4 and pred.trace["context_size"] == 15
    lm = routed({THOUGHT: thoughts(), ANSWER: said("Lyon")})
    pred = programs.build("ircot", search=ManySearch(), k=5, loops=3, context_tokens=100_000)(question=Q)
    assert pred.trace["shown"] == 15 and prompts(lm, ANSWER)[0].count(" fact ") == 15  # not the thoughts' 8
    assert writer_form(programs.build("ircot", search=ManySearch())) == writer_form(build("par2", ManySearch()))


def test_reacts_writer_reads_what_later_searches_found_by_ircots_reader_rule():
    """Issue 62 item 3: ReAct's writer read the first 8 passages found, so a third search's hits (the second hop's
    paragraph) never reached it; now it reads as IRCoT's reader does: the newest search's hits first, within
    ``context_tokens``."""
    def agent():
        searches = ({"next_thought": "Search.", "next_tool_name": "search", "next_tool_args": f'{{"query": "{q}"}}'}
                    for q in ("first", "second", "gold hop"))
        return Queue(*searches, {"next_thought": "Done.", "next_tool_name": "finish", "next_tool_args": "{}"})
    unreadable = {"reasoning": "no answer field"}  # the agent's answer cannot be read: the writer answers
    lm = routed({REACT: agent(), EXTRACT: unreadable, ANSWER: {"answer": "Lyon"}})
    pred = programs.build("react", search=ManySearch(), k=5, loops=5)(question=Q)
    read = prompts(lm, ANSWER)[-1]  # the writer, after the agent's extract step
    assert all(f"[gold hop #{r}]" in read for r in range(1, 6)) and read.count(" fact ") == 15  # all 15, not 8
    assert pred.trace["shown"] == 15 and pred.trace["context_tokens"] == 3000
    per_passage = approx_tokens(ManySearch().search("gold hop", 1)[0].format(None))
    lm = routed({REACT: agent(), EXTRACT: unreadable, ANSWER: {"answer": "Lyon"}})
    pred = programs.build("react", search=ManySearch(), k=5, loops=5, context_tokens=4 * per_passage)(question=Q)
    read = prompts(lm, ANSWER)[-1]  # a budget that cuts keeps the newest search's best, as IRCoT's does
    assert all(f"[gold hop #{r}]" in read for r in range(1, 5)) and read.count(" fact ") == 4
    assert pred.trace["shown"] == 4 and pred.trace["context_size"] == 15


def test_ircot_and_react_take_par2s_budgets_unless_told_otherwise():
    par2 = programs.spec("par2").settings
    for name, keys in (("ircot", ("loops", "context_tokens")), ("react", ("loops", "context_tokens"))):
        taken = programs.accepted_config(name, {"loops": None, "context_tokens": None})
        assert taken == {key: par2[key].default for key in keys}
    # flare's reader reads by the same rule, within the same budget (its sentence budget is its own)
    flare = programs.accepted_config("flare", {"context_tokens": None})
    assert flare == {"context_tokens": par2["context_tokens"].default}
    assert programs.accepted_config("ircot", {"loops": 2, "context_tokens": 800}) == {"loops": 2, "context_tokens": 800}


# --- the comparison / step-budget script --------------------------------------------------------------------------

def test_paired_recall_test_against_par2():
    from experiments.suite import Cell, Result
    from scripts.par2_compare import paired

    ref = Result(Cell("par2", "d"), "run", {"n": 8, "recall_any": 1.0}, [{"id": str(i), "recall_any": 1.0}
                                                                           for i in range(8)])
    other = Result(Cell("rag", "d"), "run", {"n": 8, "recall_any": 0.5},
                   [{"id": str(i), "recall_any": float(i % 2), "trace": {"fallbacks": {"esc": 1}}} for i in range(8)])
    text, metrics = paired([ref, other], ref)
    # differences: four 0s and four 1s (mean 0.5, sd 0.535): t = 2.65 on 7 df, two-sided p = 0.033
    assert metrics["rag_vs_par2_ttest_recall_p"] == pytest.approx(0.0331, abs=1e-3)
    # one ESC fallback per question
    assert "| rag | 8 of 8 | 0.500 | - | - | - | - | - | - | 1.000 | 0 | 0.033 |" in text
    assert "| par2 | 8 of 8 | 1.000 | - | - | - | - | - | - | 0.000 | 0 | - |" in text


def test_compare_script_runs_programs_and_budgets_in_one_run(monkeypatch, capsys, embedder):
    import mlflow

    import scripts.par2_compare as compare
    from experiments import sessions

    lm = DummyLM({PLAN: {"searches": "Apple founders | who\nSteve Jobs | person"},
                  ESC: {"decision": "STOP", "next_query": ""}, THOUGHT: {"next_sentence": "So the answer is: Paris."},
                  ANSWER: {"reasoning": "Jobs founded Apple.", "answer": "Paris"}})
    monkeypatch.setattr(sessions, "make_lm", lambda *a, **k: lm)
    monkeypatch.setattr(sessions, "Retriever", lambda corpora, *a, **kw: Retriever(corpora, embedder=embedder))
    summaries = compare.main(["--dataset", "demo", "--train", "0", "--dev", "0", "--test", "2", "--k", "2",
                              "--loops", "2", "--programs", "rag", "par2", "--budgets", "2", "3",
                              "--budget-programs", "par2", "ircot"])
    assert set(summaries) == {"rag", "par2_L2", "ircot_L2", "par2_L3", "ircot_L3"}  # par2 at H=2 runs once
    out = capsys.readouterr().out
    assert "### programs at H=3" in out and "| ircot_L3 | 2 of 2 |" in out and "| McNemar |" in out
    run_id = out.strip().split()[-1]
    metrics = mlflow.get_run(run_id).data.metrics
    assert {"demo_par2_L3_vs_ircot_L3_mcnemar_p", "ircot_L3_vs_par2_L3_ttest_recall_p"} <= metrics.keys()
    children = mlflow.search_runs(filter_string=f"tags.mlflow.parentRunId = '{run_id}'", output_format="list")
    assert len(children) == 5 and all("test_recall_any" in c.data.metrics for c in children)


def test_an_esc_query_that_echoes_the_format_note_is_searched_without_it():
    """The 0.5B copies DSPy's type note after a field's value; the words of the note are not a search."""
    routed({PLAN: TWO_SEARCHES, ESC: Queue({"decision": "CONTINUE", "next_query": 'Ana Berg # note: the value you '
                                            'produce must adhere to the JSON schema: {"type": "string"}'},
                                           {"decision": "STOP", "next_query": ""}),
            ANSWER: said("Lyon")})
    search = ScriptedSearch(ROUTES)
    build("par2_chain", search, k=2, loops=5)(question=Q)
    assert search.calls == [Q, "Ana Berg"]


def test_the_react_search_tool_searches_without_the_format_note_the_agent_echoed():
    from programs.baselines.iterative import SearchTool

    search = ScriptedSearch(ROUTES)
    SearchTool(search, k=1, max_chars=None)('Ana Berg # note: the value you produce must adhere to the JSON schema: '
                                            '{"type": "string"}')
    assert search.calls == ["Ana Berg"]


@pytest.mark.parametrize("null", ["None", "N/A", "no further search needed"])
def test_a_continue_whose_next_query_says_none_is_unreadable_and_no_planned_query_is_none(null):
    assert controller_reply(dspy.Prediction(decision="CONTINUE", next_query=null)) is None
    assert controller_reply(dspy.Prediction(decision="CONTINUE", next_query="Ana Berg birthplace")) == "CONTINUE"
    assert controller_reply(dspy.Prediction(decision="STOP", next_query=null)) == "STOP"
    assert [s.query for s in plan_lines(f"1. {null}\n2. Ana Berg birthplace", 5)] == ["Ana Berg birthplace"]
