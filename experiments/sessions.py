"""A run's session: its settings resolved into ready objects (data and splits, role LMs, retriever, metrics, judge)
beside what they derive (:mod:`experiments.derived`), and what keys its checkpoints (the code that answers, the
pinned models)."""
from __future__ import annotations

import hashlib
import json
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import dspy

import data as datasets
import programs
from data import corpora as sources
from data import settings as data_settings
from decoding.choice import MCScoring
from evaluation import settings as evaluation_settings, tracking
from evaluation.metrics import Judge, gold_of
from evaluation.task_metrics import answer_metrics
from experiments import pride
from experiments.cli import check_args, fail, on_sigterm
from experiments.code import answer_code, object_modules
from experiments.derived import Derived, judge_panel, panel_note
from programs.shared.oracle import ALL, expand, parse_roles
from programs.shared.writer import mc_state
from retrieval import settings as retrieval_settings
from retrieval.retriever import Retriever
from runtime.lm import make_lm
from runtime.paths import project_cache
from runtime.roles import Roles, assign_roles, init_dspy
from runtime.settings import Settings


@dataclass(frozen=True)
class Session:
    """A run's settings resolved into ready objects: the data and its split, role LMs, retriever, metrics and judge,
    beside what the settings derive (:class:`~experiments.derived.Derived`); its MLflow params and checkpoint keys
    are made of both."""
    derived: Derived
    bundle: datasets.Bundle
    splits: datasets.Splits
    roles: Roles
    retriever: Retriever | None
    metrics: dict
    judge: Judge | None

    @property
    def args(self) -> Settings:
        """The run's settings as resolved (:func:`session`)."""
        return self.derived.args

    def with_settings(self, **changes) -> Session:
        """This session with ``changes`` to its settings (a cell's grid values, its oracle roles), its data, LMs and
        retriever shared."""
        return replace(self, derived=replace(self.derived, args=self.args.replace(**changes)))

    @property
    def groups(self) -> tuple[str, ...]:
        """Example fields metrics are broken down by: the dataset's, plus the option shift with ``--circular``."""
        return (*self.bundle.groups, "rotation") if self.args.circular else self.bundle.groups

    def evaluated(self, examples: list[dspy.Example]) -> list[dspy.Example]:
        """The examples to evaluate: as given, or once per cyclic option shift with ``--circular``."""
        return datasets.circular(examples) if self.args.circular else examples

    def eval_data(self, split: str, examples: list[dspy.Example]) -> tracking.EvalData:
        """``examples`` of ``split`` (train / dev / test) as the MLflow dataset input of a run."""
        return tracking.EvalData(f"{self.args.dataset}/{split}/seed{self.args.seed}", split, tuple(examples),
                                 self.bundle.source, self.bundle.fingerprint)

    def params(self, program_name: str) -> dict:
        """The run's MLflow params: the program and its config, the data as loaded and split, the retriever, the
        evaluation's settings (``evaluation.settings``, the judge panel as resolved) and the LMs
        (``Derived.lm_ids``)."""
        a, d, sizes = self.args, self.derived, {k: len(v) for k, v in self.splits.ids().items()}
        return {"program": program_name, "program_config": d.program_config(program_name),
                "oracle": d.oracle(program_name),
                "dataset": a.dataset, "data_source": self.bundle.source, "data_fingerprint": self.bundle.fingerprint,
                "task": self.bundle.task, "split_seed": a.seed, **{f"n_{k}": v for k, v in sizes.items()},
                "split_ids": self.splits.ids(), "embedder": self.retriever.embedder.id if self.retriever else "",
                "index": a.index, **a.of(retrieval_settings.OPTIONS),
                "corpora": {c.name: len(c) for c in self.bundle.corpora},
                **a.of(evaluation_settings.SCORING + evaluation_settings.ASKING), "judge_lms": ",".join(d.judge_lms),
                **d.lm_ids(), "machine": tracking.machine(),
                **d.corpus_params()}

    def build(self, program_name: str, oracle: str | None = None) -> dspy.Module:
        """The program with its role LMs and ``--mc-scoring`` (:meth:`build_scored`); ``oracle``: its oracle roles in
        place of ``--oracle``'s (``Derived.program_config``)."""
        return self.build_scored(program_name, oracle=oracle)[0]

    def build_scored(self, program_name: str, make: Callable[[MCScoring | None], dspy.Module] | None = None,
                     oracle: str | None = None) -> tuple[dspy.Module, dict | None]:
        """``make(mc)`` (default: the program with its role LMs, :meth:`build`'s), built with the multiple-choice
        scoring ``--mc-scoring`` asks for, and its PriDe calibration (``experiments.pride.scored``: on the first
        ``--mc-calibration`` train questions; None unless ``pride``)."""
        if self.args.no_retrieval:
            program_name = closed_book(program_name)
        config = self.derived.program_config(program_name, oracle)

        def built(mc: MCScoring | None) -> dspy.Module:
            try:
                return assign_roles(programs.build(program_name, search=self.retriever, mc=mc, **config), self.roles)
            except FileNotFoundError as err:  # e.g. rag_critic's taxonomy file
                fail(str(err))

        a = self.args
        return pride.scored(program_name, make or built, a.mc_scoring if self.bundle.task == "mcq" else "generate",
                            self.splits.train[:a.mc_calibration], a.retries, self.checkpoint)

    def checkpoint(self, stage: str, program_name: str, program: dspy.Module, pooled: tuple[str, ...] = ()) -> Path:
        """Per-example results file keyed by everything that changes them (the dataset and what its examples and
        corpora hold, a prebuilt index and its search settings, the models (``Derived.model_ids``), the embedder's
        versioned id, settings, prompts and demos, the code that answers through it,
        :func:`experiments.code.answer_code`), so an interrupted run resumes and a changed one starts afresh. The
        slice is not part of the key: records are looked up by question id (and used only for the question and gold
        they answered, ``evaluation.answered``), so a larger ``--test`` reuses the questions a smaller one answered,
        and a smaller one reads its subset. ``pooled``: the
        questions (as the program sees them) that the whole file depends on (PriDe's calibration prior), which are
        keyed."""
        a, d = self.args, self.derived
        retrieval = a.of(retrieval_settings.OPTIONS)  # left out at its defaults: earlier keys stay valid
        indexes = [c.index_fingerprint for c in self.bundle.corpora]  # a prebuilt index and its search settings
        key = json.dumps([stage, program_name, a.dataset, self.bundle.fingerprint, d.model_ids(),
                          self.retriever.embedder.id if self.retriever else None, a.index, d.config,
                          *([] if retrieval == {s.name: s.default for s in retrieval_settings.OPTIONS}
                            else [retrieval]),
                          *([indexes] if any(indexes) else []),
                          a.judge, d.corpus_params(), programs.portable_state(program),
                          *([mc_state(program)] if a.mc_scoring != "generate" else []),
                          *([list(pooled)] if pooled else []), answer_code(object_modules(program, self.retriever))],
                         default=str, sort_keys=True)
        return project_cache() / "evals" / f"{stage}-{hashlib.sha256(key.encode()).hexdigest()[:20]}.jsonl"


def check_data(args: Settings, task: str, splits: datasets.Splits) -> str:
    """The checks of flags against the data (before any LM starts or corpus is embedded): PriDe's calibration
    slice, ``--circular`` on multiple choice, and a gold label in every question for each ``--oracle`` role (the
    roles returned, as checked)."""
    if args.mc_scoring == "pride" and task == "mcq" and not 0 < args.mc_calibration <= len(splits.train):
        fail(f"--mc-scoring pride calibrates on --mc-calibration train questions: give 1..{len(splits.train)} "
             "(or raise --train)")
    if args.circular and task != "mcq":
        fail(f"--circular needs a multiple-choice dataset; {args.dataset} has free-form answers")
    return check_oracle(args, [ex for part in (splits.train, splits.dev, splits.test) for ex in part])


def closed_book(program: str) -> str:
    """The program ``--no-retrieval`` runs for ``program``: the closed-book writer (``cot`` keeps its reasoning)."""
    return "cot" if program == "cot" else "direct"


def session(args: Settings, needs_search: bool, no_lm: bool = False) -> Session:
    """Resolve every setting into ready objects, turning bad input into a one-line error before anything starts:
    settings (:func:`check_args`), then the data and the settings against it (:func:`check_data`), then LMs and
    retriever. ``args`` are resolved into the session's own (``args`` itself is frozen, never changed): the dataset
    left out becomes ``--program``'s, the split sizes left out the dataset's, ``--k`` left out ``--program``'s own,
    ``--no-retrieval`` runs the closed-book writer and ``--oracle`` is its roles as checked. ``no_lm``: the run's
    programs make no LM call (each built with ``--oracle all``, no ``--judge``): no LM is built, so no server starts,
    and a stray call fails its question."""
    signal.signal(signal.SIGTERM, on_sigterm)
    if args.dataset is None:
        args = args.replace(dataset=programs.spec(args.program).default_dataset if args.program else "demo")
    check_args(args, [args.program] if args.program else [])
    if args.no_retrieval and args.program and args.program != closed_book(args.program):
        print(f"--no-retrieval: {args.program} runs as {closed_book(args.program)} (its closed-book writer), and its "
              "run, checkpoint and saved program are named so", file=sys.stderr)
        args = args.replace(program=closed_book(args.program))
    if args.program:  # the k the program runs at (recall@k, params, checkpoint key)
        args = args.replace(k=programs.run_k(args.program, args.k))
    try:
        bundle = sources.load(args.dataset, args.data_dir, args.corpus, args.leave_question_out, args.max_docs)
        if needs_search and not args.no_retrieval:
            sources.require(bundle)  # nq, triviaqa: no corpus of their own
        args = args.replace(**dict(zip(("train", "dev", "test"), data_settings.split_sizes(
            args.dataset, args.train, args.dev, args.test))))
        splits = datasets.split(bundle.examples, args.train, args.dev, args.test, args.seed)
    except (FileNotFoundError, ValueError, KeyError) as err:
        fail(str(err).strip("'\""))
    args = args.replace(oracle=check_data(args, bundle.task, splits))
    if no_lm and args.judge:
        fail("--judge needs an LM; this run makes no LM call (every role oracle): drop --judge")
    try:
        writer = None if no_lm else make_lm(args.lm, args.api_base, cache=not args.no_cache)
        extra = {role: make_lm(getattr(args, f"{role}_lm"), args.api_base, cache=not args.no_cache)
                 for role in ("planner", "critic", "judge") if getattr(args, f"{role}_lm") and not no_lm}
        retriever = (Retriever(bundle.corpora, args.embedder, args.index, **args.of(retrieval_settings.OPTIONS))
                     if needs_search and not args.no_retrieval else None)
    except (FileNotFoundError, ValueError, KeyError) as err:
        fail(str(err).strip("'\""))
    roles = Roles(writer=writer, **extra)
    init_dspy(writer, cache=not args.no_cache)
    judge = Judge(roles.lm("judge")) if args.judge else None
    if args.judge and bundle.task == "xrag":
        from evaluation.xlingual import JudgePanel

        panel = judge_panel(args)
        try:
            judge = JudgePanel([make_lm(m, args.api_base, cache=not args.no_cache) for m in panel])
        except ValueError as err:
            fail(str(err))
        if alone := panel_note(panel, args.lm):
            print(f"note: XRAG answers judged by {alone}", file=sys.stderr)
    return Session(Derived(args, bundle.task), bundle, splits, roles, retriever,
                   answer_metrics(bundle.task, judge, args.dataset), judge)


def oracle_suffix(roles: str, program_name: str | None = None) -> str:
    """What marks an oracle run's name and leaderboard row: ``+oracle:relevance,sufficiency`` (nothing without),
    with the gold labels program ``program_name`` reads in every run (``programs.gold_reads``: ``mono_rag+oracle:own``,
    C_own's culture)."""
    marks = [*filter(None, roles.split(",")), *(programs.gold_reads(program_name) if program_name else ())]
    return f"+oracle:{','.join(marks)}" if marks else ""


PASSAGE_HINT = "gold passages (gold titles, gold_ids, a supporting paragraph) or, for a single-hop question, answers"
ORACLE_HINTS = {"relevance": PASSAGE_HINT, "sufficiency": PASSAGE_HINT, "controller": PASSAGE_HINT,
                "planner": "the culture's language (source_lang, or XRAG's support_lang)",
                "verdict": "reference answers", "gap": "gold titles", "query": "the question",
                "plan": PASSAGE_HINT, "writer": "reference answers"}


def check_oracle(args: Settings, examples: list[dspy.Example], why: str = "") -> str:
    """``--oracle``: known roles, each one a decision of ``--program`` (outside a suite), and a gold label for it in
    every example; else one line naming the problem (after ``why``: what asked for the roles, if not the flag).
    Returns the roles, comma-separated as parsed."""
    try:
        roles = parse_roles(args.oracle)
    except ValueError as err:
        fail(str(err))
    single = args.program and not getattr(args, "suite", None)
    if single:
        if stray := [r for r in roles if r not in (*programs.oracle_roles(args.program), ALL)]:
            fail(f"--oracle {stray[0]}: {args.program} has no such decision; its oracle roles: "
                 f"{', '.join(programs.oracle_roles(args.program)) or 'none'}")
    # all: the program's own roles; in a suite each program's differ, and an example lacking one fails alone
    checked = (expand(roles, programs.oracle_roles(args.program)) if single else ()) if ALL in roles else roles
    for role in checked:
        if lacking := [ex.id for ex in examples if gold_of(ex).missing(role)]:
            fail(f"{why}--oracle {role} needs {ORACLE_HINTS[role]} in every question; {len(lacking)} of "
                 f"{len(examples)} {args.dataset} questions have none (e.g. {lacking[0]})")
    return ",".join(roles)
