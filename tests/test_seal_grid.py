"""The SEAL grid's bookkeeping: its cells, the paired comparisons with Holm across the grid, replacement counts."""
import math

import pytest

from experiments import suite
from scripts.seal_grid import comparisons, replacements
from tests.test_pool import pool_dir  # noqa: F401 (fixture)


def rec(i, precision, replaced=()):
    return {"id": f"q{i}", "title_precision": precision, "title_recall": precision, "title_f1": precision,
            "trace": {"replaced": list(replaced)}}


def result(program, config, records):
    return suite.Result(suite.Cell(program, "hotpotqa", tuple(config.items())), "run", {}, records)


def test_the_grid_runs_the_single_pass_arm_once_per_k():
    entry = suite.Entry("seal", ("crag", "rag_cited"), ("hotpotqa",), {"k": (1, 3), "loops": (0, 1)})
    cells, pairs = suite.plan((entry,))
    assert [c.label for c in cells if c.program == "rag_cited"] == ["rag_cited_k1", "rag_cited_k3"]
    assert len(cells) == 2 * 2 * 2 + 2 and len(pairs) == 2 * 2 * 2  # seal paired with both arms at every (k, L)


def test_comparisons_pair_seal_with_every_arm_and_correct_across_the_grid():
    results = [result("seal", {"k": 3, "loops": 0}, [rec(i, 1.0 if i < 6 else 0.5) for i in range(10)]),
               result("seal", {"k": 3, "loops": 1}, [rec(i, 1.0, [1]) for i in range(10)]),
               result("self_rag", {"k": 3, "loops": 0}, [rec(i, 0.5) for i in range(10)]),
               result("self_rag", {"k": 3, "loops": 1}, [rec(i, 0.5) for i in range(10)]),
               result("rag_cited", {"k": 3}, [rec(i, 1.0) for i in range(10)])]
    rows = comparisons(results)
    # self_rag at L0 and L1, rag_cited paired with seal at both L: 4 pairs x 3 title metrics
    assert len(rows) == 12 and {(r["vs"], r["L"]) for r in rows} == {("self_rag", 0), ("self_rag", 1),
                                                                     ("rag_cited", 0), ("rag_cited", 1)}
    worse = next(r for r in rows if r["vs"] == "rag_cited" and r["L"] == 0 and r["metric"] == "P@k")
    assert worse["diff"] == pytest.approx(-0.2) and worse["p"] < 0.05  # 4 of 10 at 0.5
    assert worse["p_holm"] >= worse["p"]
    same = next(r for r in rows if r["vs"] == "rag_cited" and r["L"] == 1 and r["metric"] == "P@k")
    assert math.isnan(same["p"]) and (same["low"], same["high"]) == (0.0, 0.0)  # no difference: no test
    assert replacements(results[1].records) == {"replaced_per_loop": 1.0, "loops_replacing": 1.0, "repairs": 10}
    assert replacements(results[0].records) == {}


def test_grid_runs_every_arm_in_the_pool_and_logs_one_run(pool_dir, embedder, monkeypatch, capsys):
    import mlflow
    from dspy.utils.dummies import DummyLM

    import scripts.seal_grid as grid
    from experiments import sessions
    from retrieval.retriever import Retriever
    from tests.test_seal import ANSWER, ASSESS, GAP, INSUFFICIENT, QUERY, Queue

    lm = DummyLM({"`[[ ## triples ## ]]`": Queue({"triples": "Blue Fox | is a | painting"}),
                  ASSESS: Queue(INSUFFICIENT), GAP: Queue({"missing_entities": '["Ana Berg"]',
                                                          "missing_relations": '["birthplace"]'}),
                  "`[[ ## relevant ## ]]`": Queue({"relevant": "False", "support": "none", "usefulness": "1",
                                                   "next_query": "Ana Berg painter"}),
                  "`[[ ## grade ## ]]`": Queue({"grade": "incorrect"}),
                  "[[ ## earlier_queries ## ]]": Queue({"query": "Ana Berg painter birthplace"}),
                  QUERY: Queue({"query": "Ana Berg birthplace"}), ANSWER: Queue({"answer": "Lyon [1]"}),
                  "`[[ ## same ## ]]`": Queue({"same": "False"})})
    monkeypatch.setattr(sessions, "make_lm", lambda *a, **k: lm)
    monkeypatch.setattr(sessions, "Retriever", lambda corpora, *a, **kw: Retriever(corpora, embedder))
    summaries = grid.main(["--dev", "2", "--ks", "2", "--budgets", "0", "1", "--data-dir", str(pool_dir),
                           "--ledger-to-writer"])
    assert set(summaries) == {"rag_cited_k2", "seal_k2_L0", "self_rag_k2_L0", "crag_k2_L0", "seal_ledger_k2_L0",
                              "seal_k2_L1", "self_rag_k2_L1", "crag_k2_L1", "seal_ledger_k2_L1"}
    assert summaries["seal_k2_L1"]["replaced_per_loop"] >= 0
    assert summaries["rag_cited_k2"]["em"] == 0.5  # 1 of 2 golds is Lyon
    assert all(s["failed_examples"] == 0 for s in summaries.values())
    out = capsys.readouterr().out
    assert "corpus multihop_pool" in out and "| seal vs | metric |" in out and "| crag_k2_L1 | 2 of 2 |" in out
    runs = mlflow.search_runs(experiment_names=["seal-grid"], output_format="list")
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    assert len(runs) == 1 + 9 and {r.data.tags["mlflow.parentRunId"] for r in runs if r != parent} == {
        parent.info.run_id}
    children = {r.data.tags["cell"]: r for r in runs if r != parent}
    assert "dev_citation_precision" in children["seal_k2_L1"].data.metrics
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(parent.info.run_id)}
    assert {"leaderboard.md", "report.md"} <= artifacts


def test_the_grid_runs_on_the_dataset_asked_for(monkeypatch):
    import scripts.seal_grid as grid

    seen = {}

    def fake(args, custom, report):
        seen.update(dataset=args.dataset, entry=custom[0].datasets)
        return {"results": []}
    monkeypatch.setattr(grid.suite, "run_suite", fake)
    grid.main(["--dataset", "musique", "--ks", "3", "--budgets", "0", "1"])
    assert seen == {"dataset": "musique", "entry": ("musique",)}


def test_an_unanswered_question_is_left_out_of_the_pairs_not_scored_zero():
    """Issue 73: a question one arm left unanswered (None) was paired as 0 with the other arm's score."""
    unanswered = {"id": "q0", "title_precision": None, "title_recall": None, "title_f1": None, "retryable": True}
    results = [result("seal", {"k": 3, "loops": 0}, [unanswered] + [rec(i, 1.0) for i in range(1, 6)]),
               result("rag_cited", {"k": 3}, [rec(i, 1.0) for i in range(6)])]
    rows = comparisons(results)
    assert {(r["n"], r["seal"], r["diff"]) for r in rows} == {(5, 1.0, 0.0)}  # the 5 questions both scored
