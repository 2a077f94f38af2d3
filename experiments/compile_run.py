"""optimize.py's run: one MLflow run that scores a program on dev and test before and after its compile (the compile
settings: ``optimizers.settings``) and stores the compiled program."""
from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from evaluation import serving, tracking
from experiments.cli import fail
from experiments.sessions import Session
from experiments.stages import run_stage
from optimizers import settings as compile_settings
from optimizers.fitting import CompileInput, compile_fitted, compile_ledger, log_compiled
from optimizers.settings import CompileOptions
from programs.shared.oracle import ALL


def check_compile_flags(args) -> None:
    if args.oracle:
        fail("--oracle is for evaluation (evaluate.py, --suite): compiling reads no gold labels; compile without it "
             "and evaluate the compiled program with --oracle")


def compile_input(s: Session) -> CompileInput:
    """What a compile reads of session ``s``, resolved once: the compile options of its settings, its role LMs,
    splits and checkpoint keys, and the config and data a compiled program is saved with."""
    return CompileInput(CompileOptions.of(s.args), s.roles, s.splits, s.checkpoint, s.derived.config, s.derived.data)


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

    teacher = s.build(args.program, oracle=ALL) if args.teacher == "oracle" else None
    params = compile_settings.params(args, args.optimizer, metric_name) | {"teacher": args.teacher}
    run_name = f"{args.program}-{args.dataset}-{args.optimizer}" + (f"-teacher={args.teacher}" if teacher else "")
    with tracking.run(args.experiment, run_name, tags={"entry": "optimize.py", "teacher": args.teacher}) as run:
        tracking.log_params(s.params(args.program) | params)
        stages, scored = {}, {}

        def stage(name, prog, examples):
            if examples:  # none: e.g. --dev 0 with bootstrap, which never looks at dev
                scored[name], stages[name] = run_stage(s, prog, s.evaluated(examples), args.program, name,
                                                       run_id=run.info.run_id)

        s.eval_data("train", s.splits.train).log()  # what compile learns from
        stage("dev_before", program, s.splits.dev)
        stage("test_before", program, s.splits.test)
        run_input = compile_input(s)
        compiled, _ = compile_fitted(run_input, program, args.optimizer, metric, s.roles.lm("planner"),
                                     compile_ledger(run_input, args.program, program, params), teacher)
        tracking.tag_effective(compiled, args.program)  # its gates fitted on dev may rest
        stage("dev_after", compiled, s.splits.dev)
        stage("test_after", compiled, s.splits.test)

        out = Path(args.out) if args.out else Path(tempfile.mkdtemp()) / "program.json"
        log_compiled(run_input, compiled, args.program, out)
        prompts = tracking.register_prompts(compiled, args.program, {"optimizer": args.optimizer,
                                                                     "dataset": args.dataset,
                                                                     "teacher": args.teacher})
        example = next(ex for ex in (*s.splits.test, *s.splits.dev, *s.splits.train)).inputs().toDict()
        with tracking.untraced():  # MLflow answers the example with the logged model: not one of the run's questions
            model = serving.log_served(out, args.program, serving.serving_config(args, compiled), example,
                                       [f"prompts:/{p}" for p in prompts], args.api_base, s.derived.data)
        stored = tracking.artifact_path(out.name)
        if not args.out:
            shutil.rmtree(out.parent)  # the lasting copy is the run's artifact
    return CompileRun(run.info.run_id, run_name, stages, scored, prompts, stored, out.name,
                      f"runs:/{run.info.run_id}/model", serving.model_name(args.program),
                      str(model.registered_model_version))
