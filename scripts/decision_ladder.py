"""One method's decision ladder against its baseline: same questions, same writer, one MLflow parent run.

``python -m scripts.decision_ladder --program seal --baseline rag_cited --dataset musique --k 3 --loops 1 \\
    --dev 30 --test 30``

Rungs (each a child run, checkpointed per question; every rung paired with the baseline on the test questions by
exact McNemar with a bootstrap CI and Holm, with LM calls, tokens and seconds per question beside quality):

- ``generate``: the method's decisions as written labels (``--decisions generate``), critic = ``--lm``;
- ``fused``: the decisions read as probabilities and fused with the retriever's score, their gates fitted on the
  dev split (``optimizers.calibration.calibrate_decisions``; no demos: only the decisions change), critic = ``--lm``;
- ``fused-critic``: the same with ``--critic-lm`` (e.g. the 1.5B) making the decisions, the writer unchanged;
- ``oracle``: the method's decisions replaced by gold labels for every decision role it has (``--oracle``; not the
  generative query, plan and writer roles): how much the
  decisions leave on the table, and a check of the loop that no model weakness can hide.

The writer is ``--lm`` in every rung and in the baseline, and the baseline must answer with the method's own writer
(the same prompt, chain of thought or not: ``programs.shared.writer.writer_form``; ``rag_critic`` pairs with ``rag``,
``par2`` with ``rag_cot``, ``seal`` and ``crag`` with ``rag_cited``), so rungs differ in the decisions only."""
from __future__ import annotations

import dataclasses
import json
import sys

import dspy
import mlflow

import programs
from decoding.decisions import describe, gates
from experiments import suite
from evaluation import tracking
from optimizers.calibration import calibrate_decisions
from programs.shared.oracle import DECISION_ROLES
from programs.shared.writer import writer_form
from experiments.cli import fail, interruptible
from experiments.sessions import session
from runtime.files import write_whole

RUNGS = ("generate", "fused", "fused-critic", "oracle")
ENTRY = "scripts/decision_ladder.py"


def rung_args(args, rung: str):
    """The command-line arguments of one rung: its ``--decisions``, critic LM and ``--oracle`` roles."""
    decisions = [r for r in programs.oracle_roles(args.program) if r in DECISION_ROLES]  # not the generative roles
    return args.replace(decisions="fused" if rung.startswith("fused") else "generate",
                        critic_lm=args.critic_lm if rung == "fused-critic" else None,
                        oracle=",".join(decisions) if rung == "oracle" else "")


def check_same_writer(s, method: str, baseline: str) -> None:
    """Stop (one line naming the fix) unless ``baseline`` answers with ``method``'s writer; the fix offered is the
    variants of the baseline's class that do (``rag`` -> ``rag_cot`` for ``par2``)."""
    def form(name: str) -> list:
        try:
            return writer_form(programs.build(name, search=s.retriever, **s.derived.program_config(name)))
        except FileNotFoundError as err:  # e.g. rag_critic's taxonomy file
            fail(str(err))

    if s.retriever is None:
        return  # --no-retrieval: the rungs and the baseline all answer closed book
    own = form(method)
    if form(baseline) == own:
        return
    kin = [n for n in programs.names() if programs.spec(n).cls is programs.spec(baseline).cls and form(n) == own]
    fail(f"--baseline {baseline} answers with another writer than {method} (another prompt, or chain of thought where "
         f"the other has none), so the rungs would differ from it in more than the decisions; "
         + (f"use --baseline {' or '.join(kin)}" if kin else f"pick a baseline that answers with {method}'s writer"))


def fitted(s, name: str) -> tuple[dspy.Module, dict]:
    """Program ``name`` with its gates fitted on the dev split against gold (``calibrate_decisions``), and the fits.
    The fits are kept like a checkpoint, keyed by the program before fitting and the dev questions, so a resumed
    ladder does not fit again (an unreadable file: one warning line, fitted again); an interrupted fit resumes from
    the dev questions it finished (the journal beside them)."""
    program = s.build(name)
    journal = s.checkpoint("gates", name, program, tuple(ex.id for ex in s.splits.dev))
    saved = journal.with_suffix(".json")
    if saved.exists():
        try:
            fits = json.loads(saved.read_text(encoding="utf-8"))
            for gate_name, gate in gates(program).items():
                if "thresholds" in fits[gate_name]:
                    gate.load_state(fits[gate_name])
            print(f"gates fitted on dev reused from {saved}", file=sys.stderr)
            return program, fits
        except (ValueError, KeyError, TypeError) as err:
            print(f"warning: saved gate fits {saved} are unreadable ({type(err).__name__}: {str(err)[:80]}); "
                  "fitting again", file=sys.stderr)
            program = s.build(name)
    fits = calibrate_decisions(program, s.splits.dev, fused=True, retries=s.args.retries, journal=journal)
    write_whole(saved, json.dumps(fits))
    return program, fits


@interruptible
def main(argv=None) -> dict:
    p = suite.parser(__doc__.splitlines()[0])
    p.add_argument("--baseline", required=True, help="the program every rung is paired with")
    p.add_argument("--rungs", nargs="+", default=list(RUNGS), choices=RUNGS)
    args = suite.script_args(p, argv, (*suite.OWN_CELLS, "split", "oracle", "decisions"), takes=("program",))
    if not args.program:
        fail("--program is required (the method whose decisions climb the ladder)")
    if "fused-critic" in args.rungs and not args.critic_lm:
        fail("the fused-critic rung needs --critic-lm (e.g. local:qwen-1.5b); or leave it out of --rungs")
    args = args.replace(split="test", suite=f"ladder-{args.program}")
    base = session(args, True)
    args = base.args  # as resolved: the dataset, split sizes and k it runs
    check_same_writer(base, args.program, args.baseline)
    if any(r.startswith("fused") for r in args.rungs) and not base.splits.dev:
        fail("the fused rungs fit their gates on the dev split: pass --dev N (N >= 10)")
    baseline = suite.Cell(args.baseline, args.dataset, (("k", args.k),))
    results = []
    with tracking.run(args.experiment, args.suite, tags={"entry": ENTRY}) as parent:
        tracking.log_params({k: v for k, v in vars(args).items() if k not in ("data_dir", "api_base")})
        results.append(suite.run_cell(base, baseline, parent.info.run_id, args.suite, entry=ENTRY))
        for rung in args.rungs:
            s = session(rung_args(args, rung), True)
            cell = dataclasses.replace(suite.cell(args.program, args.dataset, {"k": args.k, "loops": args.loops},
                                                  s.derived.oracle(args.program)), variant=rung.replace("-", "_"))
            program = None
            if rung.startswith("fused"):
                program, fits = fitted(s, args.program)
                for gate, fit in fits.items():
                    mlflow.log_dict(fit, f"calibration/{rung}/{gate}.json")
                    print(f"{rung} {gate}: {describe(fit)}", file=sys.stderr)
                if not any("thresholds" in fit for fit in fits.values()):
                    fail(f"the {rung} rung fitted none of its gates on the {len(s.splits.dev)} dev questions (no "
                         f"labelled decisions): it would run on the paper's fixed thresholds; use a dataset with "
                         f"gold passages or a larger --dev")
            results.append(suite.run_cell(s, cell, parent.info.run_id, args.suite, program=program, entry=ENTRY))
        pairs = [(args.dataset, r.cell, baseline) for r in results[1:]]
        board = suite.log_leaderboard(results, pairs,
                                      f"{args.program} decision ladder vs {args.baseline} on {args.dataset} "
                                      f"(seed {args.seed}, writer {args.lm}, critic of fused-critic "
                                      f"{args.critic_lm or '-'})")
    print(f"\n{board.markdown}\nrun {parent.info.run_id} ({args.suite})")
    return {"run_id": parent.info.run_id, "results": results, "leaderboard": board}


if __name__ == "__main__":
    main()
