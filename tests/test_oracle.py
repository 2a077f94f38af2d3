"""Oracle roles (--oracle): each role reads only its own gold labels, no prompt carries a label, and the loops do what
the gold says -- CORAL and CRAG keep exactly the gold passages they retrieve, SEAL stops exactly when it holds them."""

import dspy
import pytest

import data
import programs
from experiments import cli
from experiments import sessions
from experiments.derived import Derived
from evaluation import loop as evaluation
from evaluation.metrics import accuracy, exact_match, gold_of
from experiments.suite import Cell, Entry, cell_name, plan, parser as suite_parser
from programs.coral.coral import CORAL, CORALConfig
from programs.baselines.crag import CRAG
from programs.shared.oracle import Gold, gold_labels
from programs.shared.writer import oracle_writers
from programs.par2.par2 import PAR2
from retrieval.corpus import Corpus, Passage
from retrieval.retriever import Retriever
from programs.seal.seal import SEAL
from programs.rag_critic.self_refine import SelfRefine
from runtime.roles import init_dspy
from scripts import ceiling
from tests.dummies import routed
from tests.test_coral import EN, ENOUGH, KO, OPTIONS, PLAN, QUESTION, REPLAN, SINGLE, WRITE
from tests.test_oracle_roles import NoCalls, sessions_config
from tests.test_seal import (ANSWER, ASSESS, BERG_FACTS, FILM_FACTS, GAP, GAP_BERG, INSUFFICIENT, NO_FACTS, QUERY,
                             SUFFICIENT, Q, ScriptedSearch, extract)

SECRET_TITLE, SECRET_ANSWER = "Secret Gold Title", "Zanzibar Broth"  # labels that no passage or input holds


def titles(passages):
    return [p.title for p in passages]


@pytest.fixture
def coral_search(embedder):
    return Retriever([Corpus("en", EN, "en"), Corpus("ko", KO, "ko")], embedder)


def test_an_oracle_role_reads_gold_only_for_the_role_it_names_and_no_prompt_holds_a_label(coral_search, monkeypatch):
    read = []

    class Spy(Gold):  # counts which role's labels the program reads
        def relevance(self, passage):
            read.append("relevance")
            return super().relevance(passage)

        def sufficiency(self, passages):
            read.append("sufficiency")
            return super().sufficiency(passages)

        def planner(self, held=()):
            read.append("planner")
            return super().planner(held)

        def verdict(self, answer):
            read.append("verdict")
            return super().verdict(answer)

    monkeypatch.setattr(evaluation, "gold_of", lambda ex: Spy(**vars(gold_of(ex))))
    lm = routed({PLAN: {"corpora": ["en", "ko"]}, ENOUGH: {"enough": False, "reason": "need more"},
                 REPLAN: {"corpora": ["ko"], "query": "seaweed soup birthday"}, WRITE: {"answer": "miyeokguk"}})
    example = dspy.Example(id="q1", question=QUESTION, lang="en", source_lang="ko", answer=SECRET_ANSWER,
                           answers=[SECRET_ANSWER], gold_titles=["미역국", SECRET_TITLE]).with_inputs("question", "lang")
    coral = CORAL(coral_search, CORALConfig(k=2, loops=2), oracle="relevance")
    records, _ = evaluation.evaluate(coral, [example], {"em": exact_match}, retries=0)
    assert not records[0]["failed"] and set(read) == {"relevance"}
    messages = [h["messages"][-1]["content"] for h in lm.history]
    assert not any(SINGLE in m for m in messages)   # the critic's relevance is the oracle's: no call
    assert any(ENOUGH in m for m in messages)       # sufficiency is still the model's
    assert not any(SECRET_TITLE in m or SECRET_ANSWER in m or "gold" in m.lower() for m in messages)
    assert [p["title"] for p in records[0]["passages"]] == ["미역국"]


def test_an_oracle_role_without_gold_labels_fails_loudly_and_a_program_refuses_a_role_it_lacks():
    routed({ANSWER: {"answer": "Lyon [1]"}})
    with pytest.raises(ValueError, match="--oracle relevance: no gold label"):
        CRAG(ScriptedSearch({Q: ["Blue Fox"]}), k=1, loops=0, oracle="relevance")(question=Q)
    with pytest.raises(ValueError, match="crag has no such decision; its oracle roles: relevance"):
        CRAG(ScriptedSearch({}), oracle="controller")
    with pytest.raises(ValueError, match="unknown --oracle role 'critic'"):
        SEAL(ScriptedSearch({}), oracle="critic")


def test_coral_under_oracle_relevance_keeps_every_gold_passage_it_retrieves_and_drops_the_others(coral_search):
    routed({PLAN: {"corpora": ["en", "ko"]}, ENOUGH: {"enough": True, "reason": "ok"}, WRITE: {"answer": "x"}})
    with gold_labels(Gold(frozenset({"미역국", "Birthdays", SECRET_TITLE}))):
        pred = CORAL(coral_search, CORALConfig(k=2, loops=1), oracle="relevance")(question=QUESTION, lang="en")
    assert sorted(titles(pred.passages)) == ["Birthdays", "미역국"]
    assert all(s["kept"] == (s["id"] in ("en:e1", "ko:k1")) for s in pred.trace["scores"][0])
    assert len(pred.trace["scores"][0]) == 4  # all four candidates were judged, two kept


def test_coral_under_oracle_sufficiency_and_planner_stops_when_the_gold_is_kept_in_the_cultures_corpus(coral_search):
    lm = routed({PLAN: {"corpora": ["en"]}, SINGLE: {"relevance": 5, "usefulness": 5, "specificity": 5,
                                                   "compatibility": 5, "critique": "ok"},
                 ENOUGH: {"enough": False, "reason": "no"}, WRITE: {"answer": "x"}})
    with gold_labels(Gold(frozenset({"미역국"}), culture="ko")):
        coral = CORAL(coral_search, CORALConfig(k=2, loops=3), oracle="sufficiency,planner")
        pred = coral(question=QUESTION, lang="en")
    assert pred.trace["corpora"] == [["ko"]] and pred.trace["stop_reason"] == "sufficient"  # the planner: not en
    messages = [h["messages"][-1]["content"] for h in lm.history]
    assert not any(PLAN in m or ENOUGH in m for m in messages)  # neither the planner nor sufficiency was asked


# XRAG's multilingual layout: gold in the culture's corpus (ko) and in English, gold passages by paragraph id
XRAG_MULTI = dspy.Example(id="x", question=QUESTION, lang="en", support_lang="ko", answer="miyeokguk",
                          answers=["miyeokguk"], supporting=["ko:k1", "en:e1"]).with_inputs("question", "lang")


def test_the_planner_oracle_names_the_corpora_of_the_gold_passages_not_yet_held(coral_search):
    """Issue 62 item 1: it named the culture's corpus alone, so with gold in two corpora the re-plan was the corpus
    already searched (no_change_possible) while the sufficiency oracle waited for the other."""
    gold = gold_of(XRAG_MULTI)
    k1, e1 = (coral_search.search(QUESTION, 2, [c]) for c in ("ko", "en"))
    k1, e1 = next(p for p in k1 if p.id == "ko:k1"), next(p for p in e1 if p.id == "en:e1")
    assert gold.planner([]) == ("ko", "en") and gold.planner([k1]) == ("en",)  # the culture's first
    assert gold.planner([k1, e1]) == ("ko",)  # every gold passage held: the culture's corpus
    blend = dspy.Example(question=QUESTION, source_lang="ko", answer="C", answers=["C"])  # gold by culture only
    assert gold_of(blend).planner([e1]) == ("ko",)
    def coral(**config):  # every role oracle, the writer's too (as programs.build wires it): no LM call
        program = programs.spec("coral").construct(search=coral_search, k=2, loops=3, oracle="all", **config)
        return oracle_writers(program, program.oracle)
    lm = routed({})
    with gold_labels(gold):  # one corpus a round: round 2 re-plans to the corpus still missing
        pred = coral(max_corpora=1)(question=QUESTION, lang="en")
    assert pred.trace["corpora"] == [["ko"], ["en"]] and pred.trace["stop_reason"] == "sufficient"
    assert sorted(p.id for p in pred.passages) == ["en:e1", "ko:k1"] and lm.history == []
    with gold_labels(gold):  # both corpora in round 1 where the planner may name them
        pred = coral()(question=QUESTION, lang="en")
    assert pred.trace["corpora"] == [["ko", "en"]] and pred.trace["stop_reason"] == "sufficient"


# BLEnD-like short answer (issue 62 item 2): answers only, no gold ids or titles
BLEND_LIKE = dspy.Example(id="b", question=QUESTION, lang="en", source_lang="ko", answer="seaweed soup",
                          answers=["seaweed soup", "miyeokguk"]).with_inputs("question", "lang")
HOLDS = Passage("ko:k1", "미역국", "Koreans eat seaweed soup miyeokguk on birthdays.")
WORD_ONLY = Passage("ko:k3", "Seaweed", "Seaweed is farmed along the coast.")  # "seaweed", not "seaweed soup"


def test_a_span_question_without_gold_passages_labels_relevance_and_sufficiency_by_the_writers_span_rule():
    gold = gold_of(BLEND_LIKE)
    assert not any(gold.missing(role) for role in ("relevance", "sufficiency", "controller"))
    assert gold.relevance(HOLDS) and not gold.relevance(WORD_ONLY)
    assert gold.sufficiency([WORD_ONLY, HOLDS]) and not gold.sufficiency([WORD_ONLY]) and not gold.sufficiency([])
    assert gold.controller([HOLDS]) and gold.relevance(HOLDS) == (gold.writer([HOLDS]) == "seaweed soup")
    mc = gold_of(dspy.Example(question=QUESTION, source_lang="ko", options=OPTIONS, answer="C", answers=["C"]))
    assert mc.relevance(HOLDS) and not mc.relevance(Passage("en:e3", "Pho", "Pho is a Vietnamese soup."))
    assert gold_of(dspy.Example(question=QUESTION, source_lang="ko")).missing("relevance")  # no answers: no label


def test_gold_ids_win_over_the_answer_span():
    stray = Passage("ko:k9", "Soups", "Koreans eat miyeokguk often.")  # holds the answer, not a supporting id
    assert not gold_of(XRAG_MULTI).relevance(stray) and not gold_of(XRAG_MULTI).sufficiency([stray])
    unsupported = XRAG_MULTI.copy(supporting=None)  # the same question without its supporting ids: the span rule
    assert gold_of(unsupported).relevance(stray) and gold_of(unsupported).sufficiency([stray])


def test_coral_all_oracle_runs_on_culture_questions_and_keeps_the_passage_holding_the_answer(embedder):
    bundle = data.load("demo_culture")
    assert ceiling.runs_on("coral", bundle.examples)  # the ceiling no longer skips CORAL there
    example = next(ex for ex in bundle.examples if ex.id == "cu-en-01")  # C: "Roast turkey"
    program = programs.build("coral", search=Retriever(bundle.corpora, embedder), **sessions_config("coral"))
    lm = NoCalls()
    init_dspy(lm, cache=False)
    records, _ = evaluation.evaluate(program, [example], {"accuracy": accuracy}, retries=0)
    texts = {f"{c.name}:{d['id']}": d["text"] for c in bundle.corpora for d in c.docs}
    kept = [texts[p["id"]] for p in records[0]["passages"]]
    assert not records[0]["failed"] and lm.prompts == [] and records[0]["answer"] == "C"
    assert kept and all("roast turkey" in t.lower() for t in kept)


def test_crag_under_oracle_relevance_keeps_exactly_the_gold_passages_it_retrieves():
    lm = routed({ANSWER: {"answer": "Lyon [1]"}, QUERY: {"query": "Ana Berg birthplace"}})
    search = ScriptedSearch({Q: ["Blue Fox", "Red Owl", "Green Cat"]})
    with gold_labels(Gold(frozenset({"Blue Fox", "Green Cat", SECRET_TITLE}))):
        pred = CRAG(search, k=3, loops=1, oracle="relevance")(question=Q)
    assert titles(pred.passages) == ["Blue Fox", "Green Cat"] and pred.trace["actions"] == ["correct"]
    assert all(SECRET_TITLE not in h["messages"][-1]["content"] for h in lm.history) and len(lm.history) == 1
    # no gold among the first hits: everything is dropped, the rewritten query's gold hit is what is kept
    search = ScriptedSearch({Q: ["Red Owl", "Grey Elk"], "ana berg": ["Ana Berg", "Green Cat"]})
    with gold_labels(Gold(frozenset({"Ana Berg"}))):
        pred = CRAG(search, k=2, loops=1, oracle="relevance")(question=Q)
    assert titles(pred.passages) == ["Ana Berg"] and pred.trace["actions"] == ["incorrect", "correct"]


def seal_lm():
    return routed({extract("Blue Fox"): FILM_FACTS, extract("Ana Berg"): BERG_FACTS, extract("Red Owl"): NO_FACTS,
                   ASSESS: SUFFICIENT, GAP: GAP_BERG, QUERY: {"query": "Ana Berg"}, ANSWER: {"answer": "Lyon [1]"}})


def test_seal_under_oracle_sufficiency_stops_exactly_when_the_gold_passages_are_held():
    search = ScriptedSearch({Q: ["Blue Fox", "Red Owl"], "ana berg": ["Ana Berg"]})
    lm = seal_lm()  # the model would call the first facts sufficient
    with gold_labels(Gold(frozenset({"Blue Fox", "Ana Berg"}))):
        pred = SEAL(search, k=2, loops=3, oracle="sufficiency")(question=Q)
    assert pred.stop_reason == "sufficient" and pred.loops_used == 1
    assert sorted(titles(pred.passages)) == ["Ana Berg", "Blue Fox"]
    assert [a["oracle"] for a in pred.trace["assessments"]] == [False, True]
    assert not any(ASSESS in h["messages"][-1]["content"] for h in lm.history)  # the gate never asked the model
    seal_lm()
    with gold_labels(Gold(frozenset({"Blue Fox"}))):  # held from the start: no repair
        pred = SEAL(search, k=2, loops=3, oracle="sufficiency")(question=Q)
    assert pred.stop_reason == "sufficient" and pred.loops_used == 0


def test_seal_under_oracle_gap_repairs_from_the_gold_titles_it_lacks_without_asking_for_a_gap():
    # the model's gap would send the repair after Grey Elk; the oracle's is the gold title not held, Ana Berg
    search = ScriptedSearch({"ana berg": ["Ana Berg"], "grey elk": ["Grey Elk"], Q: ["Blue Fox", "Red Owl"]})
    lm = routed({extract("Blue Fox"): FILM_FACTS, extract("Ana Berg"): BERG_FACTS, extract("Red Owl"): NO_FACTS,
                 extract("Grey Elk"): NO_FACTS, ASSESS: INSUFFICIENT,
                 GAP: {"missing_entities": '["Grey Elk"]', "missing_relations": "[]"},
                 '["Ana Berg"]': {"query": "Ana Berg"}, QUERY: {"query": "Grey Elk"}, ANSWER: {"answer": "Lyon [1]"}})
    gold = Gold(frozenset({"Blue Fox", "Ana Berg"}), titles=frozenset({"Blue Fox", "Ana Berg"}))
    with gold_labels(gold):
        pred = SEAL(search, k=2, loops=2, oracle="sufficiency,gap")(question=Q)
    assert pred.trace["gaps"] == [{"entities": ["Ana Berg"], "relations": []}]
    assert pred.queries[1] == "Ana Berg" and sorted(titles(pred.passages)) == ["Ana Berg", "Blue Fox"]
    assert pred.stop_reason == "sufficient" and not any(GAP in h["messages"][-1]["content"] for h in lm.history)
    with pytest.raises(ValueError, match="--oracle gap: no gold label"):  # gold passages without titles
        with gold_labels(Gold(frozenset({"Blue Fox"}))):
            SEAL(search, k=2, loops=2, oracle="gap")(question=Q)


def test_par2_under_oracle_controller_stops_once_every_gold_passage_is_retrieved():
    from tests.test_par2 import ANSWER as WRITE_STEP, ESC, PLAN as SEARCHES, ROUTES, TWO_SEARCHES
    from tests.test_par2 import ScriptedSearch as Par2Search, said

    def run(gold):
        lm = routed({SEARCHES: TWO_SEARCHES, WRITE_STEP: said("Lyon"),
                     ESC: {"decision": "STOP", "next_query": "Green Cat film"}})  # the model would always stop
        with gold_labels(Gold(frozenset(gold))):
            pred = PAR2(Par2Search(ROUTES), k=2, loops=3, oracle="controller")(question=Q)
        return pred, sum(ESC in h["messages"][-1]["content"] for h in lm.history)

    pred, asked = run({"Ana Berg"})  # retrieved by the anchor: STOP without asking
    assert pred.trace["stop_reason"] == "esc_stop" and asked == 0
    pred, asked = run({"Green Cat"})  # not yet: the model's query is searched, then STOP
    assert [s.get("action") for s in pred.trace["steps"]] == ["CONTINUE", "STOP"] and asked == 1


def test_self_refine_under_oracle_verdict_stops_exactly_on_a_right_answer():
    from tests.test_rag_critic import FEEDBACK, REVISE, WRITER, ScriptedSearch as CriticSearch
    from tests.test_rag_critic import said

    def run(answers):
        lm = routed({FEEDBACK: {"verdict": "Correct", "feedback": "Name the city."}, REVISE: {"answer": "Lyon"},
                     WRITER: said("Blue Fox")})
        example = dspy.Example(question=Q, answers=answers)
        with gold_labels(Gold(correct=lambda answer: bool(exact_match(example, dspy.Prediction(answer=answer))))):
            pred = SelfRefine(CriticSearch(), k=2, oracle="verdict")(question=Q)
        return pred, sum(FEEDBACK in h["messages"][-1]["content"] for h in lm.history)

    pred, asked = run(["Blue Fox"])
    assert pred.answer == "Blue Fox" and pred.trace["stop_reason"] == "self_correct" and asked == 0
    pred, asked = run(["Lyon"])  # the model's "Correct" is overruled; its feedback revises the draft
    assert pred.answer == "Lyon" and asked == 1 and pred.trace["rounds"][0]["verdict"] == "Error"


def test_a_program_that_reads_the_culture_label_is_marked_as_an_oracle_row():
    """Issue 75 item 5: the C_own programs read a gold label in every run (the culture's language): they declare it
    in their registry spec, and their run names and rows carry it as an oracle mark, with any --oracle roles."""
    reads = {n for n in programs.names() if programs.gold_reads(n)}
    assert reads == {n for n, spec in programs.REGISTRY.items() if spec.fixed.get("scope") in ("own", "own_en")}
    assert reads == {"mono_rag", "own_en_rag", "coral_fixed_own", "coral_fixed_own_en"}
    assert sessions.oracle_suffix("", "mono_rag") == "+oracle:own" and sessions.oracle_suffix("", "multi_rag") == ""
    assert sessions.oracle_suffix("relevance", "coral_fixed_own") == "+oracle:relevance,own"
    cells, _ = plan((Entry("coral", ("mono_rag", "multi_rag", "own_en_rag"), ("blend",)),))
    assert [c.label for c in cells] == ["coral", "mono_rag+oracle:own", "multi_rag", "own_en_rag+oracle:own"]
    args = suite_parser("x").parse_args(["--suite", "coral,mono_rag"])
    s = sessions.Session(Derived(args, "mcq"), None, None, None, None, {}, None)
    assert cell_name(s, Cell("mono_rag", "blend", (), "compiled")) == "mono_rag_compiled+oracle:own"


def test_oracle_rows_are_marked_in_config_params_and_suite_labels_and_bad_roles_are_one_line(capsys):
    args = suite_parser("x").parse_args(["--suite", "crag,rag", "--oracle", "verdict, relevance"])
    examples = [dspy.Example(id="h1", question="q", answer="a", answers=["a"], gold_titles=["T"])]
    assert sessions.check_oracle(args, examples) == "relevance,verdict"
    args = args.replace(oracle="relevance,verdict", max_chars=600)
    s = Derived(args, "short")
    assert s.config["oracle"] == "relevance,verdict"  # in every checkpoint key of the run
    assert s.oracle("crag") == "relevance" and s.program_config("crag")["oracle"] == "relevance"
    assert s.oracle("rag") == "" and "oracle" not in s.program_config("rag")
    assert s.oracle("coral_fixed_own") == "relevance" and s.oracle("rag_critic") == "verdict"
    cells, pairs = plan((Entry("crag", ("rag",), ("hotpotqa",)),), oracle=args.oracle)
    assert [c.label for c in cells] == ["crag+oracle:relevance", "rag_k3"] and pairs[0][1] is cells[0]
    for argv, message in ((["--program", "crag", "--oracle", "controller"], "crag has no such decision"),
                          (["--program", "crag", "--oracle", "critic"], "unknown --oracle role 'critic'"),
                          (["--program", "coral", "--oracle", "planner"], "needs the culture's language")):
        with pytest.raises(SystemExit):
            sessions.check_oracle(cli.parser("x").parse_args(argv), examples)
        assert message in capsys.readouterr().err
    assert programs.oracle_roles("par2_anchor") == ("query", "writer") and programs.oracle_roles("coral") == (
        "relevance", "sufficiency", "planner", "query", "writer")
