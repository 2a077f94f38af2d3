import json
import re

import dspy
import pytest
from dspy.utils.dummies import DummyLM

import programs
from programs.coral.coral import CORAL, CORALConfig, Rated, accumulate, best, same_plan, validate_corpora
from programs.coral.critics import passes
from programs.coral.mrag import corpus_of, scope_corpora
from retrieval.corpus import Corpus, Passage
from retrieval.retriever import Retriever
from runtime.roles import Roles, assign_roles

EN = [{"id": "e1", "title": "Birthdays", "text": "In many countries people eat cake on birthdays."},
      {"id": "e2", "title": "Football", "text": "Football is a popular sport worldwide."}]
KO = [{"id": "k1", "title": "미역국", "text": "Koreans eat seaweed soup miyeokguk on birthdays."},
      {"id": "k2", "title": "김치", "text": "Kimchi is served with most meals in Korea."}]
QUESTION = "What soup do Koreans eat on birthdays?"
OPTIONS = {"A": "Cake", "B": "Kimchi stew", "C": "Seaweed soup", "D": "Pho"}
LANGS = {"en": "en", "ko": "ko", "es": "es"}

# Header of an input field that only one signature has: routes a scripted answer to that signature.
PLAN, REPLAN, BATCH, SINGLE, ENOUGH, WRITE = ("[[ ## question_language ## ]]", "[[ ## previous_corpora ## ]]",
                                              "[[ ## candidates ## ]]", "[[ ## document ## ]]",
                                              "[[ ## evidence ## ]]", "[[ ## passages ## ]]")


class Queue:
    """Scripted answers for one signature, consumed in order; the last one repeats."""

    def __init__(self, *answers: dict):
        self.answers, self.used = list(answers), 0

    def items(self):
        self.used += 1
        return (self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]).items()


def rating(doc: int, *scores: int, critique: str = "ok") -> dict:
    return dict(zip(("doc", "relevance", "usefulness", "specificity", "compatibility"), (doc, *scores)),
                critique=critique)


def batched(*ratings: dict) -> dict:
    """The batched critic's answer: one 'n | rel | use | spec | comp | critique' line per rating."""
    return {"ratings": "\n".join(" | ".join(str(r[k]) for k in ("doc", "relevance", "usefulness", "specificity",
                                                                  "compatibility", "critique")) for r in ratings)}


@pytest.fixture
def search(embedder):
    return Retriever([Corpus("en", EN, "en"), Corpus("ko", KO, "ko")], embedder)


def scripted(dummy, **queues: Queue):
    headers = {"plan": PLAN, "replan": REPLAN, "batch": BATCH, "single": SINGLE, "enough": ENOUGH, "write": WRITE}
    return dummy({headers[name]: queue for name, queue in queues.items()})


# -- deterministic rules ------------------------------------------------------------------------------------------
def p(pid: str, corpus: str = "en") -> Passage:
    return Passage(f"{corpus}:{pid}", pid, "text", corpus, corpus)


def test_keep_rule_needs_every_score_and_the_weighted_total():
    assert Rated.of(p("a"), [3, 2, 2, 2]).total == 6.0 and passes(Rated.of(p("a"), [3, 2, 2, 2]))
    assert not passes(Rated.of(p("a"), [2, 2, 2, 2]))  # total 5 < 6
    assert not passes(Rated.of(p("a"), [5, 5, 5, 1]))  # one score below 2
    assert passes(Rated.of(p("a"), [2, 2, 2, 2]), min_each=1, min_total=5)
    clamped = Rated.of(p("a"), [9, -1, "4", "x"])
    assert clamped.scores == (5, 0, 4, 0)


def test_kept_documents_accumulate_once_each_with_their_best_score():
    kept = accumulate({}, [Rated.of(p("a"), [3, 2, 2, 2]), Rated.of(p("b"), [4, 4, 4, 4])])
    kept = accumulate(kept, [Rated.of(p("a"), [5, 5, 5, 5]), Rated.of(p("b"), [3, 3, 3, 3])])
    assert list(kept) == ["en:a", "en:b"] and kept["en:a"].total == 12.5 and kept["en:b"].total == 10.0
    assert [r.passage.id for r in best(list(kept.values()), 1)] == ["en:a"]


def test_planner_corpora_are_validated_against_the_pool():
    chosen, unknown = validate_corpora(["Korean", "xx", "ko: Korean", "es (Spanish)", "fr"], LANGS, 3)
    assert chosen == ["ko", "es"] and unknown == 2  # by code or name, duplicates folded, the planner's order
    assert validate_corpora(["ko", "es", "en"], LANGS, 2) == (["ko", "es"], 0)  # capped
    assert validate_corpora([], LANGS, 3) == ([], 0) and validate_corpora(["zz"], LANGS, 3) == ([], 1)  # none made up


def test_plans_that_differ_by_quotes_or_repetition_are_the_same_plan():
    assert same_plan(["ko", "en"], "Soup  in KOREA", ["en", "ko"], "soup in korea")
    assert same_plan(["en"], '"seaweed soup" “Korea”', ["en"], "seaweed soup Korea")
    assert same_plan(["en"], "seaweed soup seaweed soup seaweed soup", ["en"], "seaweed soup")
    assert not same_plan(["en"], "soup", ["en"], "birthday soup")
    assert not same_plan(["en", "ko"], "soup", ["en"], "soup")


def test_scopes_resolve_to_language_corpora(search):
    assert corpus_of(search, "ko") == "ko" and corpus_of(search, "fr") is None
    assert scope_corpora("own", search, "ko") == ["ko"] and scope_corpora("own_en", search, "ko") == ["ko", "en"]
    assert scope_corpora("all", search, "ko") == ["en", "ko"] and scope_corpora("own", search, "fr") == []


# -- the loop -----------------------------------------------------------------------------------------------------
def test_one_sufficient_round_costs_four_calls(dummy, search):
    lm = scripted(dummy, plan=Queue({"corpora": ["en", "ko", "Klingon"]}),
                  batch=Queue(batched(rating(1, 1, 1, 1, 1), rating(2, 5, 5, 4, 5, critique="says it"))),
                  enough=Queue({"enough": True, "reason": "direct answer"}), write=Queue({"answer": "C"}))
    pred = CORAL(search, CORALConfig(k=1, critic_batch=True))(question=QUESTION, options=OPTIONS, lang="en")
    t = pred.trace
    assert pred.answer == "C" and [x.id for x in pred.passages] == ["ko:k1"]
    assert t["iterations"] == 1 and t["corpora"] == [["en", "ko"]] and t["stop_reason"] == "sufficient"
    assert t["unknown_corpora"] == 1 and t["calls"] == {"planner": 1, "critic": 1, "sufficiency": 1, "writer": 1}
    assert t["critiques"] == [["ok", "says it"]] and [s["kept"] for s in t["scores"][0]] == [False, True]
    assert t["selected_langs"] == [["en", "ko"]] and t["evidence_langs"] == ["ko"]
    assert len(lm.history) == 4 and json.loads(json.dumps(t)) == t
    temperatures = [h["kwargs"].get("temperature") for h in lm.history]
    assert temperatures == [0.6, 0.6, 0.6, 0.0]  # planner, critic, sufficiency at 0.6; writer at 0
    assert "Options: A. Cake" in lm.history[1]["messages"][-1]["content"]  # the critic sees the options


def test_the_record_scores_everything_retrieved_and_the_trace_names_what_was_kept(dummy, search):
    """Issue 62 item 2: CORAL's record reported only the kept documents as retrieved, so its Recall and All-Pass
    measured the critic's filter; it now reports every candidate (``retrieved``, as every method does), the writer's
    documents as its passages and the kept ones in the trace."""
    from evaluation.loop import evaluate
    from evaluation.metrics import exact_match

    scripted(dummy, plan=Queue({"corpora": ["en", "ko"]}),
             batch=Queue(batched(rating(1, 1, 1, 1, 1), rating(2, 5, 5, 4, 5))), write=Queue({"answer": "C"}))
    example = dspy.Example(id="q", question=QUESTION, lang="en", answer="C", answers=["C"],
                           supporting=["en:e1", "ko:k1"]).with_inputs("question", "lang")
    program = CORAL(search, CORALConfig(k=1, loops=1, critic_batch=True))
    (rec,), _ = evaluate(program, [example], {"em": exact_match}, k=5, retries=0)
    assert rec["trace"]["scores"][0][0]["id"] == "en:e1"  # retrieved, rated, dropped by the critic
    assert rec["retrieved_n"] == 2 and rec["title_recall"] == 1.0 and rec["all_pass_all"] == 1.0
    assert [p["id"] for p in rec["passages"]] == rec["trace"]["kept"] == ["ko:k1"]  # the writer's, the kept


def test_rounds_accumulate_and_stop_at_the_bound(dummy, search):
    lm = scripted(dummy, plan=Queue({"corpora": ["en"]}),
                  batch=Queue(batched(rating(1, 3, 2, 2, 2)), batched(rating(1, 5, 5, 5, 5)),
                              batched(rating(1, 1, 1, 1, 1), rating(2, 1, 1, 1, 1))),
                  enough=Queue({"enough": False, "reason": "nothing Korean"}),
                  replan=Queue({"corpora": ["en"], "query": QUESTION}, {"corpora": ["en", "ko"], "query": QUESTION},
                               {"corpora": ["en", "ko"], "query": "football kimchi"}),
                  write=Queue({"answer": "C"}))
    pred = CORAL(search, CORALConfig(k=1, loops=3, critic_batch=True))(question=QUESTION, options=OPTIONS, lang="en")
    t = pred.trace
    assert t["iterations"] == 3 and t["stop_reason"] == "max_rounds"
    assert t["corpora"] == [["en"], ["en", "ko"], ["en", "ko"]]
    assert t["queries"] == [QUESTION, QUESTION, "football kimchi"]
    assert t["replan_retries"] == 1 and t["repeated_plans"] == 0
    assert [len(s) for s in t["scores"]] == [1, 2, 2]  # round 2 re-uses e1's score, scores only k1
    assert [x.id for x in pred.passages] == ["ko:k1", "en:e1"]  # kept over rounds, best s_tot first
    assert t["calls"] == {"planner": 1 + 3, "critic": 3, "sufficiency": 2, "writer": 1}  # no check in round 3
    assert "nothing Korean" in lm.history[3]["messages"][-1]["content"]  # the replanner gets the reason


def test_two_identical_plans_stop_the_loop_with_the_evidence_kept(dummy, search):
    lm = scripted(dummy, plan=Queue({"corpora": ["en"]}), batch=Queue(batched(rating(1, 5, 5, 5, 5))),
                  enough=Queue({"enough": False, "reason": "more"}),
                  replan=Queue({"corpora": ["en"], "query": f'"{QUESTION}"'},
                               {"corpora": ["en"], "query": f"{QUESTION} {QUESTION}"}),
                  write=Queue({"answer": "C"}))
    pred = CORAL(search, CORALConfig(k=1, loops=3, critic_batch=True))(question=QUESTION, options=OPTIONS, lang="en")
    t = pred.trace
    assert t["stop_reason"] == "repeated_plan" and t["repeated_plans"] == 1 and t["replan_retries"] == 1
    assert t["corpora"] == [["en"]] and [x.id for x in pred.passages] == ["en:e1"]  # no corpus added
    assert t["calls"]["planner"] == 1 + 2
    replans = [h for h in lm.history if REPLAN in h["messages"][-1]["content"]]
    assert replans[1]["kwargs"].get("rollout_id") is not None  # the second plan is sampled anew, not cached


def test_one_round_budget_skips_the_sufficiency_check(dummy, search):
    lm = scripted(dummy, plan=Queue({"corpora": ["ko"]}),
                  batch=Queue(batched(rating(1, 1, 1, 1, 1), rating(2, 1, 1, 1, 1))),
                  write=Queue({"answer": "A"}))
    pred = CORAL(search, CORALConfig(k=1, loops=1, critic_batch=True))(question=QUESTION, options=OPTIONS, lang="en")
    assert pred.passages == [] and pred.trace["stop_reason"] == "max_rounds"  # nothing kept: no context
    assert len(lm.history) == 3 and "## passages ##" in lm.history[-1]["messages"][-1]["content"]


def test_nothing_kept_replans_without_a_sufficiency_call(dummy, search):
    scripted(dummy, plan=Queue({"corpora": ["en"]}), batch=Queue(batched(rating(1, 0, 0, 0, 0, critique="off"))),
             replan=Queue({"corpora": ["ko"], "query": "seaweed soup"}), write=Queue({"answer": "C"}))
    t = CORAL(search, CORALConfig(k=1, loops=2, critic_batch=True))(question=QUESTION, options=OPTIONS, lang="en").trace
    assert "sufficiency" not in t["calls"] and t["sufficiency"][0]["enough"] is False
    assert "off" in t["sufficiency"][0]["reason"]
    assert t["corpora"][1] == ["en", "ko"]  # none of the question's corpus was kept, but no re-plan reason said so


def test_malformed_batch_falls_back_to_one_call_per_document(dummy, search):
    lm = scripted(dummy, plan=Queue({"corpora": ["en", "ko"]}), batch=Queue({"ratings": "three, then four"}),
                  single=Queue(rating(0, 1, 1, 1, 1), rating(0, 4, 4, 4, 4)), write=Queue({"answer": "C"}))
    pred = CORAL(search, CORALConfig(k=1, loops=1, critic_batch=True))(question=QUESTION, options=OPTIONS, lang="en")
    t = pred.trace
    assert t["critic_fallbacks"] == 1 and t["calls"]["critic"] == 1 + 2
    assert [x.id for x in pred.passages] == ["ko:k1"]
    assert len(lm.history) == 1 + 1 + 2 + 1


def test_batch_missing_a_document_scores_only_that_one_alone(dummy, search):
    scripted(dummy, plan=Queue({"corpora": ["en", "ko"]}), batch=Queue(batched(rating(2, 5, 5, 5, 5))),
             single=Queue(rating(0, 1, 1, 1, 1)), write=Queue({"answer": "C"}))
    t = CORAL(search, CORALConfig(k=1, loops=1, critic_batch=True))(question=QUESTION, options=OPTIONS, lang="en").trace
    assert t["critic_missing"] == 1 and t["critic_fallbacks"] == 0 and t["calls"]["critic"] == 2


def test_per_document_critic_makes_one_call_per_candidate(dummy, search):
    scripted(dummy, plan=Queue({"corpora": ["en", "ko"]}), single=Queue(rating(0, 4, 4, 4, 4)),
             write=Queue({"answer": "C"}))
    coral = CORAL(search, CORALConfig(k=2, loops=1, critic_batch=False))
    t = coral(question=QUESTION, options=OPTIONS, lang="en").trace
    assert t["calls"]["critic"] == 4 and len(t["scores"][0]) == 4


@pytest.mark.parametrize("batch, best, worst", [(True, 4, 11), (False, 18, 53)])
def test_call_budget_with_k5_three_corpora_three_rounds(dummy, embedder, batch, best, worst):
    """Best case: enough after round 1. Worst: never enough, and the planner repeats itself once per replan."""
    words = ("first", "second", "third")
    pool = Retriever([Corpus(lang, [{"id": f"{w}{i}", "title": w, "text": f"{w} {lang} note {i}"}
                                    for w in words for i in range(5)], lang) for lang in ("en", "ko", "es", "zh")],
                     embedder)
    ratings = batched(*(rating(i, 4, 4, 4, 4) for i in range(1, 16)))
    plans = [{"corpora": ["en", "ko", "es"], "query": q} for q in ("first", "second", "second", "third")]
    for enough, expected in ((True, best), (False, worst)):
        lm = dummy({PLAN: Queue({"corpora": ["en", "ko", "es"]}), BATCH: Queue(ratings),
                    SINGLE: Queue(rating(0, 4, 4, 4, 4)), ENOUGH: Queue({"enough": enough, "reason": "more"}),
                    REPLAN: Queue(*plans), WRITE: Queue({"answer": "A"})})
        coral = CORAL(pool, CORALConfig(k=5, loops=3, critic_batch=batch))
        t = coral(question="first", options=OPTIONS, lang="en").trace
        assert len(lm.history) == expected and sum(t["calls"].values()) == expected
        assert t["iterations"] == (1 if enough else 3) and all(len(s) == 15 for s in t["scores"])


def test_select_only_ablation_keeps_the_query_and_stops_when_nothing_is_left(dummy, search):
    scripted(dummy, plan=Queue({"corpora": ["en", "ko"]}), batch=Queue(batched(rating(1, 1, 1, 1, 1))),
             replan=Queue({"corpora": ["en", "ko"]}), write=Queue({"answer": "B"}))
    coral_select = programs.build("coral_select", search=search, k=1, loops=3)
    assert "query" not in coral_select.replanner.signature.output_fields
    t = coral_select(question=QUESTION, options=OPTIONS, lang="en").trace
    assert t["queries"] == [QUESTION] and t["stop_reason"] == "repeated_plan" and t["repeated_plans"] == 1


def test_mcq_letters_are_parsed_and_short_answers_pass_through(dummy, search):
    scripted(dummy, plan=Queue({"corpora": ["ko"]}), batch=Queue(batched(rating(1, 1, 1, 1, 1))),
             write=Queue({"answer": "The answer is (C) Seaweed soup"}, {"answer": " seaweed soup "}))
    coral = CORAL(search, CORALConfig(k=1, loops=1, critic_batch=True))
    assert coral(question=QUESTION, options=OPTIONS, lang="en").answer == "C"
    assert coral(question=QUESTION).answer == "seaweed soup"


def test_roles_bind_planner_and_critic_predictors(search):
    writer, planner, critic = DummyLM([{}]), DummyLM([{}]), DummyLM([{}])
    coral = assign_roles(programs.build("coral", search=search), Roles(writer=writer, planner=planner, critic=critic))
    lms = {name: pred.lm for name, pred in coral.named_predictors()}
    assert lms["planner"] is planner and lms["replanner"] is planner
    assert lms["critic"] is critic and lms["critic_each"] is critic and lms["sufficiency"] is critic
    assert lms["writer.choice"] is writer


def test_compiled_coral_round_trips(tmp_path, search):
    coral = programs.build("coral", search=search, k=2)
    coral.critic.demos = [dspy.Example(question="q", candidates=["[1] x"], ratings="1 | 3 | 3 | 3 | 3 | ok")]
    path = tmp_path / "coral.json"
    programs.save_compiled(coral, path, "coral", {"k": 2, "loops": 2}, {"dataset": "demo"})
    loaded = programs.load_compiled(str(path), search=search)
    assert loaded.k == 2 and loaded.loops == 2 and loaded.critic.demos[0]["ratings"].startswith("1 | 3")


# -- every multilingual baseline and ablation ---------------------------------------------------------------------
def everything(dummy):
    return dummy({"[[ ## source_language ## ]]": Queue({"english": "birthday soup Korea"}),
                  "[[ ## passage ## ]]": Queue({"english": "Koreans eat seaweed soup on birthdays."}),
                  PLAN: Queue({"corpora": ["ko"]}), REPLAN: Queue({"corpora": ["ko"], "query": "seaweed soup"}),
                  "[[ ## previous_query ## ]]": Queue({"query": "seaweed soup birthday"}),
                  BATCH: Queue(batched(*(rating(i, 4, 4, 4, 4) for i in range(1, 7)))), SINGLE: Queue(rating(0, 4, 4, 4, 4)),
                  ENOUGH: Queue({"enough": False, "reason": "more"}), WRITE: Queue({"answer": "C"}),
                  "[[ ## question ## ]]": Queue({"answer": "C"})})


@pytest.mark.parametrize("name", ["direct", "rag", "mono_rag", "multi_rag", "cross_rag", "t_rag", "coral",
                                  "coral_select", "coral_fixed_own", "coral_fixed_all", "coral_fixed_own_en",
                                  "own_en_rag", "en_rag"])
@pytest.mark.parametrize("lang", ["ko", None])
def test_every_baseline_runs_on_two_language_corpora(dummy, search, name, lang):
    everything(dummy)
    program = programs.build(name, search=search, k=1, loops=2)
    pred = program(question=QUESTION, options=OPTIONS, lang=lang)
    assert pred.answer == "C" and json.loads(json.dumps(pred.trace)) == pred.trace
    assert "iterations" in pred.trace and all(isinstance(x, Passage) for x in pred.passages)


def test_baseline_scopes_and_translation(dummy, search):
    lm = everything(dummy)
    mono = programs.build("mono_rag", search=search, k=2)(question=QUESTION, options=OPTIONS, lang="ko")
    assert {x.corpus for x in mono.passages} == {"ko"} and len(lm.history) == 1
    multi = programs.build("multi_rag", search=search, k=3)(question=QUESTION, options=OPTIONS, lang="ko")
    assert len(multi.passages) == 3 and {x.corpus for x in multi.passages} == {"en", "ko"}
    t_rag = programs.build("t_rag", search=search, k=1)(question="생일에 먹는 국은?", options=OPTIONS, lang="ko")
    assert t_rag.trace["queries"] == ["birthday soup Korea"] and t_rag.passages[0].corpus == "en"
    calls = len(lm.history)
    cross = programs.build("cross_rag", search=search, k=2)(question=QUESTION, options=OPTIONS, lang="ko")
    translated = [x for x in cross.passages if x.corpus == "ko"]
    assert len(lm.history) - calls == 1 + len(translated)  # one call per non-English passage, then the writer
    assert all(x.lang == "en" and x.text.startswith("Koreans eat") for x in translated)
    assert programs.build("t_rag", search=search)(question=QUESTION, lang="en").trace["queries"] == [QUESTION]
    calls = len(lm.history)
    own_en = programs.build("own_en_rag", search=search, k=4)(question=QUESTION, options=OPTIONS, lang="ko")
    assert own_en.trace["corpora"] == [["ko", "en"]] and own_en.trace["iterations"] == 1
    assert len(lm.history) - calls == 1  # single pass: the writer only, no critic loop


def test_compare_script_prints_one_table_and_logs_one_run(embedder, monkeypatch, capsys):
    import mlflow

    import scripts.coral_compare as compare
    from experiments import sessions

    lm = DummyLM({PLAN: Queue({"corpora": ["ko"]}), REPLAN: Queue({"corpora": ["es"], "query": "other"}),
                  BATCH: Queue(batched(*(rating(i, 4, 4, 4, 4) for i in range(1, 10)))), SINGLE: Queue(rating(0, 4, 4, 4, 4)),
                  ENOUGH: Queue({"enough": True, "reason": "fine"}), WRITE: Queue({"answer": "A"})})
    monkeypatch.setattr(sessions, "make_lm", lambda *a, **k: lm)
    monkeypatch.setattr(sessions, "Retriever", lambda corpora, *a, **kw: Retriever(corpora, embedder))
    rows = compare.main(["--dataset", "demo_culture", "--programs", "direct", "mono_rag", "coral", "--train", "2",
                         "--dev", "1", "--test", "6", "--balance", "source_lang", "--k", "2", "--compile"])
    assert list(rows) == ["direct", "mono_rag+oracle:own", "coral", "coral_compiled"] and rows["coral"]["n"] == 6
    assert rows["coral"]["n_by_source_lang/ko"] == 1 and rows["coral"]["iterations"] == 1.0
    out = capsys.readouterr().out
    assert "| program | answered | accuracy |" in out and "| coral_compiled | 6 of 6 |" in out
    assert "only method right" in out
    runs = mlflow.search_runs(experiment_names=["agentic-rag"], output_format="list")
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    children = {r.data.tags["cell"]: r for r in runs if r != parent}
    assert set(children) == {"direct", "mono_rag+oracle:own", "coral", "coral_compiled"}  # it reads the culture
    assert {"demo_culture_coral_vs_direct_mcnemar_p", "compile_lm_calls"} <= parent.data.metrics.keys()
    assert {"test_accuracy", "test_lm_calls", "test_seconds"} <= children["coral_compiled"].data.metrics.keys()
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(parent.info.run_id)}
    assert {"comparison.md", "leaderboard.md", "coral_language_mix.png"} <= artifacts


def test_compare_script_circular_mode_scores_a_letter_bias_zero(monkeypatch, capsys):
    import scripts.coral_compare as compare
    from experiments import sessions

    monkeypatch.setattr(sessions, "make_lm", lambda *a, **k: DummyLM({WRITE: Queue({"answer": "A"})}))
    rows = compare.main(["--dataset", "demo_culture", "--programs", "direct", "--train", "1", "--dev", "1",
                         "--test", "3", "--circular"])
    assert rows["direct"]["n"] == 12 and rows["direct"]["accuracy"] == 0.25 and rows["direct"]["circular_accuracy"] == 0
    out = capsys.readouterr().out
    assert "| program | answered | accuracy | circular_accuracy |" in out
    assert "| direct | 1.000 (3) | 0.000 (3) | 0.000 (3) | 0.000 (3) | 1.000 | 12 / 0 / 0 / 0 |" in out  # by gold


def test_leaderboard_counts_a_circular_question_right_only_at_every_shift():
    from evaluation import leaderboard
    from experiments.suite import Cell, Result

    def result(name, rights):
        records = [{"id": f"q{q}#r{r}", "base_id": f"q{q}", "answer": "A", "accuracy": float(ok)}
                   for q, row in enumerate(rights) for r, ok in enumerate(row)]
        return Result(Cell(name, "d"), "run", {"accuracy": 0.5}, records)

    row = leaderboard.paired(result("coral", [[1, 0], [1, 1], [1, 1]]), result("direct", [[1, 1], [1, 0], [0, 0]]))
    assert (row["n"], row["only_method"], row["only_baseline"], row["mcnemar_p"]) == (3, 2, 1, 1.0)


def test_every_registered_program_takes_the_question_language():
    import inspect

    for name in programs.names():
        assert "lang" in inspect.signature(programs.spec(name).cls.forward).parameters, name


def test_critic_lines_are_parsed_leniently():
    from programs.coral.critics import parse_ratings

    text = "1 | 4 | 3 | 5 | 2 | on topic\n[2] | 0|1|1|0\nsummary: mostly useful\n3. | 9 | 1 | 1 | 1 | x"
    assert parse_ratings(text) == [(1, [4, 3, 5, 2], "on topic"), (2, [0, 1, 1, 0], ""), (3, [9, 1, 1, 1], "x")]
    assert parse_ratings("") == [] and parse_ratings("three, then four") == []


def test_unreadable_sufficiency_verdict_means_search_again(dummy, search):
    scripted(dummy, plan=Queue({"corpora": ["en"]}), batch=Queue(batched(rating(1, 5, 5, 5, 5))),
             enough=Queue({"enough": "perhaps", "reason": "?"}),
             replan=Queue({"corpora": ["ko"], "query": "seaweed soup"}), write=Queue({"answer": "C"}))
    t = CORAL(search, CORALConfig(k=1, loops=2, critic_batch=True))(question=QUESTION, options=OPTIONS, lang="en").trace
    assert t["sufficiency"][0]["enough"] is False and t["sufficiency"][0]["parsed"] is False
    assert t["parse_failures"] == 1 and t["iterations"] == 2 and t["stop_reason"] == "max_rounds"


def test_a_prompt_past_the_context_window_is_no_unreadable_verdict(search):
    # only an unreadable reply reads as "search again": a context overflow propagates (the run stops with one line)
    from runtime.lm import ContextOverflow
    from runtime.roles import init_dspy
    from tests.dummies import Overflowing

    routes = {PLAN: Queue({"corpora": ["en"]}), BATCH: Queue(batched(rating(1, 5, 5, 5, 5))),
              WRITE: Queue({"answer": "C"})}
    init_dspy(Overflowing(routes, marker=ENOUGH), cache=False)
    with pytest.raises(ContextOverflow):
        CORAL(search, CORALConfig(k=1, loops=2, critic_batch=True))(question=QUESTION, options=OPTIONS, lang="en")
    init_dspy(Overflowing(routes, marker=BATCH), cache=False)
    with pytest.raises(ContextOverflow):
        CORAL(search, CORALConfig(k=1, loops=2, critic_batch=True))(question=QUESTION, options=OPTIONS, lang="en")


def test_no_valid_corpus_name_falls_back_to_english_and_is_counted(dummy, search):
    scripted(dummy, plan=Queue({"corpora": ["Klingon"]}), batch=Queue(batched(rating(1, 1, 1, 1, 1))),
             write=Queue({"answer": "A"}))
    t = CORAL(search, CORALConfig(k=1, loops=1, critic_batch=True))(question=QUESTION, options=OPTIONS, lang="fr").trace
    assert t["corpora"] == [["en"]] and t["planner_fallbacks"] == 1 and t["unknown_corpora"] == 1


def test_replan_without_a_valid_name_keeps_the_corpora(dummy, search):
    scripted(dummy, plan=Queue({"corpora": ["en", "ko"]}), batch=Queue(batched(rating(1, 1, 1, 1, 1))),
             replan=Queue({"corpora": ["Klingon"], "query": "seaweed soup birthday"}), write=Queue({"answer": "C"}))
    t = CORAL(search, CORALConfig(k=1, loops=2, critic_batch=True))(question=QUESTION, options=OPTIONS, lang="en").trace
    assert t["corpora"] == [["en", "ko"], ["en", "ko"]] and t["queries"][1] == "seaweed soup birthday"
    assert t["planner_fallbacks"] == 1


def test_candidate_corpora_are_shown_in_a_seeded_order_with_the_options_and_probes_only_on_request(dummy, embedder):
    langs = ("ar", "de", "el", "en", "es", "ko")
    pool = Retriever([Corpus(lang, [{"id": "1", "title": f"{lang} title", "text": f"{lang} soup birthday"}], lang)
                      for lang in langs], embedder)
    coral, again = CORAL(pool), CORAL(pool)
    questions = [f"What soup is eaten on birthday number {i}?" for i in range(8)]
    orders = [coral.presented(q) for q in questions]
    assert orders == [again.presented(q) for q in questions]  # seeded: the same question, the same order
    assert all(sorted(o) == sorted(langs) for o in orders) and len({tuple(o) for o in orders}) > 1
    assert CORAL(pool, CORALConfig(seed=14)).presented(questions[0]) != orders[0] or CORAL(
        pool, CORALConfig(seed=15)).presented(questions[0]) != orders[0]
    assert CORAL(pool, CORALConfig(shuffle_corpora=False)).presented(questions[0]) == list(langs)  # pool order
    lm = scripted(dummy, plan=Queue({"corpora": ["ko"]}), single=Queue(rating(0, 1, 1, 1, 1)),
                  write=Queue({"answer": "A"}))
    t = coral(question=questions[0], options=OPTIONS, lang="en").trace
    assert t["presented"] == orders[0]
    prompt = lm.history[0]["messages"][-1]["content"]
    assert "Options: A. Cake" in prompt and "top match" not in prompt  # the paper's planner: full query, no probe
    programs.build("coral_probe", search=pool)(question=questions[0], options=OPTIONS, lang="en")
    prompt = next(h for h in lm.history[1:] if PLAN in h["messages"][-1]["content"])["messages"][-1]["content"]
    shown = [line.split(":")[0].strip('"[ ,') for line in prompt.splitlines() if "top match" in line]
    assert len(shown) == 1 or shown == orders[0]  # one line per corpus in the presented order
    for lang in langs:
        assert f"{lang}: " in prompt and f"top match: '{lang} title'" in prompt


def test_closed_set_outputs_use_a_grammar_only_where_the_endpoint_takes_one(dummy, search):
    def run():
        return scripted(dummy, plan=Queue({"corpora": ["ko"]}), single=Queue(rating(0, 4, 4, 4, 4)),
                        enough=Queue({"enough": False, "reason": "more"}),
                        replan=Queue({"corpora": ["en"], "query": "seaweed"}), write=Queue({"answer": "A"}))
    lm = run()  # DummyLM: no grammar support -> plain requests, validated afterwards as before
    CORAL(search, CORALConfig(k=1, loops=2))(question=QUESTION, options=OPTIONS, lang="en")
    assert not any("grammar" in (h["kwargs"].get("extra_body") or {}) for h in lm.history)
    lm = run()
    lm.server = object()  # what make_lm sets on the embedded llama.cpp LM
    lm.kwargs["extra_body"] = {"max_tokens": 512}
    CORAL(search, CORALConfig(k=1, loops=2))(question=QUESTION, options=OPTIONS, lang="en")
    grammars = [(h["kwargs"].get("extra_body") or {}).get("grammar") for h in lm.history]
    assert grammars[-1] is None  # the writer is free
    constrained = [g for g in grammars if g]
    plan = next(g for g in constrained if "## corpora ##" in g and "## query ##" not in g)
    assert '\\"ko\\"' in plan and '\\"en\\"' in plan and "es" not in plan  # only the pool's names
    assert any("## corpora ##" in g and "## query ##" in g for g in constrained)  # the replanner
    assert any("## relevance ##" in g and '"5"' in g for g in constrained)  # the per-document critic
    assert any('## enough ##' in g and '("True" | "False")' in g for g in constrained)  # sufficiency
    assert all(h["kwargs"]["extra_body"]["max_tokens"] == 512 for h in lm.history if h["kwargs"].get("extra_body"))


def test_a_critic_reply_under_its_grammar_fits_the_calls_output_cap(dummy, search):
    """make demo printed "LM reply reached this call's output cap (max_tokens=96)": the critic's grammar allowed a
    160-character critique line, the call a fixed 96 tokens. Now the call has its signature's cap, and the critique
    under the grammar at most as many characters as its field's token cap."""
    from runtime.caps import field_cap, output_cap
    from signatures.critic import RateDocument

    lm = scripted(dummy, plan=Queue({"corpora": ["ko"]}), single=Queue(rating(0, 4, 4, 4, 4)),
                  enough=Queue({"enough": True, "reason": "ok"}), write=Queue({"answer": "A"}))
    lm.server = object()  # what make_lm sets on the embedded llama.cpp LM: grammars on
    CORAL(search, CORALConfig(k=1, loops=1))(question=QUESTION, options=OPTIONS, lang="en")
    critics = [h for h in lm.history if "## relevance ##" in (h["kwargs"].get("extra_body") or {}).get("grammar", "")]
    assert critics  # one call per document (the planned corpus and the question's own)
    for critic in critics:
        grammar = critic["kwargs"]["extra_body"]["grammar"]
        longest = re.search(r'"\[\[ ## critique ## \]\]\\n" \[\^\\n\]\{1,(\d+)\}', grammar)
        assert critic["kwargs"]["max_tokens"] == output_cap(RateDocument)
        assert int(longest[1]) <= field_cap("critique", RateDocument.output_fields["critique"])


def test_planner_diagnostics_count_culture_recall_and_list_position():
    from scripts.coral_compare import planner_diagnostics, planner_table

    languages = {"ar": "ar", "de": "de", "en": "en", "ko": "ko"}
    records = [  # question language en (the planner's main corpus, left out); candidates ar, de, ko
        {"source_lang": "ko", "trace": {"question_corpus": "en", "presented": ["en", "ar", "de", "ko"],
                                        "corpora": [["en", "ar", "de"], ["en", "ko"]]}},
        {"source_lang": "ko", "trace": {"question_corpus": "en", "presented": ["ko", "en", "de", "ar"],
                                        "corpora": [["en", "ko"]]}},
        {"source_lang": "su", "trace": {"question_corpus": "en", "corpora": [["ar"]]}},  # no su corpus; pool order
    ]
    d = planner_diagnostics(records, languages)
    assert d["culture_corpus_questions"] == 2 and d["culture_recall_round1"] == 0.5 and d["culture_recall_any"] == 1.0
    assert d["first_listed_chosen"] == 1.0  # ar first for q1 and q3, ko first for q2
    assert d["first_listed_chance"] == pytest.approx((2 / 3 + 1 / 3 + 1 / 3) / 3)
    assert d["mean_listed_position"] == pytest.approx((1 + 2 + 1 + 1) / 4) and d["mean_listed_position_chance"] == 2.0
    text, metrics = planner_table({"coral": [r | {"trace": r["trace"] | {"selected_langs": [["x"]]}} for r in records],
                                   "direct": [{"trace": {}}]}, languages)
    assert "| coral | 2 | 0.500 | 1.000 | 1.000 (0.444) | 1.25 (2.00) |" in text and "direct" not in text
    assert metrics["coral_planner_culture_recall_round1"] == 0.5


def test_planner_eval_reports_list_position_per_presentation(embedder, monkeypatch, capsys):
    import scripts.planner_eval as planner_eval
    from experiments import sessions

    lm = DummyLM({PLAN: Queue({"corpora": ["ar"]})})  # a planner that always names the first corpus of the pool
    monkeypatch.setattr(sessions, "make_lm", lambda *a, **k: lm)
    monkeypatch.setattr(planner_eval, "make_lm", lambda *a, **k: lm)
    monkeypatch.setattr(sessions, "Retriever", lambda corpora, *a, **kw: Retriever(corpora, embedder))
    rows = planner_eval.main(["--dataset", "demo_culture", "--train", "1", "--dev", "1", "--test", "6",
                              "--balance", "source_lang", "--planners", "fake:p"])
    listed, shuffled = rows["fake:p listed"], rows["fake:p shuffled"]
    # pool order ar en es id ko zh, English questions: ar is always the first-listed candidate when nothing shuffles
    assert listed["first_listed_chosen"] == 1.0 and listed["mean_listed_position"] == 1.0
    assert shuffled["first_listed_chosen"] < 1.0 and shuffled["mean_listed_position"] > 1.0
    assert listed["culture_corpus_questions"] == 6
    assert listed["culture_recall_round1"] == pytest.approx(2 / 6)  # ar, and en: the question's language is added
    assert listed["lm_calls_per_question"] == 1.0 and listed["unusable_outputs"] == 0
    assert "| fake:p | probed | 6 |" in capsys.readouterr().out


def test_one_set_of_calls_scores_every_mc_mode():
    from scripts.coral_compare import mc_modes, modes_table

    def rec(i, gold, mc):
        return {"id": f"q#r{i}", "base_id": "q", "gold": gold, "answer": "?", "accuracy": 0.0, "failed": False,
                "trace": {"mc": mc} if mc else {}}

    probs = {"A": 0.5, "B": 0.3, "C": 0.1, "D": 0.1}
    records = {"direct": [rec(0, "B", {"written": "A", "probs": probs, "answer": "B"}),
                          rec(1, "C", {"written": "C", "probs": probs, "answer": "C"}),
                          rec(2, "D", None)],  # no probabilities read: its answer in every mode
               "multi_rag": [rec(0, "A", None)]}
    modes = mc_modes(records, "accuracy", {"direct": {"A": 0.25}})
    assert list(modes) == ["direct [generate]", "direct [logprob]", "direct [pride]"]
    assert [r["answer"] for r in modes["direct [generate]"]] == ["A", "C", "?"]
    assert [r["answer"] for r in modes["direct [logprob]"]] == ["A", "A", "?"]
    assert [r["accuracy"] for r in modes["direct [pride]"]] == [1.0, 1.0, 0.0]
    text = modes_table(modes, "accuracy")
    assert "| direct [pride] | 0.667 | 0.000 | B (1/3) |" in text


@pytest.mark.parametrize("reply, scored, alone", [
    ("0 | 5 | 5 | 5 | 5\n1 | 1 | 1 | 1 | 1", {1: 5, 2: 1}, 1),  # counts from 0, last line missing: no shift
    ("1 | 5 | 5 | 5 | 5\n1 | 1 | 1 | 1 | 1\n3 | 2 | 2 | 2 | 2", {1: 5, 3: 2}, 1),  # a repeated number: doc 2 alone
    ("2 | 5 | 5 | 5 | 5\n3 | 1 | 1 | 1 | 1", {2: 5, 3: 1}, 1),  # the first line missing
])
def test_batched_critic_lines_go_to_the_document_their_number_names(dummy, search, reply, scored, alone):
    scripted(dummy, batch=Queue({"ratings": reply}))
    chunk = [Passage(f"p{i}", f"title {i}", f"text {i}") for i in (1, 2, 3)]
    trace = programs.coral.coral.Trace()
    out = CORAL(search, CORALConfig(critic_batch=True)).keep_gate.critic.rate_batch(chunk, QUESTION, trace)
    assert {pos: r.relevance for pos, r in out.items()} == scored
    assert all(out[pos].passage is chunk[pos - 1] for pos in out) and trace.critic_missing == alone


def test_the_critic_sees_what_the_writer_sees_unless_told(search):
    assert CORAL(search).critic_chars is None and CORAL(search, CORALConfig(max_chars=600)).critic_chars == 600
    assert CORAL(search, CORALConfig(critic_chars=200)).critic_chars == 200


def test_the_question_language_corpus_is_in_every_first_plan(dummy, search):
    """Issue 75 item 4, the paper's planner prompt: the first plan always holds the corpus in the question's
    language (added, and traced, when the LM leaves it out; at most ``max_corpora``)."""
    scripted(dummy, plan=Queue({"corpora": ["ko"]}), batch=Queue(batched(rating(1, 5, 5, 5, 5))),
             write=Queue({"answer": "C"}))
    t = CORAL(search, CORALConfig(k=1, loops=1, critic_batch=True))(question=QUESTION, options=OPTIONS, lang="en").trace
    assert t["corpora"] == [["en", "ko"]] and t["question_corpus"] == "en" and t["planner_fallbacks"] == 0
    assert t["own_added"] == ["first plan: the question's language corpus is always searched"]
    t = CORAL(search, CORALConfig(k=1, loops=1, max_corpora=1, critic_batch=True))(
        question=QUESTION, options=OPTIONS, lang="en").trace
    assert t["corpora"] == [["en"]]  # at most max_corpora: the question's language first


@pytest.mark.parametrize("dropped, kept, second", [
    (None, False, ["en", "ko"]),  # a reply without the field reads, and keeps the corpus
    ("none", False, ["en", "ko"]), ("", False, ["en", "ko"]), ("N/A.", False, ["en", "ko"]),
    ("its documents were about Spain, not Korea", False, ["ko"]),
    ("its documents were about Spain, not Korea", True, ["en", "ko"])])  # the critic kept one: not low-relevance
def test_a_replan_drops_the_question_language_corpus_only_with_a_stated_reason(dummy, search, dropped, kept, second):
    """Issue 75 item 4, the paper's re-planner prompt: it keeps the corpus in the question's language "unless the
    system's reasoning explicitly shows it is consistently low-relevance": a re-plan that leaves it out without a
    reason in ``dropped_because``, or while the critic keeps one of its documents (the real 0.5B dropped English
    with four of its five documents kept), gets it back (traced in ``own_added``); one with a reason and none of its
    documents kept drops it (traced in ``own_dropped``)."""
    replan = {"corpora": ["ko"], "query": "seaweed soup"} | ({} if dropped is None else {"dropped_because": dropped})
    score = 5 if kept else 0
    lm = scripted(dummy, plan=Queue({"corpora": ["en"]}), batch=Queue(batched(rating(1, score, score, score, score))),
                  enough=Queue({"enough": False, "reason": "nothing on Korea"}), replan=Queue(replan),
                  write=Queue({"answer": "C"}))
    t = CORAL(search, CORALConfig(k=1, loops=2, critic_batch=True))(question=QUESTION, options=OPTIONS, lang="en").trace
    assert t["corpora"] == [["en"], second] and t["parse_failures"] == 0 and t["calls"]["planner"] == 2
    why = "re-plan dropped it while the critic keeps its documents" if kept else \
        "re-plan dropped it without a stated reason"
    assert t["own_added"] == ([] if second == ["ko"] else [why])
    assert t["own_dropped"] == ([dropped] if second == ["ko"] else [])
    replans = [h for h in lm.history if REPLAN in h["messages"][-1]["content"]]
    assert len(replans) == 1 and "dropped_because" in replans[0]["messages"][0]["content"]  # told of the field


@pytest.mark.parametrize("reason, says", [
    ("its documents were about Spain, not Korea", True), ("off-topic: recipes from Mexico", True),
    ("the English documents are not relevant", True), ("irrelevant", True),
    ("none", False), ("None.", False), ("N/A", False), ("null", False), ("", False), (None, False), ("-", False),
    ("Not supplied for this particular example.", False),  # DSPy's text for a demo's missing field
    ("kept", False), ("The corpus is kept", False), ("no reason", False), ("not applicable", False),
    ("[[ ## query ## ]]", False),  # an echoed header
    ("its documents were relevant", False), ("useful", False)])
def test_only_a_stated_reason_drops_the_question_language_corpus(reason, says):
    from programs.coral.coral import stated
    assert stated(reason) is says


def test_a_plan_without_a_valid_name_searches_the_question_language_and_is_counted(dummy, search):
    scripted(dummy, plan=Queue({"corpora": ["Klingon"]}), batch=Queue(batched(rating(1, 1, 1, 1, 1))),
             write=Queue({"answer": "A"}))
    t = CORAL(search, CORALConfig(k=1, loops=1, critic_batch=True))(question=QUESTION, options=OPTIONS, lang="ko").trace
    assert t["corpora"] == [["ko"]] and t["planner_fallbacks"] == 1 and t["unknown_corpora"] == 1


@pytest.mark.parametrize("name, searched", [("mono_rag", ["ko"]), ("own_en_rag", ["ko", "en"]), ("en_rag", ["en"]),
                                            ("coral_fixed_own", ["ko"]), ("coral_fixed_own_en", ["ko", "en"])])
def test_the_own_corpus_is_the_cultures_when_the_question_has_one(dummy, search, name, searched):
    """C_own is the culture's corpus (BLEnD's questions are English, their culture is not): the evaluation gives
    the culture label around each call; without one (a direct call) the question's language is searched."""
    from evaluation.loop import evaluate
    from evaluation.metrics import accuracy

    everything(dummy)
    program = programs.build(name, search=search, k=1, loops=1)
    example = dspy.Example(id="q", question=QUESTION, options=OPTIONS, answer="C", lang="en",
                           source_lang="ko").with_inputs("question", "options", "lang")
    records, _ = evaluate(program, [example], {"accuracy": accuracy})
    assert records[0]["trace"]["corpora"] == [searched]
    assert program(question=QUESTION, options=OPTIONS, lang="en").trace["corpora"] == [["en"]]


@pytest.mark.parametrize("name", ["mono_rag", "coral_fixed_own"])
def test_a_compile_gives_c_own_programs_the_culture_label_they_read_at_test_time(dummy, search, name):
    """Issue 75 item 5: with the self teacher, a C_own program bootstraps its demos on the culture's corpus, as it
    is tested (the compile sets each train example's gold labels, as the evaluation does), not on the corpus of the
    question's language."""
    from optimizers.compile import compile_program

    everything(dummy)
    example = dspy.Example(id="q", question=QUESTION, options=OPTIONS, answer="C", answers=["C"], lang="en",
                           source_lang="ko").with_inputs("question", "options", "lang")
    compiled = compile_program(programs.build(name, search=search, k=1, loops=1), "bootstrap", [example], [],
                               lambda ex, pred, trace=None: pred.answer == "C", max_demos=1)
    demos = [d for _, p in compiled.named_predictors() for d in p.demos if d.get("augmented")]
    shown = [str(d.get("passages") or d.get("candidates") or d.get("document")) for d in demos]
    assert shown and all("seaweed soup" in text and "cake" not in text for text in shown)  # ko:k1, not en:e1


def test_every_culture_baseline_searches_the_cultures_corpus_on_the_demo_set(dummy, embedder):
    """On the culture questions as the loader builds them (English questions, ``source_lang`` their culture):
    mono_rag searches each question's culture corpus, own_en_rag adds English, en_rag searches English only."""
    import data
    from evaluation.loop import evaluate
    from evaluation.metrics import accuracy

    everything(dummy)
    bundle = data.load("demo_culture")
    search = Retriever(bundle.corpora, embedder)
    examples = [next(ex for ex in bundle.examples if ex.source_lang == lang) for lang in ("ko", "zh", "en")]
    searched = {name: [r["trace"]["corpora"][0] for r in evaluate(programs.build(name, search=search, k=1),
                                                                  examples, {"accuracy": accuracy})[0]]
                for name in ("mono_rag", "own_en_rag", "en_rag")}
    assert searched == {"mono_rag": [["ko"], ["zh"], ["en"]], "own_en_rag": [["ko", "en"], ["zh", "en"], ["en"]],
                        "en_rag": [["en"]] * 3}


DRAFT = "[[ ## draft ## ]]"


def test_compare_script_runs_the_papers_rows_by_default(embedder, monkeypatch):
    """Without --programs: the paper's monoRAG row on BLEnD (en_rag, English) beside C_own (mono_rag, the culture's
    corpus), and its Table 13 Self-RAG comparison."""
    import scripts.coral_compare as compare
    from experiments import sessions

    lm = DummyLM({"[[ ## passage ## ]]": Queue({"english": "translated"}), PLAN: Queue({"corpora": ["en"]}),
                  REPLAN: Queue({"corpora": ["en"], "query": "q"}), SINGLE: Queue(rating(0, 4, 4, 4, 4)),
                  ENOUGH: Queue({"enough": True, "reason": "fine"}),
                  DRAFT: Queue({"relevant": True, "support": "full", "usefulness": 5, "next_query": "q"}),
                  WRITE: Queue({"answer": "A"})})
    monkeypatch.setattr(sessions, "make_lm", lambda *a, **k: lm)
    monkeypatch.setattr(sessions, "Retriever", lambda corpora, *a, **kw: Retriever(corpora, embedder))
    records = {}
    run_cell = compare.suite.run_cell

    def spy(*a, **kw):
        result = run_cell(*a, **kw)
        records[result.cell.program] = result.records
        return result
    monkeypatch.setattr(compare.suite, "run_cell", spy)
    rows = compare.main(["--dataset", "demo_culture", "--train", "1", "--dev", "1", "--test", "3", "--balance",
                         "source_lang", "--k", "1", "--loops", "1"])
    assert {"en_rag", "mono_rag+oracle:own", "self_rag", "coral"} <= set(rows)
    assert all(r["n"] == 3 for r in rows.values())
    cultures = [r["source_lang"] for r in records["mono_rag"]]
    assert any(c != "en" for c in cultures)
    assert [r["trace"]["corpora"] for r in records["mono_rag"]] == [[[c]] for c in cultures]
    assert all(r["trace"]["corpora"] == [["en"]] for r in records["en_rag"])


def test_a_rewritten_query_that_echoes_the_format_note_is_searched_without_it(dummy, search):
    """Seen on XRAG: the 0.5B's rewrite ends in DSPy's type note, which the next round searched for."""
    scripted(dummy, plan=Queue({"corpora": ["en"]}), batch=Queue(batched(rating(1, 1, 1, 1, 1))),
             enough=Queue({"enough": False, "reason": "nothing on Korea"}),
             replan=Queue({"corpora": ["ko"], "query": 'seaweed soup # note: the value you produce must adhere to '
                                                       'the JSON schema: {"type": "string"} # complete'}),
             write=Queue({"answer": "C"}))
    t = CORAL(search, CORALConfig(k=1, loops=2, critic_batch=True))(question=QUESTION, options=OPTIONS, lang="en").trace
    assert t["queries"] == [QUESTION, "seaweed soup"]
