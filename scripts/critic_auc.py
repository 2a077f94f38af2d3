"""Is a critic better than chance? ROC AUC of critic scores for gold vs distractor passages on HotpotQA.

``python scripts/critic_auc.py --n 10 --distractors 2 --critic-lm local:qwen-0.5b local:qwen-1.5b``

For each of ``--n`` HotpotQA dev-distractor questions (seeded), its gold paragraphs (the supporting-fact titles)
and its first ``--distractors`` distractor paragraphs are scored one at a time by

- CORAL's per-document critic: ``s_tot = rel + 0.5 (use + spec + comp)`` (and relevance alone);
- SEAL's extractor + assessor, on that passage alone: the verified facts' ``coverage`` and ``answerability``
  (0 when no fact survives verification, as SEAL's gate counts it insufficient without asking).

AUC = P(score of a gold passage > score of a distractor), ties counting half (Mann-Whitney U / n1 n2, scipy);
0.5 is chance. Prints one table row per critic LM and logs one MLflow run with every passage's scores."""
from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import mlflow  # noqa: E402
from scipy.stats import mannwhitneyu  # noqa: E402

import data as datasets  # noqa: E402
from data.hotpotqa import FILES  # noqa: E402
from optimizers import tracking  # noqa: E402
from programs.coral import CORAL, Trace  # noqa: E402
from programs.evidence import lenient  # noqa: E402
from programs.retrieval import Passage  # noqa: E402
from programs.seal import SEAL, triple_lines, verbatim_facts  # noqa: E402
from runtime.lm import make_lm  # noqa: E402
from runtime.metering import metered  # noqa: E402
from runtime.roles import init_dspy  # noqa: E402

SCORES = ("coral_s_tot", "coral_relevance", "seal_coverage", "seal_answerability")


def auc(gold: list[float], other: list[float]) -> float:
    """P(gold > other) + P(tie) / 2; NaN when either side is empty."""
    if not gold or not other:
        return float("nan")
    return float(mannwhitneyu(gold, other, alternative="two-sided").statistic) / (len(gold) * len(other))


def labelled_passages(root: Path | None, n: int, distractors: int, seed: int) -> list[tuple[str, Passage, bool]]:
    """(question, passage, is_gold) for the gold paragraphs and the first ``distractors`` others of ``n`` seeded
    questions."""
    records = list(datasets.load_records([datasets.require_file(root, *FILES)]))
    records.sort(key=lambda r: r["_id"])
    random.Random(seed).shuffle(records)
    out = []
    for rec in records[:n]:
        gold = {title for title, _ in rec["supporting_facts"]}
        others = 0
        for title, sentences in rec["context"]:
            is_gold = title in gold
            if not is_gold:
                if others >= distractors:
                    continue
                others += 1
            out.append((rec["question"], Passage(f"{rec['_id']}:{title}", title, "".join(sentences).strip()),
                        is_gold))
    return out


def seal_scores(seal: SEAL, question: str, passage: Passage) -> tuple[float, float]:
    """SEAL's assessor on the facts it verifies from this one passage: (coverage, answerability)."""
    out = lenient(seal.extract, question=question, passage=passage.format(seal.max_chars))
    facts = verbatim_facts(triple_lines(out.triples), passage, seal.max_triples)[0] if out else []
    if not facts:
        return 0.0, 0.0
    verdict = lenient(seal.assess, question=question, facts=[f.render() for f in facts])
    if verdict is None:
        return 0.0, 0.0

    def number(value) -> float:
        try:
            return float(value)
        except (TypeError, ValueError):
            return 0.0
    return number(verdict.coverage), number(verdict.answerability)


def score_all(items, max_chars: int) -> tuple[list[dict], dict]:
    """Every passage scored by both critics with the configured LM; returns the rows and the LM cost."""
    coral, seal = CORAL(search=None, max_chars=max_chars), SEAL(search=None, max_chars=max_chars)
    rows = []
    with metered() as cost:
        for question, passage, is_gold in items:
            rated = coral.rate_one(passage, question, Trace())
            coverage, answerability = seal_scores(seal, question, passage)
            rows.append({"question": question, "title": passage.title, "gold": is_gold, "coral_s_tot": rated.total,
                         "coral_relevance": rated.relevance, "seal_coverage": coverage,
                         "seal_answerability": answerability, "coral_scores": list(rated.scores)})
    return rows, cost.as_dict()


def main(argv=None) -> dict[str, dict]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--n", type=int, default=10, help="HotpotQA questions")
    p.add_argument("--distractors", type=int, default=2, help="distractor paragraphs per question")
    p.add_argument("--critic-lm", nargs="+", default=["local:qwen-0.5b"], help="critic LMs to compare")
    p.add_argument("--api-base", help="OpenAI-compatible base URL for the critic LMs")
    p.add_argument("--max-chars", type=int, default=600, help="characters of each passage shown to the critic")
    p.add_argument("--seed", type=int, default=13)
    p.add_argument("--data-dir", help="benchmark data folder (default: $RAG_DATA_DIR)")
    p.add_argument("--no-cache", action="store_true", help="disable DSPy's LM response cache")
    p.add_argument("--experiment", default="critic-auc", help="MLflow experiment")
    args = p.parse_args(argv)
    try:
        items = labelled_passages(datasets.data_dir(args.data_dir), args.n, args.distractors, args.seed)
    except (FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2)
    results, lines = {}, ["| critic LM | gold / distractor passages | " + " | ".join(f"AUC {s}" for s in SCORES)
                          + " | LM calls/passage | s/passage |", "|---|---|" + "---|" * (len(SCORES) + 2)]
    with tracking.run(args.experiment, "critic-auc-hotpotqa", tags={"entry": "scripts/critic_auc.py"}) as run:
        tracking.log_params({"n": args.n, "distractors": args.distractors, "critic_lms": args.critic_lm,
                             "seed": args.seed, "max_chars": args.max_chars, "cache": not args.no_cache,
                             "passages": [f"{q[:40]}|{p.title}|{g}" for q, p, g in items]})
        for name in args.critic_lm:
            lm = make_lm(name, args.api_base, cache=not args.no_cache)
            init_dspy(lm, cache=not args.no_cache)
            t0 = time.perf_counter()
            rows, cost = score_all(items, args.max_chars)
            seconds = time.perf_counter() - t0
            gold = [r for r in rows if r["gold"]]
            other = [r for r in rows if not r["gold"]]
            summary = {f"auc_{s}": auc([r[s] for r in gold], [r[s] for r in other]) for s in SCORES}
            summary |= {"lm_calls_per_passage": cost["lm_calls"] / len(rows),
                        "seconds_per_passage": seconds / len(rows)}
            label = name.replace(":", "_").replace("/", "_")
            mlflow.log_metrics({f"{label}_{k}": v for k, v in summary.items() if v == v})
            tracking.log_jsonl(f"scores/{label}.jsonl", rows)
            results[name] = summary
            lines.append(f"| {name} | {len(gold)} / {len(other)} | "
                         + " | ".join(f"{summary[f'auc_{s}']:.3f}" for s in SCORES)
                         + f" | {summary['lm_calls_per_passage']:.1f} | {summary['seconds_per_passage']:.1f} |")
            print(f"run {run.info.run_id}: {lines[-1]}", file=sys.stderr, flush=True)
        text = "\n".join(lines)
        mlflow.log_text(text + "\n", "critic_auc.md")
    print(f"\nHotpotQA critic AUC, {args.n} questions | run {run.info.run_id}\n\n{text}")
    return results


if __name__ == "__main__":
    main()
