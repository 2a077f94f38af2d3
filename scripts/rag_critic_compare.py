"""RAG-Critic vs its baselines on one seeded split: quality, cost, paired tests, critic and planner behaviour.

``python scripts/rag_critic_compare.py --dataset hotpotqa --train 0 --dev 0 --test 30 --split test --no-cache
[--programs rag self_refine rag_critic] [--critic-lm local:qwen-1.5b] [--judge --judge-lm local:qwen-1.5b]
[--error-profile]``
Takes every flag of evaluate.py. Each program is checkpointed with evaluate.py's key, so an interrupted run (or
one program at a time) resumes. Prints and logs (one MLflow run) a markdown table: EM, F1, judge, LM calls, prompt
tokens and seconds per question, the share of answers the critic (self-feedback for self_refine) flagged, the
share of valid plans; exact McNemar p of each program vs the first (on EM, and on the judge when given); and the
critic's identification of wrong first answers (F1 < 0.5) from rag_critic's own trace. ``--error-profile`` labels
the first program's wrong answers with the critic-role LM.
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import mlflow  # noqa: E402

import evaluate as evaluate_cli  # noqa: E402
from optimizers import cli, tracking  # noqa: E402
from optimizers.critic_scores import answer_is_wrong, identification  # noqa: E402
from optimizers.evaluation import evaluate  # noqa: E402
from optimizers.stats import mcnemar_exact  # noqa: E402


def fmt(value, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return str(value) if isinstance(value, (int, str)) else f"{value:.{digits}f}"


def behaviour(records: list[dict]) -> dict:
    """Flagged share and plan validity from the traces (programs without a critic give none)."""
    traces = [r["trace"] for r in records if r.get("trace") and "flagged" in r["trace"]]
    if not traces:
        return {}
    out = {"flagged": sum(t["flagged"] for t in traces) / len(traces)}
    plans = sum(t.get("plans", 0) for t in traces)
    if "plans" in traces[0]:
        out |= {"plans": plans, "plans_valid": sum(t["plans_valid"] for t in traces) / plans if plans else math.nan}
    return out


def critic_identification(records: list[dict]) -> dict:
    """The first-round critic verdict on each first answer vs that answer's gold correctness."""
    rounds = [(r["trace"]["rounds"][0], r["gold"]) for r in records if (r.get("trace") or {}).get("rounds")
              and "critique" in r["trace"]["rounds"][0]]
    return identification([c["critique"]["verdict"] != "Correct" for c, _ in rounds],
                          [answer_is_wrong(c["answer_in"], gold) for c, gold in rounds]) if rounds else {}


def main(argv=None) -> dict:
    p = cli.parser(__doc__.splitlines()[0])
    p.add_argument("--programs", nargs="+", default=["rag", "self_refine", "rag_critic"])
    p.add_argument("--split", default="test", choices=["train", "dev", "test"])
    p.add_argument("--error-profile", action="store_true", help="label the first program's wrong answers")
    args = p.parse_args(argv)
    args.program = args.programs[0]
    s = cli.session(args, needs_search=True)
    taxonomy = evaluate_cli.error_taxonomy(args.data_dir) if args.error_profile else None
    examples = getattr(s.splits, args.split)
    records, summaries = {}, {}
    name = f"rag-critic-compare-{args.dataset}-n{len(examples)}"
    with tracking.run(args.experiment, name, tags={"entry": "scripts/rag_critic_compare.py"}) as run:
        tracking.log_params({k: v for k, v in s.params(args.program).items() if k not in ("program",)}
                            | {"programs": args.programs, "split": args.split})
        for prog in args.programs:
            program = s.build(prog)
            records[prog], summaries[prog] = evaluate(program, examples, s.metrics, k=args.k, retries=args.retries,
                                                      checkpoint=s.checkpoint(args.split, prog, program, examples),
                                                      desc=prog)
            summaries[prog] |= behaviour(records[prog])
            tracking.log_metrics(summaries[prog], prog)
            tracking.log_jsonl(f"predictions/{prog}.jsonl", records[prog])
        report = tables(args, records, summaries, len(examples))
        if args.error_profile:
            report += "\n\n### error profile of " + args.programs[0] + "\n\n" + evaluate_cli.error_profile(
                s, records[args.programs[0]], taxonomy, f"{args.programs[0]} (labels by {s.lm_ids()['critic_lm']})")
        mlflow.log_text(report, "compare.md")
    print(f"\n{report}\n\nrun {run.info.run_id}")
    return summaries


def tables(args, records: dict, summaries: dict, n: int) -> str:
    base = args.programs[0]
    metrics = ["em", "f1"] + (["judge"] if args.judge else [])
    head = (["program", "n"] + [m.upper() if m != "judge" else "judge" for m in metrics] +
            ["LM calls/q", "prompt tok/q", "s/q", "flagged", "plans valid", "failed"])
    rows = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for prog, sm in summaries.items():
        cells = [prog, str(sm["n"])] + [fmt(sm.get(m)) for m in metrics] + [
            *(fmt(float(sm[c]), d) if c in sm else "-" for c, d in (("lm_calls", 1), ("prompt_tokens", 0),
                                                                     ("seconds", 1))),
            fmt(sm.get("flagged"), 2), fmt(sm.get("plans_valid"), 2) + (f" of {sm['plans']}" if "plans" in sm else ""),
            str(sm.get("failed_examples", 0))]
        rows.append("| " + " | ".join(cells) + " |")
    sig = [f"| program | metric | only it right | only {base} right | McNemar p |", "|---|---|---|---|---|"]
    by_id = {prog: {r["id"]: r for r in recs} for prog, recs in records.items()}
    for prog in args.programs[1:]:
        ids = [i for i in by_id[base] if i in by_id[prog]]
        for m in [m for m in metrics if m != "f1"]:  # paired on binary correctness: EM (and the judge)
            right = [[by_id[x][i].get(m, 0.0) >= 1.0 for i in ids] for x in (prog, base)]
            only_it, only_base, pval = mcnemar_exact(*right)
            sig.append(f"| {prog} | {m} | {only_it} | {only_base} | {fmt(pval)} |")
            mlflow.log_metric(f"mcnemar_{prog}_vs_{base}_{m}", pval)
    out = (f"## {', '.join(args.programs)} on {args.dataset} ({args.split}, n={n}, seed={args.seed}, k={args.k}, "
           f"lm={args.lm}, critic={args.critic_lm or args.lm}, planner={args.planner_lm or args.lm})\n\n"
           + "\n".join(rows) + "\n\n" + "\n".join(sig))
    for prog in args.programs:
        ident = critic_identification(records[prog])
        if ident:
            mlflow.log_metrics({f"{prog}_critic_{k}": v for k, v in ident.items() if not math.isnan(v)})
            out += (f"\n\n{prog} critic vs gold correctness of its first answer (F1 < 0.5 = wrong): "
                    + ", ".join(f"{k}={fmt(v, 3 if isinstance(v, float) else 0)}" for k, v in ident.items()))
    return out


if __name__ == "__main__":
    main()
