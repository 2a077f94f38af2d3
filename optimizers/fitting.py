"""A run's program compiled as the compile flags say: its gates fitted on dev (before the compile and after),
its demos fitted to a token budget, the compile's cost kept in a ledger across runs (and under ``--no-cache`` its
answers, so a re-run resumes it), the compiled program saved and logged."""
from __future__ import annotations

import hashlib
import inspect
import json
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import dspy
import mlflow
from dspy.clients.cache import Cache

import programs
from data import Splits
from decoding.decisions import describe
from evaluation import tracking
from optimizers import calibration, compile as compile_module
from optimizers.calibration import calibrate_decisions
from optimizers.compile import compile_program, fit_demos, unecho_demos
from optimizers.settings import CompileOptions
from runtime.files import locked, write_whole
from runtime.metering import Limit, metered
from runtime.roles import Roles, assign_roles

#: The code a compile runs beyond the answer code its checkpoints are keyed by: the optimizers, the gate fitting and
#: this module.
COMPILE_CODE = (compile_module, calibration, sys.modules[__name__])


@dataclass(frozen=True)
class CompileInput:
    """What a compile reads of its run, resolved once by the caller (``experiments.compile_run.compile_input``): the
    compile ``options``, the role LMs, the questions it learns from (train) and fits gates on (dev), ``checkpoint``:
    where a program's per-question files are kept, keyed as the run's checkpoints are (``(stage, program name,
    program, pooled question keys) -> path``), and what a saved compiled program keeps: the program ``config`` and
    the ``data`` settings that rebuild its retriever and split."""
    options: CompileOptions
    roles: Roles
    splits: Splits
    checkpoint: Callable[..., Path]
    config: dict
    data: dict


def compile_fitted(run: CompileInput, program: dspy.Module, optimizer: str, metric, proposer: dspy.LM,
                   ledger: Path | None = None, teacher: dspy.Module | None = None) -> tuple[dspy.Module, dict]:
    """Compile ``program`` of ``run`` (its roles, splits and checkpoints) with ``optimizer`` as the compile
    options say (its calls metered, within the compile budget; ``proposer``: MIPROv2's instruction proposer and
    GEPA's reflection LM), fit its demos to ``--demo-tokens`` and its gates to dev (:func:`fit_gates`: before the
    compile too, so the compile bootstraps, searches and scores the program as it will run, not through unfitted
    gates); all logged to the active run. Returns the compiled program and what the compile cost: LM calls, tokens,
    seconds, the budget that stopped it (empty: none) and the demo tokens of each predictor. ``ledger``: a file keyed
    by the compile's setting that keeps its cost across runs (:func:`carried`), so a compile re-run from the LM cache
    reports what it cost; under ``--no-cache`` the compile's own answers are kept beside it (:func:`answers_kept`),
    so a re-run resumes an interrupted compile and reproduces a finished one there too. ``teacher``: bootstrap's
    teacher program (``compile_program``; None: the program itself)."""
    options = run.options
    t0, limit = time.perf_counter(), Limit(options.compile_budget, options.compile_minutes)
    cost = None
    kept = ledger.with_suffix(".answers") if ledger and options.no_cache else None
    lms = [lm for lm in (*vars(run.roles).values(), proposer) if lm is not None]  # (astuple would copy them)
    program = assign_roles(program.deepcopy(), run.roles)  # the caller's program keeps its gates; the roles' LMs
    fit_gates(run, program, metric, "calibration_before_compile")
    try:
        with tracking.untraced(), metered() as cost, answers_kept(kept, lms):  # counted, not traced
            compiled = compile_program(program, optimizer, run.splits.train, run.splits.dev, metric,
                                       max_demos=options.demos, candidates=options.candidates, budget=options.budget,
                                       seed=options.seed, reflection_lm=proposer, limit=limit, teacher=teacher)
    except BaseException:
        if ledger and cost:
            carried(ledger, time.perf_counter() - t0, cost, finished=False)
        raise
    spent = {"seconds": time.perf_counter() - t0, "lm_calls": cost.lm_calls, "prompt_tokens": cost.prompt_tokens,
             "completion_tokens": cost.completion_tokens}
    if ledger:
        spent = carried(ledger, spent["seconds"], cost, finished=True)
    spent["budget_exhausted"] = float(bool(limit.reached))
    tracking.log_metrics(spent, "compile")
    assign_roles(compiled, run.roles)  # as a loaded program runs (MIPROv2's and GEPA's copies hold copied LMs)
    for name, n in unecho_demos(compiled).items():
        print(f"{name}: removed DSPy's echoed format text from {n} demo(s)", file=sys.stderr)
    demos = fit_demos(compiled, options.demo_tokens)
    for name, (tokens, dropped) in demos.items():
        mlflow.log_metric(f"demo_tokens_{name}", tokens)
        if dropped:
            print(f"{name}: dropped its {dropped} longest demo(s) to fit --demo-tokens {options.demo_tokens} "
                  f"({tokens} estimated tokens kept)", file=sys.stderr)
    fit_gates(run, compiled, metric)
    return compiled, spent | {"budget_stop": limit.reached, "demo_tokens": {n: t for n, (t, _) in demos.items()}}


class ResumeCache(Cache):
    """A disk cache that serves only answers an earlier run stored, never one this run stored: a re-run compile
    re-reads what an earlier run asked, while within one run every call is asked as ``--no-cache`` asks."""

    def __init__(self, where: Path):
        super().__init__(enable_disk_cache=True, enable_memory_cache=False, disk_cache_dir=str(where),
                         restrict_pickle=True)
        self.mine: set[str] = set()

    def get(self, request, ignored_args_for_cache_key=None):
        if self._key(request, ignored_args_for_cache_key) in self.mine:
            return None
        return super().get(request, ignored_args_for_cache_key)

    def put(self, request, value, ignored_args_for_cache_key=None, enable_memory_cache=True):
        self.mine.add(self._key(request, ignored_args_for_cache_key))
        super().put(request, value, ignored_args_for_cache_key, enable_memory_cache)

    def _key(self, request, ignored) -> str | None:
        try:
            return self.cache_key(request, ignored)
        except Exception:  # a request the cache cannot hash: Cache.get/put skip it too
            return None


@contextmanager
def answers_kept(where: Path | None, lms: list[dspy.LM]):
    """Under ``--no-cache`` (``where`` given, keyed like the compile's ledger): the ``lms``' answers go to a
    :class:`ResumeCache` at ``where`` for the duration, so a re-run of the same compile re-reads them; no other
    compile's answers are read. ``None``: as is."""
    if where is None:
        yield
        return
    saved, flags = dspy.cache, [(lm, lm.cache) for lm in lms]
    dspy.cache = ResumeCache(where)
    for lm, _ in flags:
        lm.cache = True
    try:
        yield
    finally:
        dspy.cache.disk_cache.close()
        dspy.cache = saved
        for lm, flag in flags:
            lm.cache = flag


def compile_ledger(run: CompileInput, label: str, program: dspy.Module, params: dict) -> Path:
    """Where the cost of compiling ``program`` (as ``label``, with compile ``params``) is kept across runs: beside
    its checkpoints, keyed like them (the program, its settings, the models, the answer code), and by what else made
    the compile: the train and dev questions it learns and fits from, the split seed, its settings (``params``) and its
    own code (the optimizers' modules: a changed optimizer is another compile, not a resumable one)."""
    base = run.checkpoint("compile", label, program)
    code = hashlib.sha256("".join(inspect.getsource(m) for m in COMPILE_CODE).encode()).hexdigest()
    ids = run.splits.ids()
    made = params | {"code": code, "seed": run.options.seed, "train": ids["train"], "dev": ids["dev"]}
    setting = hashlib.sha256(json.dumps(made, sort_keys=True, default=str).encode()).hexdigest()[:12]
    return base.with_name(f"{base.stem}-{setting}.json")


def carried(ledger: Path, seconds: float, cost, finished: bool) -> dict:
    """The cost of a compile whose calls may partly come from the LM cache (which reports no tokens and takes no
    time), kept in ``ledger`` across runs: a finished compile's cost as first recorded; an interrupted one's tokens
    and seconds added to those of the run that finishes it (its LM calls, cache hits included, count them all).
    Read and rewritten whole under the ledger's lock (another compile of the same setting waits), so no run's cost
    is lost nor half written."""
    with locked(ledger, wait=True):
        earlier = json.loads(ledger.read_text(encoding="utf-8")) if ledger.exists() else {}
        if earlier.get("finished"):
            return {k: v for k, v in earlier.items() if k != "finished"}
        spent = {"seconds": seconds + earlier.get("seconds", 0.0), "lm_calls": cost.lm_calls,
                 "prompt_tokens": cost.prompt_tokens + earlier.get("prompt_tokens", 0),
                 "completion_tokens": cost.completion_tokens + earlier.get("completion_tokens", 0)}
        write_whole(ledger, json.dumps(spent | {"finished": finished}))
    return spent


def fit_gates(run: CompileInput, program: dspy.Module, metric, name: str = "calibration") -> None:
    """With ``run``'s ``decisions`` ``logprob|fused``: fit the thresholds (and fusion weights) of ``program``'s gates
    on dev, answer-level gates by the compile ``metric``'s verdict; logged to the active run under ``name``. The dev
    decisions are journalled per question, keyed like a checkpoint (the program as it is, the dev questions, the
    metric), so a fit of the same program again (an interrupted run, each optimizer's start) asks nothing."""
    options = run.options
    if options.decisions == "generate" or not run.splits.dev:
        return
    journal = run.checkpoint("gates", options.program, program,
                             (*(str(ex.id) for ex in run.splits.dev), f"metric={options.metric}"))
    fits = calibrate_decisions(program, run.splits.dev, options.decisions == "fused", options.retries,
                               lambda ex, answer: bool(metric(ex, dspy.Prediction(answer=answer), trace=True)),
                               journal=journal)
    for gate, fit in fits.items():
        mlflow.log_dict(fit, f"{name}/{gate}.json")  # the dev ROC curve and the chosen operating point
        if fit.get("auc") is not None:
            mlflow.log_metrics({f"{name}_{gate}_auc": fit["auc"], f"{name}_{gate}_n": fit["n"]})
        print(f"{name.replace('_', ' ')} {gate}: {describe(fit)}", file=sys.stderr)


def log_compiled(run: CompileInput, compiled: dspy.Module, program_name: str, out: Path) -> None:
    """Save ``compiled`` (``program_name``, built with ``run``'s config) to ``out`` (program.json: what
    ``evaluate.py --compiled RUN`` loads) and log it to the active run."""
    programs.save_compiled(compiled, out, program_name, run.config, run.data)
    mlflow.log_artifact(str(out))
