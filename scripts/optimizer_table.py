"""The optimizer table: one program on one dataset, uncompiled and compiled by each optimizer, same test questions.

``python -m scripts.optimizer_table --program rag --dataset hotpotqa --optimizers bootstrap random_search mipro gepa \\
    --train 20 --dev 30 --test 50 --proposer-lm local:qwen-1.5b [--compile-budget N] [--demo-tokens T]``

One MLflow parent run; a child run per cell, all on the same seeded split with the same LMs: ``uncompiled``, and per
optimizer its compile on train (the search optimizers select on dev; within ``--compile-budget``/``--compile-minutes``,
demos fitted to ``--demo-tokens``, with ``--decisions logprob|fused`` the gates fitted on dev, as ``optimize.py``
does) with the compiled program as the run's ``program.json`` (``evaluate.py --compiled RUN`` loads it), then the test
questions, checkpointed per question. The leaderboard pairs every optimizer with ``uncompiled`` on the test questions
(exact McNemar, bootstrap CI, Holm; paired t-test on F1) and shows each compile's cost in the same row. The program
runs on ``--lm`` (its roles on ``--planner-lm``/``--critic-lm`` as usual); MIPROv2 proposes instructions and GEPA
reflects with ``--proposer-lm`` (default: the planner role's LM). An interrupted run, re-run with the same command,
reads finished test questions from their checkpoints and every compile call it already made from the LM cache (under
``--no-cache``: from the compile's own answers, kept beside its checkpoints); a row still shows what its compile cost
(``optimizers.fitting.compile_ledger``). ``--budget`` is both MIPROv2's trials and GEPA's metric calls."""
from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import programs
from experiments import cli, compile_run, suite
from evaluation import tracking
from experiments.cli import compile_metric, fail, interruptible
from experiments.sessions import session
from optimizers import fitting, settings as compile_settings
from optimizers.compile import OPTIMIZERS
from runtime.lm import make_lm

ENTRY = "scripts/optimizer_table.py"


def compile_cost(spent: dict) -> dict:
    """The ``compile_*`` summary keys of a compiled cell, which the leaderboard shows beside its quality."""
    demos = ", ".join(f"{name} {tokens}" for name, tokens in spent["demo_tokens"].items() if tokens) or "0"
    return {"compile_lm_calls": spent["lm_calls"], "compile_prompt_tokens": spent["prompt_tokens"],
            "compile_completion_tokens": spent["completion_tokens"], "compile_minutes": spent["seconds"] / 60,
            "compile_demo_tokens": demos, "compile_budget_stop": spent["budget_stop"] or "no"}


@interruptible
def main(argv=None) -> dict:
    p = suite.parser(__doc__.splitlines()[0])
    p.add_argument("--optimizers", nargs="+", default=list(OPTIMIZERS), choices=OPTIMIZERS)
    p.add_argument("--proposer-lm", help="MIPROv2's instruction proposer and GEPA's reflection LM (e.g. "
                                         "local:qwen-1.5b; default: --planner-lm, else --lm)")
    cli.add_flags(p, compile_settings.SETTINGS)
    # each optimizer's own flags (--demos, --candidates, --budget) are taken: the table runs several optimizers
    args = suite.script_args(p, argv, (*suite.OWN_CELLS, "split"), takes=("program", "demos", "candidates", "budget"))
    if not args.program:
        fail(f"--program is required; choose one of: {', '.join(programs.names())}")
    compile_run.check_compile_flags(args)
    args = args.replace(split="test", suite=f"optimizers-{args.program}")
    s = session(args, programs.spec(args.program).needs_search)
    args = s.args  # as resolved: the dataset, split sizes and k it runs
    searching = [o for o in args.optimizers if o != "bootstrap"]
    if not s.splits.train or not s.splits.test or (searching and not s.splits.dev):
        fail("the optimizer table needs --train and --test" + (f" and --dev (for {', '.join(searching)})"
                                                               if searching else "") + " of at least 1 example")
    metric_name, metric = compile_metric(s.bundle.task, args.metric, s.judge)
    proposer = (make_lm(args.proposer_lm, args.api_base, cache=not args.no_cache) if args.proposer_lm
                else s.roles.lm("planner"))
    proposer_id = args.proposer_lm or s.derived.lm_ids()["planner_lm"]
    run_input = compile_run.compile_input(s)
    base = suite.cell(args.program, args.dataset, {"k": args.k, "loops": args.loops})
    results = []
    with tracking.run(args.experiment, f"{args.suite}-{args.dataset}", tags={"entry": ENTRY}) as parent:
        tracking.log_params({k: v for k, v in vars(args).items() if k not in ("data_dir", "api_base")}
                            | {"compile_metric": metric_name, "proposer": proposer_id})
        for optimizer in ["uncompiled", *args.optimizers]:
            cell = dataclasses.replace(base, variant=optimizer)
            with tracking.run(args.experiment, f"{cell.label}-{args.dataset}", parent_run_id=parent.info.run_id,
                              nested=True) as child:
                program, cost = s.build(args.program), {}
                if optimizer == "uncompiled":  # its gates fitted on dev too: the rows differ in the prompts only
                    fitting.fit_gates(run_input, program, metric)
                else:
                    params = (compile_settings.params(args, optimizer, metric_name)
                              | {"proposer": proposer_id if optimizer in ("mipro", "gepa") else ""})
                    tracking.log_params(params)
                    ledger = fitting.compile_ledger(run_input, cell.label, program, params)
                    program, spent = fitting.compile_fitted(run_input, program, optimizer, metric, proposer, ledger)
                    cost = compile_cost(spent)
                    with tempfile.TemporaryDirectory() as tmp:
                        fitting.log_compiled(run_input, program, args.program, Path(tmp) / "program.json")
            result = suite.run_cell(s, cell, parent.info.run_id, args.suite, program=program, entry=ENTRY,
                                    run_id=child.info.run_id)
            result.summary |= cost
            results.append(result)
        pairs = [(args.dataset, r.cell, results[0].cell) for r in results[1:]]
        board = suite.log_leaderboard(results, pairs,
                                      f"{args.program} compiled by each optimizer vs uncompiled on {args.dataset} "
                                      f"(seed {args.seed}, program on {args.lm}, proposer/reflection {proposer_id}, "
                                      f"compile metric {metric_name})")
    print(f"\n{board.markdown}\nrun {parent.info.run_id} ({args.suite}-{args.dataset})")
    for r in results[1:]:  # the artifact holds its settings and split; its paths and servers only when named again
        print(f"{r.cell.variant}: {cli.evaluate_command(r.run_id, args)} --lm {args.lm}")
    return {"run_id": parent.info.run_id, "results": results, "leaderboard": board}


if __name__ == "__main__":
    main()
