"""RAG-Critic against its baselines on one seeded split, as a suite run, plus the critic's and planner's behaviour.

``python -m scripts.rag_critic_compare --dataset hotpotqa --train 20 --dev 30 --test 30 --no-cache
[--programs rag_critic rag rag_cot self_rag self_refine flare metarag] [--critic-lm local:qwen-1.5b]
[--judge --judge-lm local:qwen-1.5b] [--error-profile]``
A thin use of ``evaluate.py --suite`` (takes every flag of evaluate.py): the first program is paired with the
others in the suite's leaderboard (EM, F1, judge, LM calls, tokens and seconds per question, McNemar with CIs and
Holm), one child run per program, checkpointed per question (an interrupted run resumes). By default the paper
suite's arms: ``rag`` (RAG-Critic's first draft: its draft and corrections are one writer's, so that pair measures
the correction), ``rag_cot`` (with chain of thought: ``rag_critic_cot``'s draft), ``self_rag``, ``self_refine``,
``flare`` and ``metarag``, every arm at RAG-Critic's k (the paper's 5) unless ``--k`` says otherwise. Added in the parent run's report.md: the
share of answers the critic (self-feedback for self_refine, the monitor for metarag) flagged, the share of valid
plans, the plans whose answer read original plus newly found documents (supplementary retrieval) and the valid plans
that ran without a step error, the critic's identification of wrong first answers (F1 < 0.5) from each critic
program's own trace, with ``--judge`` the critic's confusion matrix against the judge's verdict on each first answer,
and with ``--error-profile`` each program's wrong answers labelled by the error critic on the judge LM
(``--judge-lm``).
"""
from __future__ import annotations

import math

import dspy
import mlflow

from experiments import cli, suite
from experiments.eval_run import ERROR_PROFILE, error_profile, error_taxonomy
from evaluation.critic_scores import answer_is_wrong, identification
from evaluation.leaderboard import fmt


def behaviour(records: list[dict]) -> dict:
    """Flagged share and plan validity from the traces (programs without a critic give none)."""
    traces = [r["trace"] for r in records if r.get("trace") and "flagged" in r["trace"]]
    if not traces:
        return {}
    out = {"flagged": sum(t["flagged"] for t in traces) / len(traces)}
    plans = sum(t.get("plans", 0) for t in traces)
    if "plans" in traces[0]:
        out |= {"plans": plans, "plans_valid": sum(t["plans_valid"] for t in traces) / plans if plans else math.nan,
                "plans_supplementary": sum(t.get("plans_supplementary", 0) for t in traces),
                "plans_clean": sum(t.get("plans_clean", 0) for t in traces),
                "instructions_copied": sum(t.get("instructions_copied", 0) for t in traces)}
    return out


def critic_identification(records: list[dict]) -> dict:
    """The first-round critic verdict on each first answer (flagged: Error) vs that answer's gold correctness."""
    rounds = [(r["trace"]["rounds"][0], r["gold"]) for r in records if (r.get("trace") or {}).get("rounds")
              and "critique" in r["trace"]["rounds"][0]]
    return identification([c["critique"]["verdict"] == "Error" for c, _ in rounds],
                          [answer_is_wrong(c["answer_in"], gold) for c, gold in rounds]) if rounds else {}


def judge_confusion(records: list[dict], session) -> dict:
    """The first-round critic flag against the judge's verdict on that first answer (``session.judge``, the same
    judge as the leaderboard): counts of flagged/unflagged wrong/right first answers."""
    examples = {ex.id: ex for split in (session.splits.train, session.splits.dev, session.splits.test) for ex in split}
    out = {"flagged_wrong": 0, "flagged_right": 0, "passed_wrong": 0, "passed_right": 0}
    for r in records:
        first = ((r.get("trace") or {}).get("rounds") or [{}])[0]
        if "critique" not in first or r["id"] not in examples:
            continue
        right = session.judge(examples[r["id"]], dspy.Prediction(answer=first["answer_in"])) == 1.0
        flagged = first["critique"]["verdict"] == "Error"  # an unparsed verdict is not acted on
        out[f"{'flagged' if flagged else 'passed'}_{'right' if right else 'wrong'}"] += 1
    return out


def report(args, taxonomy):
    """The parent run's report.md: critic/planner behaviour per program, critic identification, error profiles."""
    def make(results: list, sessions: dict) -> str:
        lines = ["| program | flagged | plans | plans valid | supplementary retrieval | valid, no step error | "
                 "instruction copied from the example |", "|---|---|---|---|---|---|---|"]
        for r in results:
            b = behaviour(r.records)
            if b:
                lines.append(f"| {r.label} | {fmt(b['flagged'], '{:.2f}')} | {b.get('plans', '-')} | "
                             f"{fmt(b.get('plans_valid'), '{:.2f}')} | {b.get('plans_supplementary', '-')} | "
                             f"{b.get('plans_clean', '-')} | {b.get('instructions_copied', '-')} |")
                mlflow.log_metrics({f"{r.cell.label}_{k}": v for k, v in b.items() if not math.isnan(v)})
        out = ["### What the critics did", "", *lines]
        for r in results:
            s = sessions.get(r.cell.dataset)
            if s is not None and s.judge is not None and (confusion := judge_confusion(r.records, s)) and any(
                    confusion.values()):
                mlflow.log_metrics({f"{r.cell.label}_critic_{k}": v for k, v in confusion.items()})
                out += ["", f"{r.cell.label} critic vs the judge on its first answer: "
                        + ", ".join(f"{k}={v}" for k, v in confusion.items())]
            if ident := critic_identification(r.records):
                mlflow.log_metrics({f"{r.cell.label}_critic_{k}": v for k, v in ident.items() if not math.isnan(v)})
                out += ["", f"{r.cell.label} critic vs gold correctness of its first answer (F1 < 0.5 = wrong): "
                        + ", ".join(f"{k}={fmt(v)}" for k, v in ident.items())]
        for r in results if args.error_profile else ():
            s = sessions[r.cell.dataset]
            out += ["", f"### error profile of {r.cell.label}", "", error_profile(
                s, r.records, taxonomy, f"{r.cell.label} (labels by {s.derived.lm_ids()['judge_lm']})")]
        return "\n".join(out) + "\n"
    return make


def main(argv=None) -> dict:
    p = suite.parser(__doc__.splitlines()[0])
    entry = next(e for e in suite.SUITES["paper"] if e.method == "rag_critic")
    p.add_argument("--programs", nargs="+", default=[entry.method, *entry.baselines],
                   help="the method first, then the programs it is paired with (default: the paper suite's)")
    cli.add_flags(p, (ERROR_PROFILE,))
    p.set_defaults(dataset="hotpotqa", split="test", suite="rag-critic-compare")
    args = suite.script_args(p, argv, ("datasets", "methods"), takes=("error_profile",))
    if args.ray:
        cli.fail("rag_critic_compare.py runs its cells in this process (the error profile needs the sessions); "
                 "use evaluate.py --suite for --ray")
    taxonomy = error_taxonomy(args.data_dir) if args.error_profile else None
    entry = suite.Entry(args.programs[0], tuple(args.programs[1:]), (args.dataset,))
    out = suite.run_suite(args, custom=(entry,), report=report(args, taxonomy))
    return {r.cell.label: r.summary | behaviour(r.records) for r in out["results"]}


if __name__ == "__main__":
    cli.interruptible(main)()
