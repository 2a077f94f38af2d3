"""The decision ladder: every rung a child run paired with the baseline, fused gates fitted on dev only, the
oracle rung marked, and the writer the same LM throughout."""
import json
import math

import mlflow
import pytest

from experiments import sessions
from retrieval.retriever import Retriever
from tests.test_decisions import RelevanceLM
from tests.test_seal import ANSWER

DEMO = "data/demo/multihop.jsonl"


def gold_titles() -> set[str]:
    with open(DEMO, encoding="utf-8") as f:
        return {t for line in f for t in json.loads(line)["gold_titles"]}


@pytest.fixture
def ladder_lm(embedder, monkeypatch):
    """CRAG's relevance decisions with P(yes) 0.8 on gold titles and 0.3 elsewhere; the writer answers "Ohio"."""
    import scripts.decision_ladder as ladder

    with open("data/demo/multihop_corpus.jsonl", encoding="utf-8") as f:
        titles = [json.loads(line)["title"] for line in f]
    gold = gold_titles()
    lm = RelevanceLM({"`[[ ## grade ## ]]`": {"grade": "ambiguous"},
                      "[[ ## earlier_queries ## ]]": {"query": "another search"}, ANSWER: {"answer": "Ohio [1]"}},
                     {t: 0.8 if t in gold else 0.3 for t in titles})
    made = []

    def make_lm(name, *args, **kwargs):
        made.append(name)
        return lm
    monkeypatch.setattr(sessions, "make_lm", make_lm)
    monkeypatch.setattr(sessions, "Retriever", lambda corpora, *a, **kw: Retriever(corpora, embedder))
    return ladder, made


def test_every_rung_is_a_child_run_paired_with_the_baseline(ladder_lm, capsys):
    ladder, made = ladder_lm
    out = ladder.main(["--program", "crag", "--baseline", "rag_cited", "--dataset", "demo", "--k", "2",
                       "--loops", "1", "--train", "0", "--dev", "4", "--test", "3", "--critic-lm", "fake:critic"])
    labels = [r.cell.label for r in out["results"]]
    assert labels == ["rag_cited_k2", "crag_k2_L1_generate", "crag_k2_L1_fused", "crag_k2_L1_fused_critic",
                      "crag_k2_L1_oracle+oracle:relevance"]
    assert "fake:critic" in made  # the fused-critic rung's decisions; the writer stays --lm
    pairs = out["leaderboard"].markdown.split("Method vs baseline")[1]
    assert pairs.count("| rag_cited_k2 | em |") == 4 and pairs.count("| rag_cited_k2 | f1 |") == 4  # every rung, EM and F1
    runs = mlflow.search_runs(experiment_names=["agentic-rag"], output_format="list")
    parent = next(r for r in runs if r.info.run_id == out["run_id"])
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert len(children) == 5 and {c.data.params["oracle"] for c in children} == {"", "relevance"}
    fit = json.loads(open(mlflow.artifacts.download_artifacts(
        run_id=parent.info.run_id, artifact_path="calibration/fused/grade_gate.json")).read())
    assert fit["n"] > 0 and 0 < fit["positives"] < fit["n"] and fit["auc"] > 0.5  # on dev decisions
    assert not math.isclose(fit["thresholds"]["upper"], 2 / 3)  # fitted, not the paper's fixed value


def test_the_ladder_sets_decisions_and_oracle_itself(ladder_lm, capsys):
    ladder, _ = ladder_lm
    base = ["--program", "crag", "--baseline", "rag_cited", "--dataset", "demo", "--dev", "2", "--test", "2"]
    for extra, message in ((["--oracle", "relevance"], "--oracle does not apply to this script (it sets it"), ([], "needs --critic-lm"),
                           (["--rungs", "fused", "--dev", "0"], "pass --dev")):
        with pytest.raises(SystemExit) as stop:
            ladder.main(base + extra)
        assert stop.value.code == 2 and message in capsys.readouterr().err


def test_a_fused_rung_that_fits_no_gate_stops_instead_of_running_on_the_fixed_thresholds(ladder_lm, monkeypatch,
                                                                                         capsys):
    ladder, _ = ladder_lm  # e.g. dev questions whose gold passages the labelling cannot see
    monkeypatch.setattr(ladder, "calibrate_decisions", lambda *a, **kw: {"grade_gate": {
        "skipped": "a threshold needs both positive and negative labelled decisions", "n": 0}})
    with pytest.raises(SystemExit) as stop:
        ladder.main(["--program", "crag", "--baseline", "rag_cited", "--dataset", "demo", "--k", "2", "--loops", "1",
                     "--train", "0", "--dev", "2", "--test", "2", "--rungs", "fused"])
    assert stop.value.code == 2 and "fused rung fitted none of its gates" in capsys.readouterr().err


def test_a_resumed_ladder_reuses_the_gates_it_fitted_on_dev(ladder_lm, monkeypatch, capsys):
    from decoding.decisions import gates

    ladder, _ = ladder_lm
    argv = ["--program", "crag", "--baseline", "rag_cited", "--dataset", "demo", "--k", "2", "--loops", "1",
            "--train", "0", "--dev", "4", "--test", "2", "--rungs", "fused"]
    states, run_cell = [], ladder.suite.run_cell

    def recording(s, cell, *args, program=None, **kwargs):
        if program is not None:
            states.append(gates(program)["grade_gate"].dump_state())
        return run_cell(s, cell, *args, program=program, **kwargs)
    monkeypatch.setattr(ladder.suite, "run_cell", recording)
    ladder.main(argv)
    capsys.readouterr()

    def refit(*args, **kwargs):
        raise AssertionError("fitted again")
    monkeypatch.setattr(ladder, "calibrate_decisions", refit)
    ladder.main(argv)
    assert "gates fitted on dev reused" in capsys.readouterr().err
    assert states[0]["weights"] is not None and states[1] == states[0]  # fitted (not the defaults), then reused


def test_the_baseline_must_answer_with_the_methods_writer(ladder_lm, monkeypatch, capsys):
    """Issue 61 item 3: par2's rungs against plain rag would also differ in the chain of thought (rag_critic's
    against rag_cot, issue 75: it drafts with rag's writer), crag's in the cited answer; the ladder stops and names
    the baseline's variant with the method's writer."""
    from experiments import suite
    from tests.test_rag_critic import FIXTURES

    ladder, _ = ladder_lm
    monkeypatch.setenv("RAG_DATA_DIR", str(FIXTURES))  # rag_critic's taxonomy
    base = ["--dataset", "demo", "--train", "0", "--dev", "2", "--test", "2", "--rungs", "generate"]
    for program, baseline, fix in (("rag_critic", "rag_cot", "use --baseline rag"),
                                   ("par2", "rag", "use --baseline rag_cot"), ("crag", "rag", "use --baseline rag_cited")):
        with pytest.raises(SystemExit) as stop:
            ladder.main(["--program", program, "--baseline", baseline, *base])
        assert stop.value.code == 2 and fix in capsys.readouterr().err
    args = suite.parser("x").parse_args(["--program", "rag_critic", *base[:-2]])
    s = sessions.session(args, True)
    for program, baseline in (("rag_critic", "rag"), ("self_refine", "rag"), ("rag_critic_cot", "rag_cot"),
                              ("self_refine_cot", "rag_cot"), ("par2", "rag_cot"),
                              ("coral", "rag"), ("seal", "rag_cited")):
        ladder.check_same_writer(s, program, baseline)  # passes: no exit
