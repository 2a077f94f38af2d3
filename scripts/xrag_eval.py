"""XRAG-style tables on the XQuAD settings in one process and one MLflow run: the paper's Table 4 shape
(monolingual retrieval: accuracy and response-language correctness per question language X and for the
English-question baseline on the same items, under no retrieval, oracle, full and open retrieval) and Table 5
shape (multilingual retrieval, full context: 1 supporting + 3 distracting paragraphs in X and in English, per X,
and the En + En_X baseline with the English question).

``python -m scripts.xrag_eval --n 20``                              (judged by the default panel: the 1.5B alone)
``python -m scripts.xrag_eval --n 5 --langs de zh --conditions full open --programs rag coral``
``python -m scripts.xrag_eval --n 20 --judge-lms A,B,C``             (three judge LMs: the paper's protocol)

Answers are judged as the paper judges (``evaluation.xlingual``): a panel's majority vote (``--judge-lms``, default
every local LM but the writer's: no LM judges its own answers; a tie is split, recorded and not scored) AND lingua's
language check; only a normalized exact match is decided without a judge. The run reports how many judged answers split the panel.

Conditions: ``none`` = the closed-book writer (``direct``); ``oracle`` = ``rag`` that can only see the
supporting paragraph; ``full`` = ``rag --k 8`` over supporting + distractors (all of them); ``open`` = ``rag``
over the pooled per-language corpora (top ``--k``). Every ``--programs`` entry runs in the oracle, full and open
conditions, with the same k as ``rag``. The same ``--n`` XQuAD questions (seeded) are used in every language.
XQuAD questions are answered by ONE paragraph, unlike XRAG's cross-document questions: these numbers measure
cross-lingual reading and answer language, not cross-document reasoning.

A thin use of the suite machinery (``experiments/suite.py``): every (condition, setting, program) cell is a child
run of one parent run, checkpointed per question, and the parent holds the suite's leaderboard (per setting;
in every retrieval condition the first ``--programs`` entry is paired with the others) beside the two tables
(report.md)."""
from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace

import mlflow

import data as datasets
import programs
from experiments import suite
from evaluation import tracking
from experiments.cli import interruptible
from experiments.derived import judge_panel, panel_note
from experiments.sessions import session

CONDITIONS = ("none", "oracle", "full", "open")
FULL_K = 8  # supporting + distractors: every visible document
ENTRY = "scripts/xrag_eval.py"


def sample_ids(root, n: int, seed: int) -> set[str]:
    """``n`` XQuAD question ids, seeded; ids are parallel across languages."""
    from data.xrag import read_xquad

    ids = sorted(qa["id"] for art in read_xquad(root, "en") for par in art["paragraphs"] for qa in par["qas"])
    return set(random.Random(seed).sample(ids, n))


def x_langs(args) -> list[str]:
    """The question languages X of ``--langs`` (English is the baseline, not an X)."""
    return [lang for lang in args.langs if lang != "en"]


def mono_langs(args) -> list[str]:
    """The question languages of the monolingual table: X and the English baseline (alone for ``--langs en``;
    left out with ``--no-baseline`` when its cells are already measured)."""
    baseline = ["en"] if args.baseline or "en" in args.langs else []
    return [*x_langs(args), *baseline]


def cells(args) -> list[tuple[str, str, str, str, int]]:
    """(table, condition, dataset, program, k) for every cell to run."""
    out = []
    for cond in args.conditions:  # cheapest first, every language, so a cut-off run still fills whole rows
        for lang in mono_langs(args):
            name = {"none": "xrag_mono:", "oracle": "xrag_mono_oracle:", "full": "xrag_mono:",
                    "open": "xrag_mono_open:"}[cond] + lang
            progs = ["direct"] if cond == "none" else args.programs
            out += [("mono", cond, name, p, args.k if cond == "open" else FULL_K) for p in progs]
    if args.multi:
        out += [("multi", "full", f"xrag_multi:{lang}", "rag", FULL_K) for lang in mono_langs(args)]
    return out


def table(results: dict, args, kind: str) -> str:
    """Markdown: one row per (condition, program), columns accuracy / language-correct per language."""
    langs = mono_langs(args)
    head = "| condition | program | " + " | ".join(f"{lang} acc / lang" for lang in langs) + " | avg X acc |"
    lines = [head, "|" + "---|" * (len(langs) + 3)]
    rows = sorted({(c, p) for (t, c, _, p) in results if t == kind}, key=lambda r: (CONDITIONS.index(r[0]), r[1]))
    for cond, prog in rows:
        cols, xs = [], []
        for lang in langs:
            got = next((v for (t, c, d, p), v in results.items()
                        if t == kind and c == cond and p == prog and d.endswith(":" + lang)), None)
            if got is None:
                cols.append("–")
                continue
            acc = got.get("accuracy", got.get("char3_recall", 0.0))
            cols.append(f"{100 * acc:.0f} / {100 * got['lang_ok']:.0f}")
            if lang != "en":
                xs.append(acc)
        avg = f"{100 * sum(xs) / len(xs):.1f}" if xs else "–"
        lines.append(f"| {cond} | {prog} | " + " | ".join(cols) + f" | {avg} |")
    return "\n".join(lines)


def main(argv=None) -> dict:
    p = suite.parser(__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=20, help="questions per language (the same XQuAD items in each)")
    p.add_argument("--langs", nargs="+", default=["de", "es", "zh", "ar"],
                   help="question languages X (the English baseline runs too unless --no-baseline; "
                        "`--langs en` runs it alone)")
    p.add_argument("--conditions", nargs="+", default=list(CONDITIONS), choices=CONDITIONS)
    p.add_argument("--programs", nargs="+", default=["rag"],
                   help="programs for the oracle, full and open conditions (none is always `direct`)")
    p.add_argument("--no-baseline", dest="baseline", action="store_false",
                   help="skip the English-question baseline (e.g. its cells are already measured in another run)")
    p.add_argument("--no-multi", dest="multi", action="store_false", help="skip the multilingual-setting table")
    p.add_argument("--judge-all", action="store_true",
                   help="also report the judge verdict alone (costs a judge call on wrong-language answers too); "
                        "by default the panel is asked only where accuracy needs it (language right, no exact match)")
    p.set_defaults(split="test", judge=True)
    args = suite.script_args(p, argv, (*suite.OWN_CELLS, "dataset", "train", "dev", "test"))
    # the open condition's top k: every program at rag's
    args = args.replace(train=0, dev=0, test=1, k=programs.run_k("rag", args.k))
    chosen = sample_ids(datasets.data_dir(args.data_dir), args.n, args.seed)
    summaries, results, pairs = {}, [], []
    with tracking.run(args.experiment, f"xrag-eval-n{args.n}", tags={"entry": ENTRY}) as run:
        tracking.log_params({"n_per_lang": args.n, "langs": args.langs, "conditions": args.conditions,
                             "programs": args.programs, "question_ids": sorted(chosen), "lm": args.lm,
                             "judge_lms": ",".join(judge_panel(args)), "embedder": args.embedder})
        key = s = None
        for kind, cond, name, prog, k in cells(args):
            if (name, cond != "none") != key:  # one session (data, retriever, judge) per setting at a time
                key = (name, cond != "none")
                s = session(args.replace(dataset=name), needs_search=key[1])
                s = s if args.judge_all else replace(s, metrics={m: f for m, f in s.metrics.items() if m != "judge"})
            cell = replace(suite.cell(prog, name, {"k": k}, args.oracle), variant=f"{kind}_{cond}")
            examples = [ex for ex in s.bundle.examples if ex.id.split("@")[0] in chosen]
            result = suite.run_cell(suite.cell_session(s, cell), cell, run.info.run_id, "xrag-eval",
                                    examples=examples, stage="xrag", entry=ENTRY)
            results.append(result)
            summaries[(kind, cond, name, prog)] = result.summary
            print(f"{cell.label}@{name}: " + "  ".join(
                f"{m}={result.summary[m]:.2f}" if m in result.summary else f"{m}=-" for m in
                ("accuracy", "lang_ok", "judge", "em", "f1", "char3_recall", "lm_calls", "seconds"))
                + f"  split={result.summary.get('panel/split', 0) + result.summary.get('language_panel/split', 0)}"
                " (not scored)", flush=True)
            if cond != "none" and prog != args.programs[0]:
                first = next(r.cell for r in results if r.cell.dataset == name and r.cell.variant == cell.variant
                             and r.cell.program == args.programs[0])
                pairs.append((name, first, cell))
        board = suite.log_leaderboard(results, pairs, f"XRAG-style settings on XQuAD, n={args.n} per language, "
                                                      f"lm {args.lm}")
        mono, multi = table(summaries, args, "mono"), table(summaries, args, "multi")
        # counted from the stored records (a resumed run reports what its checkpoints hold): answers a metric could
        # not score (an unreadable or unreachable judge), and how the panel decided the others (xlingual.JudgePanel)
        counts = Counter()
        for r in results:
            counts.update({key: v for key, v in r.summary.items()
                           if key.startswith(("verdict_by/", "panel/", "language_by/", "language_panel/"))})
        unscored = sum(v for r in results for key, v in r.summary.items()
                       if "_errors_by_class/" in key and not key.endswith("/SplitVerdict"))  # splits: their own count
        tallies = {"judge_exact": counts["verdict_by/exact"], "judge_abstained": counts["verdict_by/abstained"],
                   "judge_panel": counts["verdict_by/judges"], "judge_splits": counts["panel/split"],
                   "language_by_lingua": counts["language_by/lingua"],
                   "language_by_judges": counts["language_by/judges"],
                   "language_splits": counts["language_panel/split"]}
        mlflow.log_metrics({"unscored_verdicts": unscored, **tallies})
        mlflow.log_text(f"## Monolingual retrieval\n\n{mono}\n\n## Multilingual retrieval\n\n{multi}\n", "report.md")
    print(f"\n{board.markdown}")
    print("\nMonolingual retrieval (accuracy = judge AND language, % / response-language correct, %)\n" + mono)
    if args.multi:
        print("\nMultilingual retrieval (full context)\n" + multi)
    t = tallies
    print(f"\nrun {run.info.run_id}; judges {panel_note(judge_panel(args), args.lm) or ', '.join(judge_panel(args))}"
          f" (majority; a tie is split, not scored); verdicts not scored: {unscored}; without a judge call: "
          f"{t['judge_exact']} exact matches (right), {t['judge_abstained']} abstentions (wrong); judged by the panel: {t['judge_panel']}, the judges split on "
          f"{t['judge_splits']}; response language decided by lingua {t['language_by_lingua']}, by the panel "
          f"{t['language_by_judges']} (lingua undecided; the judges split on {t['language_splits']})")
    return summaries


if __name__ == "__main__":
    interruptible(main)()
