"""Scripts reuse the toolkit's flags (issue 74 item 4): no comparison script declares its own copy of a flag the shared
parser declares, and each refuses in one line what ``evaluate.py --suite`` refuses (``cli.APPLIES``, ``cli.NEEDS``)
and the settings it sets itself."""
import ast
from pathlib import Path

import pytest

from experiments import eval_run, suite
from experiments.cli import add_flags
from optimizers import settings as compile_settings

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
COMPARISONS = ("seal_grid", "coral_compare", "par2_compare", "rag_critic_compare", "xrag_eval", "ladder", "ceiling",
               "decision_ladder", "optimizer_table")
#: The benchmarks and tools that still declare their own copy of a shared flag (issue 74): this list only shrinks.
LEFT = {"bench_ann": {"--out"}, "bench_engines": {"--rounds", "--threads", "--out"},
        "bench_lm_path": {"--train", "--k", "--loops", "--lm", "--out", "--demos"},
        "bench_milvus": {"--dataset", "--embedder", "--k"}, "bench_retrieval": {"--embedder"},
        "bench_retrievers": {"--datasets", "--rerank-depth", "--lm"},
        "bench_threads": {"--threads", "--program", "--dataset", "--lm", "--api-base", "--out"},
        "bench_tracing": {"--program", "--lm"}, "build_index": {"--out", "--embedder", "--index"},
        "chaos_run": {"--program", "--embedder", "--seed"}, "check_mlflow_ui": {"--experiment"},
        "critic_auc": {"--datasets", "--candidates", "--lm", "--k", "--out"},
        "critic_eval": {"--data-dir", "--experiment"}, "gold_span_cut": {"--data-dir"},
        "retrieval_difficulty": {"--dataset", "--k", "--embedder", "--data-dir"},
        "xrag_build": {"--lm", "--api-base", "--data-dir", "--seed", "--out"}}


def shared_flags() -> set[str]:
    """Every flag evaluate.py and optimize.py declare."""
    p = eval_run.parser("x")
    add_flags(p, (compile_settings.OPTIMIZER, *compile_settings.SETTINGS, compile_settings.TEACHER,
                  compile_settings.OUT))
    return {o for action in p._actions for o in action.option_strings if o.startswith("--")}


def declared(path: Path) -> set[str]:
    """The flags a script's own ``add_argument`` calls declare."""
    return {a.value for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument"
            for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)}


def test_no_script_declares_its_own_copy_of_a_shared_flag():
    shared = shared_flags()
    copies = {f.stem: declared(f) & shared for f in sorted(SCRIPTS.glob("*.py"))}
    assert {name: flags for name, flags in copies.items() if flags - LEFT.get(name, set())} == {}
    assert all(not copies[name] for name in COMPARISONS)
    assert all(copies[name] for name in LEFT)  # a script that stopped is taken off the list


@pytest.mark.parametrize("script, argv, said", [
    ("seal_grid", ["--program", "rag"], "--program does not apply to evaluate.py --suite"),
    ("seal_grid", ["--k", "3"], "--k does not apply to this script"),
    ("seal_grid", ["--dataset", "demo"], "--dataset demo: the grid's title metrics need a multi-hop dataset"),
    ("coral_compare", ["--program", "rag"], "--program does not apply"),
    ("par2_compare", ["--suite", "paper"], "--suite does not apply to this script"),
    ("rag_critic_compare", ["--judge-lm", "x/y"], "--judge-lm needs --judge"),
    ("rag_critic_compare", ["--methods", "rag"], "--methods does not apply to this script"),
    ("xrag_eval", ["--dataset", "demo"], "--dataset does not apply to this script"),
    ("ladder", ["--ray"], "--ray does not apply to this script"),
    ("ceiling", ["--mc-calibration", "4"], "--mc-calibration needs --mc-scoring pride"),
    ("decision_ladder", ["--program", "crag", "--baseline", "rag_cited", "--ray"], "--ray does not apply to this script"),
    ("decision_ladder", ["--program", "crag", "--baseline", "rag_cited", "--split", "dev"],
     "--split does not apply to this script"),
    ("decision_ladder", ["--program", "crag", "--baseline", "rag_cited", "--judge-lms", "a/b"],
     "--judge-lms needs --judge"),
    ("optimizer_table", ["--program", "rag", "--suite", "paper"], "--suite does not apply to this script"),
    ("optimizer_table", ["--program", "rag", "--split", "dev"], "--split does not apply to this script"),
    ("optimizer_table", ["--program", "rag", "--rerank-depth", "30"], "--rerank-depth needs --rerank"),
])
def test_a_comparison_script_refuses_in_one_line_what_it_would_not_run(script, argv, said, monkeypatch, capsys):
    """Before, each of these was accepted and changed nothing (or was unknown to seal_grid's own parser)."""
    module = __import__(f"scripts.{script}", fromlist=["main"])

    def started(*a, **kw):
        raise AssertionError("the run started")
    for holder in (module, suite):
        for name in ("session", "run_suite"):
            if hasattr(holder, name):
                monkeypatch.setattr(holder, name, started)
    with pytest.raises(SystemExit) as stop:
        module.main(argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and said in err and len(err.strip().splitlines()) == 1


def test_the_seal_grid_runs_a_suite_with_the_shared_flags_at_its_own_defaults(monkeypatch):
    import scripts.seal_grid as grid

    seen = {}
    monkeypatch.setattr(grid.suite, "run_suite", lambda args, custom, report: seen.update(args=args, entry=custom[0])
                        or {"results": []})
    grid.main(["--retriever", "bm25", "--judge-lm", "openai/judge", "--dev", "4", "--ks", "2", "--budgets", "1",
               "--ledger-to-writer"])
    args, entry = seen["args"], seen["entry"]
    assert (args.retriever, args.judge_lm, args.dev, args.train, args.test, args.split) == ("bm25", "openai/judge", 4,
                                                                                          0, 0, "dev")
    assert (args.suite, args.dataset, args.corpus, args.experiment, args.judge, args.no_cache) == (
        "seal-grid", "hotpotqa", "multihop_pool", "seal-grid", True, True)
    # --ledger-to-writer adds the seal_ledger rows; seal's own rows keep the writer that sees passages only
    assert entry.baselines[-1] == "seal_ledger" and not args.ledger_to_writer
    assert entry.grid == {"k": (2,), "loops": (1,)}
