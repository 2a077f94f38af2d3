"""Compile a program and track it: ``python optimize.py --program rag [--dataset hotpotqa --optimizer bootstrap]``.

Evaluates the uncompiled program on dev and test, compiles on train (search optimizers select on dev), with
``--decisions logprob|fused`` fits the decision gates' thresholds (and fusion weights) on dev against gold titles,
evaluates the compiled program on dev and test, saves it as DSPy JSON state and logs one MLflow run."""
from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

import mlflow

import programs
from optimizers import tracking
from optimizers.calibration import calibrate_decisions
from optimizers.cli import compile_metric, fail, interruptible, parser, retrieval_options, session
from optimizers.compile import OPTIMIZERS, compile_program
from optimizers.evaluation import evaluate
from optimizers.metrics import ANSWER_METRICS
from runtime.metering import metered


@interruptible
def main(argv=None) -> str:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--optimizer", default="bootstrap", choices=OPTIMIZERS)
    p.add_argument("--metric", choices=list(ANSWER_METRICS), help="compile metric (default: f1, or accuracy for MCQ)")
    p.add_argument("--demos", type=int, default=2, help="max bootstrapped and labeled demos per predictor")
    p.add_argument("--candidates", type=int, default=4, help="candidate programs (random_search, mipro)")
    p.add_argument("--budget", type=int, help="mipro trials / gepa metric calls")
    p.add_argument("--out", help="where to write the compiled program JSON (also logged to MLflow)")
    args = p.parse_args(argv)
    if not args.program:
        fail(f"--program is required; choose one of: {', '.join(programs.names())}")
    s = session(args, programs.spec(args.program).needs_search)
    if not s.splits.train or (args.optimizer != "bootstrap" and not s.splits.dev):
        fail(f"--optimizer {args.optimizer} needs --train" + ("" if args.optimizer == "bootstrap" else " and --dev")
             + " of at least 1 example")
    metric_name, metric = compile_metric(s.bundle.task, args.metric)
    program = s.build(args.program)
    k = args.k if s.retriever else None

    run_name = f"{args.program}-{args.dataset}-{args.optimizer}"
    with tracking.run(args.experiment, run_name, tags={"entry": "optimize.py"}) as run:
        tracking.log_params(s.params(args.program) | {
            "optimizer": args.optimizer, "compile_metric": metric_name, "max_demos": args.demos,
            "candidates": args.candidates, "budget": args.budget or ""})
        stages = {}

        def stage(name, prog, examples):
            if not examples:  # e.g. --dev 0 with bootstrap, which never looks at dev
                return
            examples = s.evaluated(examples)
            records, summary = evaluate(prog, examples, s.metrics, k=k, retries=args.retries,
                                        checkpoint=s.checkpoint(name, args.program, prog), desc=name,
                                        groups=s.groups)
            tracking.log_metrics(summary, name)
            tracking.log_jsonl(f"predictions/{name}.jsonl", records)
            stages[name] = summary
            return summary

        stage("dev_before", program, s.splits.dev)
        stage("test_before", program, s.splits.test)
        t0 = time.perf_counter()
        with metered() as cost:
            compiled = compile_program(program, args.optimizer, s.splits.train, s.splits.dev, metric,
                                       max_demos=args.demos, candidates=args.candidates, budget=args.budget,
                                       seed=args.seed, reflection_lm=s.roles.lm("planner"))
        tracking.log_metrics({"seconds": time.perf_counter() - t0, "lm_calls": cost.lm_calls,
                              "prompt_tokens": cost.prompt_tokens, "completion_tokens": cost.completion_tokens},
                             "compile")
        if args.decisions != "generate" and s.splits.dev:  # thresholds (and fusion weights) fitted on dev
            fits = calibrate_decisions(compiled, s.splits.dev, args.decisions == "fused", args.retries)
            for gate, fit in fits.items():
                mlflow.log_dict(fit, f"calibration/{gate}.json")  # the dev ROC curve and the chosen operating point
                if "auc" in fit:
                    mlflow.log_metrics({f"calibration_{gate}_auc": fit["auc"], f"calibration_{gate}_n": fit["n"]})
                print(f"calibrated {gate}: " + (f"dev AUC {fit['auc']:.3f} on {fit['n']} decisions, thresholds "
                                                f"{fit['thresholds']}, fusion weights {fit['weights']}"
                                                if "auc" in fit else f"kept its thresholds ({fit['skipped']})"),
                      file=sys.stderr)
        stage("dev_after", compiled, s.splits.dev)
        stage("test_after", compiled, s.splits.test)
        if s.judge:
            mlflow.log_metric("judge_failures", s.judge.failures)

        out = Path(args.out) if args.out else Path(tempfile.mkdtemp()) / "program.json"
        programs.save_compiled(compiled, out, args.program, s.config,
                               {"dataset": args.dataset, "embedder": args.embedder, "index": args.index,
                                "corpus": args.corpus, "leave_question_out": args.leave_question_out,
                                "max_docs": args.max_docs, **retrieval_options(args)})
        mlflow.log_artifact(str(out))
        stored = tracking.artifact_path(out.name)
        if not args.out:
            shutil.rmtree(out.parent)  # the lasting copy is the run's artifact

    print(f"\nrun {run.info.run_id} ({run_name})")
    for name, summary in stages.items():
        scores = "  ".join(f"{m}={summary.get(m, 0):.3f}" for m in s.metrics)
        print(f"  {name:12s} {scores}  failed={summary['failed_examples']}  lm_calls/q={summary.get('lm_calls', 0):.2f}"
              f"  prompt_tokens/q={summary.get('prompt_tokens', 0):.0f}  s/q={summary.get('seconds', 0):.2f}")
    print(f"compiled program: {stored} (MLflow run {run.info.run_id}, artifact {out.name})")
    print(f"load it with programs.load_compiled({run.info.run_id!r}) or evaluate.py --compiled {run.info.run_id}")
    print(f"browse runs: mlflow ui --backend-store-uri {tracking.tracking_uri()}  (then open http://127.0.0.1:5000)")
    return run.info.run_id


if __name__ == "__main__":
    main()
