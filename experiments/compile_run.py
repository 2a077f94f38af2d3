"""optimize.py's run: the flags that say how a program is compiled, and one MLflow run that scores a program on dev
and test before and after its compile and stores the compiled program."""
from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from evaluation import serving, tracking
from evaluation.loop import evaluate
from evaluation.metrics import METRIC_NAMES
from experiments.cli import at_least, fail
from experiments.sessions import Session
from optimizers.fitting import compile_fitted, compile_ledger, log_compiled
from programs.shared.oracle import ALL


def compile_flags(p) -> None:
    """The flags that say how a program is compiled (also scripts/optimizer_table.py's)."""
    p.add_argument("--metric", choices=METRIC_NAMES,
                   help="compile metric (default: f1, or accuracy for MCQ; judge needs --judge)")
    p.add_argument("--demos", type=at_least(0), default=2, help="max bootstrapped and labeled demos per predictor")
    p.add_argument("--candidates", type=at_least(1), default=4, help="candidate programs (random_search, mipro)")
    p.add_argument("--budget", type=at_least(1), help="mipro trials / gepa metric calls")
    p.add_argument("--compile-budget", type=int, metavar="N",
                   help="stop the compile at N LM calls (cache hits included) and keep the best program so far")
    p.add_argument("--compile-minutes", type=at_least(0, float), metavar="M",
                   help="stop the compile after M minutes and keep the best program so far")
    p.add_argument("--demo-tokens", type=int, metavar="T",
                   help="drop each predictor's longest demos until its demos fit T estimated tokens (chars/4)")


TEACHERS = ("self", "oracle")


def teacher_flag(p) -> None:
    """``--teacher``: whose runs on train BootstrapFewShot makes the demos of (optimize.py's)."""
    p.add_argument("--teacher", default="self", choices=TEACHERS,
                   help="bootstrap: make the demos from the program's own runs on train (self), or from the same "
                        "program built with every oracle role (oracle: --oracle all, no LM call), whose gold "
                        "sub-queries, plans and answers become the demos; the compiled program makes LM calls")


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


@dataclass
class CompileRun:
    """What :func:`compile_and_score` logged: its MLflow run, each stage's summary and records, the
    prompt versions it registered, where the compiled program is stored (``artifact`` in the run) and the MLflow
    Model serving it (``model``: ``runs:/<run id>/model``, registered as ``registered`` version ``version``)."""
    run_id: str
    name: str
    stages: dict
    records: dict
    prompts: list
    stored: str
    artifact: str
    model: str
    registered: str
    version: str


def compile_and_score(s: Session, metric_name: str, metric) -> CompileRun:
    """One MLflow run: ``s``'s program scored on dev and test, compiled with ``--optimizer`` on train
    (:func:`compile_fitted`), scored again, saved to ``--out`` (default: only as the run's artifact) and logged as an
    MLflow Model from code (``evaluation.serving``) that answers the first asked question as its input example."""
    args = s.args
    program = s.build(args.program)
    k = args.k if s.retriever else None

    teacher = s.build(args.program, oracle=ALL) if args.teacher == "oracle" else None
    params = compile_params(args, args.optimizer, metric_name) | {"teacher": args.teacher}
    run_name = f"{args.program}-{args.dataset}-{args.optimizer}" + (f"-teacher={args.teacher}" if teacher else "")
    with tracking.run(args.experiment, run_name, tags={"entry": "optimize.py", "teacher": args.teacher}) as run:
        tracking.log_params(s.params(args.program) | params)
        stages, scored = {}, {}
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
            scored[name] = records
            return summary

        s.eval_data("train", s.splits.train).log()  # what compile learns from
        stage("dev_before", program, s.splits.dev)
        stage("test_before", program, s.splits.test)
        compiled, _ = compile_fitted(s, program, args.optimizer, metric, s.roles.lm("planner"),
                                     compile_ledger(s, args.program, program, params), teacher)
        tracking.tag_effective(compiled, args.program)  # its gates fitted on dev may rest
        stage("dev_after", compiled, s.splits.dev)
        stage("test_after", compiled, s.splits.test)

        out = Path(args.out) if args.out else Path(tempfile.mkdtemp()) / "program.json"
        log_compiled(s, compiled, out)
        prompts = tracking.register_prompts(compiled, args.program, {"optimizer": args.optimizer,
                                                                     "dataset": args.dataset,
                                                                     "teacher": args.teacher})
        example = next(ex for ex in (*s.splits.test, *s.splits.dev, *s.splits.train)).inputs().toDict()
        with tracking.untraced():  # MLflow answers the example with the logged model: not one of the run's questions
            model = serving.log_served(out, args.program, serving.serving_config(args, compiled), example,
                                       [f"prompts:/{p}" for p in prompts], args.api_base, s.data)
        stored = tracking.artifact_path(out.name)
        if not args.out:
            shutil.rmtree(out.parent)  # the lasting copy is the run's artifact
    return CompileRun(run.info.run_id, run_name, stages, scored, prompts, stored, out.name,
                      f"runs:/{run.info.run_id}/model", serving.model_name(args.program),
                      str(model.registered_model_version))
