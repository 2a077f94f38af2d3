"""The attribution ladder (scripts/ladder.py): its arms are the program's oracle roles each given back alone, the LM
calls of an arm come only from the predictors of the role given back (none in the all-oracle arm), and each drop is
paired on the same question ids. The end-to-end runs are on the demo data with one catch-all DummyLM."""
from dataclasses import replace

import pytest
from dspy.utils.dummies import DummyLM

import programs
from experiments import suite
from runtime.roles import Roles, init_dspy
from scripts import ladder

#: Every output field of PAR2's and SEAL's predictors, so each parses (ChatAdapter ignores the fields it did not ask
#: for): the controller always CONTINUEs and the assessor finds nothing sufficient, so every role gets its turn.
ANSWERS = {"searches": "1. Jaws film | find the film", "decision": "CONTINUE", "next_query": "Steven Spielberg",
           "reasoning": "The passages say so.", "answer": "Ohio", "triples": "",
           "coverage": "0.1", "bridge": "missing", "corroboration": "single_source", "answerability": "0.1",
           "sufficient": "False", "missing_entities": '["Steven Spielberg"]', "missing_relations": "[]",
           "query": "Steven Spielberg birthplace"}
#: The predictors (names in the program) that make the LM calls of each role, read from the programs: PAR2's query
#: role also asks the ESC for its next query when the controller oracle says CONTINUE (``PAR2._decide``).
PREDICTORS = {"par2": {"controller": {"esc"}, "query": {"planner", "esc"}, "writer": {"writer.short.predict"}},
              "seal": {"relevance": {"extract"}, "sufficiency": {"assess"}, "gap": {"gap"},
                       "query": {"micro_query"}, "writer": {"writer.short"}}}
#: Roles that call no LM with every other role oracle: SEAL asks its assessor only about verified facts, and under
#: the relevance oracle it extracts none (``SEAL._sufficient``).
SILENT = {("seal", "sufficiency")}
N = 4


def hook(s):
    lm = DummyLM({"": ANSWERS})
    init_dspy(lm, cache=False)
    return replace(s, roles=Roles(writer=lm))


@pytest.fixture
def run(embedder, monkeypatch):
    import retrieval.retriever
    monkeypatch.setattr(retrieval.retriever, "get_embedder", lambda name: embedder)
    return ladder.main(["--programs", "par2", "seal", "--datasets", "demo", "--train", "0", "--dev", "0",
                        "--test", str(N), "--lm", "openai/unused", "--no-cache", "--no-trace", "--full",
                        "--experiment", "ladder-test"], hook=hook)


@pytest.mark.parametrize("name", ["par2", "seal", "coral", "rag_critic"])
def test_the_arms_are_every_role_oracle_then_each_role_given_back_alone(name):
    roles = programs.oracle_roles(name)
    cells = ladder.arms(name, "musique", full=True)
    assert cells[0].oracle == "all" and ladder.given_back(cells[0]) == ""
    assert [ladder.given_back(c) for c in cells[1:-1]] == list(roles)
    for cell, back in zip(cells[1:-1], roles):
        assert set(cell.oracle.split(",")) == set(roles) - {back}
        assert cell.label == f"{name}+oracle:{cell.oracle}"
    assert cells[-1].oracle == "" and cells[-1].label == name and ladder.given_back(cells[-1]) == "all"
    assert len(ladder.arms(name, "musique", full=False)) == len(roles) + 1


def test_an_arm_calls_the_lm_only_in_the_predictors_of_the_role_given_back(run):
    by_label = {r.cell.label: r for r in run["results"]}
    assert len(by_label) == sum(len(PREDICTORS[p]) + 2 for p in PREDICTORS)  # arm 0, one per role, --full
    for cell, calls in run["calls"].items():
        summary = by_label[cell.label].summary
        assert summary["n"] == N and summary["failed_examples"] == 0
        assert sum(calls.values()) == round(summary["lm_calls"] * N)  # the attribution counts every metered call
        back = ladder.given_back(cell)
        if back == "":
            assert summary["lm_calls"] == 0 and not calls
        elif back != "all":
            assert set(calls) <= PREDICTORS[cell.program][back], (cell.label, calls)
            assert bool(calls) == ((cell.program, back) not in SILENT), (cell.label, calls)
    assert "| par2+oracle:query,writer | controller |" in run["report"]
    assert "- sufficiency: no LM call on these questions" in run["report"]


def test_a_resumed_ladder_counts_the_lm_calls_by_predictor_its_checkpoints_hold(embedder, monkeypatch):
    import retrieval.retriever
    monkeypatch.setattr(retrieval.retriever, "get_embedder", lambda name: embedder)
    lms = []

    def hooked(s):
        s = hook(s)
        lms.append(s.roles.writer)
        return s
    argv = ["--programs", "par2", "--datasets", "demo", "--train", "0", "--dev", "0", "--test", str(N),
            "--lm", "openai/unused", "--no-cache", "--no-trace", "--experiment", "ladder-test"]
    first = ladder.main(argv, hook=hooked)
    second = ladder.main(argv, hook=hooked)
    assert not lms[-1].history  # every question of the second run was read back from its arm's checkpoint
    assert second["calls"] == first["calls"] and sum(map(len, first["calls"].values())) > 0
    assert "read back from a checkpoint written before" not in second["report"]


def test_every_arm_answers_the_same_questions_and_each_drop_is_paired_on_them(run):
    for program in PREDICTORS:
        results = [r for r in run["results"] if r.cell.program == program]
        ids = [[rec["id"] for rec in r.records] for r in results]
        assert all(i == ids[0] for i in ids) and len(ids[0]) == N
        tests = ladder.drops(results[0], results[1:])
        for r in results[1:]:
            row = tests[(r.cell.label, "f1")]
            top = {rec["id"]: rec["f1"] for rec in results[0].records}
            mine = {rec["id"]: rec["f1"] for rec in r.records}
            assert row["n"] == N and row["diff"] == pytest.approx(sum(top[q] - mine[q] for q in top) / N)


def fake(label: str, oracle: str, ems: dict, lm_calls: float = 0.0) -> suite.Result:
    records = [{"id": q, "answer": "x" if em else "y", "em": em, "f1": em, "lm_calls": lm_calls}
               for q, em in ems.items()]
    summary = {"n": len(records), "em": sum(ems.values()) / len(ems), "f1": sum(ems.values()) / len(ems),
               "lm_calls": lm_calls}
    return suite.Result(suite.Cell("par2", "d", oracle=oracle), label, summary, records)


def test_a_drop_pairs_by_question_id_and_holm_runs_over_the_ladders_arms():
    ids = [f"q{i}" for i in range(8)]
    top = fake("all", "all", dict.fromkeys(ids, 1.0))
    # controller given back: wrong on q0..q5, its records in reverse order and q7 missing: paired by id, n = 7
    back_controller = fake("c", "query,writer", {q: float(i > 5) for i, q in reversed(list(enumerate(ids[:7])))},
                           lm_calls=1.0)
    back_query = fake("q", "controller,writer", dict.fromkeys(ids, 0.0))  # wrong on all 8, with no LM call
    back_writer = fake("w", "controller,query", dict.fromkeys(ids, 1.0))  # the all-oracle arm's answers
    tests = ladder.drops(top, [back_controller, back_query, back_writer])
    c, q, w = (tests[(f"par2+oracle:{o}", "em")] for o in ("query,writer", "controller,writer", "controller,query"))
    assert (c["n"], c["diff"], c["only_method"], c["only_baseline"]) == (7, pytest.approx(6 / 7), 6, 0)
    assert (c["p"], q["p"], w["p"]) == (pytest.approx(2 * 0.5 ** 6), pytest.approx(2 * 0.5 ** 8), 1.0)
    # Holm over the ladder's three arms: the smallest p times 3, the next times 2 (kept non-decreasing), then 1
    assert (q["holm_p"], c["holm_p"], w["holm_p"]) == (pytest.approx(3 * q["p"]), pytest.approx(2 * c["p"]), 1.0)
    text = ladder.table([top, back_controller, back_query, back_writer], {})
    assert "- writer: no LM call on these questions: the arm is the all-oracle arm" in text  # same answers, calls
    assert "- query: no LM call on these questions, yet other answers" in text
    assert "- controller:" not in text  # it called the LM
    assert "did not record the same questions" in text


def test_an_arm_notes_its_records_read_back_without_lm_calls_by_predictor():
    top = fake("all", "all", {"q0": 1.0, "q1": 1.0})
    arm = fake("c", "query,writer", {"q0": 1.0, "q1": 0.0}, lm_calls=1.0)
    for rec in top.records:
        rec["lm_calls_by"] = {}
    arm.records[0]["lm_calls_by"] = {"esc": 1}  # q1's record was written before calls were counted by predictor
    text = ladder.table([top, arm], {top.cell: ladder.predictor_calls(top), arm.cell: ladder.predictor_calls(arm)})
    assert "| par2+oracle:query,writer | controller | 2 of 2 | 0 |" in text and text.count("| esc 1 |") == 1
    assert "- par2+oracle:query,writer: 1 record(s) read back from a checkpoint written before" in text
    assert "- par2+oracle:all:" not in text
