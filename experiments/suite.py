"""Suites: every method with its paper baselines on its benchmarks, one MLflow parent run, one child run per cell.

A suite is data: :class:`Entry` (method, baselines, datasets, optional grid of ``k``/``loops`` values). Adding a
program to the comparison is one ``Entry`` line in ``SUITES``. The arms of one entry run at the same k: ``--k``
when given, else the grid's, else the method's own, so a baseline runs at its method's k (in SEAL's entry
``rag_cited`` runs at SEAL's k = 3, its cell named ``rag_cited_k3``; a cell names k only where it is not the
program's own). ``python evaluate.py --suite paper --test 30`` runs
every (program, dataset[, grid point]) cell on the same seeded split with the same LMs and embedder, each cell
checkpointed per example (an interrupted suite re-run makes no repeated LM calls), then logs the leaderboard
(``evaluation.leaderboard``) and plots to the parent run. ``--ray [ADDRESS]`` runs the cells as Ray tasks.

The comparison scripts (``scripts/*_compare.py``, ``seal_grid.py``, ``xrag_eval.py``) are thin uses of the same
machinery: they open a parent run, evaluate their arms with :func:`run_cell` (their own programs and questions
where a method needs them: compiled variants, balanced slices) and log :func:`log_leaderboard`, then add only
their method's diagnostics."""
from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import urllib.parse
from dataclasses import dataclass, field, replace
from pathlib import Path

import mlflow

import programs
from experiments import cli
from evaluation import leaderboard, settings as evaluation_settings, tracking
from evaluation.settings import named
from experiments.cli import fail
from experiments.derived import program_oracle
from experiments.sessions import Session, oracle_suffix, session
from experiments.stages import run_stage
from evaluation.loop import Checkpoint, Collected, RunStopped, is_record
from runtime.files import write_whole
from runtime.paths import PROJECT_ROOT, project_cache
from runtime.settings import Setting, Settings

SHORT = {"k": "k", "loops": "L"}  # grid keys in cell labels: seal_k3_L1


@dataclass(frozen=True)
class Entry:
    """A method, the baselines its paper compares it with, the datasets it is measured on, and an optional grid."""
    method: str
    baselines: tuple[str, ...]
    datasets: tuple[str, ...]
    grid: dict = field(default_factory=dict, hash=False)  # e.g. {"k": (1, 3), "loops": (0, 1, 3)}


SUITES: dict[str, tuple[Entry, ...]] = {
    "paper": (
        Entry("seal", ("self_rag", "crag", "rag_cited"), ("hotpotqa", "2wiki")),
        Entry("coral", ("direct", "en_rag", "mono_rag", "multi_rag", "own_en_rag", "cross_rag", "t_rag",
                        "coral_select"), ("blend", "click")),
        Entry("par2", ("direct", "cot", "rag_cot", "react", "ircot", "par2_anchor", "par2_chain"),
              ("musique", "2wiki")),
        Entry("rag_critic", ("rag", "self_rag", "self_refine", "flare", "metarag"), ("hotpotqa", "2wiki")),
        Entry("rag_critic_cot", ("rag_cot", "self_refine_cot"), ("hotpotqa", "2wiki")),
        Entry("coral", ("direct", "rag"), ("xrag_multi_open:all",)),
    ),
    "seal-grid": (Entry("seal", ("self_rag", "crag", "rag_cited"), ("hotpotqa",),
                        {"k": (1, 3), "loops": (0, 1, 3, 5)}),),
}


@dataclass(frozen=True)
class Cell:
    program: str
    dataset: str
    config: tuple[tuple[str, int], ...] = ()  # grid values this program takes, e.g. (("k", 3), ("loops", 1))
    variant: str = ""  # a script's own variant of the program, e.g. "compiled"
    oracle: str = ""  # the program's --oracle roles: an oracle row, never mixed into a non-oracle one

    @property
    def label(self) -> str:
        return (self.program + "".join(f"_{SHORT.get(k, k)}{v}" for k, v in self.config)
                + (f"_{self.variant}" if self.variant else "") + oracle_suffix(self.oracle, self.program))


@dataclass
class Result:
    cell: Cell
    run_id: str
    summary: dict
    records: list[dict]
    effective: str = ""  # what the program ran as where that is not the cell (``tracking.tag_effective``)

    @property
    def label(self) -> str:
        """The row's name: what its program ran as."""
        return self.effective or self.cell.label


def entries(name: str, dataset: str | None) -> tuple[Entry, ...]:
    """A named suite, or an ad-hoc one: ``METHOD,BASELINE,...`` on ``--dataset``."""
    if name in SUITES:
        return SUITES[name]
    names = [n for n in name.split(",") if n]
    unknown = [n for n in names if n not in programs.REGISTRY]
    if unknown or not names:
        fail(f"unknown suite '{name}'; use one of {', '.join(SUITES)} or a comma-separated program list "
             f"(method first) with --dataset")
    return (Entry(names[0], tuple(names[1:]), (dataset or programs.spec(names[0]).default_dataset,)),)


def _grid_points(grid: dict) -> list[dict]:
    keys = list(grid)
    return [dict(zip(keys, values)) for values in itertools.product(*(grid[k] for k in keys))] or [{}]


def cell(program: str, dataset: str, point: dict, oracle: str = "") -> Cell:
    """The cell of ``program`` on ``dataset`` at grid ``point``, keeping only the values the program takes and the
    ``oracle`` roles (``--oracle``) it has a decision for."""
    roles = program_oracle(oracle, program)
    return Cell(program, dataset, tuple(sorted(programs.accepted_config(program, point).items())), oracle=roles)


def at_k(program: str, point: dict, k: int | None) -> dict:
    """Grid ``point`` for ``program`` with the entry's ``k`` (None: --k or the grid sets it) where that is not the
    program's own k."""
    return point | {"k": k} if k is not None and programs.run_k(program, None) not in (None, k) else point


def plan(suite: tuple[Entry, ...], only_datasets=None, only_methods=None, oracle: str = "",
         k: int | None = None, only_arms=None) -> tuple[list[Cell], list[tuple]]:
    """The distinct cells to run (in suite order) and the (dataset, method cell, baseline cell) pairs to test;
    ``oracle``: the ``--oracle`` roles, which mark the cells of programs that have them; ``k``: ``--k`` (None: the
    grid's, else each entry's method's own, for its baselines too); ``only_arms``: only the cells whose program or
    label is named (a baseline keeps the k its entry gives it), and the pairs of two such cells."""
    cells, pairs = {}, []
    for entry in suite:
        if only_methods and entry.method not in only_methods:
            continue
        shared = programs.run_k(entry.method, None) if k is None and "k" not in entry.grid else None
        for dataset in entry.datasets:
            if only_datasets and dataset not in only_datasets:
                continue
            for point in _grid_points(entry.grid):
                method = cell(entry.method, dataset, point, oracle)
                cells.setdefault(method, None)
                for baseline in entry.baselines:
                    base = cell(baseline, dataset, at_k(baseline, point, shared), oracle)
                    cells.setdefault(base, None)
                    if (dataset, method, base) not in pairs:
                        pairs.append((dataset, method, base))
    if only_arms:
        kept = {c for c in cells if c.program in only_arms or c.label in only_arms}
        return [c for c in cells if c in kept], [p for p in pairs if {p[1], p[2]} <= kept]
    return list(cells), pairs


def cell_session(base: Session, cell: Cell) -> Session:
    """The dataset's session with the cell's grid values in place of ``--k``/``--loops``, and the k the cell's
    program runs at (recall@k, params, checkpoint key)."""
    s = base.with_settings(**dict(cell.config))
    return s.with_settings(k=programs.run_k(cell.program, s.args.k))


def run_cell(s: Session, cell: Cell, parent_run_id: str, suite_name: str, program=None, examples=None,
             stage: str | None = None, entry: str = "evaluate.py --suite", run_id: str | None = None) -> Result:
    """Evaluate one cell into its own child run of ``parent_run_id`` (metrics named ``<split>_<metric>``),
    checkpointed per example under ``stage`` (default: the split): ``s.build(cell.program)`` on the ``--split``
    questions, unless a script passes its own program/questions; ``run_id``: the cell's child run a script already
    started (e.g. holding its compile), continued."""
    a = s.args
    program = s.build(cell.program) if program is None else program
    examples = s.evaluated(getattr(s.splits, a.split)) if examples is None else examples
    name = cell_name(s, cell)
    with cell_run(a, cell, name, parent_run_id, suite_name, entry, run_id) as run:
        tracking.log_params(cell_params(s, cell, name, examples))
        shown = tracking.tag_effective(program, name)
        records, summary = run_stage(s, program, examples, cell.label, a.split, key=stage,
                                     desc=f"{cell.label}/{cell.dataset}", run_id=run.info.run_id)
        mlflow.flush_trace_async_logging()
    return Result(cell, run.info.run_id, summary, records, shown if shown != name else "")


def cell_name(s: Session, cell: Cell) -> str:
    """The cell's row name, with the oracle roles its program runs with (a script's cell names none of its own)."""
    return cell.label if cell.oracle else replace(cell, oracle=s.derived.oracle(cell.program)).label


def cell_params(s: Session, cell: Cell, name: str, examples: list) -> dict:
    a = s.args
    return s.params(cell.program) | {"split": a.split, "cell": name, "eval_ids": [ex.id for ex in examples]}


def cell_run(a: Settings, cell: Cell, name: str, parent_run_id: str, suite_name: str,
             entry: str = "evaluate.py --suite", run_id: str | None = None):
    """The cell's child run of ``parent_run_id``."""
    tracking.setup(a.experiment)
    return tracking.run(a.experiment, f"{name}-{cell.dataset}", parent_run_id=parent_run_id,
                        nested=mlflow.active_run() is not None, run_id=run_id,
                        tags={"entry": entry, "suite": suite_name, "cell": name, "dataset": cell.dataset})


def against(reference: Cell, cells: list[Cell]) -> list[tuple]:
    """Leaderboard pairs: ``reference`` against every other cell of its dataset."""
    return [(reference.dataset, reference, c) for c in cells if c != reference and c.dataset == reference.dataset]


def log_leaderboard(results: list[Result], pairs: list[tuple], title: str) -> leaderboard.Board:
    """The leaderboard of ``results`` (tables, paired tests, plots) logged to the active (parent) run."""
    board = leaderboard.report(results, pairs, title=title)
    leaderboard.log(board, results, pairs)
    return board


def judged_by(args: Settings, sessions: dict[str, Session]) -> str:
    """The judge a multi-dataset title names: each dataset's ``Derived.judged_by``, once when they agree (under Ray
    no session is built here: each cell's run names its own)."""
    if not sessions:
        return "per cell run" if args.judge else "-"
    named = {d: s.derived.judged_by for d, s in sessions.items()}
    return (next(iter(named.values())) if len(set(named.values())) == 1
            else "; ".join(f"{d}: {j}" for d, j in named.items()))


@dataclass
class Outcome:
    """What a Ray task sends back for its cell: the name of the checkpoint its session keys (``Session.checkpoint``),
    the records it added to it (``new``), and what the driver logs; or, when the cell stopped (``RunStopped``),
    its ``error`` line and the records it finished before."""
    checkpoint: str
    new: list[dict]
    records: list[dict] = field(default_factory=list)
    summary: dict = field(default_factory=dict)
    params: dict = field(default_factory=dict)
    metrics: list[str] = field(default_factory=list)
    data: tracking.EvalData | None = None
    name: str = ""
    effective: str = ""
    error: str = ""


def _remote_cell(args: Settings, cell: Cell, known: tuple[str, dict] | None, hook=None) -> Outcome:
    """A Ray task: its own session (data, retriever, LMs) for the cell's dataset, then the cell's questions,
    resuming ``known`` (the driver's last checkpoint of this cell: its name and records) where this session keys the
    same checkpoint. It writes nothing (no checkpoint, no MLflow run, no question traces): the driver does."""
    s = session(args.replace(dataset=cell.dataset), programs.spec(cell.program).needs_search)
    s = cell_session(hook(s) if hook is not None else s, cell)
    a, program = s.args, s.build(cell.program)
    examples = s.evaluated(getattr(s.splits, a.split))
    key, name = s.checkpoint(a.split, cell.label, program).name, cell_name(s, cell)
    sink = Collected(known[1] if known and known[0] == key else {}, key)
    try:
        records, summary = run_stage(s, program, examples, cell.label, a.split, key=sink,
                                     desc=f"{cell.label}/{cell.dataset}")
    except RunStopped as err:
        return Outcome(key, sink.new, error=f"{type(err).__name__}: {str(err).splitlines()[0]}")
    return Outcome(key, sink.new, records, summary, cell_params(s, cell, name, examples), list(s.metrics),
                   s.eval_data(a.split, examples), name, tracking.effective(program, name))


#: What a Ray worker's environment gets from the driver's (docs/cli.md): where the data is, how endpoints are
#: retried, the key of ``--api-base`` endpoints, the local server's prompt cache (it keys checkpoints) and the
#: offline switches; a provider's key only for an LM of that provider (``shipped_env``). On the driver's own machine
#: (``--ray`` without an address) also its cache folders.
SHIPPED = ("RAG_DATA_DIR", "RAG_API_KEY", "RAG_ENDPOINT_BACKOFF", "RAG_ENDPOINT_ERRORS", "RAG_INTERRUPT_GRACE",
           "RAG_PROMPT_CACHE_MB", "HF_HUB_OFFLINE", "LITELLM_LOCAL_MODEL_COST_MAP")
SHIPPED_LOCAL = ("RAG_CACHE_DIR", "RAG_INDEX_DIR", "RAG_SERVER_DIR", "HF_HOME")


def shipped_env(args: Settings, environ: dict) -> dict:
    """The variables of ``environ`` a Ray worker of this run gets: :data:`SHIPPED`, :data:`SHIPPED_LOCAL` on a
    local Ray, and ``<PROVIDER>_API_KEY`` for each LM of the run named ``provider/model`` without ``--api-base``."""
    lms = [args.lm, args.planner_lm, args.critic_lm, args.judge_lm, *(args.judge_lms or "").split(",")]
    keys = set() if args.api_base else {f"{lm.split('/')[0].upper()}_API_KEY" for lm in lms if lm and "/" in lm}
    names = {*SHIPPED, *(SHIPPED_LOCAL if args.ray == "local" else ()), *keys}
    return {k: v for k, v in environ.items() if k in names}


def known_cells(split: str) -> tuple[Path, dict]:
    """The driver's record of which checkpoint each Ray cell last wrote (``cell@dataset`` per split -> file name)."""
    path = project_cache() / "evals" / f"ray-cells-{split}.json"
    return path, json.loads(path.read_text()) if path.exists() else {}


def _held(name: str) -> dict:
    """The records of the driver's checkpoint ``name``, read under its lock."""
    sink = Checkpoint(project_cache() / "evals" / name, wait=True, readable=is_record)
    sink.close()
    return sink.done


def _keep(args: Settings, cell: Cell, out: Outcome, parent_run_id: str, suite_name: str) -> Result | None:
    """The driver's part of a Ray cell that came back: the records it added appended to its checkpoint (the one
    writer, under the checkpoint's lock), the checkpoint's name recorded for the next run, and, unless it stopped,
    its child run logged."""
    sink = Checkpoint(project_cache() / "evals" / out.checkpoint, wait=True, readable=is_record)
    try:
        for rec in out.new:
            sink.append(rec)
    finally:
        sink.close()
    path, known = known_cells(args.split)
    write_whole(path, json.dumps(known | {f"{cell.label}@{cell.dataset}": out.checkpoint}, indent=1))
    if out.error:
        return None
    with cell_run(args, cell, out.name, parent_run_id, suite_name) as run:
        tracking.log_params(out.params)
        mlflow.set_tag("effective_program", out.effective)
        tracking.log_evaluation(args.split, out.records, out.summary, out.metrics, out.data)
    return Result(cell, run.info.run_id, out.summary, out.records, out.effective if out.effective != out.name else "")


#: Ray's switch for a one-machine cluster: "0" and a node's address is 127.0.0.1 (its servers listen there alone);
#: otherwise Ray replaces 127.0.0.1 (``--node-ip-address``, ``ray.init``) by the machine's outward address and its
#: GCS and raylets listen on every interface.
RAY_LOOPBACK = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def loopback(ray: str) -> bool:
    """Whether ``--ray`` names a cluster on this machine's loopback: a local one, or an address on 127.0.0.1."""
    host = "localhost" if ray == "local" else urllib.parse.urlsplit(ray if "://" in ray else f"//{ray}").hostname
    return host == "localhost" or (host or "").startswith("127.") or host == "::1"


def _ray_results(args, cells: list[Cell], parent_run_id: str, hook) -> tuple[list[Result], list[str]]:
    """Each cell as a Ray task (:func:`_remote_cell`; one whose worker dies is run again by Ray), this process the
    one writer of their checkpoints and runs (:func:`_keep`) as each finishes; returns the results in cell order
    and one line per cell that failed (the others are kept)."""
    if loopback(args.ray):  # its servers on 127.0.0.1 only, and reached there (read when ray is imported)
        os.environ.setdefault(RAY_LOOPBACK, "0")
    try:
        import ray
    except ImportError:
        fail("--ray needs Ray: pip install '.[ray]'")
    env = shipped_env(args, dict(os.environ))
    if args.ray == "local":
        ray.init(runtime_env={"env_vars": env | {"PYTHONPATH": str(PROJECT_ROOT)}}, include_dashboard=False)
    else:  # a cluster: ship this checkout to the workers
        ray.init(address=args.ray, runtime_env={"env_vars": env, "working_dir": str(PROJECT_ROOT),
                                                "excludes": [".venv", ".cache", "mlruns", ".git"]})
    done, failed = {}, []
    try:
        task = ray.remote(num_cpus=args.ray_cpus)(_remote_cell)
        known = known_cells(args.split)[1]
        pending = {}
        for cell in cells:
            name = known.get(f"{cell.label}@{cell.dataset}")
            pending[task.remote(args, cell, (name, _held(name)) if name else None, hook)] = cell
        while pending:
            [ref], _ = ray.wait(list(pending), num_returns=1)
            cell = pending.pop(ref)
            try:
                out = ray.get(ref)
                error = "" if (result := _keep(args, cell, out, parent_run_id, args.suite)) else out.error
            except ray.exceptions.RayError as err:  # the task itself failed: nothing of it came back
                cause = getattr(err, "cause", None) or err
                error = f"{type(cause).__name__}: {str(cause).splitlines()[0]}"
            if error:
                failed.append(f"{cell.label}@{cell.dataset}: {error}")
                print(f"error: cell {failed[-1]}", file=sys.stderr)
            else:
                done[cell] = result
    finally:
        ray.shutdown()
    return [done[c] for c in cells if c in done], failed


def run_suite(args: Settings, hook=None, custom: tuple[Entry, ...] | None = None, report=None) -> dict:
    """Run the suite named by ``args.suite`` (or the ``custom`` entries under that name) and log its leaderboard;
    ``hook(session) -> session`` (tests) is applied to every dataset's session before its cells run, and
    ``report(results, sessions) -> markdown`` (a script's own diagnostics; ``sessions`` by dataset, empty under
    Ray) runs inside the parent run and is logged as report.md."""
    suite = custom or entries(args.suite, args.dataset)
    cells, pairs = plan(suite, args.datasets, args.methods, args.oracle, args.k, args.arms)
    if not cells:
        fail(f"suite '{args.suite}' has no cell for --datasets {args.datasets} / --methods {args.methods} / --arms "
             f"{args.arms}")
    cli.check_args(args, list(dict.fromkeys(c.program for c in cells)))
    results: list[Result] = []
    sessions: dict[str, Session] = {}
    with tracking.run(args.experiment, f"suite-{args.suite}", tags={"entry": "evaluate.py --suite"}) as parent:
        # the suite's settings as declared (a cell's: its run)
        tracking.log_params({"cells": [f"{c.label}@{c.dataset}" for c in cells]} | args.of(PARAMS))
        failed = []
        if args.ray:
            results, failed = _ray_results(args, cells, parent.info.run_id, hook)
        else:
            for dataset in dict.fromkeys(c.dataset for c in cells):
                mine = [c for c in cells if c.dataset == dataset]
                s = session(args.replace(dataset=dataset), any(programs.spec(c.program).needs_search for c in mine))
                s = sessions[dataset] = hook(s) if hook else s
                results += [run_cell(cell_session(s, c), c, parent.info.run_id, args.suite) for c in mine]
        board = log_leaderboard(results, pairs, f"suite {args.suite}, split {args.split} (seed {args.seed}), "
                                                f"lm {args.lm}, judge {judged_by(args, sessions)}"
                                                f", corpus {args.corpus or 'per dataset'}")
        extra = report(results, sessions) if report else ""
        if extra:
            mlflow.log_text(extra, "report.md")
        print(f"\n{board.markdown}\n{extra}\nrun {parent.info.run_id} (suite-{args.suite})")
        if failed:
            tracking.log_json("failed_cells.json", failed)
            raise RunStopped(f"{len(failed)} of {len(cells)} cells failed ({'; '.join(failed)}); the others are "
                             "logged and checkpointed: fix the cause and run the same command again")
    return {"run_id": parent.info.run_id, "results": results, "leaderboard": board, "report": extra}


SPLIT = Setting("split", str, None, "default: dev, test for --suite", choices=("train", "dev", "test"))
#: The suite's settings, declared once.
SETTINGS = (
    Setting("suite", str, None, f"run a suite ({', '.join(SUITES)}, or METHOD,BASELINE,... on --dataset): every cell "
            "on the same seeded split, one parent MLflow run, a leaderboard"),
    Setting("datasets", str, None, "suite: only these datasets", many=True),
    Setting("methods", str, None, "suite: only these methods (with their baselines)", many=True),
    Setting("arms", str, None, "suite: only these arms (a program or cell label, e.g. rag: a baseline at the k its "
            "method gives it), in any entry", many=True),
    Setting("ray", str, None, "suite: run cells as Ray tasks (local ray.init(), or a cluster address); pip install "
            "'.[ray]'", choices=("ADDRESS",), check=named, const="local"),
    Setting("ray_cpus", float, 1, "CPUs Ray reserves per cell", 0),
)
#: What a suite's parent run logs: its settings and every setting its cells share.
PARAMS = (SPLIT, *SETTINGS, *cli.SETTINGS, *evaluation_settings.SETTINGS)


def parser(description: str) -> argparse.ArgumentParser:
    """evaluate.py's flags with the suite's: what ``evaluate.py --suite`` and the comparison scripts parse."""
    p = cli.parser(description)
    cli.add_flags(p, (SPLIT, *SETTINGS))
    return p


#: The suite's own flags, which a script that runs its own cells (not through :func:`run_suite`) never reads.
OWN_CELLS = ("suite", "datasets", "methods", "arms", "ray", "ray_cpus")


def script_args(p: argparse.ArgumentParser, argv: list[str] | None, fixed: tuple[str, ...] = (),
                takes: tuple[str, ...] = ()) -> Settings:
    """A comparison script's command line (``p``: :func:`parser` with the script's own flags) parsed and refused as
    ``evaluate.py --suite``'s is: a flag :data:`cli.APPLIES` keeps from a suite (but those the script ``takes``), or
    one :data:`cli.NEEDS` says means nothing alone, is one line; so is a flag of ``fixed``, the settings the script
    sets itself."""
    args = p.parse_args(argv)
    given = cli.given_flags(p, argv)
    if taken := [name for name in fixed if name in given]:
        flag = f"--{taken[0].replace('_', '-')}"
        fail(f"{flag} does not apply to this script (it sets it itself, or never reads it): leave it out")
    cli.check_applies(given - set(takes), cli.SUITE)
    cli.check_needs(given, args)
    return args
