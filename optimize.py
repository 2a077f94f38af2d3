"""Compile a program and track it: ``python optimize.py --program rag [--dataset hotpotqa --optimizer bootstrap]``.

Evaluates the uncompiled program on dev and test, compiles on train (search optimizers select on dev; within
``--compile-budget``/``--compile-minutes``, keeping the best program so far), fits the demos to ``--demo-tokens``, with
``--decisions logprob|fused`` fits the decision gates' thresholds (and fusion weights) on dev against gold titles
(answer-level gates: the compile metric's verdict on the answer they judged),
evaluates the compiled program on dev and test, saves it as DSPy JSON state and logs one MLflow run."""
from __future__ import annotations

import hashlib
import inspect
import json
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import dspy
import mlflow
from dspy.clients.cache import Cache

import programs
from decoding.decisions import describe
from optimizers import compile as compile_module
from evaluation import tracking
from optimizers.calibration import calibrate_decisions
from experiments.cli import compile_metric, evaluate_command, fail, interruptible, parser, session
from optimizers.compile import OPTIMIZERS, compile_program, fit_demos
from evaluation.loop import evaluate
from evaluation.metrics import METRIC_NAMES
from evaluation.stats import bootstrap_ci
from runtime import store
from runtime.files import locked, write_whole
from runtime.metering import Limit, metered
from runtime.roles import assign_roles


@interruptible
def main(argv=None) -> str:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--optimizer", default="bootstrap", choices=OPTIMIZERS)
    compile_flags(p)
    p.add_argument("--out", help="where to write the compiled program JSON (also logged to MLflow)")
    args = p.parse_args(argv)
    if not args.program:
        fail(f"--program is required; choose one of: {', '.join(programs.names())}")
    check_compile_flags(args)
    s = session(args, programs.spec(args.program).needs_search)
    if not s.splits.train or (args.optimizer != "bootstrap" and not s.splits.dev):
        fail(f"--optimizer {args.optimizer} needs --train" + ("" if args.optimizer == "bootstrap" else " and --dev")
             + " of at least 1 example")
    metric_name, metric = compile_metric(s.bundle.task, args.metric, s.judge)
    program = s.build(args.program)
    k = args.k if s.retriever else None

    run_name = f"{args.program}-{args.dataset}-{args.optimizer}"
    with tracking.run(args.experiment, run_name, tags={"entry": "optimize.py"}) as run:
        tracking.log_params(s.params(args.program) | compile_params(args, args.optimizer, metric_name))
        stages, scores = {}, {}
        traces = tracking.question_traces(run.info.run_id, s.metrics, args.trace)

        def stage(name, prog, examples):
            if not examples:  # e.g. --dev 0 with bootstrap, which never looks at dev
                return
            examples = s.evaluated(examples)
            records, summary = evaluate(prog, examples, s.metrics, k=k, retries=args.retries,
                                        checkpoint=s.checkpoint(name, args.program, prog), desc=name,
                                        groups=s.groups, retry_failed=args.retry_failed, traces=traces,
                                        wait=args.wait_for_checkpoint)
            tracking.log_evaluation(name, records, summary, s.metrics, s.eval_data(name.split("_")[0], examples))
            stages[name] = summary
            scores[name] = [r[metric_name] for r in records if r[metric_name] is not None]  # None: not scored
            return summary

        s.eval_data("train", s.splits.train).log()  # what compile learns from
        stage("dev_before", program, s.splits.dev)
        stage("test_before", program, s.splits.test)
        compiled, _ = compile_fitted(s, program, args.optimizer, metric, s.roles.lm("planner"),
                                     compile_ledger(s, args.program, program,
                                                    compile_params(args, args.optimizer, metric_name)))
        tracking.tag_effective(compiled, args.program)  # its gates fitted on dev may rest
        stage("dev_after", compiled, s.splits.dev)
        stage("test_after", compiled, s.splits.test)

        out = Path(args.out) if args.out else Path(tempfile.mkdtemp()) / "program.json"
        log_compiled(s, compiled, out)
        prompts = tracking.register_prompts(compiled, args.program, {"optimizer": args.optimizer,
                                                                     "dataset": args.dataset})
        stored = tracking.artifact_path(out.name)
        if not args.out:
            shutil.rmtree(out.parent)  # the lasting copy is the run's artifact

    print(f"\nrun {run.info.run_id} ({run_name})")
    for name, summary in stages.items():
        mean, low, high = bootstrap_ci(scores[name])
        others = "  ".join(f"{m}={summary.get(m, 0):.3f}" for m in s.metrics if m != metric_name)
        print(f"  {name:12s} {metric_name}={mean:.3f} [95% CI {low:.2f}-{high:.2f}, n={len(scores[name])}]  {others}"
              f"  failed={summary['failed_examples']}  lm_calls/q={summary.get('lm_calls', 0):.2f}"
              f"  prompt_tokens/q={summary.get('prompt_tokens', 0):.0f}  s/q={summary.get('seconds', 0):.2f}")
    if "test_before" in scores:
        print(verdict(scores["test_before"], scores["test_after"], metric_name, args))
    print(f"prompt versions: {', '.join(prompts)}")
    print(f"compiled program: {stored} (MLflow run {run.info.run_id}, artifact {out.name})")
    print(f"load it with programs.load_compiled({run.info.run_id!r}) or {evaluate_command(run.info.run_id, args)}")
    print(f"browse runs: mlflow ui --backend-store-uri {store.tracking_uri()}  (then open http://127.0.0.1:5000)")
    return run.info.run_id


def compile_flags(p) -> None:
    """The flags that say how a program is compiled (also scripts/optimizer_table.py's)."""
    p.add_argument("--metric", choices=METRIC_NAMES,
                   help="compile metric (default: f1, or accuracy for MCQ; judge needs --judge)")
    p.add_argument("--demos", type=int, default=2, help="max bootstrapped and labeled demos per predictor")
    p.add_argument("--candidates", type=int, default=4, help="candidate programs (random_search, mipro)")
    p.add_argument("--budget", type=int, help="mipro trials / gepa metric calls")
    p.add_argument("--compile-budget", type=int, metavar="N",
                   help="stop the compile at N LM calls (cache hits included) and keep the best program so far")
    p.add_argument("--compile-minutes", type=float, metavar="M",
                   help="stop the compile after M minutes and keep the best program so far")
    p.add_argument("--demo-tokens", type=int, metavar="T",
                   help="drop each predictor's longest demos until its demos fit T estimated tokens (chars/4)")


def check_compile_flags(args) -> None:
    if args.oracle:
        fail("--oracle is for evaluation (evaluate.py, --suite): compiling reads no gold labels; compile without it "
             "and evaluate the compiled program with --oracle")
    for flag in ("compile_budget", "compile_minutes", "demo_tokens"):
        if getattr(args, flag) is not None and getattr(args, flag) <= 0:
            fail(f"--{flag.replace('_', '-')} must be positive (leave it out for no limit)")


def compile_params(args, optimizer: str, metric_name: str) -> dict:
    return {"optimizer": optimizer, "compile_metric": metric_name, "max_demos": args.demos,
            "candidates": args.candidates, "budget": args.budget or "", "compile_budget": args.compile_budget or "",
            "compile_minutes": args.compile_minutes or "", "demo_tokens": args.demo_tokens or ""}


def compile_fitted(s, program: dspy.Module, optimizer: str, metric, proposer: dspy.LM,
                   ledger: Path | None = None) -> tuple[dspy.Module, dict]:
    """Compile ``program`` with ``optimizer`` as the compile flags say (its calls metered, within the compile
    budget; ``proposer``: MIPROv2's instruction proposer and GEPA's reflection LM), fit its demos to
    ``--demo-tokens`` and its gates to dev (:func:`fit_gates`: before the compile too, so the compile bootstraps,
    searches and scores the program as it will run, not through unfitted gates); all logged to the active run.
    Returns the compiled program and what the compile cost: LM calls, tokens, seconds, the budget that stopped it
    (empty: none) and the demo tokens of each predictor. ``ledger``: a file keyed by the compile's setting that
    keeps its cost across runs (:func:`carried`), so a compile re-run from the LM cache reports what it cost; under
    ``--no-cache`` the compile's own answers are kept beside it (:func:`answers_kept`), so a re-run resumes an
    interrupted compile and reproduces a finished one there too."""
    args = s.args
    t0, limit = time.perf_counter(), Limit(args.compile_budget, args.compile_minutes)
    cost = None
    kept = ledger.with_suffix(".answers") if ledger and args.no_cache else None
    lms = [lm for lm in (*vars(s.roles).values(), proposer) if lm is not None]  # (astuple would copy them)
    program = assign_roles(program.deepcopy(), s.roles)  # the caller's program keeps its gates; the roles' LMs
    fit_gates(s, program, metric, "calibration_before_compile")
    try:
        with tracking.untraced(), metered() as cost, answers_kept(kept, lms):  # counted, not traced
            compiled = compile_program(program, optimizer, s.splits.train, s.splits.dev, metric,
                                       max_demos=args.demos, candidates=args.candidates, budget=args.budget,
                                       seed=args.seed, reflection_lm=proposer, limit=limit)
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
    assign_roles(compiled, s.roles)  # as a loaded program runs (MIPROv2's and GEPA's copies hold copied LMs)
    demos = fit_demos(compiled, args.demo_tokens)
    for name, (tokens, dropped) in demos.items():
        mlflow.log_metric(f"demo_tokens_{name}", tokens)
        if dropped:
            print(f"{name}: dropped its {dropped} longest demo(s) to fit --demo-tokens {args.demo_tokens} "
                  f"({tokens} estimated tokens kept)", file=sys.stderr)
    fit_gates(s, compiled, metric)
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


def compile_ledger(s, label: str, program: dspy.Module, params: dict) -> Path:
    """Where the cost of compiling ``program`` (as ``label``, with compile ``params``) is kept across runs: beside
    its checkpoints, keyed like them, by the compile's settings and by the compile's own code (optimizers/compile.py:
    a changed optimizer is another compile, not a resumable one)."""
    base = s.checkpoint("compile", label, program)
    code = hashlib.sha256(inspect.getsource(compile_module).encode()).hexdigest()
    setting = hashlib.sha256(json.dumps(params | {"code": code}, sort_keys=True, default=str).encode()).hexdigest()[:12]
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


def fit_gates(s, program: dspy.Module, metric, name: str = "calibration") -> None:
    """With ``--decisions logprob|fused``: fit the thresholds (and fusion weights) of ``program``'s gates on dev,
    answer-level gates by the compile ``metric``'s verdict; logged to the active run under ``name``. The dev
    decisions are journalled per question, keyed like a checkpoint (the program as it is, the dev questions, the
    metric), so a fit of the same program again (an interrupted run, each optimizer's start) asks nothing."""
    if s.args.decisions == "generate" or not s.splits.dev:
        return
    journal = s.checkpoint("gates", s.args.program, program,
                           (*(str(ex.id) for ex in s.splits.dev), f"metric={s.args.metric}"))
    fits = calibrate_decisions(program, s.splits.dev, s.args.decisions == "fused", s.args.retries,
                               lambda ex, answer: bool(metric(ex, dspy.Prediction(answer=answer), trace=True)),
                               journal=journal)
    for gate, fit in fits.items():
        mlflow.log_dict(fit, f"{name}/{gate}.json")  # the dev ROC curve and the chosen operating point
        if fit.get("auc") is not None:
            mlflow.log_metrics({f"{name}_{gate}_auc": fit["auc"], f"{name}_{gate}_n": fit["n"]})
        print(f"{name.replace('_', ' ')} {gate}: {describe(fit)}", file=sys.stderr)


def log_compiled(s, compiled: dspy.Module, out: Path) -> None:
    """Save ``compiled`` to ``out`` (program.json: what ``evaluate.py --compiled RUN`` loads) and log it to the
    active run."""
    a = s.args
    programs.save_compiled(compiled, out, a.program, s.config, s.data)
    mlflow.log_artifact(str(out))


def verdict(before: list[float], after: list[float], metric: str, args) -> str:
    """What the test slice can say about compiled vs uncompiled: the paired difference with its bootstrap CI, and
    in plain words whether the slice is big enough to tell them apart, with the command for a real comparison."""
    diff, low, high = bootstrap_ci(list(zip(after, before)))
    line = (f"compiled - uncompiled on the same {len(after)} test questions: {metric} {diff:+.3f} "
            f"(95% CI {low:+.2f} to {high:+.2f})")
    if low <= 0 <= high:
        benchmark = {"demo": "hotpotqa", "demo_culture": "blend"}.get(args.dataset, args.dataset)
        line += (f"; the interval includes 0, so this slice cannot tell them apart. For a comparison: python "
                 f"optimize.py --program {args.program} --dataset {benchmark} --test {max(50, 2 * len(after))}")
    return line


if __name__ == "__main__":
    main()
