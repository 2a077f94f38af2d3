"""``run NAME``: a declared table through the suite machinery (``experiments.suite.run_suite``: checkpointed per
question, resumable, Ray with ``--ray``), one parent run per dataset (a part: ``--datasets`` runs some), each stamped
with the code that ran (:data:`~experiments.tables.stored.STAMP`), its finished cells kept in the repository
(:func:`~experiments.tables.stored.keep`); before it, on a non-local LM or with
``--estimate``, what it will cost."""
from __future__ import annotations

import argparse
import shlex
import sys
from dataclasses import replace

import mlflow

from evaluation import tracking
from evaluation.leaderboard import fmt
from experiments import cli, suite
from experiments.cli import fail
from experiments.tables import stamp, stored
from experiments.tables.declared import Table
from runtime.lm import LOCAL_PREFIX

#: Flags a table declares (or leaves at their defaults): a run that sets one otherwise is not the table.
FIXED = (*(s.name for s in cli.SETTINGS), "judge", "no_retrieval", "circular", "mc_scoring", "mc_calibration",
         "split", "suite", "program", "no_cache")


def parser() -> argparse.ArgumentParser:
    """``run``'s flags: the suite's (``evaluate.py --suite``'s), and the estimate's."""
    p = suite.parser("run a declared table")
    p.add_argument("--estimate", action="store_true", help="print what the run would cost, then stop")
    p.add_argument("--price-in", type=float, metavar="USD", help="price per million prompt tokens")
    p.add_argument("--price-out", type=float, metavar="USD", help="price per million completion tokens")
    p.add_argument("--ask-above-calls", type=cli.at_least(0), default=2000,
                   help="ask before a run estimated at more LM calls than this")
    p.add_argument("--ask-above-usd", type=float, default=1.0,
                   help="with prices: ask before a run estimated to cost more than this")
    p.add_argument("--yes", action="store_true", help="run without asking, whatever the estimate")
    return p


def settle(table: Table, args, given: set[str]):
    """``args`` as ``table`` declares them; a flag that sets a declared setting (or one the table leaves at its
    default) otherwise is one line, exit 2."""
    # no_cache: a table measures cost, and a reply from DSPy's response cache has none (a re-keyed cell whose prompts
    # did not change would read 0 prompt tokens and 0.1 s a question)
    declared = {"train": 0, "dev": 0, "judge": table.judge, "split": "test", "no_cache": True, **table.settings}
    defaults = vars(parser().parse_args([]))
    for key in FIXED:
        value = declared.get(key, defaults.get(key))
        if key in given and getattr(args, key) != value:
            flag = "--" + key.replace("_", "-")
            shown = value if value is not None else "left to each dataset and method"
            fail(f"{flag} {getattr(args, key)}: table {table.name} runs with {key} {shown}; leave {flag} out (a "
                 "different setting is a different table: declare it in experiments/tables/declared.py)")
        args = args.replace(**{key: value})
    return args if "lm" in given else args.replace(lm=table.lm)


def parts(table: Table, only=None) -> list[tuple[str, tuple]]:
    """(dataset, the table's entries on it) per dataset the run covers (``--datasets``: some)."""
    if unknown := [d for d in only or () if d not in table.datasets]:
        fail(f"--datasets {unknown[0]}: table {table.name} has {', '.join(table.datasets)}")
    return [(d, tuple(replace(e, datasets=(d,)) for e in table.entries if d in e.datasets))
            for d in table.datasets if not only or d in only]


def estimate(table: Table, args) -> dict:
    """Per arm: questions x the cost per question measured in the newest stored run of its program
    (:func:`~experiments.tables.stored.measured`), the totals and, with prices, the cost; printed as a table."""
    rows, total = [], dict.fromkeys(stored.COST, 0.0)
    for dataset, entries in parts(table, args.datasets):
        for cell in suite.plan(entries, only_methods=args.methods, k=args.k, only_arms=args.arms)[0]:
            n = table.sizes[dataset]
            cost, source = stored.measured(cell, args.lm)
            rows.append((cell.label, dataset, n, cost, source))
            if table.judge:  # a judge call a question (exact matches take none: an upper bound)
                rows.append((f"{cell.label}: judge", dataset, n, stored.JUDGE_COST, "default (a call a question)"))
    for _, _, n, cost, _ in rows:
        for key in total:
            total[key] += n * cost[key]
    priced = args.price_in is not None and args.price_out is not None
    usd = (total["prompt_tokens"] * args.price_in + total["completion_tokens"] * args.price_out) / 1e6 if priced \
        else None
    lines = [f"estimate: table {table.name} on {args.lm}",
             "| arm | dataset | questions | LM calls/q | prompt tok/q | compl tok/q | LM calls | prompt tok | "
             "compl tok | measured from |", "|" + "---|" * 10]
    for label, dataset, n, cost, source in rows:
        lines.append(f"| {label} | {dataset} | {n} | {cost['lm_calls']:.1f} | {cost['prompt_tokens']:.0f} | "
                     f"{cost['completion_tokens']:.0f} | {n * cost['lm_calls']:.0f} | {n * cost['prompt_tokens']:.0f}"
                     f" | {n * cost['completion_tokens']:.0f} | {source} |")
    asked = sum(n for label, _, n, _, _ in rows if not label.endswith(": judge"))
    lines.append(f"| total | | {asked} | | | | {total['lm_calls']:.0f} | "
                 f"{total['prompt_tokens']:.0f} | {total['completion_tokens']:.0f} | |")
    lines.append(f"cost: ${fmt(usd, '{:.2f}')} at ${args.price_in}/M prompt, ${args.price_out}/M completion tokens"
                 if priced else "cost: give --price-in and --price-out (USD per million tokens) to price it")
    print("\n".join(lines))
    return {"rows": rows, "total": total, "usd": usd}


def confirm(table: Table, args, est: dict) -> None:
    """Above ``--ask-above-calls`` (or, priced, ``--ask-above-usd``) ask before starting; ``--yes`` skips; with no
    terminal to ask on, one line and exit 2."""
    calls, usd = est["total"]["lm_calls"], est["usd"]
    over = calls > args.ask_above_calls or (usd is not None and usd > args.ask_above_usd)
    if not over or args.yes:
        return
    size = f"{calls:.0f} LM calls" + (f", ${usd:.2f}" if usd is not None else "")
    if not sys.stdin.isatty():
        fail(f"table {table.name} is estimated at {size}, above --ask-above-calls {args.ask_above_calls}"
             + (f" / --ask-above-usd {args.ask_above_usd}" if usd is not None else "") + ": pass --yes to run it")
    if input(f"table {table.name} is estimated at {size}; run it? [y/N] ").strip().lower() not in ("y", "yes"):
        fail("not started")


def command(argv: list[str]) -> str:
    """The command line that ran, URLs without credentials."""
    return "python -m experiments.tables " + " ".join(shlex.quote(tracking.redact(a)) for a in argv)


def run(table: Table, args, given: set[str], argv: list[str], hook=None) -> list[dict]:
    """Run ``table`` (its parts); returns each part's ``run_suite`` output."""
    if table.kind != "suite":
        fail(f"table {table.name} is a compile table: its cells run with scripts/optimizer_table.py ({table.note})")
    args = settle(table, args, given)
    local = args.lm.startswith(LOCAL_PREFIX) and all(
        (getattr(args, f"{r}_lm") or args.lm).startswith(LOCAL_PREFIX) for r in ("planner", "critic", "judge"))
    if args.estimate:
        estimate(table, args)
        return []
    if not local:
        confirm(table, args, estimate(table, args))
    made = stamp.current(table) | {"table": table.name, "command": command(argv)}
    out = []
    for dataset, entries in parts(table, args.datasets):
        part = args.replace(suite=stored.suite_tag(table), test=table.sizes[dataset])
        result = suite.run_suite(part, hook=hook, custom=entries)
        with mlflow.start_run(run_id=result["run_id"]):
            mlflow.set_tag("table", table.name)
            tracking.log_json(stored.STAMP, made | {"commit": tracking.git_commit()})
        for path in stored.keep(table, result["run_id"]):
            print(f"kept: {path}")
        out.append(result)
    print(f"\nrender it: python -m experiments.tables render {table.name}")
    return out
