"""Evaluate a program or a compiled artifact on one split and log an MLflow run.

``python evaluate.py --program rag --dataset hotpotqa --split dev --dev 50 --judge``
``python evaluate.py --compiled <run-id or program.json> --split test``
``python evaluate.py --suite paper --test 30 --judge`` (every method with its baselines, see experiments/suite.py)"""
from __future__ import annotations

import programs
from experiments.cli import as_compiled, check_applies, check_needs, evaluate_run, fail, given_flags, interruptible
from experiments.sessions import session
from experiments.eval_run import evaluate_program, parser
from experiments.suite import run_suite


@interruptible
def main(argv=None) -> dict:
    p = parser(__doc__.splitlines()[0])
    args = p.parse_args(argv)
    flags = given_flags(p, argv)
    check_applies(flags, evaluate_run(args))
    if args.suite:
        check_needs(flags, args)
        return run_suite(args.replace(split=args.split or "test"))
    args = args.replace(split=args.split or "dev")
    if not (args.program or args.compiled):
        fail(f"give one of --program ({', '.join(programs.names())}) or --compiled PATH|RUN_ID")
    artifact, given = None, {}
    if args.compiled:  # checked, then run as compiled: its settings, and its paths only where the flags name them
        given = {key: getattr(args, key) for key in flags}
        try:
            artifact = programs.read_artifact(args.compiled)
            programs.check_compiled(artifact, given)
        except (FileNotFoundError, ValueError) as err:
            fail(str(err))
        args = as_compiled(args, artifact, set(given))
    check_needs(flags, args)
    s = session(args, programs.spec(args.program).needs_search)
    run_id, run_name, summary = evaluate_program(s, artifact, given)
    print(f"\nrun {run_id} ({run_name}): {summary['answered']} answered of {summary['n']} asked (scores over the "
          f"{summary['answered']} answered, cost over all {summary['n']} asked)")
    print("  " + "  ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in summary.items()))
    return summary


if __name__ == "__main__":
    main()
