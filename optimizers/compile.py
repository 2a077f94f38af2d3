"""Teleprompter registry: compile a program's few-shot demos (and, for MIPROv2/GEPA, instructions), within an LM
budget if given; fit the demos to a prompt-token budget."""
from __future__ import annotations

import json
import random
import re
import sys
import time
import types
from contextlib import contextmanager, nullcontext

import dspy
import mlflow
from dspy.teleprompt.gepa.instruction_proposal import InstructionProposer
from dspy.utils.callback import BaseCallback

from evaluation.loop import EndpointDown, endpoint_backoff, stopped
from evaluation.metrics import UnreadableVerdict, gold_of
from programs.shared.oracle import gold_labels, teaching
from programs.shared.text import FORMAT_ECHO, unechoed
from runtime.lm import TRANSIENT_ERRORS, UNREADABLE_ERRORS, ServerError, describe
from runtime.metering import BudgetSpent, Limit, limited

OPTIMIZERS = ("bootstrap", "random_search", "mipro", "gepa")
#: Trace entries of a prediction that GEPA's feedback quotes: the method's decisions.
DECISIONS = ("queries", "actions", "grades", "stop_reason")
PROBE_EXAMPLES = 5  # train examples run once before MIPROv2 to find the predictors the data calls
FEEDBACK_CHARS = 600  # the feedback text is cut here; each quoted decision at a quarter of it


#: Times a compile asks a call that ends on a transient error (greedily, after ``evaluation.endpoint_backoff``).
COMPILE_TRIES = 3


class _Stop(BaseException):
    """(example, where, error): an error that stops the compile, raised past DSPy's optimizers: they catch
    ``Exception`` around a program or metric call (up to ``max_errors``, counting the example as failed or scoring
    it 0), so an outage or a bug would compile on without demos. :func:`stops` makes it the one line."""


def asked(call, example, where: str, unreadable: type[Exception] | tuple[type[Exception], ...]):
    """``call()`` in a compile: an ``unreadable`` error (the model answered, unreadably) is raised as it is, for DSPy
    to handle; a transient error (``runtime.lm.TRANSIENT_ERRORS``) is asked again greedily, :data:`COMPILE_TRIES`
    times in all; any other error, or the last transient one, is raised as :class:`_Stop`."""
    for tries in range(1, COMPILE_TRIES + 1):
        try:
            return call()
        except unreadable:
            raise
        except Exception as err:
            if tries == COMPILE_TRIES or not isinstance(err, TRANSIENT_ERRORS):
                raise _Stop(example, where, err) from err
            time.sleep(endpoint_backoff(err, tries))


def verdicts_only(metric):
    """The compile metric: a judge's unreadable verdict (:class:`UnreadableVerdict`) scores the example as wrong;
    any other error stops the compile (:func:`asked`)."""
    def wrapped(example, pred, trace=None):
        try:
            return asked(lambda: metric(example, pred, trace), example, "the compile metric", UnreadableVerdict)
        except UnreadableVerdict:
            return False if trace is not None else 0.0
    return wrapped


def guarded(program: dspy.Module, labelled: list, teach: bool = False) -> dspy.Module:
    """``program``, its calls made through :func:`asked`: an unreadable reply fails the example as DSPy does, any
    other error stops the compile. Set as an instance attribute, so every copy an optimizer makes keeps it.
    ``labelled``: the examples whose gold labels (``programs.shared.oracle``) the call on an example's inputs runs
    under, as an evaluation runs it (a fixed own-corpus scope searches the culture's corpus, as at test time); a
    call on other inputs stops the compile. ``teach``: its oracle answers are recorded as its predictors' calls (a
    teacher built with oracle roles)."""
    golds = {inputs_key(ex.inputs()): gold_of(ex) for ex in labelled}
    where = f"the program {type(program).__name__} (compile)"

    def forward(self, *args, **kwargs):
        example = dspy.Example(**kwargs)
        if (gold := golds.get(inputs_key(kwargs))) is None:
            raise _Stop(example, where, ValueError("called on inputs of no train or dev example: no gold labels"))
        with gold_labels(gold), teaching() if teach else nullcontext():
            return asked(lambda: type(self).forward(self, *args, **kwargs), example, where, UNREADABLE_ERRORS)

    program.forward = types.MethodType(forward, program)
    return program


def inputs_key(inputs) -> str:
    """An example's inputs as one key: what finds its gold labels when a program is called on them."""
    return json.dumps(dict(inputs), sort_keys=True, ensure_ascii=False, default=str)


def feedback(gold, pred, score: float) -> str:
    """Why an answer scored what it did, for GEPA's reflection LM: expected vs predicted answer, the gold titles the
    program never retrieved (``retrieved``, else ``passages``, against ``gold_titles``), and its decisions
    (:data:`DECISIONS` in its ``trace``); at most :data:`FEEDBACK_CHARS` characters."""
    parts = [(f"Expected answer: {gold.get('answer')!r}. Predicted: {getattr(pred, 'answer', None)!r}. "
              f"Score {score:.2f}.")]
    passages, titles = getattr(pred, "retrieved", None) or getattr(pred, "passages", None), gold.get("gold_titles")
    if passages is not None and titles:
        seen = {getattr(p, "title", None) for p in passages}
        missed = [t for t in titles if t not in seen]
        parts.append(f"Gold passages never retrieved: {', '.join(map(repr, missed))}." if missed
                     else "Every gold passage was retrieved.")
    trace = getattr(pred, "trace", None)
    if isinstance(trace, dict):
        decisions = [f"{key}={json.dumps(trace[key], ensure_ascii=False, default=str)[:FEEDBACK_CHARS // 4]}"
                     for key in DECISIONS if trace.get(key) not in (None, "", [])]
        if decisions:
            parts.append(f"Decisions: {'; '.join(decisions)}.")
    return " ".join(parts)[:FEEDBACK_CHARS]


def with_feedback(metric):
    """GEPA's metric shape: a score plus textual :func:`feedback` for the reflection LM."""
    def gepa_metric(gold, pred, trace=None, pred_name=None, pred_trace=None):
        score = float(metric(gold, pred))
        return dspy.Prediction(score=score, feedback=feedback(gold, pred, score))
    return gepa_metric


#: A proposed instruction sharing this many consecutive words with a train example copies it.
QUOTED_WORDS = 8
PASSAGE_LINE = re.compile(r"\[\d+\]\s*\[[^\]\d][^\]]*\]")  # "[2] [Title] text": how the programs show passages


def instruction_fault(text: str, trainset: list) -> str | None:
    """Why a proposed instruction is not one (None: it may be). A small proposer (the 1.5B) often writes a train
    question with its answer, a question, a copy of the passages or a bare answer ("I don't know") where an
    instruction belongs, and a dev set of 30 can select it by chance."""
    words = re.findall(r"\w+", text.lower())
    if len(words) < 5:
        return "too short to instruct"
    if text.rstrip().endswith("?"):
        return "a question, not an instruction"
    if PASSAGE_LINE.search(text):
        return "it copies retrieved passages"
    grams = {tuple(words[i:i + QUOTED_WORDS]) for i in range(len(words) - QUOTED_WORDS + 1)}
    for example in trainset:
        for value in example.values():
            seen = re.findall(r"\w+", str(value).lower())
            if (len(seen) >= 3 and f" {' '.join(seen)} " in f" {' '.join(words)} ") or any(
                    tuple(seen[i:i + QUOTED_WORDS]) in grams for i in range(len(seen) - QUOTED_WORDS + 1)):
                return "it copies a train example"
    return None


def _refused(name: str, text: str, fault: str) -> None:
    print(f"compile: {name}: proposed instruction refused ({fault}): {' '.join(text.split())[:80]!r}", file=sys.stderr)


class _MIPRO(dspy.MIPROv2):
    """MIPROv2 whose instruction candidates are only instructions (:func:`instruction_fault`)."""

    def _propose_instructions(self, program, trainset, *args, **kwargs):
        candidates = super()._propose_instructions(program, trainset, *args, **kwargs)
        for i, (name, _) in enumerate(program.named_predictors()):
            kept = candidates[i][:1]  # the program's own instruction
            for text in candidates[i][1:]:
                fault = instruction_fault(text, trainset)
                kept.append(text) if fault is None else _refused(name, text, fault)
            candidates[i] = kept
        return candidates


class _Proposer(InstructionProposer):
    """GEPA's instruction proposer, keeping a component's instruction where the reflection wrote no instruction."""

    def __init__(self, trainset: list):
        super().__init__()
        self.trainset = trainset

    def __call__(self, candidate, reflective_dataset, components_to_update):
        proposed = super().__call__(candidate, reflective_dataset, components_to_update)
        for name, text in proposed.items():
            if (fault := instruction_fault(text, self.trainset)) is not None:
                _refused(name, text, fault)
                proposed[name] = candidate[name]
        return proposed


class _Bootstrap(dspy.BootstrapFewShot):
    """BootstrapFewShot that, stopped by a budget, keeps the demos bootstrapped so far (and, as DSPy does, labeled
    demos from the train examples not bootstrapped)."""

    def _bootstrap(self, **kwargs):
        self.bootstrapped, self.stopped = [], False
        try:
            super()._bootstrap(**kwargs)
        except BudgetSpent:
            self.stopped = True
            self.validation = [x for x in self.trainset if x not in self.bootstrapped]
            random.Random(0).shuffle(self.validation)

    def _bootstrap_one_example(self, example, round_idx=0):
        ok = super()._bootstrap_one_example(example, round_idx)
        if ok:
            self.bootstrapped.append(example)
        return ok


class BestSoFar(BaseCallback):
    """The best program a search optimizer has scored (a ``dspy.Evaluate`` run) on the whole devset so far: what a
    budget stop keeps of random search, MIPROv2 and GEPA. Each such score is also logged to the active MLflow run as
    a step of ``compile_candidate_dev_score`` (and the best so far as ``compile_best_dev_score``)."""

    def __init__(self, devset: list):
        self.devset, self.program, self.score, self.scored, self._started = devset, None, None, 0, {}

    def on_evaluate_start(self, call_id, instance, inputs):
        self._started[call_id] = (inputs.get("program"), inputs.get("devset") or instance.devset)

    def on_evaluate_end(self, call_id, outputs, exception=None):
        program, examples = self._started.pop(call_id, (None, ()))
        whole = len(examples) == len(self.devset) and all(ex in self.devset for ex in examples)
        if exception is None and program is not None and whole:
            self.scored += 1
            if self.score is None or outputs.score > self.score:
                self.program, self.score = program, outputs.score
            if mlflow.active_run():
                mlflow.log_metrics({"compile_candidate_dev_score": outputs.score,
                                    "compile_best_dev_score": self.score}, step=self.scored)


class Exercised(dspy.Module):
    """A view of ``program`` whose parameters are the predictors it calls on ``probe`` (one run per example; the
    predictors called before a failure count): what MIPROv2 proposes instructions and demos for. The others are
    named in one line and left as they are; if no predictor was called, the view holds all of them."""

    def __init__(self, program: dspy.Module, probe: list):
        super().__init__()
        self.program, names = program, {id(p): name for name, p in program.named_predictors()}
        called = set()
        for example in probe:
            trace = []
            with dspy.context(trace=trace):
                try:
                    program(**example.inputs())
                except Exception:  # noqa: BLE001 -- a failing example still shows the predictors it reached
                    pass
            called |= {names[id(p)] for p, *_ in trace if id(p) in names}
        self.called = called or set(names.values())
        left = [name for name in names.values() if name not in self.called]
        if left:
            print(f"compile: tuning {', '.join(sorted(self.called))}; left as they are (not called on the first "
                  f"{len(probe)} train examples): {', '.join(left)}", file=sys.stderr)

    def named_parameters(self):
        return [(name, p) for name, p in self.program.named_parameters() if name in self.called]

    def forward(self, **kwargs):
        return self.program(**kwargs)

    @staticmethod
    def unwrap(compiled: dspy.Module) -> dspy.Module:
        """The program inside a compiled view (with the view's dev ``score`` if the optimizer set one)."""
        if not isinstance(compiled, Exercised):
            return compiled
        if hasattr(compiled, "score"):
            compiled.program.score = compiled.score
        return compiled.program


def compile_program(program: dspy.Module, optimizer: str, trainset: list, devset: list, metric, *,
                    max_demos: int = 2, candidates: int = 4, budget: int | None = None, seed: int = 0,
                    reflection_lm: dspy.LM | None = None, limit: Limit | None = None,
                    teacher: dspy.Module | None = None) -> dspy.Module:
    """Compile ``program`` on ``trainset``; optimizers that search (all but ``bootstrap``) select on ``devset``.

    ``budget`` is MIPROv2's trial count or GEPA's metric-call budget; GEPA reflects with ``reflection_lm`` and
    MIPROv2 proposes its instructions with it (None: the configured LM), the program runs on its own LMs. Threads
    are 1: the embedded server serves one request at a time on 2 cores. A ``limit`` (LM calls, minutes) reached
    stops the compile: it keeps the demos bootstrapped so far (bootstrap) or the best candidate scored on the whole
    devset so far (else the uncompiled program), says so in one line, and leaves ``limit.reached`` set.

    ``teacher`` (bootstrap only): the program whose runs on train the demos are made of (None: ``program`` itself),
    of ``program``'s class with the same predictors, run under each train example's gold labels: one built with
    oracle roles (``--teacher oracle``) records their answers as its predictors' calls
    (``programs.shared.oracle.taught``), so ``program`` learns from the oracle's sub-queries, plans and answers on
    the train questions whose answer the metric passes (an oracle writer that abstained passes none)."""
    if teacher is not None and optimizer != "bootstrap":
        raise ValueError(f"a teacher program is for --optimizer bootstrap, not {optimizer}")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer '{optimizer}'; choose one of: {', '.join(OPTIMIZERS)}")
    metric = verdicts_only(metric)
    demos = {"max_bootstrapped_demos": max_demos, "max_labeled_demos": max_demos}
    best = BestSoFar(devset)
    program = guarded(keeping_lms(program), [*trainset, *devset])
    with (limited(limit) if limit else nullcontext(), dspy.context(callbacks=[*dspy.settings.callbacks, best]),
          stops()):
        if optimizer == "bootstrap":
            tp = _Bootstrap(metric=metric, **demos)
            compiled = tp.compile(program, trainset=trainset,
                                  teacher=None if teacher is None else guarded(keeping_lms(teacher), trainset,
                                                                               teach=True))
            if tp.stopped:
                kept = f"the demos bootstrapped from {len(tp.bootstrapped)} of {len(trainset)} train examples so far"
        else:
            try:
                compiled = search(program, optimizer, trainset, devset, metric, demos, candidates, budget, seed,
                                  reflection_lm)
            except BudgetSpent:
                compiled = Exercised.unwrap(best.program) if best.program else program.deepcopy()
                kept = (f"the best of {best.scored} candidate(s) scored on the dev set so far (dev score "
                        f"{best.score:.1f})" if best.program
                        else "the uncompiled program: no candidate was scored on the whole dev set yet")
    if limit and limit.reached:
        print(f"compile budget spent ({limit.reached}): {optimizer} stopped early and kept {kept}", file=sys.stderr)
    for attribute in ("reset_copy", "forward"):  # the compile's own (keeping_lms, guarded)
        vars(compiled).pop(attribute, None)
    return compiled


@contextmanager
def stops():
    """An error that stops the compile (:class:`_Stop`) as the one line that stops the run: a transient one
    :class:`EndpointDown` (the compile's calls so far are cached, so the same command resumes), a dead server's
    ``ServerError`` as it is (it has its own message), any other :class:`QuestionError`."""
    try:
        yield
    except _Stop as stop:
        example, where, err = stop.args
        if isinstance(err, ServerError):
            raise err from None
        if isinstance(err, TRANSIENT_ERRORS):
            raise EndpointDown(f"{where} failed {COMPILE_TRIES} times in a row (last: {describe(err)}); the "
                               "compile's calls so far are cached: run the same command again when it is back") from err
        raise stopped(example, where, err) from err


def keeping_lms(program: dspy.Module) -> dspy.Module:
    """A copy of ``program`` whose copies made by ``reset_copy`` run on ``program``'s LMs. DSPy's ``reset_copy``
    (where BootstrapFewShot and random search start every candidate) sets each predictor's ``lm`` to None, so a
    compile ran a role's own LM (a 1.5B critic) on the default LM and returned a program that did. The override is
    an instance attribute, so every copy an optimizer makes keeps it."""
    lms = {name: predictor.lm for name, predictor in program.named_predictors()}
    program = program.deepcopy()

    def reset_copy(self):
        fresh = type(self).reset_copy(self)
        for name, predictor in fresh.named_predictors():
            predictor.lm = lms[name]
        return fresh

    program.reset_copy = types.MethodType(reset_copy, program)
    return program


def search(program, optimizer, trainset, devset, metric, demos, candidates, budget, seed, reflection_lm):
    """Compile with one of the optimizers that select on ``devset``."""
    if optimizer == "random_search":
        tp = dspy.BootstrapFewShotWithRandomSearch(metric=metric, num_candidate_programs=candidates, num_threads=1,
                                                   **demos)
        return tp.compile(program, trainset=trainset, valset=devset)
    if optimizer == "mipro":
        # proposals and trials only for the predictors the data calls (not the writer's multiple-choice predictor
        # on free-form questions: it took 3 of 8 trials of the first real run)
        tp = _MIPRO(metric=metric, prompt_model=reflection_lm, auto=None, num_candidates=candidates, num_threads=1,
                    seed=seed, **demos)
        view = keeping_lms(Exercised(program, trainset[:PROBE_EXAMPLES]))
        return view.unwrap(tp.compile(view, trainset=trainset, valset=devset, num_trials=budget or 2 * candidates,
                                      minibatch=len(devset) > 35, minibatch_size=min(35, len(devset))))
    # every iteration reflects on each predictor the minibatch ran: round-robin would spend whole iterations on a
    # predictor the dataset never calls (the writer's multiple-choice predictor on free-form questions)
    tp = dspy.GEPA(metric=with_feedback(metric), reflection_lm=reflection_lm, max_metric_calls=budget or 60,
                   num_threads=1, seed=seed, component_selector="all", instruction_proposer=_Proposer(trainset))
    return tp.compile(program, trainset=trainset, valset=devset)


def demo_tokens(demos: list) -> int:
    """Estimated prompt tokens of ``demos``: the characters of their field values / 4 (no tokenizer needed; about
    right for English text under Qwen's tokenizer)."""
    return sum(len(str(value)) for demo in demos for key, value in demo.items() if key != "augmented") // 4


def unecho_demos(program: dspy.Module) -> dict[str, int]:
    """Remove DSPy's format text that a teacher's reply copied (:func:`~programs.shared.text.unechoed`) from each
    demo's values, so a bootstrapped demo does not teach the student to echo it (the 0.5B's CORAL replanner queries
    ending in '# note: the value you produce must adhere to the JSON schema'). Returns per predictor the demos
    changed (only predictors with one)."""
    changed = {}
    for name, predictor in program.named_predictors():
        for demo in predictor.demos:
            echoed = [k for k, v in demo.items() if k != "augmented" and isinstance(v, str) and FORMAT_ECHO.search(v)]
            for key in echoed:
                demo[key] = unechoed(demo[key])
            if echoed:
                changed[name] = changed.get(name, 0) + 1
    return changed


def fit_demos(program: dspy.Module, max_tokens: int | None) -> dict[str, tuple[int, int]]:
    """Drop each predictor's longest demos until its demos' :func:`demo_tokens` fit ``max_tokens`` (None: keep all),
    so short traces are kept first. Returns per predictor: (demo tokens kept, demos dropped)."""
    fitted = {}
    for name, predictor in program.named_predictors():
        kept, dropped = list(predictor.demos), 0
        while max_tokens is not None and kept and demo_tokens(kept) > max_tokens:
            kept.remove(max(kept, key=lambda d: demo_tokens([d])))
            dropped += 1
        predictor.demos = kept
        fitted[name] = (demo_tokens(kept), dropped)
    return fitted
