"""The SEAL grid's bookkeeping: its cells, the paired comparisons with Holm across the grid, replacement counts."""
import math

from scripts.seal_grid import cells, comparisons, replacements
from tests.test_pool import pool_dir  # noqa: F401 (fixture)


def rec(i, judge, precision, replaced=()):
    return {"id": f"q{i}", "judge": judge, "title_precision": precision, "title_recall": precision,
            "title_f1": precision, "trace": {"replaced": list(replaced)}}


def test_cells_run_rag_once_per_k():
    assert cells(["seal", "crag", "rag"], [1, 3], [0, 1]) == [
        ("rag", 1, None), ("rag", 3, None), ("seal", 1, 0), ("crag", 1, 0), ("seal", 1, 1), ("crag", 1, 1),
        ("seal", 3, 0), ("crag", 3, 0), ("seal", 3, 1), ("crag", 3, 1)]


def test_comparisons_pair_seal_with_every_arm_and_correct_across_the_grid():
    grid = cells(["seal", "self_rag", "rag"], [3], [0, 1])
    records = {"seal_k3_L0": [rec(i, 1.0 if i < 6 else 0.0, 1.0) for i in range(10)],
               "seal_k3_L1": [rec(i, 1.0, 1.0, [1]) for i in range(10)],
               "self_rag_k3_L0": [rec(i, 0.0, 0.5) for i in range(10)],
               "self_rag_k3_L1": [rec(i, 0.0, 0.5) for i in range(10)],
               "rag_k3": [rec(i, 0.0, 1.0) for i in range(10)]}
    rows = comparisons(records, grid)
    # self_rag at L0 and L1, rag paired with seal at both L: 4 pairs x 4 metrics
    assert len(rows) == 16 and {(r["vs"], r["L"]) for r in rows} == {("self_rag", "0"), ("self_rag", "1"),
                                                                     ("rag", "0"), ("rag", "1")}
    judge = next(r for r in rows if r["vs"] == "rag" and r["L"] == "1" and r["metric"] == "judge")
    assert judge["diff"] == 1.0 and judge["test"] == "McNemar 10/0" and judge["p_holm"] >= judge["p"]
    same = next(r for r in rows if r["vs"] == "rag" and r["metric"] == "P@k")
    assert math.isnan(same["p"]) and (same["low"], same["high"]) == (0.0, 0.0)  # no difference: no test
    assert replacements(records["seal_k3_L1"]) == {"replaced_per_loop": 1.0, "loops_replacing": 1.0, "repairs": 10}
    assert replacements(records["seal_k3_L0"]) == {}


def test_grid_runs_every_arm_in_the_pool_and_logs_one_run(pool_dir, embedder, monkeypatch, capsys):
    import mlflow
    from dspy.utils.dummies import DummyLM

    import scripts.seal_grid as grid
    from optimizers import cli
    from programs.retrieval import Retriever
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
    monkeypatch.setattr(cli, "make_lm", lambda *a, **k: lm)
    monkeypatch.setattr(cli, "Retriever", lambda corpora, *a, **kw: Retriever(corpora, embedder))
    summaries = grid.main(["--n", "2", "--ks", "2", "--budgets", "0", "1", "--data-dir", str(pool_dir),
                           "--ledger-to-writer"])
    assert set(summaries) == {"rag_k2", "seal_k2_L0", "self_rag_k2_L0", "crag_k2_L0", "seal_ledger_k2_L0",
                              "seal_k2_L1", "self_rag_k2_L1", "crag_k2_L1", "seal_ledger_k2_L1"}
    assert summaries["seal_k2_L1"]["replaced_per_loop"] >= 0 and summaries["rag_k2"]["em"] == 0.5  # 1 of 2 golds is Lyon
    assert all(s["failed_examples"] == 0 for s in summaries.values())
    out = capsys.readouterr().out
    assert "corpus=multihop_pool" in out and "| seal vs | metric |" in out and "| crag | 2 | 1 |" in out
    run = mlflow.search_runs(experiment_names=["seal-grid"], output_format="list")[0]
    assert "seal_k2_L1_citation_precision" in run.data.metrics and "grid_k" in run.data.params
