"""SEAL-RAG and its Self-RAG baseline: deterministic pieces directly, the loops on DummyLM with a scripted search."""
import json

import dspy
import pytest
from dspy.utils.dummies import DummyLM

import programs
from retrieval.corpus import Corpus, Passage
from retrieval.retriever import Retriever
from programs.shared.evidence import search_excluding
from programs.seal.seal import (SEAL, Gap, Ledger, clip, entity_first_rank, failed_criteria, occurs_verbatim, pivots,
                           triple_lines, verbatim_facts)
from programs.baselines.self_rag import SelfRAG, merge
from programs.shared.text import repeats
from runtime.roles import Roles, assign_roles
from tests.dummies import Queue, routed

# Made-up toy world (not benchmark text): the answer needs the film page, then its director's page.
TEXTS = {"Blue Fox": "Blue Fox is a 1931 silent film directed by Ana Berg.",
         "Ana Berg": "Ana Berg was a film director born in Lyon.",
         "Red Owl": "Red Owl is a 1950 film about an owl.",
         "Green Cat": "Green Cat is a 1931 silent film about a cat.",
         "Grey Elk": "Grey Elk is a painting of an elk."}
P = {title: Passage(f"toy:{i}", title, text, corpus="toy", score=1.0 - i / 10)
     for i, (title, text) in enumerate(TEXTS.items())}
Q = "Where was the director of the film Blue Fox born?"


class ScriptedSearch:
    """Stands in for the Retriever: the first route whose key occurs in the query gives the hits (top-k)."""

    def __init__(self, routes: dict[str, list[str]], default=("Red Owl", "Green Cat", "Grey Elk")):
        self.routes, self.default, self.calls = routes, default, []

    def search(self, query, k, corpora=None):
        self.calls.append((query, k))
        titles = next((t for key, t in self.routes.items() if key.lower() in query.lower()), self.default)
        return [P[t] for t in titles][:k]




def extract(title):  # the extract prompt of one passage
    return f"[[ ## passage ## ]]\n[{title}]"


ASSESS, GAP, QUERY, ANSWER, CRITIC = ("`[[ ## coverage ## ]]`", "`[[ ## missing_entities ## ]]`", "`[[ ## query ## ]]`",
                                      "`[[ ## answer ## ]]`", "`[[ ## relevant ## ]]`")
INSUFFICIENT = {"coverage": "0.5", "bridge": "missing", "corroboration": "single_source", "answerability": "0.2",
                "sufficient": "False"}
SUFFICIENT = {"coverage": "1.0", "bridge": "linked", "corroboration": "corroborated", "answerability": "0.9",
              "sufficient": "True"}
FILM_FACTS = {"triples": '["Blue Fox | directed by | Ana Berg"]'}
BERG_FACTS = {"triples": '["Ana Berg | born in | Lyon"]'}
NO_FACTS = {"triples": "[]"}
GAP_BERG = {"missing_entities": '["Ana Berg"]', "missing_relations": '["birthplace"]'}


def calls(lm, key):
    return sum(key in h["messages"][-1]["content"] for h in lm.history)


# --- deterministic pieces -------------------------------------------------------------------------------------

def test_verbatim_filter_rejects_ungrounded_triples_and_caps_per_passage():
    p = P["Blue Fox"]
    lines = ["Blue Fox | directed by | Ana Berg",
             "blue  fox | is a | 1931",                 # case and spacing aside, verbatim; a relation of stopwords
             "Blue Fox | directed by | Bob Stone",     # tail not in the passage
             "Blue Fox | directed by | Ana Ber",       # not on a word boundary
             "He | made | Blue Fox",                   # no content word in the head
             "Blue Fox | Ana Berg",                    # malformed
             "Blue Fox | directed by | Ana Berg",      # duplicate
             "Blue Fox | is | silent film"]            # over the cap
    facts, rejected = verbatim_facts(lines, p, cap=2)
    assert [(f.head, f.relation, f.tail) for f in facts] == [("Blue Fox", "directed by", "Ana Berg"),
                                                           ("blue  fox", "is a", "1931")]
    assert rejected == 4 and {f.title for f in facts} == {"Blue Fox"}
    assert facts[0].span == TEXTS["Blue Fox"]  # the supporting sentence travels with the triple
    # the extractor writes text lines; bullets, numbering and a JSON list's punctuation are not part of a triple
    assert triple_lines('["Blue Fox | is | film", "x"]\n1. Ana Berg | born | Lyon\n- a | b | c\n\n') == [
        "Blue Fox | is | film", "x", "Ana Berg | born | Lyon", "a | b | c"]
    assert occurs_verbatim("ANA BERG", p.text) and not occurs_verbatim("Berg.", "Bergen")
    assert verbatim_facts([f"Blue Fox | fact {i} | 1931" for i in range(15)], p, cap=10) == ([], 15)  # no 'fact'
    relations = ["is", "was", "is a", "was a", "is the", "has", "had", "of", "in", "by", "on", "at", "for", "from",
                 "with"]  # 15 distinct relations without content words
    assert len(verbatim_facts([f"Blue Fox | {r} | 1931" for r in relations], p, cap=10)[0]) == 10


def test_verbatim_check_needs_relation_one_sentence_and_the_text_the_extractor_saw():
    city = Passage("w:1", "Ann Arbor", "Ann Arbor is a city in Michigan. Lansing is the state capital.", score=1.0)
    # the relation is checked: head and tail co-occur, but nothing says capital
    assert verbatim_facts(["Ann Arbor | capital of | Michigan"], city, 10) == ([], 1)
    assert [f.span for f in verbatim_facts(["Ann Arbor | city in | Michigan"], city, 10)[0]] == [
        "Ann Arbor is a city in Michigan."]
    # head and tail in different sentences are not a fact; the title may stand for the subject
    assert verbatim_facts(["Michigan | state capital | Lansing"], city, 10) == ([], 1)
    assert len(verbatim_facts(["Ann Arbor | state capital | Lansing"], city, 10)[0]) == 1
    # only the text the extractor was shown counts (max_chars cuts the passage)
    assert verbatim_facts(["Lansing | is the | state capital"], city, 10, max_chars=40) == ([], 1)
    assert len(verbatim_facts(["Lansing | is the | state capital"], city, 10, max_chars=600)[0]) == 1


def test_stuck_detection_and_pivots():
    assert repeats("Ana Berg birthplace", ["Where was Ana Berg born, birthplace?"], 0.7)  # 3/4 content words
    assert not repeats("Ana Berg birthplace", [Q], 0.7) and repeats("the of", [Q], 0.7)
    ledger = Ledger()
    ledger.add(verbatim_facts(["Blue Fox | directed by | Ana Berg"], P["Blue Fox"], 10)[0])
    assert ledger.linked(Q) == ["Blue Fox", "Ana Berg"]
    gap = Gap(("Ana Berg",), ("birthplace", "city"))
    assert pivots(gap, ledger.linked(Q), {"Blue Fox"}, Q) == ["Ana Berg birthplace city", "Ana Berg"]
    assert pivots(Gap(), ledger.linked(Q), {"Blue Fox", "Ana Berg"}, Q) == []  # bridge page already seen


def test_blocklist_excludes_fetched_passages_from_the_search_and_keeps_query_words():
    search = ScriptedSearch({"blue fox": ["Blue Fox", "Ana Berg", "Red Owl", "Green Cat"]})
    hits = search_excluding(search, "Blue Fox director birthplace", 2, {"toy:0", "toy:2"})
    assert [p.title for p in hits] == ["Ana Berg", "Green Cat"] and search.calls[-1][1] == 4  # over-fetched
    assert clip("University of Michigan  state capital", 12) == "University of Michigan state capital"
    assert clip("a b c d e", 3) == "a b c"


def verified(passage, *lines):
    """{passage id: the facts of ``lines`` that pass the verbatim check against it} (what SEAL ranks by)."""
    return {passage.id: verbatim_facts(list(lines), passage, 10)[0]}


def test_ranking_by_verified_facts_replaces_a_distractor_in_the_papers_bridge_case():
    """The paper's bridge case (own toy text): the university page is held with two distractors; the gap is the
    state's capital. The capital page must replace a distractor, although the held pages name more ledger anchors
    and are incumbents -- and the distractor whose text merely mentions "the state capital" (no verified fact
    states it) is the one that goes."""
    uni = Passage("m:0", "University of Michigan", "The University of Michigan is a public university in Ann Arbor, "
                  "Michigan.", score=0.9)
    rival = Passage("m:1", "Michigan State University", "Michigan State University is a public university in "
                    "Michigan, a short drive from the state capital.", score=0.8)
    arbor = Passage("m:2", "Ann Arbor, Michigan", "Ann Arbor is a city in Michigan, home of the University of "
                    "Michigan.", score=0.7)
    capital = Passage("m:3", "Lansing, Michigan", "Lansing is the capital of the U.S. state of Michigan.", score=0.2)
    facts = (verified(uni, "University of Michigan | public university in | Ann Arbor")
             | verified(rival, "Michigan State University | public university in | Michigan",
                        "Lansing | capital of | Michigan")  # not what this page says: rejected
             | verified(arbor, "Ann Arbor | city in | Michigan") | verified(capital, "Lansing | capital of | Michigan"))
    assert [len(f) for f in facts.values()] == [1, 1, 1, 1]
    gap = Gap(("Michigan",), ("state capital",))
    anchors = ["University of Michigan", "Ann Arbor", "Michigan"]
    ranked = entity_first_rank([uni, rival, arbor], [capital], facts, anchors, gap, k=3)
    assert ranked == [capital, uni, arbor]  # rival's text names the capital, its facts do not
    # with the gap's entity alone, which every page's facts name, the anchors and incumbency keep the held pages
    assert capital not in entity_first_rank([uni, rival, arbor], [capital], facts, anchors, Gap(("Michigan",)), k=3)
    # a newcomer whose facts could not be verified counts for nothing, whatever its text names
    assert capital not in entity_first_rank([uni, rival, arbor], [capital], {}, anchors, gap, k=3)


def test_entity_first_ranking_keeps_exactly_k_and_replaces_distractors():
    facts = {P[t].id: verbatim_facts([line], P[t], 10)[0] for t, line in [
        ("Blue Fox", "Blue Fox | directed by | Ana Berg"), ("Ana Berg", "Ana Berg | born in | Lyon"),
        ("Red Owl", "Red Owl | film about | owl"), ("Green Cat", "Green Cat | film about | cat")]}
    evidence = [P["Blue Fox"], P["Red Owl"], P["Green Cat"]]
    anchors, gap = ["Blue Fox", "Ana Berg"], Gap(("Ana Berg",), ("birthplace", "born"))
    ranked = entity_first_rank(evidence, [P["Grey Elk"], P["Ana Berg"]], facts, anchors, gap, k=3)
    assert [p.title for p in ranked] == ["Ana Berg", "Blue Fox", "Red Owl"]  # the weakest distractor goes
    one = entity_first_rank([P["Blue Fox"]], [P["Ana Berg"]], facts, anchors, gap, k=1)
    assert [p.title for p in one] == ["Ana Berg"]  # its facts state the missing relation too
    # nothing resolves the gap or anchors the ledger: incumbents stay, even against higher retrieval scores
    assert entity_first_rank([P["Grey Elk"]], [P["Red Owl"]], facts, [], Gap(), k=1) == [P["Grey Elk"]]
    assert len(entity_first_rank([P["Red Owl"]], [P["Ana Berg"], P["Grey Elk"], P["Red Owl"]], facts, anchors, gap,
                                 1)) == 1


def test_sufficiency_gate_needs_every_criterion():
    assert failed_criteria(dspy.Prediction(**{**SUFFICIENT, "coverage": 1.0, "answerability": 0.9,
                                             "sufficient": True}), 0.75, 0.7) == []
    bad = dspy.Prediction(coverage=0.5, bridge="missing", corroboration="contradicted", answerability=0.2,
                          sufficient=False)
    assert failed_criteria(bad, 0.75, 0.7) == ["coverage", "bridge", "contradiction", "answerability", "verdict"]


def test_single_source_evidence_is_not_sufficient():
    """The paper's gate counts corroborating sources against a threshold: key facts stated by one source alone fail
    the gate like a contradiction does, whatever the other criteria and the written verdict say."""
    alone = dspy.Prediction(**{**SUFFICIENT, "corroboration": "single_source", "coverage": 1.0, "answerability": 0.9,
                               "sufficient": True})
    assert failed_criteria(alone, 0.75, 0.7) == ["corroboration"]
    search = ScriptedSearch({"ana berg": ["Ana Berg"], Q: ["Blue Fox"]})
    lm = routed({ANSWER: {"answer": "Lyon [1]"}, extract("Blue Fox"): FILM_FACTS, extract("Ana Berg"): BERG_FACTS,
                 ASSESS: {**SUFFICIENT, "corroboration": "single_source"}, GAP: GAP_BERG,
                 QUERY: {"query": "Ana Berg birthplace"}})
    pred = SEAL(search, k=1, loops=1)(question=Q)
    assert pred.stop_reason == "loop_budget" and pred.loops_used == 1 and calls(lm, GAP) == 1  # repaired, not stopped
    assert pred.trace["assessments"][0]["failed"] == ["corroboration"]


# --- the SEAL loop on DummyLM ---------------------------------------------------------------------------------

def test_seal_repairs_the_bridge_by_replacing_the_passage_at_k1():
    search = ScriptedSearch({"ana berg": ["Ana Berg"], Q: ["Blue Fox"]})
    lm = routed({ANSWER: {"answer": "Lyon [1]"}, extract("Blue Fox"): FILM_FACTS, extract("Ana Berg"): BERG_FACTS,
                 "Ana Berg | born in | Lyon": SUFFICIENT, ASSESS: INSUFFICIENT, GAP: GAP_BERG,
                 QUERY: {"query": "Ana Berg birthplace"}})
    pred = SEAL(search, k=1, loops=3)(question=Q)
    assert pred.answer == "Lyon" and [p.title for p in pred.passages] == ["Ana Berg"]
    assert pred.queries == [Q, "Ana Berg birthplace"] and pred.loops_used == 1 and pred.stop_reason == "sufficient"
    assert pred.ledger == [{"head": "Blue Fox", "relation": "directed by", "tail": "Ana Berg", "title": "Blue Fox",
                            "span": TEXTS["Blue Fox"]},
                           {"head": "Ana Berg", "relation": "born in", "tail": "Lyon", "title": "Ana Berg",
                            "span": TEXTS["Ana Berg"]}]
    assert [k for _, k in search.calls] == [1, 2]  # the repair over-fetches by the one blocked passage
    assert pred.citations == ["toy:1"] and pred.trace["replaced"] == [1]
    assert [q for q, _ in search.calls] == [Q, "Ana Berg birthplace"]  # the anchor stays in the micro-query
    writer_prompt = lm.history[-1]["messages"][-1]["content"]
    assert "Blue Fox | directed by" not in writer_prompt and "[1] [Ana Berg]" in writer_prompt  # passages only
    assert len(lm.history) == 7  # extract, assess, gap, query, extract, assess, answer
    assert pred.trace["iterations"] == 1 and json.loads(json.dumps(pred.trace)) == pred.trace


def test_ledger_to_writer_shows_the_facts_of_replaced_passages():
    search = ScriptedSearch({"ana berg": ["Ana Berg"], Q: ["Blue Fox"]})
    lm = routed({ANSWER: {"answer": "Lyon [1]"}, extract("Blue Fox"): FILM_FACTS,
                 extract("Ana Berg"): BERG_FACTS, "Ana Berg | born in | Lyon": SUFFICIENT, ASSESS: INSUFFICIENT,
                 GAP: GAP_BERG, QUERY: {"query": "Ana Berg birthplace"}})
    pred = SEAL(search, k=1, loops=3, ledger_to_writer=True)(question=Q)
    assert pred.answer == "Lyon"
    assert "[Blue Fox] Blue Fox | directed by | Ana Berg" in lm.history[-1]["messages"][-1]["content"]


def test_loop_bound_zero_means_no_repair():
    search = ScriptedSearch({Q: ["Blue Fox", "Red Owl"]})
    lm = routed({extract("Blue Fox"): FILM_FACTS, extract("Red Owl"): NO_FACTS, ASSESS: INSUFFICIENT,
                 GAP: GAP_BERG, QUERY: {"query": "Ana Berg"}, ANSWER: {"answer": "I don't know"}})
    pred = SEAL(search, k=2, loops=0)(question=Q)
    assert pred.loops_used == 0 and pred.queries == [Q] and pred.stop_reason == "loop_budget"
    assert len(search.calls) == 1 and len(pred.passages) == 2
    assert len(lm.history) == 1 and pred.ledger == []  # the answer only: at L=0 seal is rag
    lm = routed({extract("Blue Fox"): FILM_FACTS, extract("Red Owl"): NO_FACTS, ANSWER: {"answer": "Ana Berg [1]"}})
    pred = SEAL(search, k=2, loops=0, ledger_to_writer=True)(question=Q)
    assert len(lm.history) == 3 and calls(lm, ASSESS) == calls(lm, QUERY) == 0  # 2 extractions + the answer
    assert len(pred.ledger) == 1 and "Blue Fox | directed by" in lm.history[-1]["messages"][-1]["content"]


@pytest.mark.parametrize("loops", [1, 2, 3])
def test_loop_bound_is_respected_and_k_never_grows(loops):
    titles = ["Ana Berg", "Red Owl", "Green Cat", "Grey Elk"]  # each repair targets (and admits) a new page
    search = ScriptedSearch({Q: ["Blue Fox"], **{t.lower(): [t] for t in titles}})
    lm = routed({ANSWER: {"answer": "Lyon [1]"}, extract("Blue Fox"): FILM_FACTS,
                 **{extract(t): {"triples": f'["{t} | is | {TEXTS[t].split()[-1].rstrip(".")}"]'} for t in titles},
                 ASSESS: INSUFFICIENT,
                 GAP: Queue(*({"missing_entities": f'["{t}"]', "missing_relations": "[]"} for t in titles)),
                 QUERY: Queue(*({"query": f"{t} facts"} for t in titles))})
    pred = SEAL(search, k=1, loops=loops)(question=Q)
    assert pred.loops_used == loops and pred.stop_reason == "loop_budget"
    assert pred.queries == [Q, *(f"{t} facts" for t in titles[:loops])] and len(search.calls) == loops + 1
    assert [p.title for p in pred.passages] == [titles[loops - 1]] and pred.trace["replaced"] == [1] * loops
    assert [k for _, k in search.calls] == [1 + i for i in range(loops + 1)]  # k plus the blocked passages
    assert calls(lm, QUERY) == calls(lm, ASSESS) == loops
    assert len(pred.ledger) == loops + 1  # every hit is read (its facts verified) before ranking, the last one too


def test_stuck_query_forces_a_pivot_and_stops_when_no_pivot_is_left():
    search = ScriptedSearch({"ana berg": ["Ana Berg"], Q: ["Blue Fox"]})
    lm = routed({extract("Blue Fox"): NO_FACTS, extract("Ana Berg"): NO_FACTS, GAP: GAP_BERG,
                 QUERY: {"query": "where was the director of the film Blue Fox born"}, ANSWER: {"answer": "Lyon [1]"}})
    pred = SEAL(search, k=1, loops=3)(question=Q)
    assert pred.queries == [Q, "Ana Berg birthplace"]  # the proposal repeated the question: pivot to the gap
    assert pred.trace["pivots"] == 1 and pred.stop_reason == "stuck" and pred.loops_used == 1
    assert pred.trace["assessments"] == [{"failed": ["no_facts"]}]  # no facts: no assess call
    assert calls(lm, ASSESS) == 0 and calls(lm, GAP) == 1  # unchanged facts are not re-assessed


def test_malformed_lm_output_is_counted_not_fatal():
    search = ScriptedSearch({Q: ["Blue Fox", "Red Owl"]})
    routed({extract("Blue Fox"): {"answer": "no triples field"}, extract("Red Owl"): {"triples": "Red Owl | is | owl"},
            ASSESS: {"coverage": "most"}, GAP: GAP_BERG, QUERY: {"query": "Ana Berg birthplace"},
            ANSWER: {"answer": "Lyon [1]"}})
    pred = SEAL(search, k=2, loops=1)(question=Q)
    # one extraction, the assessment, and the two repair hits read before ranking (no extraction scripted for them)
    assert pred.answer == "Lyon" and pred.trace["parse_failures"] == 4
    assert pred.ledger == [{"head": "Red Owl", "relation": "is", "tail": "owl", "title": "Red Owl",
                            "span": TEXTS["Red Owl"]}]
    assert pred.trace["assessments"][0]["failed"] == ["parse_failure"]


# --- the Self-RAG baseline ------------------------------------------------------------------------------------

GOOD = {"relevant": "True", "support": "full", "usefulness": "5", "next_query": "none"}
WEAK = {"relevant": "False", "support": "none", "usefulness": "1", "next_query": "Ana Berg birthplace"}


def test_self_rag_stops_when_the_critic_accepts():
    search = ScriptedSearch({Q: ["Blue Fox", "Ana Berg"]})
    lm = routed({CRITIC: GOOD, ANSWER: {"answer": "Lyon [1]"}})
    pred = SelfRAG(search, k=2, loops=3)(question=Q)
    assert pred.answer == "Lyon" and pred.stop_reason == "accepted" and pred.loops_used == 0
    assert len(lm.history) == 2 and len(pred.passages) == 2


@pytest.mark.parametrize("loops", [0, 1, 2])
def test_self_rag_loop_bound_and_best_draft(loops):
    search = ScriptedSearch({"ana berg": ["Ana Berg"], "red owl": ["Red Owl"], Q: ["Blue Fox"]})
    drafts = Queue({"answer": "Paris [1]"}, {"answer": "I don't know"},
                   {"answer": "Lyon [1]"})
    critiques = Queue({**WEAK, "relevant": "True", "support": "partial", "usefulness": "3"},
                      {**WEAK, "next_query": "Red Owl film"}, WEAK)
    lm = routed({CRITIC: critiques, ANSWER: drafts})
    pred = SelfRAG(search, k=1, loops=loops)(question=Q)
    assert pred.loops_used == loops and len(pred.queries) == loops + 1 == len(search.calls)
    assert pred.stop_reason == "loop_budget" and len(pred.passages) == 1
    assert len(lm.history) == (1 if loops == 0 else 2 * (loops + 1))
    assert pred.answer == "Paris" and pred.citations == ["toy:0"]  # round 0 graded best; a refusal never wins
    if loops:
        assert pred.queries[1] == "Ana Berg birthplace" and pred.trace["chosen_round"] == 0


def test_self_rag_does_not_repeat_a_query_and_stops_when_stuck():
    search = ScriptedSearch({"ana berg": ["Ana Berg"], Q: ["Blue Fox"]})
    critiques = Queue(WEAK, {**WEAK, "next_query": "Ana Berg birthplace?"}, WEAK)  # the same query again
    routed({CRITIC: critiques, ANSWER: Queue({"answer": "Paris [1]"},
                                             {"answer": "I don't know"})})
    pred = SelfRAG(search, k=1, loops=3)(question=Q)
    # the repeat falls back to the question with the draft, but the draft was a refusal: nothing new to ask
    assert pred.queries == [Q, "Ana Berg birthplace"] and pred.stop_reason == "stuck"
    assert len(search.calls) == 2


def test_self_rag_keeps_earlier_passages_within_k():
    search = ScriptedSearch({"ana berg": ["Blue Fox", "Ana Berg", "Green Cat"], Q: ["Blue Fox", "Red Owl", "Grey Elk"]})
    routed({CRITIC: WEAK, ANSWER: {"answer": "Paris [2]"}})
    pred = SelfRAG(search, k=3, loops=1)(question=Q)  # equal critiques: the later round's draft is chosen
    # two new passages (Blue Fox was held, so it is not fetched again) alternate with the held ones, back to k
    assert [p.title for p in pred.passages] == ["Ana Berg", "Blue Fox", "Green Cat"]
    assert pred.trace["chosen_round"] == 1 and pred.citations == ["toy:0"]
    assert [p.title for p in merge([P["Blue Fox"]], [P["Ana Berg"]], 1)] == ["Ana Berg"]
    # the re-query blocked the three held passages (over-fetching 3 + 3) and Blue Fox was not fetched twice
    assert search.calls[1] == ("Ana Berg birthplace", 6) and pred.trace["iterations"] == 1


def test_self_rag_critic_failure_falls_back_to_the_draft_conditioned_query():
    search = ScriptedSearch({Q: ["Blue Fox"]})
    routed({CRITIC: {"relevant": "perhaps"}, ANSWER: {"answer": "Lyon [1]"}})
    pred = SelfRAG(search, k=1, loops=1)(question=Q)
    assert pred.trace["parse_failures"] == 2 and pred.queries == [Q, f"{Q} Lyon"] and pred.answer == "Lyon"


# --- registry and roles ---------------------------------------------------------------------------------------

def test_registry_builds_both_and_binds_roles(embedder):
    retriever = Retriever([Corpus("toy", [{"id": str(i), "title": t, "text": x} for i, (t, x) in
                                          enumerate(TEXTS.items())])], embedder)
    assert programs.accepted_config("seal", {"k": 1, "loops": 2, "max_chars": 90}) == {"k": 1, "loops": 2,
                                                                                       "max_chars": 90}
    seal, self_rag = (programs.build(n, search=retriever, k=1, loops=2) for n in ("seal", "self_rag"))
    assert (seal.k, seal.loops, self_rag.k, self_rag.loops) == (1, 2, 1, 2)
    writer, planner, critic = DummyLM([{}]), DummyLM([{}]), DummyLM([{}])
    assign_roles(seal, Roles(writer=writer, planner=planner, critic=critic))
    assign_roles(self_rag, Roles(writer=writer, planner=planner, critic=critic))
    assert seal.extract.lm is critic and seal.assess.lm is critic
    assert seal.gap.lm is planner and seal.micro_query.lm is planner and seal.writer.short.lm is writer
    assert self_rag.critic.lm is critic and self_rag.writer.short.lm is writer


def test_seal_runs_over_the_real_retriever(embedder, dummy):
    retriever = Retriever([Corpus("toy", [{"id": str(i), "title": t, "text": x} for i, (t, x) in
                                          enumerate(TEXTS.items())])], embedder)
    dummy({"`[[ ## triples ## ]]`": NO_FACTS, GAP: GAP_BERG, QUERY: {"query": "Ana Berg birthplace"},
           ANSWER: {"answer": "Lyon [1]"}})
    pred = programs.build("seal", search=retriever, k=2, loops=1)(question=Q)
    assert pred.answer == "Lyon" and len(pred.passages) == 2 and pred.queries[-1] == "Ana Berg birthplace"


def test_gap_and_micro_query_prompts_see_the_blocked_terms():
    search = ScriptedSearch({"ana berg": ["Ana Berg"], Q: ["Blue Fox"]})
    lm = routed({ANSWER: {"answer": "Lyon [1]"}, extract("Blue Fox"): FILM_FACTS, extract("Ana Berg"): BERG_FACTS,
                 "Ana Berg | born in | Lyon": SUFFICIENT, ASSESS: INSUFFICIENT, GAP: GAP_BERG,
                 QUERY: {"query": "Ana Berg birthplace"}})
    SEAL(search, k=1, loops=3)(question=Q)
    for key in (GAP, QUERY):
        prompt = next(h for h in lm.history if key in h["messages"][-1]["content"])["messages"][-1]["content"]
        blocked = prompt.split("[[ ## blocked ## ]]")[1].split("[[ ##")[0]
        assert Q in blocked and "Blue Fox" in blocked  # the query issued and the title already fetched
