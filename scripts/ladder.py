"""Which role the small model loses on: per method and dataset, every role oracle (arm 0, no LM call), then one arm
per oracle role R the method has with every role oracle but R, which the LM (``--lm``) plays again; ``--full``: a
last arm with no oracle at all. Oracle rows are bounds, never results (docs/results/archive/headroom.md).

``RAG_DATA_DIR=/work/shared/data python -m scripts.ladder --programs par2 seal --datasets musique --test 30``

A thin use of the suite machinery (``experiments/suite.py``), as ``scripts/ceiling.py``: one parent MLflow run, one
child run per arm, named by its oracle roles (``par2+oracle:query,writer``: the controller given back), checkpointed
per question, the leaderboard logged. Every arm answers the same seeded split (``--train/--dev/--test/--split/
--seed``; default split: test) and differs from the others only in its oracle roles. The report (report.md, printed)
is one table per method and dataset: each arm's evidence (All-Pass, Recall over its first k paragraphs and over
everything it retrieved), answers (EM, F1, the judge's with ``--judge``), cost per question (the program's LM calls,
prompt tokens, seconds; the judge's calls are counted apart), the program's LM calls by predictor as its records count
them (the check that only the role given back calls the LM), and the drop per role: all-oracle minus the arm, paired
on the same questions (exact McNemar on EM and the judge, a paired t-test on F1; Holm over the ladder's rows, per
metric). The report notes an arm whose role called no LM on these questions: identical to arm 0, or decided without
the LM.
"""
from __future__ import annotations

import json
from collections import Counter

import mlflow

import data as datasets
import programs
from evaluation import tracking
from evaluation.leaderboard import answered, fmt, paired
from evaluation.stats import holm
from experiments import cli, suite
from experiments.sessions import session
from programs.shared.oracle import ALL
from scripts.ceiling import runs_on

PROGRAMS = ("par2", "seal", "coral")
ENTRY = "scripts/ladder.py"
#: (summary key, column, format) of each arm's row.
COLUMNS = (("all_pass", "All-Pass@k", "{:.3f}"), ("title_recall", "R@k", "{:.3f}"),
           ("all_pass_all", "All-Pass all", "{:.3f}"), ("recall_all", "R all", "{:.3f}"), ("em", "EM", "{:.3f}"),
           ("f1", "F1", "{:.3f}"), ("judge", "judge", "{:.3f}"), ("accuracy", "acc", "{:.3f}"),
           ("lm_calls", "LM calls/q", "{:.2f}"), ("prompt_tokens", "prompt tok/q", "{:.0f}"),
           ("seconds", "s/q", "{:.1f}"))
#: The answer metrics whose drop is tested (McNemar on correctness, a paired t-test on F1: ``leaderboard.paired``).
DROPS = ("em", "f1", "judge", "accuracy")


def arms(program: str, dataset: str, full: bool) -> list[suite.Cell]:
    """The ladder of ``program`` on ``dataset``: every role oracle, then each of its oracle roles given back to the LM
    (every other role oracle), then (``full``) no oracle at all."""
    roles = programs.oracle_roles(program)
    oracles = [ALL, *(",".join(r for r in roles if r != back) for back in roles), *([""] if full else [])]
    return list(dict.fromkeys(suite.cell(program, dataset, {}, o) for o in oracles))  # one role: its arm is --full


def given_back(cell: suite.Cell) -> str:
    """The roles the LM plays in ``cell``'s arm: "" (every role oracle), one role, or ``all`` (no oracle)."""
    if cell.oracle == ALL:
        return ""
    roles = programs.oracle_roles(cell.program)
    back = [r for r in roles if r not in cell.oracle.split(",")]
    return ALL if len(back) == len(roles) else ",".join(back)


def arm_session(s, cell: suite.Cell):
    """The dataset's session as ``cell``'s arm runs: its k and its oracle roles."""
    cs = suite.cell_session(s, cell)
    return cs.with_settings(oracle=cell.oracle)


def run_arm(s, cell: suite.Cell, parent_run_id: str) -> tuple[suite.Result, Counter]:
    """One arm into its child run, with the LM calls of its questions by predictor (:func:`predictor_calls`)."""
    result = suite.run_cell(arm_session(s, cell), cell, parent_run_id, "ladder", entry=ENTRY)
    return result, predictor_calls(result)


def predictor_calls(result: suite.Result) -> Counter:
    """The program's LM calls on ``result``'s questions by predictor, as each record counts them (``lm_calls_by``:
    also those read back from the checkpoint); the judge's are not the program's."""
    calls = Counter()
    for rec in result.records:
        calls.update(rec.get("lm_calls_by") or {})
    return calls


def drops(top: suite.Result, rows: list[suite.Result]) -> dict[tuple[str, str], dict]:
    """(arm label, metric) -> all-oracle (``top``) minus the arm on the questions both scored (``leaderboard.paired``),
    with the Holm-adjusted p-value over the ladder's arms per metric."""
    out = {}
    for metric in DROPS:
        tests = [paired(top, r, metric) for r in rows if metric in top.summary and metric in r.summary]
        for row, adjusted in zip(tests, holm([t["p"] for t in tests])):
            out[(row["baseline"], metric)] = row | {"holm_p": adjusted}
    return out


def idle_note(top: suite.Result, arm: suite.Result) -> str:
    """What the report says of an arm whose role called no LM on its questions (the same LM calls per question as
    every role oracle: none, or the judge's alone); "" when it called one."""
    def calls(r):
        return {rec["id"]: rec.get("lm_calls") or 0 for rec in r.records}

    def answers(r):
        return {rec["id"]: (rec["answer"], [p["id"] for p in rec.get("passages") or []]) for rec in r.records}
    if calls(top) != calls(arm):
        return ""
    if answers(top) == answers(arm):
        return "no LM call on these questions: the arm is the all-oracle arm (the role has no effect here)"
    return ("no LM call on these questions, yet other answers or passages: the program decides this role without "
            "its LM here")


def table(results: list[suite.Result], calls: dict) -> str:
    """One ladder's table (its first result is the all-oracle arm) and its notes."""
    top, rest = results[0], results[1:]
    tests = drops(top, rest)
    shown = [c for c in COLUMNS if any(c[0] in r.summary for r in results)]
    metrics = [m for m in DROPS if any((r.cell.label, m) in tests for r in rest)]
    head = ["arm", "given back", "answered", "failed", *(h for _, h, _ in shown),
            *(f"drop {m} [p, Holm]" for m in metrics), "LM calls by predictor"]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    notes = []
    for r in results:
        back = given_back(r.cell)
        cells = [r.label, back or "- (every role oracle)", answered(r.summary),
                 str(r.summary.get("failed_examples", 0)), *(fmt(r.summary.get(k), f) for k, _, f in shown)]
        for m in metrics:
            t = tests.get((r.cell.label, m))
            cells.append("-" if t is None else f"{fmt(t['diff'], '{:+.3f}')} [{fmt(t['p'])}, {fmt(t['holm_p'])}] "
                                               f"n={t['n']}")
        cells.append(", ".join(f"{k} {v}" for k, v in sorted(calls.get(r.cell, {}).items())) or "none")
        lines.append("| " + " | ".join(cells) + " |")
        if r is not top and back != ALL and (note := idle_note(top, r)):
            notes.append(f"- {back}: {note}.")
        if uncounted := sum("lm_calls_by" not in rec for rec in r.records):
            notes.append(f"- {r.label}: {uncounted} record(s) read back from a checkpoint written before LM calls were "
                         "counted by predictor: their calls are not in its LM calls by predictor.")
    ids = {frozenset(rec["id"] for rec in r.records) for r in results}
    if len(ids) > 1:
        notes.append("- the arms did not record the same questions: each drop is paired on those both scored (n).")
    return "\n".join(lines) + ("\n\n" + "\n".join(notes) if notes else "")


def report(results: list[suite.Result], calls: dict, title: str, judged: dict[str, str]) -> str:
    """One table per (method, dataset), arms in ladder order; ``judged``: who judges each dataset's answers."""
    parts = [f"# Attribution ladder: {title}",
             "drop = all-oracle minus the arm (per question, the same questions): positive = what the LM loses in "
             "the role given back. p: exact McNemar (EM, judge) or paired t (F1); Holm over the ladder's arms per "
             "metric. LM calls/q are the program's (the judge's apart). Oracle rows are bounds, never results."]
    for key in dict.fromkeys((r.cell.program, r.cell.dataset) for r in results):
        ladder = [r for r in results if (r.cell.program, r.cell.dataset) == key]
        k = programs.run_k(key[0], None)
        parts.append(f"## {key[0]} on {key[1]} (k {k}, judge {judged[key[1]]})\n\n" + table(ladder, calls))
    return "\n\n".join(parts) + "\n"


def main(argv=None, hook=None) -> dict:
    """Run the ladders; ``hook(session) -> session`` (tests) is applied to every dataset's session."""
    p = suite.parser(__doc__.splitlines()[0])
    p.set_defaults(split="test")
    p.add_argument("--programs", nargs="+", default=list(PROGRAMS), choices=programs.names(),
                   help="methods to ladder (default: par2 seal coral)")
    p.add_argument("--full", action="store_true", help="a last arm with no oracle at all (every role the LM's)")
    args = suite.script_args(p, argv, ("suite", "methods", "arms", "ray", "ray_cpus"))
    if args.oracle:
        cli.fail("--oracle: the ladder sets each arm's oracle roles itself; drop --oracle")
    if bare := [m for m in args.programs if not programs.oracle_roles(m)]:
        cli.fail(f"--programs: {bare[0]} has no oracle roles to give back; choose programs with some "
                 "(programs.oracle_roles)")
    wanted = args.datasets or ([args.dataset] if args.dataset else [])
    bundles = {d: datasets.load(d, args.data_dir)
               for d in dict.fromkeys(wanted or [programs.spec(m).default_dataset for m in args.programs])}
    cells = []
    for m in args.programs:
        for d in wanted or [programs.spec(m).default_dataset]:
            if runs_on(m, bundles[d].examples):
                cells += arms(m, d, args.full)
            else:
                print(f"note: {m} skipped on {d}: a question lacks a label of its oracle roles")
    if not cells:
        cli.fail("no ladder to run: every program lacks an oracle role's label on its datasets (see the notes)")
    cli.check_args(args, list(dict.fromkeys(c.program for c in cells)))
    results, calls = [], {}
    title = f"split {args.split} (seed {args.seed}), lm {args.lm}"
    sessions = {}  # by dataset
    with tracking.run(args.experiment, "ladder", tags={"entry": ENTRY}) as parent:
        tracking.log_params({"programs": args.programs, "datasets": list(dict.fromkeys(c.dataset for c in cells)),
                             "full": args.full, "lm": args.lm, "judge": args.judge, "split": args.split,
                             "seed": args.seed, "cells": [f"{c.label}@{c.dataset}" for c in cells]})
        for dataset in dict.fromkeys(c.dataset for c in cells):
            s = session(args.replace(dataset=dataset), any(programs.spec(c.program).needs_search for c in cells))
            s = sessions[dataset] = hook(s) if hook else s
            for c in cells:
                if c.dataset == dataset:
                    result, calls[c] = run_arm(s, c, parent.info.run_id)
                    results.append(result)
        pairs = [pair for c in cells if c.oracle == ALL for pair in suite.against(c, [
            o for o in cells if o.program == c.program])]
        board = suite.log_leaderboard(results, pairs, f"ladder: {title}, judge {suite.judged_by(args, sessions)}")
        text = report(results, calls, title, {d: s.derived.judged_by for d, s in sessions.items()})
        mlflow.log_text(text, "report.md")
        mlflow.log_text(json.dumps({f"{c.label}@{c.dataset}": dict(n) for c, n in calls.items()}, indent=1),
                        "lm_calls_by_predictor.json")
    print(f"\n{board.markdown}\n\n{text}\nrun {parent.info.run_id} (ladder)")
    return {"run_id": parent.info.run_id, "results": results, "calls": calls, "report": text}


if __name__ == "__main__":
    cli.interruptible(main)()
