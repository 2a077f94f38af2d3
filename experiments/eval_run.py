"""evaluate.py's run: one program, or a compiled artifact, evaluated on one split as one MLflow run, optionally with
RAG-Critic's error profile of its wrong answers."""
from __future__ import annotations

import argparse

import programs
from evaluation import tracking
from experiments.cli import add_flags, fail
from experiments.sessions import Session, oracle_suffix
from experiments.stages import run_stage
from experiments.suite import parser as suite_parser
from runtime.settings import Setting


ERROR_PROFILE = Setting("error_profile", bool, False, "label the program's wrong answers with RAG-Critic's error "
                        "critic on the judge LM (--judge-lm: labelling is evaluation, not part of the program) and log "
                        "the tier-1/tier-2 distribution (table + bar chart); needs $RAG_DATA_DIR/rag_critic/",
                        switch=True)
#: evaluate.py's own settings, declared once.
SETTINGS = (Setting("compiled", str, None, "compiled program: program.json path or MLflow run id"), ERROR_PROFILE)


def parser(description: str) -> argparse.ArgumentParser:
    """evaluate.py's flags: a suite's, the compiled program to run, and the error profile."""
    p = suite_parser(description)
    add_flags(p, SETTINGS)
    return p


def evaluate_program(s: Session, artifact: dict | None, given: dict) -> tuple[str, str, dict]:
    """Evaluate ``--program`` (or the compiled ``artifact``, run with the ``given`` flags) on ``--split`` in one MLflow
    run; returns its run id, its name and the summary."""
    args = s.args
    taxonomy = error_taxonomy(args.data_dir) if args.error_profile else None
    roles = s.derived.oracle(args.program)
    try:
        loaded = (lambda mc: programs.load_compiled(artifact, search=s.retriever, roles=s.roles, oracle=roles, mc=mc,
                                                    given=given)) if artifact else None
        program, calibration = s.build_scored(args.program, loaded)
    except ValueError as err:  # a compiled program saved by another version of the program
        fail(str(err))
    examples = s.evaluated(getattr(s.splits, args.split))
    run_name = (f"{args.program}{oracle_suffix(roles, args.program)}-{args.dataset}-{args.split}"
                + ("-compiled" if artifact else ""))
    with tracking.run(args.experiment, run_name, tags={"entry": "evaluate.py"}) as run:
        tracking.log_params(s.params(args.program) | {"split": args.split, "compiled_from": args.compiled or ""})
        tracking.tag_effective(program, args.program)
        if calibration:
            tracking.log_json("calibration.json", calibration)
        records, summary = run_stage(s, program, examples, args.program, args.split, run_id=run.info.run_id)
        if args.error_profile:
            print(error_profile(s, records, taxonomy, f"{run_name} (labels by {s.derived.lm_ids()['judge_lm']})"))
    return run.info.run_id, run_name, summary


def error_taxonomy(data_dir):
    """RAG-Critic's taxonomy for ``--error-profile``, checked before anything is evaluated."""
    from programs.rag_critic.taxonomy import load_taxonomy

    try:
        return load_taxonomy(data_dir)
    except FileNotFoundError as err:
        fail(str(err))


def error_profile(s, records: list[dict], taxonomy, title: str) -> str:
    """Critique the wrong answers in ``records`` with the judge-role LM (the evaluator's model, so every program's
    profile is labelled by the same critic whatever its own roles) and log the profile to the active run."""
    from evaluation import error_profile as ep
    from programs.rag_critic.error_critic import ErrorCritic

    critic = ErrorCritic(taxonomy=taxonomy, max_chars=s.args.max_chars,
                         embedder=s.retriever.embedder if s.retriever else None)
    for predictor in critic.predictors():
        predictor.lm = s.roles.lm("judge")
    ids = {p["id"] for r in records for p in r.get("passages") or []}
    result = ep.profile(records, critic, ep.passage_lookup(s.bundle.corpora, ids))
    return ep.log(result, taxonomy, title)
