"""Compile a program and track it: ``python optimize.py --program rag [--dataset hotpotqa --optimizer bootstrap]``.

Evaluates the uncompiled program on dev and test, compiles on train (search optimizers select on dev; within
``--compile-budget``/``--compile-minutes``, keeping the best program so far), fits the demos to ``--demo-tokens``, with
``--decisions logprob|fused`` fits the decision gates' thresholds (and fusion weights) on dev against gold titles
(answer-level gates: the compile metric's verdict on the answer they judged),
evaluates the compiled program on dev and test, saves it as DSPy JSON state and logs one MLflow run."""
from __future__ import annotations

import programs
from evaluation import serving
from evaluation.leaderboard import answered, timing
from evaluation.stats import bootstrap_ci, paired_scores
from experiments.cli import (COMPILE, add_flags, check_applies, check_needs, compile_metric, evaluate_command, fail,
                             given_flags, interruptible, parser)
from experiments.sessions import check_oracle, session
from experiments.compile_run import check_compile_flags, compile_and_score
from optimizers import settings as compile_settings
from programs.shared.oracle import ALL
from runtime import spent, store


@interruptible
def main(argv=None) -> str:
    p = parser(__doc__.splitlines()[0])
    add_flags(p, (compile_settings.OPTIMIZER, *compile_settings.SETTINGS, compile_settings.TEACHER,
                  compile_settings.OUT))
    args = p.parse_args(argv)
    given = given_flags(p, argv)
    check_applies(given, COMPILE[args.optimizer])
    check_needs(given, args)
    if not args.program:
        fail(f"--program is required; choose one of: {', '.join(programs.names())}")
    check_compile_flags(args)
    s = session(args, programs.spec(args.program).needs_search)
    args = s.args  # as resolved: the dataset, split sizes and k it runs
    if not s.splits.train or (args.optimizer != "bootstrap" and not s.splits.dev):
        fail(f"--optimizer {args.optimizer} needs --train" + ("" if args.optimizer == "bootstrap" else " and --dev")
             + " of at least 1 example")
    if args.teacher == "oracle":  # the teacher reads every role's gold labels of the train questions
        check_oracle(args.replace(oracle=ALL), s.splits.train,
                     "--teacher oracle builds the program with --oracle all: ")
    metric_name, metric = compile_metric(s.bundle.task, args.metric, s.judge)
    run = compile_and_score(s, metric_name, metric)

    print(f"\nrun {run.run_id} ({run.name})")
    for name, summary in run.stages.items():
        mean, low, high = bootstrap_ci([r[metric_name] for r in run.records[name] if r[metric_name] is not None])
        others = "  ".join(f"{m}={summary.get(m, 0):.3f}" for m in s.metrics if m != metric_name)
        print(f"  {name:12s} {metric_name}={mean:.3f} [95% CI {low:.2f}-{high:.2f}, {answered(summary)} answered]"
              f"  {others}"
              f"  failed={summary['failed_examples']}  per asked question: lm_calls={summary.get('lm_calls', 0):.2f}"
              f"  prompt_tokens={summary.get('prompt_tokens', 0):.0f}  s={timing(summary, 'seconds', '{:.2f}')}")
    if "test_before" in run.records:
        print(verdict(run.records["test_before"], run.records["test_after"], metric_name, args))
    print(f"prompt versions: {', '.join(run.prompts)}")
    print(f"compiled program: {run.stored} (MLflow run {run.run_id}, artifact {run.artifact})")
    print(f"load it with programs.load_compiled({run.run_id!r}) or {evaluate_command(run.run_id, args)}")
    allow = ",".join(serving.outside(s.derived.data).values())  # what a served model may open only when its server allows
    print(f"served model: {run.model} (registered {run.registered} version {run.version}): "
          f"mlflow.pyfunc.load_model({run.model!r}) or mlflow models serve -m {run.model} --env-manager local"
          + (f", with {serving.ALLOW}={allow} in its environment" if allow else ""))
    print(f"browse runs: mlflow ui --backend-store-uri {store.tracking_uri()}  (then open http://127.0.0.1:5000)")
    print(spent.line())
    if "test_before" in run.records:
        print(in_words(args, run.records, metric_name, len(s.splits.train)))
    return run.run_id


def in_words(args, records: dict[str, list[dict]], metric: str, train: int) -> str:
    """The run in plain words: what was asked of whom, before and after compiling, and where it all is."""
    def mean(stage: str) -> float:
        scores = [r[metric] for r in records[stage] if r[metric] is not None]
        return sum(scores) / len(scores) if scores else float("nan")
    return (f"In words: {args.program} answered the same {len(records['test_after'])} test questions of "
            f"{args.dataset} with {args.lm} before compiling ({metric} {mean('test_before'):.2f}) and after "
            f"({mean('test_after'):.2f}); compiling ({args.optimizer}) tuned its prompts on {train} training "
            "questions. The runs, their prompts and traces and the compiled program are in MLflow (the mlflow ui "
            "command above).")


def verdict(before: list[dict], after: list[dict], metric: str, args) -> str:
    """What the test slice can say about compiled vs uncompiled (their records): the difference paired by question
    (on those both scored) with its bootstrap CI, and in plain words whether the slice is big enough to tell them
    apart, with the command for a real comparison."""
    pairs = list(paired_scores(after, before, metric).values())
    diff, low, high = bootstrap_ci(pairs)
    line = (f"compiled - uncompiled on the same {len(pairs)} test questions: {metric} {diff:+.3f} "
            f"(95% CI {low:+.2f} to {high:+.2f})")
    if low <= 0 <= high:
        benchmark = {"demo": "hotpotqa", "demo_culture": "blend"}.get(args.dataset, args.dataset)
        line += (f"; the interval includes 0, so this slice cannot tell them apart. For a comparison: python "
                 f"optimize.py --program {args.program} --dataset {benchmark} --test {max(50, 2 * len(pairs))}")
    return line


if __name__ == "__main__":
    main()
