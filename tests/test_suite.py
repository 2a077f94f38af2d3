"""Suite runner: cells, pairs, leaderboard and plots on DummyLM; two cells as concurrent Ray tasks through one
local MLflow tracking server."""
import argparse
import ipaddress
import json
import math
import os
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import mlflow
import pytest

from evaluation import leaderboard, tracking

from experiments import suite
from experiments.derived import Derived
from experiments.sessions import Session
from runtime import store


def suite_args(argv: list[str]) -> argparse.Namespace:
    p = suite.parser("suite test")
    p.set_defaults(split="test")
    return p.parse_args(argv)


def make_hook():
    """A session hook that answers every role through one DummyLM; a local function, so Ray pickles it by value
    and runs it in the worker's own process."""
    def hook(s):
        from dspy.utils.dummies import DummyLM

        from runtime.roles import Roles, init_dspy

        lm = DummyLM({"": {"reasoning": "because", "answer": "Paris"}})
        init_dspy(lm, cache=False)
        return replace(s, roles=Roles(writer=lm))
    return hook


def test_plan_expands_grids_per_program_and_pairs_at_the_same_point():
    entry = suite.Entry("seal", ("self_rag", "rag"), ("hotpotqa",), {"k": (1, 3), "loops": (0, 1)})
    cells, pairs = suite.plan((entry,))
    labels = [c.label for c in cells]
    assert labels.count("rag_k1") == 1 and "seal_k3_L1" in labels and len(cells) == 2 * 2 * 2 + 2
    assert ("hotpotqa", suite.Cell("seal", "hotpotqa", (("k", 3), ("loops", 1))),
            suite.Cell("rag", "hotpotqa", (("k", 3),))) in pairs
    only = suite.plan(suite.SUITES["paper"], only_datasets=["click"])[0]
    assert {c.dataset for c in only} == {"click"} and "coral" in {c.program for c in only}


def test_arms_runs_only_the_named_cells_at_the_k_their_entry_gives_them():
    """``--arms``: a table run in parts by arm; a baseline keeps its entry's k (rag_cited at SEAL's 3), a program
    name selects each of its cells, and only the pairs of two selected cells are tested."""
    cells, pairs = suite.plan(suite.SUITES["paper"], only_datasets=["hotpotqa"], only_arms=["rag_cited", "seal",
                                                                                             "self_rag"])
    assert [c.label for c in cells] == ["seal", "self_rag", "rag_cited_k3", "self_rag_k5"]
    assert [(p[1].label, p[2].label) for p in pairs] == [("seal", "self_rag"), ("seal", "rag_cited_k3")]
    one = suite.plan(suite.SUITES["paper"], only_datasets=["hotpotqa"], only_arms=["rag_cited_k3"])[0]
    assert [c.label for c in one] == ["rag_cited_k3"]


def test_the_arms_of_an_entry_run_at_its_methods_k_unless_k_is_given():
    """A baseline runs at its entry's method's k (rag_cited in SEAL's entry at SEAL's 3, named so), each cell's
    session holds the k its program runs at, and ``--k`` puts every arm at that k."""
    cells = suite.plan(suite.SUITES["paper"], only_datasets=["hotpotqa"])[0]
    assert [c.label for c in cells] == ["seal", "self_rag", "crag", "rag_cited_k3", "rag_critic", "rag", "self_rag_k5",
                                         "self_refine", "flare", "metarag", "rag_critic_cot", "rag_cot",
                                         "self_refine_cot"]
    def session(*argv):
        return Session(Derived(suite_args(list(argv)), "short"), None, None, None, None, {}, None)

    base = session()
    assert [suite.cell_session(base, c).args.k for c in cells] == [3, 3, 3, 3, 5, 5, 5, 5, 5, 5, 5, 5, 5]
    given = suite.plan(suite.SUITES["paper"], only_datasets=["hotpotqa"], k=4)[0]
    assert [c.label for c in given] == ["seal", "self_rag", "crag", "rag_cited", "rag_critic", "rag", "self_refine",
                                         "flare", "metarag", "rag_critic_cot", "rag_cot", "self_refine_cot"]
    assert {suite.cell_session(session("--k", "4"), c).args.k for c in given} == {4}
    grid = suite.plan(suite.SUITES["seal-grid"])[0]  # the grid sets k: every arm at the grid's
    assert "rag_cited_k1_L0" not in [c.label for c in grid] and "rag_cited_k1" in [c.label for c in grid]
    par2 = suite.plan(suite.SUITES["paper"], only_datasets=["musique"])[0]
    assert [suite.cell_session(base, c).args.k for c in par2] == [5, None, None, 5, 5, 5, 5, 5]  # direct, cot: none


def test_a_baseline_in_seals_suite_answers_from_seals_k_passages(dummy):
    args = suite_args(["--suite", "seal,rag_cited", "--dataset", "demo", "--train", "0", "--dev", "0", "--test", "2",
                       "--lm", "openai/unused", "--no-cache", "--experiment", "suite-k"])
    out = suite.run_suite(args, hook=make_hook())
    assert [r.cell.label for r in out["results"]] == ["seal", "rag_cited_k3"]
    assert all(len(rec["passages"]) == 3 for r in out["results"] for rec in r.records)
    runs = mlflow.search_runs(experiment_names=["suite-k"])
    assert all('"k": 3' in c for c in runs["params.program_config"].dropna())


def test_every_paper_method_is_paired_with_a_single_pass_under_its_own_writer(embedder, monkeypatch):
    """Issue 61 item 3: the single pass that answers with the method's writer (rag for rag_critic, rag_cot for
    rag_critic_cot and par2, rag_cited for seal), so one pair measures the method and not its writer; and no single
    pass under another writer is paired with a method (issue 75: rag_critic - rag_cot paired two writers)."""
    import programs
    from programs.baselines.rag import RAG
    from programs.coral.mrag import MultilingualRAG
    from programs.shared.writer import writer_form
    from retrieval.corpus import Corpus
    from retrieval.retriever import Retriever
    from tests.test_rag_critic import FIXTURES

    monkeypatch.setenv("RAG_DATA_DIR", str(FIXTURES))  # rag_critic's taxonomy
    retriever = Retriever([Corpus("toy", [{"id": "0", "title": "t", "text": "x"}])], embedder)

    def form(name):
        return writer_form(programs.build(name, search=retriever))
    from experiments.tables.declared import TABLES
    for entry in (*suite.SUITES["paper"], *(e for t in TABLES.values() for e in t.entries)):
        single = [b for b in entry.baselines if programs.spec(b).cls in (RAG, MultilingualRAG)]
        assert all(form(b) == form(entry.method) for b in single), (entry.method, single)
    for entry in suite.SUITES["paper"]:
        assert any(programs.spec(b).cls in (RAG, MultilingualRAG) for b in entry.baselines), entry.method


def test_self_rag_is_compared_where_the_papers_compare_with_it_at_their_k():
    """Issue 75 items 2-3: Self-RAG is SEAL's comparator and one of RAG-Critic's baselines; every arm of RAG-Critic's
    entry runs at the paper's k = 5 (Self-RAG's own is SEAL's 3, so its cell there is named ``self_rag_k5``)."""
    _, pairs = suite.plan(suite.SUITES["paper"], only_datasets=["hotpotqa", "2wiki"])
    against = {(d, m.program, b.label) for d, m, b in pairs}
    for dataset in ("hotpotqa", "2wiki"):
        assert {(dataset, "seal", "self_rag"), (dataset, "rag_critic", "self_rag_k5")} <= against
    base = Session(Derived(suite_args([]), "short"), None, None, None, None, {}, None)
    critic = [c for d, m, c in pairs if m.program.startswith("rag_critic")]
    assert {suite.cell_session(base, c).args.k for c in critic} == {5}


def test_ad_hoc_suite_and_unknown_name():
    (entry,) = suite.entries("rag,direct", "demo")
    assert (entry.method, entry.baselines, entry.datasets) == ("rag", ("direct",), ("demo",))
    with pytest.raises(SystemExit):
        suite.entries("nonsense", None)


def fake(label, dataset, right: list[bool], seconds=2.0, lm_seconds=1.5):
    program, *_ = label.split("_k")
    records = [{"id": f"q{i}", "judge": float(r), "em": float(r)} for i, r in enumerate(right)]
    summary = {"n": len(right), "judge": sum(right) / len(right), "em": sum(right) / len(right), "lm_calls": 2.0,
               "seconds": seconds, "lm_seconds": lm_seconds, "failed_examples": 0}
    return suite.Result(suite.Cell(program, dataset), "run", summary, records)


def test_leaderboard_pairs_are_tested_and_holm_adjusted():
    a = fake("seal", "d", [True] * 8 + [False] * 2)
    b = fake("self_rag", "d", [False] * 8 + [True] * 2)
    c = fake("rag", "d", [True] * 7 + [False] * 3)
    board = leaderboard.report([a, b, c], [("d", a.cell, b.cell), ("d", a.cell, c.cell)], "t")
    vs_b, vs_c = board.pairs
    assert (vs_b["only_method"], vs_b["only_baseline"], vs_b["metric"]) == (8, 2, "judge")
    assert math.isclose(vs_b["diff"], 0.6) and vs_b["ci_low"] < 0.6 < vs_b["ci_high"]
    assert math.isclose(vs_b["holm_p"], min(1.0, 2 * vs_b["mcnemar_p"]))  # the smaller of two p-values
    assert vs_c["holm_p"] == max(vs_c["mcnemar_p"], vs_b["holm_p"])
    assert "| seal | 10 of 10 |" in board.markdown and "25%" in board.markdown  # orchestration = 1 - 1.5/2


def test_an_oracle_row_is_logged_under_a_name_mlflow_accepts():
    from dataclasses import replace

    oracle = fake("crag", "d", [True] * 8 + [False] * 2)
    oracle = suite.Result(replace(oracle.cell, oracle="relevance"), oracle.run_id, oracle.summary, oracle.records)
    base = fake("rag", "d", [True] * 7 + [False] * 3)
    board = leaderboard.report([oracle, base], [("d", oracle.cell, base.cell)], "t")
    assert "| crag+oracle:relevance | 10 of 10 |" in board.markdown  # the table keeps the label as the run names it
    assert "d_crag.oracle:relevance_vs_rag_diff" in board.metrics
    tracking.setup("oracle-row")  # its artifacts in the test's store (set_experiment would put them in ./mlruns)
    with mlflow.start_run():
        leaderboard.log(board, [oracle, base], [("d", oracle.cell, base.cell)])  # MLflow refused "+" before


def test_a_row_whose_gate_rested_is_named_by_what_its_program_ran_as():
    """Issue 61 item 1: the run's tag, the cell table and the pair table name the effective program; metric keys
    stay the cell's."""
    from types import SimpleNamespace

    shown = "par2 (controller at rest = par2_anchor)"
    mlflow.set_experiment("resting-row")
    with mlflow.start_run() as run:
        assert tracking.tag_effective(SimpleNamespace(resting=lambda: None), "par2") == "par2"
        assert tracking.tag_effective(SimpleNamespace(resting=lambda: "controller at rest = par2_anchor"),
                                      "par2") == shown
    assert mlflow.get_run(run.info.run_id).data.tags["effective_program"] == shown
    method, base = replace(fake("par2", "d", [True, False, True]), effective=shown), fake("rag", "d", [True] * 3)
    board = leaderboard.report([method, base], [("d", method.cell, base.cell)], "t")
    assert f"| {shown} | 3 of 3 |" in board.markdown and f"| d | {shown} | rag | judge |" in board.markdown
    assert "d_par2_vs_rag_diff" in board.metrics


def test_suite_runs_cells_into_child_runs_and_resumes_without_lm_calls(dummy):
    args = suite_args(["--suite", "cot,direct", "--dataset", "demo", "--train", "0", "--dev", "0", "--test", "3",
                       "--lm", "openai/unused", "--no-cache", "--experiment", "suite-test"])
    out = suite.run_suite(args, hook=make_hook())
    assert [r.cell.label for r in out["results"]] == ["cot", "direct"]
    assert all(r.summary["n"] == 3 and r.summary["lm_calls"] == 1.0 for r in out["results"])
    again = suite.run_suite(args, hook=make_hook())
    assert [r.records for r in again["results"]] == [r.records for r in out["results"]]
    mlflow.set_tracking_uri(store.tracking_uri())
    runs = mlflow.search_runs(experiment_names=["suite-test"])
    children = runs[runs["tags.mlflow.parentRunId"] == out["run_id"]]
    assert sorted(children["tags.cell"]) == ["cot", "direct"]
    artifacts = {f.path for f in mlflow.MlflowClient().list_artifacts(out["run_id"])}
    assert {"leaderboard.md", "plots"} <= artifacts


@pytest.mark.timeout(900)  # a Ray cluster starting on 2 busy cores
def test_two_ray_cells_log_concurrently_through_one_tracking_server(tmp_path, monkeypatch):
    if not os.environ.get("CI"):  # CI installs the [ray] extra (Makefile): there a missing Ray fails
        ray_constants = pytest.importorskip("ray._private.ray_constants")
    with tracking.server(f"sqlite:///{tmp_path / 'server.db'}", tmp_path / "artifacts") as url:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
        args = suite_args(["--suite", "cot,direct", "--dataset", "demo", "--train", "0", "--dev", "0", "--test", "3",
                           "--lm", "openai/unused", "--no-cache", "--experiment", "ray-test", "--ray"])
        out = suite.run_suite(args, hook=make_hook())
        mlflow.set_tracking_uri(url)
        runs = mlflow.search_runs(experiment_names=["ray-test"])
        log = open(tracking.server.log).read()
    assert {r.cell.label: r.summary["n"] for r in out["results"]} == {"cot": 3, "direct": 3}
    assert len(runs) == 3 and set(runs["status"]) == {"FINISHED"}
    assert (runs["tags.mlflow.parentRunId"] == out["run_id"]).sum() == 2
    assert "database is locked" not in log
    assert len(list((tmp_path / "cache" / "evals").glob("test-*.jsonl"))) == 2  # one checkpoint per cell


def test_a_ray_worker_gets_only_the_variables_a_run_needs():
    env = {"RAG_DATA_DIR": "/d", "RAG_API_KEY": "k", "RAG_SOME_SECRET": "s", "HF_TOKEN": "t", "OPENAI_API_KEY": "o",
           "ANTHROPIC_API_KEY": "a", "MLFLOW_TRACKING_URI": "u", "RAG_CACHE_DIR": "/c", "PATH": "/bin"}
    cluster = suite_args(["--suite", "cot", "--lm", "openai/gpt-4o-mini", "--ray", "ray://head:10001"])
    assert suite.shipped_env(cluster, env) == {"RAG_DATA_DIR": "/d", "RAG_API_KEY": "k", "OPENAI_API_KEY": "o"}
    local = suite_args(["--suite", "cot", "--lm", "openai/x", "--api-base", "http://127.0.0.1:1/v1", "--ray"])
    assert suite.shipped_env(local, env) == {"RAG_DATA_DIR": "/d", "RAG_API_KEY": "k", "RAG_CACHE_DIR": "/c"}


def cluster_hook(marker: str, fail_direct: bool = False):
    """A DummyLM session hook for a Ray worker that records the worker's environment (names only) beside ``marker``,
    and stalls the first worker that makes a second LM call (its pid in ``marker``; the test kills it there), or
    with ``fail_direct`` makes every direct question raise a bug (a prompt without a reasoning field)."""
    def hook(s):
        import os
        import threading

        from dspy.utils.dummies import DummyLM

        from runtime.roles import Roles, init_dspy

        class Stalls(DummyLM):
            calls = 0

            def forward(self, prompt=None, messages=None, **kwargs):
                Stalls.calls += 1
                if fail_direct and "reasoning" not in str(messages):
                    raise ZeroDivisionError("injected bug in the direct cell")
                if Stalls.calls == 2:
                    try:
                        with open(marker, "x") as fh:
                            fh.write(str(os.getpid()))
                        threading.Event().wait()  # until the test kills this worker
                    except FileExistsError:
                        pass
                return super().forward(prompt, messages, **kwargs)

        with open(marker + ".env", "w") as fh:
            fh.write("\n".join(sorted(os.environ)))
        lm = Stalls({"": {"reasoning": "because", "answer": "Paris"}})
        init_dspy(lm, cache=False)
        return replace(s, roles=Roles(writer=lm))
    return hook


def listening(marker: str) -> list:
    """The addresses that processes whose command line holds ``marker`` listen on (TCP, read from ``/proc``)."""
    sockets = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                sockets |= {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
        except OSError:  # ended meanwhile
            continue
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            local, state, inode = row.split()[1], row.split()[3], row.split()[9]
            if state == "0A" and f"socket:[{inode}]" in sockets:  # 0A: LISTEN
                raw = bytes.fromhex(local.split(":")[0])  # host-order 32-bit words
                ip = ipaddress.ip_address(b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4)))
                found.append(getattr(ip, "ipv4_mapped", None) or ip)
    return found


@pytest.fixture
def ray_cluster(monkeypatch):
    """A local Ray cluster (``ray start --head`` on 127.0.0.1, 2 CPUs, a token of its own that this process uses
    while it runs), ended with the process that started it."""
    import secrets
    import shutil
    import subprocess
    import tempfile

    from runtime.lm import _free_port

    ray_constants = pytest.importorskip("ray._private.ray_constants")
    from ray._private.authentication_test_utils import reset_auth_token_state  # Ray's own, for its tests

    port, temp = _free_port(), tempfile.mkdtemp(prefix="ray", dir="/tmp")  # Ray's socket paths must be short
    node_env = {k: v for k, v in os.environ.items()  # a node's own: what a worker gets beyond that is shipped
                if not k.startswith(("RAG_", "HF_", "OPENAI_", "MLFLOW_", "LITELLM_"))}
    token = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}  # the driver's and the nodes'
    node_env |= token | {"RAY_USAGE_STATS_ENABLED": "0", suite.RAY_LOOPBACK: "0"}  # servers on 127.0.0.1 only
    ray = str(Path(sys.executable).with_name("ray"))  # the venv's, whether or not it is on PATH
    head = subprocess.Popen([ray, "start", "--head", "--block", "--node-ip-address",
                             "127.0.0.1", "--port", str(port), "--num-cpus", "2", "--include-dashboard=false",
                             "--disable-usage-stats", "--temp-dir", temp], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=node_env)
    for line in head.stdout:  # ray start says so once the head is up
        if "Ray runtime started" in line:
            break
    else:
        pytest.fail(f"ray start exited {head.wait()}")
    exposed = [str(a) for a in listening(temp) if not a.is_loopback]  # its GCS and raylet are up
    assert not exposed, f"the Ray head listens beyond 127.0.0.1: {exposed}"
    # this process reaches the head on 127.0.0.1, as evaluate.py's does (RAY_LOOPBACK, read when ray was imported)
    monkeypatch.setattr(ray_constants, "ENABLE_RAY_CLUSTER", False)
    before = {key: os.environ.get(key) for key in token}
    os.environ.update(token)
    reset_auth_token_state()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        for key, value in before.items():
            os.environ.pop(key) if value is None else os.environ.update({key: value})
        reset_auth_token_state()
        head.terminate()
        head.wait(timeout=120)
        shutil.rmtree(temp, ignore_errors=True)


@pytest.mark.timeout(900)  # a Ray cluster starting on 2 busy cores
def test_a_cluster_suite_loses_nothing_when_a_worker_dies_and_keeps_the_cells_that_did_not_fail(tmp_path, ray_cluster,
                                                                                             monkeypatch):
    """Two cells on a local Ray cluster, one worker SIGKILLed mid-cell: Ray runs that cell again, and the driver is
    the one writer: each question once in its checkpoint under the driver's cache, one child run per cell, none left
    RUNNING, and the workers get only the variables a run needs. Then a run with one more question where the direct
    cell fails: the cot cell's new answer is kept, the failure is one line, and nothing of direct is lost."""
    import signal
    import threading

    from evaluation.loop import RunStopped

    marker = str(tmp_path / "stalled")
    monkeypatch.setenv("RAG_SOME_SECRET", "x")
    monkeypatch.setenv("HF_TOKEN", "x")
    argv = ["--suite", "cot,direct", "--dataset", "demo", "--train", "0", "--dev", "0", "--lm", "openai/unused",
            "--no-cache", "--experiment", "cluster", "--ray", ray_cluster]
    out = {}
    run = threading.Thread(target=lambda: out.update(suite.run_suite(suite_args(argv + ["--test", "3"]),
                                                                     hook=cluster_hook(marker))))
    run.start()
    while not os.path.exists(marker) or not open(marker).read():  # the worker stalls on its 2nd LM call
        assert run.is_alive(), "the suite ended before a worker stalled"
        run.join(0.05)
    os.kill(int(open(marker).read()), signal.SIGKILL)
    run.join()
    assert {r.cell.label: len(r.records) for r in out["results"]} == {"cot": 3, "direct": 3}
    checkpoints = {f: [json.loads(x)["id"] for x in f.read_text().splitlines()]
                   for f in (tmp_path / "cache" / "evals").glob("test-*.jsonl")}
    assert sorted(map(len, checkpoints.values())) == [3, 3]
    assert all(len(set(ids)) == len(ids) for ids in checkpoints.values())  # nothing duplicated
    mlflow.set_tracking_uri(store.tracking_uri())
    runs = mlflow.search_runs(experiment_names=["cluster"])
    assert len(runs) == 3 and set(runs["status"]) == {"FINISHED"}  # the killed attempt left no run
    shipped = set(open(marker + ".env").read().split())
    assert "RAG_SOME_SECRET" not in shipped and "HF_TOKEN" not in shipped and "RAG_PROJECT_CACHE" not in shipped
    assert "RAG_DATA_DIR" in shipped or "RAG_DATA_DIR" not in os.environ
    cells = {r.cell.label: len(r.records) for r in out["results"]}
    print(f"\ncluster run: worker pid {open(marker).read()} killed mid-cell; records per cell {cells}, checkpoint "
          f"lines {sorted(map(len, checkpoints.values()))}, runs {dict(runs['status'].value_counts())}")

    with pytest.raises(RunStopped, match=r"1 of 2 cells failed \(direct@demo: .*ZeroDivisionError"):
        suite.run_suite(suite_args(argv + ["--test", "4"]), hook=cluster_hook(marker, fail_direct=True))
    after = {f: [json.loads(x)["id"] for x in f.read_text().splitlines()]
             for f in (tmp_path / "cache" / "evals").glob("test-*.jsonl")}
    assert sorted(map(len, after.values())) == [3, 4]  # cot's 4th answer kept, direct's 3 still there
    runs = mlflow.search_runs(experiment_names=["cluster"])
    assert sorted(runs["tags.cell"].dropna()) == ["cot", "cot", "direct"]
    assert sorted(runs["status"]) == ["FAILED"] + ["FINISHED"] * 4
    print(f"failing cell: checkpoint lines {sorted(map(len, after.values()))}, "
          f"runs {dict(runs['status'].value_counts())}")


def test_plots_cover_frontier_languages_and_budgets():
    from evaluation import plots

    def result(program, config, judge, lang_scores):
        summary = {"n": 4, "judge": judge, "seconds": 3.0, "prompt_tokens": 900.0, "completion_tokens": 20.0,
                   "lm_calls": 2.0 + dict(config).get("loops", 0)}
        summary |= {f"judge_by_source_lang/{lang}": v for lang, v in lang_scores.items()}
        return suite.Result(suite.Cell(program, "d", config), "run", summary, [])

    results = [result("seal", (("k", 3), ("loops", loops)), 0.2 + loops / 10, {"en": 0.5, "ko": 0.25})
               for loops in (0, 1, 3)] + [result("rag", (("k", 3),), 0.3, {"en": 0.75, "ko": 0.0})]
    figures = plots.figures(results)
    for _, fig in figures:
        plots.close(fig)
    names = [name for name, _ in figures]
    assert names == ["plots/d_frontier.png", "plots/d_languages.png", "plots/d_budgets.png"]
    assert plots.languages("d", [result("rag", (), 0.3, {"en": 1.0})]) is None  # one language: no bars


def test_frontier_bars_are_the_bootstrap_ci_of_the_per_question_scores():
    from evaluation import plots
    from evaluation.stats import bootstrap_ci

    judged = [1.0] * 9 + [0.0] * 21
    records = [{"id": f"q{i}", "judge": v} for i, v in enumerate(judged)]
    summary = {"n": 30, "judge": 0.3, "seconds": 2.0, "prompt_tokens": 500.0, "completion_tokens": 10.0}
    cells = [suite.Result(suite.Cell("rag", "d"), "run", summary, records),
             suite.Result(suite.Cell("cot", "d"), "run", dict(summary, judge=0.5), [])]  # no records: no bar
    fig = plots.frontier("d", cells)
    try:
        bars = [container.lines[2][0].get_segments()[0] for container in fig.axes[0].containers]
    finally:
        plots.close(fig)
    _, low, high = bootstrap_ci(judged)
    assert 0.0 < low < 0.3 < high < 1.0
    assert [tuple(point[1] for point in bar) for bar in bars] == [(low, high), (0.5, 0.5)]


def test_each_suite_cell_logs_its_own_unreadable_verdicts(dummy):
    def hook(s):
        from dspy.utils.dummies import DummyLM

        from evaluation.metrics import Judge
        from evaluation.task_metrics import answer_metrics
        from runtime.roles import Roles, init_dspy

        lm = DummyLM({"": {"reasoning": "because", "answer": "Lyon"}})
        init_dspy(lm, cache=False)
        judge = Judge(DummyLM({"": {"verdict": "yes"}}))  # no `same` field: every verdict is unparseable
        return replace(s, roles=Roles(writer=lm), judge=judge, metrics=answer_metrics(s.bundle.task, judge))

    args = suite_args(["--suite", "cot,direct", "--dataset", "demo", "--train", "0", "--dev", "0", "--test", "3",
                       "--lm", "openai/unused", "--no-cache", "--judge", "--experiment", "suite-judge"])
    out = suite.run_suite(args, hook=hook)
    key = "judge_errors_by_class/UnreadableVerdict"
    assert [r.summary[key] for r in out["results"]] == [3, 3]
    assert all(r["judge"] is None for result in out["results"] for r in result.records)  # no verdict, no score
    mlflow.set_tracking_uri(store.tracking_uri())
    runs = mlflow.search_runs(experiment_names=["suite-judge"])
    assert sorted(runs[f"metrics.test_{key}"].dropna()) == [3, 3]


def test_f1_is_paired_beside_a_primary_metric_at_the_floor():
    def graded(label, f1s):
        records = [{"id": f"q{i}", "em": 0.0, "f1": f} for i, f in enumerate(f1s)]
        return suite.Result(suite.Cell(label, "d"), "run", {"n": len(f1s), "em": 0.0, "f1": sum(f1s) / len(f1s)},
                            records)

    method, base = graded("seal", [0.6, 0.5, 0.7, 0.4, 0.5, 0.6]), graded("rag", [0.1, 0.2, 0.1, 0.0, 0.3, 0.6])
    board = leaderboard.report([method, base], [("d", method.cell, base.cell)], "t")
    em, f1 = board.pairs
    assert (em["metric"], em["test"], em["p"], em["diff"]) == ("em", "McNemar", 1.0, 0.0)  # EM cannot tell them apart
    assert (f1["metric"], f1["test"], f1["only_method"], f1["only_baseline"]) == ("f1", "paired t", 5, 0)
    assert f1["p"] < 0.05 and f1["holm_p"] == f1["p"]  # its own family: not adjusted by the EM test
    assert "d_seal_vs_rag_f1_ttest_p" in board.metrics and "| paired t |" in board.markdown


def test_a_cell_that_left_questions_unanswered_is_incomplete_on_its_row_and_runs(dummy):
    """Issue 73: a suite cell whose judge could not be reached for one question logged its scores as if complete,
    its run FINISHED. Its leaderboard row says how many it answered of those asked, its run and the suite's end
    FAILED tagged ``incomplete``."""
    def hook(s):
        from dspy.utils.dummies import DummyLM
        from dspy.utils.exceptions import LMTransportError

        from runtime.roles import Roles, init_dspy

        lm = DummyLM({"": {"reasoning": "because", "answer": "Lyon"}})
        init_dspy(lm, cache=False)

        def judge(example, pred, trace=None):
            if example.id == s.splits.test[0].id:
                raise LMTransportError("connection refused")
            return 1.0
        return replace(s, roles=Roles(writer=lm), judge=judge, metrics={"judge": judge})

    args = suite_args(["--suite", "cot,direct", "--dataset", "demo", "--train", "0", "--dev", "0", "--test", "3",
                       "--lm", "openai/unused", "--no-cache", "--experiment", "suite-incomplete"])
    with tracking.incomplete_runs() as left, pytest.warns(RuntimeWarning, match="transient errors"):
        out = suite.run_suite(args, hook=hook)
    assert [(r.summary["n"], r.summary["answered"]) for r in out["results"]] == [(3, 2), (3, 2)]
    assert "| cot | 2 of 3, incomplete |" in out["leaderboard"].markdown
    mlflow.set_tracking_uri(store.tracking_uri())
    runs = {r.info.run_name: r for r in mlflow.search_runs(experiment_names=["suite-incomplete"], output_format="list")}
    assert {name: (r.info.status, r.data.tags["incomplete"]) for name, r in runs.items()} == {
        "cot-demo": ("FAILED", "test: 2 answered of 3 asked"), "direct-demo": ("FAILED", "test: 2 answered of 3 asked"),
        "suite-cot,direct": ("FAILED", "cot-demo test: 2 answered of 3 asked; direct-demo test: 2 answered of 3 asked")}
    assert left == [f"run {out['run_id']} (suite-cot,direct): " + runs["suite-cot,direct"].data.tags["incomplete"]]


def test_a_pair_counts_the_questions_its_two_runs_answered_differently():
    """Self-Refine on the 0.5B accepted 108 of 110 drafts: it ran as rag, which two close scores do not say. A pair
    counts the questions whose answers differ by normalised text, a circular question once whichever copy differs,
    over the questions both runs scored only."""
    def run(label, answers):
        records = [{"id": i, "base_id": i.split("#")[0], "answer": a, "em": None if a is None else float(a == "Paris")}
                   for i, a in answers.items()]
        return suite.Result(suite.Cell(label, "d"), "run", {"n": 4, "em": 0.5}, records)

    method = run("self_refine", {"q0": "Paris.", "q1#0": "Lyon", "q1#1": "Nice", "q2": "Rome", "q3": "Oslo",
                                 "q4": None})
    base = run("rag", {"q0": "the paris", "q1#0": "Lyon", "q1#1": "Lyon", "q2": "Milan", "q4": "Bern"})
    board = leaderboard.report([method, base], [("d", method.cell, base.cell)], "t")
    assert [row["answers_differ"] for row in board.pairs] == [2]  # q1 and q2; q0 the same text; q3, q4 not paired
    assert "| answers differ |" in board.markdown and "| d | self_refine | rag | em | 3 | 2 |" in board.markdown
