"""The SEAL grid's bookkeeping: its cells, the paired comparisons with Holm across the grid, replacement counts."""
import math

from scripts.seal_grid import cells, comparisons, replacements


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
