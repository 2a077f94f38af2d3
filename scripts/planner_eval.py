"""Does CORAL's planner choose corpora by content or by list position? Its first choice only, per LM and presentation.

``python -m scripts.planner_eval --dataset blend --test 48 --balance country --planners local:qwen-0.5b local:qwen-1.5b``

For every planner LM and every way of showing it the candidate corpora -- ``listed`` (pool order, names only: what
the planner saw before issue 13), ``shuffled`` (a seeded order per question) and ``probed`` (shuffled, each with the
title and score of its top passage for the question; the ``coral_probe`` variant, not in the paper; CORAL's default
is ``shuffled``) -- CORAL's first planner call on the question with its options (``select``:
grammar-constrained names on llama.cpp, validated against the pool) on each evaluated question; no retrieval
rounds, critic or writer, so a planner costs one call per question. Reports ``coral_compare``'s planner diagnostics
(recall of the culture's own-language corpus, how often the first-listed candidate is picked and the picks' mean
listed position, each beside random picking) with LM calls and seconds per question; one MLflow run."""
from __future__ import annotations

import sys
import time

import mlflow

from experiments import suite
from evaluation import tracking
from experiments.cli import interruptible
from experiments.sessions import session
from programs.coral.coral import CORAL, CORALConfig, Trace
from programs.coral.mrag import corpus_of
from runtime.lm import make_lm
from runtime.metering import metered
from scripts.coral_compare import balanced, planner_diagnostics

PRESENTATIONS = {"listed": {"shuffle_corpora": False, "probe": False},
                 "shuffled": {"shuffle_corpora": True, "probe": False},
                 "probed": {"shuffle_corpora": True, "probe": True}}


def first_choices(coral: CORAL, examples: list) -> list[dict]:
    """The planner's first-round corpora for each example, as coral_compare's records (trace + source_lang)."""
    records = []
    for ex in examples:
        trace, lang = Trace(), ex.get("lang")
        trace.question_corpus = corpus_of(coral.search, lang)
        corpora = coral.select(ex.question, lang, trace, ex.get("options"))
        records.append({"id": ex.id, "source_lang": ex.get("source_lang"),
                        "trace": {"question_corpus": trace.question_corpus, "presented": trace.presented, "corpora": [corpora],
                                  "parse_failures": trace.parse_failures, "unknown_corpora": trace.unknown_corpora,
                                  "planner_fallbacks": trace.planner_fallbacks}})
    return records


def main(argv=None) -> dict[str, dict]:
    p = suite.parser(__doc__.splitlines()[0])
    p.add_argument("--planners", nargs="+", default=["local:qwen-0.5b"], help="planner LMs to compare")
    p.add_argument("--presentations", nargs="+", default=list(PRESENTATIONS), choices=list(PRESENTATIONS))
    p.add_argument("--balance", metavar="FIELD", help="draw the questions evenly over this example field")
    p.set_defaults(dataset="demo_culture", split="test", experiment="planner-eval")
    args = p.parse_args(argv)
    s = session(args, needs_search=True)
    args = s.args  # as resolved
    examples = getattr(s.splits, args.split)
    if args.balance:
        train = set(s.splits.ids()["train"])
        examples = balanced([ex for ex in s.bundle.examples if ex.id not in train], args.balance, len(examples),
                            args.seed)
    languages = s.retriever.languages()
    results, lines = {}, ["| planner LM | presentation | questions | culture corpus chosen | first-listed chosen "
                          "(random) | mean listed position (random) | unusable outputs | LM calls/q | s/q |",
                          "|---|---|---|---|---|---|---|---|---|"]
    with tracking.run(args.experiment, f"planner-eval-{args.dataset}", tags={"entry": "scripts/planner_eval.py"}) as run:
        tracking.log_params(s.params("coral") | {"planners": args.planners, "presentations": args.presentations,
                                                 "balance": args.balance or "", "eval_ids": [ex.id for ex in examples]})
        for name in args.planners:
            lm = make_lm(name, args.api_base, cache=not args.no_cache)
            for presentation in args.presentations:
                coral = CORAL(s.retriever, CORALConfig(seed=args.seed, **PRESENTATIONS[presentation]))
                coral.planner.lm = lm
                t0 = time.perf_counter()
                with metered() as cost:
                    records = first_choices(coral, examples)
                seconds = time.perf_counter() - t0
                d = planner_diagnostics(records, languages)
                unusable = sum(r["trace"]["planner_fallbacks"] + r["trace"]["parse_failures"] for r in records)
                d |= {"unusable_outputs": unusable, "lm_calls_per_question": cost.as_dict()["lm_calls"] / len(records),
                      "seconds_per_question": seconds / len(records)}
                label = f"{name.replace(':', '_').replace('/', '_')}_{presentation}"
                mlflow.log_metrics({f"{label}_{k}": v for k, v in d.items() if v == v})
                tracking.log_jsonl(f"choices/{label}.jsonl", records)
                results[f"{name} {presentation}"] = d
                lines.append(f"| {name} | {presentation} | {len(records)} | {d['culture_recall_round1']:.3f} "
                             f"(of {d['culture_corpus_questions']}) | {d['first_listed_chosen']:.3f} "
                             f"({d['first_listed_chance']:.3f}) | {d['mean_listed_position']:.2f} "
                             f"({d['mean_listed_position_chance']:.2f}) | {unusable} | "
                             f"{d['lm_calls_per_question']:.1f} | {d['seconds_per_question']:.1f} |")
                print(f"run {run.info.run_id}: {lines[-1]}", file=sys.stderr, flush=True)
        text = "\n".join(lines)
        mlflow.log_text(text + "\n", "planner_eval.md")
    print(f"\n{args.dataset} | corpus: {s.derived.corpus_params()['corpus_source']} | run {run.info.run_id}\n\n{text}")
    return results


if __name__ == "__main__":
    interruptible(main)()
