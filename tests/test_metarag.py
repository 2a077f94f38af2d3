"""MetaRAG on DummyLM with a scripted search: the monitor ends the loop when the expert agrees, each check is asked
as the paper orders them, each outcome plans its fix (a search where the passages fall short), the round budget
holds, the checks read P(yes) under --decisions logprob, and a resting gate names what MetaRAG runs as."""
import math

import pytest
from dspy.utils.dummies import DummyLM

import programs
from programs.baselines.metarag import MetaRAG
from runtime.roles import init_dspy
from signatures.revise import REGULATION
from tests.dummies import Queue, routed
from tests.test_rag_critic import INSTRUCTED, WRITER, Q, ScriptedSearch, prompts, said

DRAFT = "`[[ ## reasoning ## ]]`"                     # the chain-of-thought writer (the regeneration: INSTRUCTED)
KNOWN, ENOUGH, FOLLOWS, QUERY = ("`[[ ## known ## ]]`", "`[[ ## enough ## ]]`", "`[[ ## follows ## ]]`",
                                 "`[[ ## query ## ]]`")
AGAIN = {"reasoning": "Ana Berg directed Blue Fox; she was born in Lyon.", "answer": "Lyon"}


def lm_for(expert="Paris", internal="yes", external="yes", follows="yes", again=AGAIN):
    """Routes in match order: the regeneration, the draft, the expert reader (the one answer without reasoning)."""
    return routed({INSTRUCTED: again, DRAFT: said("Blue Fox"),
                   WRITER: {"answer": expert} if isinstance(expert, str) else expert, KNOWN: {"known": internal},
                   ENOUGH: {"enough": external}, FOLLOWS: {"follows": follows}, QUERY: {"query": "Ana Berg birthplace"}})


def search():
    return ScriptedSearch({"ana berg": ("Blue Fox", "Ana Berg")})   # Blue Fox is held already


def expert_calls(lm):
    return [h for h in lm.history if WRITER in h["messages"][-1]["content"]
            and DRAFT not in h["messages"][-1]["content"]]


def test_an_expert_that_agrees_ends_the_loop_before_any_check():
    lm = lm_for(expert="Blue Fox film")                   # shares 2 of 3 content words with the draft
    pred = MetaRAG(search(), k=2)(question=Q)
    t = pred.trace
    assert pred.answer == "Blue Fox" and t["stop_reason"] == "monitor_satisfied" and t["iterations"] == 0
    assert t["rounds"][0]["similarity"] == pytest.approx(2 / 3) and not t["flagged"]
    assert not prompts(lm, KNOWN) and not prompts(lm, ENOUGH) and not prompts(lm, INSTRUCTED)
    assert DRAFT not in expert_calls(lm)[0]["messages"][-1]["content"]    # the expert does not reason
    lm_for(expert="Blue Fox film")
    assert MetaRAG(search(), k=2, monitor_threshold=0.7)(question=Q).trace["stop_reason"] == "round_budget"


@pytest.mark.parametrize("internal, external, follows, action, searched", [
    ("yes", "yes", "yes", "rethink", False),
    ("yes", "yes", "no", "multi_step", False),
    ("yes", "no", None, "own_knowledge", True),
    ("no", "yes", None, "passages_only", False),
    ("no", "no", None, "decompose", True),
    ("perhaps", "yes", None, "passages_only", False),   # an unreadable check counts as no
])
def test_each_outcome_of_the_checks_plans_its_fix(internal, external, follows, action, searched):
    lm = lm_for(internal=internal, external=external, follows=follows or "yes")
    s = search()
    pred = MetaRAG(s, k=2, rounds=1)(question=Q)
    step = pred.trace["rounds"][0]
    assert step["monitor"] == "unsatisfied" and pred.trace["flagged"] and step["action"] == action
    assert set(step["checks"]) == {"internal", "external", *(["consistency"] if follows else [])}
    assert len(prompts(lm, FOLLOWS)) == (follows is not None)        # asked only when both knowledge checks pass
    regenerated = prompts(lm, INSTRUCTED)[0]
    assert REGULATION[action] in regenerated and pred.answer == "Lyon" and step["answer_out"] == "Lyon"
    assert pred.trace["unparsed_verdicts"] == (internal == "perhaps") and pred.trace["stop_reason"] == "round_budget"
    if searched:                                      # what is missing is searched for, k passages not held yet added
        assert [q for q, _ in s.calls] == [Q, "Ana Berg birthplace"] and step["added"] == ["toy:2"]
        assert [p.title for p in pred.passages] == ["Blue Fox", "Red Owl", "Ana Berg"] == [p.title for p in
                                                                                          pred.retrieved]
        assert "born in Lyon" in regenerated and pred.trace["queries"] == [Q, "Ana Berg birthplace"]
    else:
        assert [q for q, _ in s.calls] == [Q] and not prompts(lm, QUERY) and "query" not in step


def test_the_loop_stops_at_its_round_budget_and_the_last_answer_is_not_monitored_again():
    lm = lm_for()
    pred = MetaRAG(search(), k=2, rounds=2)(question=Q)
    assert pred.trace["stop_reason"] == "round_budget" and pred.trace["iterations"] == 2
    assert len(expert_calls(lm)) == 2 and len(prompts(lm, INSTRUCTED)) == 2
    lm = lm_for(expert=Queue({"answer": "Paris"}, {"answer": "Lyon"}))   # agrees with the regenerated answer
    pred = MetaRAG(search(), k=2, rounds=3)(question=Q)
    assert pred.trace["stop_reason"] == "monitor_satisfied" and pred.trace["iterations"] == 1
    assert pred.answer == "Lyon" and len(expert_calls(lm)) == 2


def test_an_unreadable_expert_or_regeneration_is_not_acted_on():
    lm_for(expert=Queue({"verdict": "??"}))
    pred = MetaRAG(search(), k=2)(question=Q)
    assert pred.trace["stop_reason"] == "monitor_unparsed" and pred.trace["unparsed_verdicts"] == 1
    assert pred.answer == "Blue Fox"
    lm_for(again={"reasoning": "x", "answer": "  "})
    pred = MetaRAG(search(), k=2, rounds=1)(question=Q)
    assert pred.answer == "Blue Fox" and pred.trace["rounds"][0]["regenerated"] is False


def test_multiple_choice_is_answered_by_the_letter_writer_alone():
    lm = lm_for()
    pred = MetaRAG(search(), k=2)(question=Q, options={"A": "Lyon", "B": "Paris"})
    assert pred.trace["stop_reason"] == "multiple_choice" and not expert_calls(lm) and not prompts(lm, KNOWN)


CHECKS = {"Leave any documents aside": "known", "Taken together": "enough", "follow from the reasoning": "follows"}


class CheckLM(DummyLM):
    """Routed answers; a bare yes/no check (as ``decide`` asks one) gets the reply ``written`` and logprobs with
    P(yes) = ``p_yes[field]``."""

    def __init__(self, routes, p_yes, written="yes"):
        super().__init__({k: v if isinstance(v, Queue) else Queue(v) for k, v in routes.items()})
        self.p_yes, self.written = p_yes, written

    def __call__(self, prompt=None, messages=None, **kwargs):
        if not messages[-1]["content"].endswith("Answer with one word: yes or no."):
            return super().__call__(prompt=prompt, messages=messages, **kwargs)
        self.history.append({"messages": messages, "kwargs": kwargs})
        p = self.p_yes[next(f for key, f in CHECKS.items() if key in messages[0]["content"])]
        return [{"text": self.written, "logprobs": {"content": [
            {"token": self.written, "logprob": 0.0, "top_logprobs": [{"token": "yes", "logprob": math.log(p)},
                                                                     {"token": "no", "logprob": math.log(1 - p)}]}]}}]


def test_the_checks_read_p_yes_under_logprob_decisions():
    init_dspy(CheckLM({INSTRUCTED: AGAIN, DRAFT: said("Blue Fox"), WRITER: {"answer": "Paris"}},
                      {"known": 0.2, "enough": 0.9, "follows": 0.5}, written="no"), cache=False)
    pred = MetaRAG(search(), k=2, rounds=1, decisions="logprob")(question=Q)
    checks = pred.trace["rounds"][0]["checks"]
    assert checks["internal"] == {"label": "no", "p_yes": pytest.approx(0.2)}     # the written "no" is not used
    assert checks["external"] == {"label": "yes", "p_yes": pytest.approx(0.9)}
    assert pred.trace["rounds"][0]["action"] == "passages_only"


def test_a_resting_gate_says_what_metarag_runs_as():
    lm = lm_for()
    metarag = programs.build("metarag", search=search(), k=2, rounds=2, loops=7)
    assert isinstance(metarag, MetaRAG) and metarag.rounds == 2 and metarag.resting() is None
    metarag.knows_gate.thresholds["threshold"] = 0.0          # a fit that says yes to every internal check
    assert metarag.resting() == "internal at rest = metarag sure of its own knowledge"
    metarag.monitor_gate.thresholds["threshold"] = 0.0        # ... and passes every answer: nothing is regulated
    assert metarag.resting() == "monitor at rest = its chain-of-thought first draft"
    loaded = MetaRAG(search(), k=2, rounds=2)
    loaded.load_state(programs.portable_state(metarag))      # the fits travel with the compiled program
    assert loaded.resting() == metarag.resting() and loaded.knows_gate.thresholds == {"threshold": 0.0}
    pred = metarag(question=Q)
    assert pred.trace["stop_reason"] == "monitor_at_rest" and pred.trace["at_rest"] == 1 and not expert_calls(lm)
    with pytest.raises(ValueError, match="rounds >= 1"):
        MetaRAG(search(), rounds=0)
