"""CORAL against its multilingual baselines on one dataset and corpus source, in one process and one MLflow run.

``python -m scripts.coral_compare --dataset blend --test 48 --balance country``            (blend_kb, leave-out)
``python -m scripts.coral_compare --dataset click --corpus xquad --test 30 --compile``
``python -m scripts.coral_compare --dataset blend --test 48 --programs direct multi_rag --circular``
``python -m scripts.coral_compare --dataset blend --test 48 --programs direct multi_rag --circular --mc-scoring pride``

The default programs are the paper's: Non-RAG (``direct``), monoRAG (``en_rag``: BLEnD's questions are English), the
fixed scopes of its Table 2 (``mono_rag`` = C_own, the culture's corpus; ``own_en_rag``; ``multi_rag`` = C_all),
crossRAG, tRAG, Self-RAG (its Table 13), CORAL with corpus selection only (Table 3) and CORAL.

A thin use of the suite machinery (``experiments/suite.py``): one parent run, one child run per program (checkpointed
per question, so an interrupted run resumes), and the suite's leaderboard (accuracy, cost per question, every
program paired with coral, or else with the first program: exact McNemar with bootstrap CIs and Holm). The parent's
comparison.md adds CORAL's own measures: accuracy at every option shift with ``--circular`` and per resource tier
(pooled and as a mean of per-language accuracies), for multiple choice the accuracy per gold letter and every
``--mc-scoring`` mode from one set of calls, the planner's corpus choices, and for coral a plot of the languages
of the planner-selected corpora against those of the final evidence (the paper's Figure 3). ``--compile`` also
bootstraps few-shot demos for coral on the train split and reports the compiled program next to the uncompiled one."""
from __future__ import annotations

import random
from collections import Counter, defaultdict

import dspy
import mlflow

import programs
from experiments import cli, suite
from evaluation import tracking
from evaluation.leaderboard import answered
from evaluation.plots import close, pyplot
from experiments.cli import compile_metric, interruptible
from experiments.sessions import session
from optimizers import settings as compile_settings
from optimizers.compile import compile_program
from evaluation.loop import summarize
from programs.shared.writer import Writer
from retrieval.corpus import excluded
from runtime.metering import metered

DEFAULT_PROGRAMS = ("direct", "en_rag", "mono_rag", "own_en_rag", "multi_rag", "cross_rag", "t_rag", "self_rag",
                    "coral_select", "coral")
TIERS = ("low", "mid", "high")
ENTRY = "scripts/coral_compare.py"


def balanced(examples: list, field: str, n: int, seed: int) -> list:
    """``n`` examples spread round-robin over the values of ``field`` (seeded order within each value)."""
    pool = sorted(examples, key=lambda ex: ex.id)
    random.Random(seed).shuffle(pool)
    by_value = defaultdict(list)
    for ex in pool:
        by_value[str(ex.get(field))].append(ex)
    queues = [by_value[v] for v in sorted(by_value)]
    picked = []
    while len(picked) < n and any(queues):
        for queue in queues:
            if queue and len(picked) < n:
                picked.append(queue.pop(0))
    return picked


def language_mix(records: list[dict]) -> tuple[Counter, Counter]:
    """Languages of the corpora the planner chose (every round) and of the evidence the writer got."""
    selected, evidence = Counter(), Counter()
    for r in records:
        trace = r.get("trace") or {}
        selected.update(lang for round_langs in trace.get("selected_langs", []) for lang in round_langs)
        evidence.update(trace.get("evidence_langs", []))
    return selected, evidence


def mix_figure(records: list[dict], by: str | None):
    """Bars of language shares, hatched = planner-selected corpora, solid = final evidence; one panel overall and
    one per value of ``by`` (e.g. tier)."""
    panels = [("all", records)]
    if by:
        panels += [(f"{by}={v}", [r for r in records if str(r.get(by)) == v])
                   for v in sorted({str(r.get(by)) for r in records})]
    fig, axes = pyplot().subplots(len(panels), 1, figsize=(8, 2.6 * len(panels)), squeeze=False)
    for ax, (title, subset) in zip(axes[:, 0], panels):
        selected, evidence = language_mix(subset)
        langs = sorted(set(selected) | set(evidence))
        xs = range(len(langs))
        for counts, offset, style in ((selected, -0.2, {"hatch": "//", "fill": False}), (evidence, 0.2, {})):
            total = sum(counts.values()) or 1
            ax.bar([x + offset for x in xs], [counts[lang] / total for lang in langs], width=0.4, **style)
        ax.set_xticks(list(xs), langs)
        ax.set_ylabel("share")
        ax.set_title(f"{title}: planner-selected corpora (hatched) vs final evidence (solid)", fontsize=9)
    fig.tight_layout()
    return fig


def table(rows: dict[str, dict], metric: str) -> str:
    tiers = [t for t in TIERS if any(f"{metric}_by_tier/{t}" in r for r in rows.values())]
    lang_means = [t for t in tiers if any(f"{metric}_by_tier_langmean/{t}" in r for r in rows.values())]
    circular = [f"circular_{metric}"] if any(f"circular_{metric}" in r for r in rows.values()) else []
    head = ["program", "answered", metric, *circular, *tiers, *(f"{t} (lang mean)" for t in lang_means), "rounds"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, r in rows.items():
        cells = [name, answered(r), f"{r.get(metric, 0):.3f}", *(f"{r[c]:.3f}" for c in circular)]
        cells += [f"{r[f'{metric}_by_tier/{t}']:.3f}" if f"{metric}_by_tier/{t}" in r else "" for t in tiers]
        cells += [f"{r[f'{metric}_by_tier_langmean/{t}']:.3f}" if f"{metric}_by_tier_langmean/{t}" in r else ""
                  for t in lang_means]
        cells += [f"{r['iterations']:.2f}" if "iterations" in r else ""]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


class Observed(dspy.Module):
    """``program`` with what its last multiple-choice writer call read added to the trace as ``mc``: the letter
    parsed from the reply (the ``generate`` answer), the letter probabilities, and the letter chosen. One set of
    LM calls then scores every ``--mc-scoring`` mode."""

    def __init__(self, program: dspy.Module):
        super().__init__()
        self.program, self.log = program, []
        for _, writer in program.named_sub_modules(Writer):
            writer.mc.observed = self.log

    def forward(self, **inputs):
        before = len(self.log)
        pred = self.program(**inputs)
        if len(self.log) > before and isinstance(pred.trace, dict):
            pred.trace = {**pred.trace, "mc": self.log[-1]}
        return pred


def mc_modes(records: dict[str, list[dict]], metric: str, prior_of: dict[str, dict]) -> dict[str, list[dict]]:
    """Per program run with letter probabilities: its records re-scored as ``generate`` (the written letter),
    ``logprob`` (the most probable letter) and, with a prior, ``pride``; a question whose probabilities could not
    be read keeps its answer in every mode."""
    out = {}
    for name, recs in records.items():
        if not any((r.get("trace") or {}).get("mc") for r in recs):
            continue
        modes = ["generate", "logprob"] + (["pride"] if name in prior_of else [])
        for mode in modes:
            rescored = []
            for r in recs:
                mc = (r.get("trace") or {}).get("mc")
                letter = r.get("answer")
                if mc and mode == "generate":
                    letter = mc["written"]
                elif mc and mode == "logprob":
                    letter = max(mc["probs"], key=mc["probs"].get)
                elif mc:
                    letter = mc["answer"]
                rescored.append(r | {"answer": letter, metric: float(letter == r.get("gold"))})
            out[f"{name} [{mode}]"] = rescored
    return out


def modes_table(records: dict[str, list[dict]], metric: str) -> str:
    """Accuracy, circular accuracy and most frequent answer of each (program, scoring mode)."""
    lines = [f"| program [mode] | {metric} | circular_{metric} | most frequent answer |", "|---|---|---|---|"]
    for label, recs in records.items():
        s = summarize(recs, {metric: None})
        (top, count), = Counter(str(r.get("answer")) for r in recs).most_common(1)
        circular = f"{s[f'circular_{metric}']:.3f}" if f"circular_{metric}" in s else ""
        lines.append(f"| {label} | {s[metric]:.3f} | {circular} | {top} ({count}/{len(recs)}) |")
    return "\n".join(lines)


def by_gold_position(records: dict[str, list[dict]], metric: str) -> str:
    """Accuracy per gold letter (n per letter in brackets) and how often each letter was answered: with
    ``--circular`` every question has its gold at every letter once, so a writer free of letter bias scores the
    same in every column; the spread (max - min) measures how much the gold's position decides."""
    letters = sorted({str(r.get("gold")) for recs in records.values() for r in recs if r.get("gold")})
    lines = ["| program | " + " | ".join(f"gold {g}" for g in letters) + " | spread | answered "
             + " / ".join(letters) + " |", "|---|" + "---|" * (len(letters) + 2)]
    for name, recs in records.items():
        acc = {g: [r[metric] for r in recs if r.get("gold") == g and r.get(metric) is not None] for g in letters}
        means = {g: sum(v) / len(v) for g, v in acc.items() if v}
        answered = Counter(str(r.get("answer")) for r in recs)
        cells = [f"{means[g]:.3f} ({len(acc[g])})" if g in means else "" for g in letters]
        spread = max(means.values()) - min(means.values()) if means else 0.0
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {spread:.3f} | "
                     + " / ".join(str(answered[g]) for g in letters) + " |")
    return "\n".join(lines)


def planner_diagnostics(records: list[dict], languages: dict[str, str]) -> dict:
    """How the planner chose corpora, per question from the trace: whether the corpus of the culture's own
    language (``source_lang``) was chosen in round 1 / in any round (selection recall, over questions whose
    culture has a corpus), and whether it follows list position: how often the first-listed candidate (the corpus
    of the question's language aside, which the planner's rule asks for) is among its round-1 picks and the picks'
    mean listed position (1 = first), each beside what picking that many candidates at random gives."""
    by_lang = {code: name for name, code in languages.items()}
    have, r1, anyr, first, first_chance, pos, pos_chance = 0, 0, 0, [], [], [], []
    for r in records:
        trace = r.get("trace") or {}
        if not trace.get("corpora"):
            continue
        rounds, own = trace["corpora"], trace.get("question_corpus")
        culture = by_lang.get(r.get("source_lang"))
        if culture:
            have += 1
            r1 += culture in rounds[0]
            anyr += any(culture in c for c in rounds)
        candidates = [c for c in (trace.get("presented") or list(languages)) if c != own]
        picks = [c for c in rounds[0] if c != own and c in candidates]
        if candidates and picks:
            first.append(candidates[0] in picks)
            first_chance.append(len(picks) / len(candidates))
            pos += [candidates.index(c) + 1 for c in picks]
            pos_chance.append((len(candidates) + 1) / 2)
    mean = lambda xs: sum(xs) / len(xs) if xs else float("nan")  # noqa: E731
    return {"culture_corpus_questions": have, "culture_recall_round1": r1 / have if have else float("nan"),
            "culture_recall_any": anyr / have if have else float("nan"), "first_listed_chosen": mean(first),
            "first_listed_chance": mean(first_chance), "mean_listed_position": mean(pos),
            "mean_listed_position_chance": mean(pos_chance)}


def planner_table(records: dict[str, list[dict]], languages: dict[str, str]) -> tuple[str, dict]:
    """``planner_diagnostics`` of every program with a planner, as a markdown table and as metrics."""
    lines = ["| program | questions with a culture corpus | culture corpus chosen, round 1 | any round | "
             "first-listed candidate chosen (random) | mean listed position of picks (random) |",
             "|---|---|---|---|---|---|"]
    metrics = {}
    for name, recs in records.items():
        if not any((r.get("trace") or {}).get("selected_langs") for r in recs):
            continue
        d = planner_diagnostics(recs, languages)
        metrics.update({f"{name}_planner_{k}": v for k, v in d.items()})
        lines.append(f"| {name} | {d['culture_corpus_questions']} | {d['culture_recall_round1']:.3f} | "
                     f"{d['culture_recall_any']:.3f} | "
                     f"{d['first_listed_chosen']:.3f} ({d['first_listed_chance']:.3f}) | "
                     f"{d['mean_listed_position']:.2f} ({d['mean_listed_position_chance']:.2f}) |")
    return ("\n".join(lines) if len(lines) > 2 else ""), metrics


def main(argv=None) -> dict[str, dict]:
    p = suite.parser(__doc__.splitlines()[0])
    p.add_argument("--programs", nargs="+", default=list(DEFAULT_PROGRAMS), choices=programs.names())
    p.add_argument("--balance", metavar="FIELD", help="draw the evaluated questions (as many as the split) evenly "
                                                      "over this example field, e.g. country, from non-train examples")
    p.add_argument("--compile", action="store_true", help="also bootstrap coral on train and report it compiled")
    cli.add_flags(p, (compile_settings.DEMOS,))
    p.set_defaults(dataset="demo_culture", split="test")
    args = suite.script_args(p, argv, suite.OWN_CELLS)
    s = session(args, needs_search=any(programs.spec(name).needs_search for name in args.programs))
    args = s.args  # as resolved
    examples = getattr(s.splits, args.split)
    if args.balance:
        train = set(s.splits.ids()["train"])
        examples = balanced([ex for ex in s.bundle.examples if ex.id not in train], args.balance, len(examples),
                            args.seed)
    train = s.splits.train
    examples = s.evaluated(examples)
    metric = next(iter(s.metrics))
    results = {}
    run_name = f"coral-compare-{args.dataset}-{s.derived.corpus_params()['corpus_source'].split()[0]}"
    with tracking.run(args.experiment, run_name, tags={"entry": ENTRY}) as run:
        tracking.log_params(s.params("coral") | {
            "programs": args.programs, "split": args.split, "balance": args.balance or "",
            "compile": args.compile, "eval_ids": [ex.id for ex in examples]})

        def run_program(cell: suite.Cell, program) -> None:
            results[cell.label] = suite.run_cell(s, cell, run.info.run_id, "coral-compare", program=program,
                                                 examples=examples, stage="compare", entry=ENTRY)

        evaluated_ids = {ex.get("base_id", ex.id) for ex in examples}
        calibrations = {}  # program name -> its PriDe calibration
        for name in args.programs:
            program, info = s.build_scored(name)
            if args.mc_scoring != "generate" and s.bundle.task == "mcq":
                program = Observed(program)
            if info:  # pride: the calibration slice (train split) must not be evaluated
                calibrations[name] = info
                if overlap := evaluated_ids & set(info["asked"]):
                    raise SystemExit(f"error: PriDe calibration questions are also evaluated: {sorted(overlap)}")
                tracking.log_json(f"calibration/{name}.json", info)
                mlflow.log_metrics({f"{name}_prior_{k}": v for k, v in info["prior"].items()})
            run_program(suite.Cell(name, args.dataset), program)
        if args.compile:
            _, compile_fn = compile_metric(s.bundle.task, None)
            hidden = {g for ex in train for g in ex.get("leave_out") or ()}  # no demo may see its own answer
            with metered() as cost, excluded(hidden):
                compiled = compile_program(s.build("coral"), "bootstrap", train, s.splits.dev, compile_fn,
                                           max_demos=args.demos, seed=args.seed)
            for heavy in (compiled.critic, compiled.sufficiency):
                heavy.demos = []  # a demo holds a whole candidate list: ~3x the prompt, past an 8k context
            tracking.log_metrics(cost.as_dict(), "compile")
            tracking.log_params({"compiled_demos": {n: len(p.demos) for n, p in compiled.named_predictors()}})
            run_program(suite.Cell("coral", args.dataset, (), "compiled"), compiled)
        cells = [r.cell for r in results.values()]
        reference = next((c for c in cells if c.label == "coral"), cells[0])
        source = s.derived.corpus_params()["corpus_source"]
        board = suite.log_leaderboard(list(results.values()), suite.against(reference, cells),
                                      f"CORAL comparison, {args.dataset}, {source}, lm {args.lm}")
        rows = {label: r.summary for label, r in results.items()}
        records_by = {label: r.records for label, r in results.items()}
        text = table(rows, metric)
        if s.bundle.task == "mcq":
            modes = mc_modes(records_by, metric, calibrations)
            text += "\n\n" + by_gold_position(records_by | modes, metric)
            if modes:
                text += "\n\n" + modes_table(modes, metric)
                mlflow.log_metrics({f"{label.replace(' [', '_').rstrip(']')}_{k}": v
                                    for label, recs in modes.items()
                                    for k, v in summarize(recs, {metric: None}).items()
                                    if k.startswith(("acc", "circ"))})
        planners, planner_metrics = planner_table(records_by, s.retriever.languages() if s.retriever else {})
        if planners:
            text += "\n\n" + planners
            mlflow.log_metrics({k: v for k, v in planner_metrics.items() if v == v})  # NaN: no such question
        if "coral" in records_by:
            fig = mix_figure(records_by["coral"], "tier" if "tier" in s.bundle.groups else None)
            mlflow.log_figure(fig, "coral_language_mix.png")
            close(fig)
        mlflow.log_text(text + "\n", "comparison.md")
    print(f"\n{args.dataset} | corpus: {s.derived.corpus_params()['corpus_source']} | leave-question-out: "
          f"{args.leave_question_out} | lm: {args.lm} | run {run.info.run_id}\n\n{board.markdown}\n{text}")
    return rows


if __name__ == "__main__":
    interruptible(main)()
