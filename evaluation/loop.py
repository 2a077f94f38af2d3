"""Resumable, cost-metered evaluation: one JSON record per example; an unreadable reply is a scored failure, a
transient error leaves the question to the next run, any other error stops the run."""
from __future__ import annotations

import contextvars
import json
import os
import queue
import sys
import threading
import time
import warnings
from collections import Counter, deque
from contextlib import ExitStack, nullcontext
from pathlib import Path
from statistics import mean
from typing import Callable

import dspy
from tqdm.auto import tqdm

from evaluation.callers import asking
from evaluation.metrics import (ALL_RETRIEVED, UnreadableVerdict, citation_precision, gold_of, gold_passages, noted,
                                retrieval_record)
from programs.shared.oracle import gold_labels
from retrieval.corpus import excluded
from runtime.files import locked, sync_folder, write_whole
from runtime.lm import ATTEMPT, TRANSIENT_ERRORS, UNREADABLE_ERRORS, ServerError, describe, env_number
from runtime.metering import IDLE_LOAD, metered

#: Record and summary fields that differ between two runs of the same answers: the clock's and the machine's.
TIMINGS = ("seconds", "lm_seconds", "load", "seconds_idle", "lm_seconds_idle", "timed_idle")


def _run(program: dspy.Module, example: dspy.Example, retries: int):
    """Call the program, retrying up to ``retries`` times; return (prediction|None, last error|None, tries).

    An unreadable reply (:data:`~runtime.lm.UNREADABLE_ERRORS`) is retried with cache-bypassing sampling
    (``ATTEMPT``); a transient error (:data:`~runtime.lm.TRANSIENT_ERRORS`: an LM endpoint, a connection, a timeout)
    is retried greedily after a backoff; any other error (a bug, an invalid request, a context overflow, a dead
    server) is raised at once: asking again cannot help. Documents of the groups in ``example.leave_out`` (if any)
    are not retrievable during the call, and the example's gold labels are there for the program's oracle roles
    (``programs.shared.oracle``; never in its inputs)."""
    error, sampled = None, 0
    for tries in range(1, retries + 2):
        token = ATTEMPT.set(sampled)
        try:
            with excluded(example.get("leave_out") or ()), gold_labels(gold_of(example)):
                return program(**example.inputs()), None, tries
        except UNREADABLE_ERRORS as err:  # the model answered unreadably: sample another answer
            error, sampled = err, sampled + 1
        except TRANSIENT_ERRORS as err:  # no answer came back: ask the same again, greedily
            error = err
            if tries <= retries:
                time.sleep(endpoint_backoff(err, tries))
        finally:
            ATTEMPT.reset(token)
    return None, error, retries + 1


def endpoint_backoff(err: Exception, tries: int) -> float:
    """Seconds before retrying an endpoint error: the server's ``retry_after``, else ``RAG_ENDPOINT_BACKOFF``
    (default 2) doubled per try, at most 30."""
    base = env_number("RAG_ENDPOINT_BACKOFF", 2.0)
    return min(30.0, getattr(err, "retry_after", None) or base * 2 ** (tries - 1))


class RunStopped(RuntimeError):
    """The run cannot go on; finished questions are in the checkpoint. The CLIs print it as one line and exit
    with :attr:`code`."""

    code = 3


class EndpointDown(RunStopped):
    """``RAG_ENDPOINT_ERRORS`` (default 5) examples in a row ended on transient errors: the run stops."""


class QuestionError(RunStopped):
    """A question's program or metric raised an error that asking again cannot fix (a bug, an invalid request, a
    context overflow): the run stops at once, naming the question."""

    code = 4


def stopped(example: dspy.Example, where: str, err: BaseException) -> QuestionError:
    """The one line that stops a run on ``err``, raised by ``where`` (the program, a metric) on ``example``."""
    question = example.get("id") or repr(example.question)
    return QuestionError(f"question {question}: {where} raised {describe(err)}; nothing was recorded for it (finished "
                         "questions are in the checkpoint): fix the cause and run the same command again")


#: What a record scores besides its metrics: retrieval against the gold passages, and the citations' precision.
SCORES = ("title_precision", "title_recall", "title_f1", "recall_any", "all_pass", "ndcg", *ALL_RETRIEVED,
          "retrieved_n", "citation_precision")


def record(example: dspy.Example, pred, metrics: dict, k: int | None, groups: tuple[str, ...] = (),
           retryable: bool = False) -> dict:
    """The record of ``pred`` (None: the program failed, every metric scores 0; ``retryable``: it never answered).
    A metric that could not be computed, on a transient error (``retryable`` is set) or an unreadable judge verdict,
    is None, with its error in ``metric_errors``; any other metric error is raised as :class:`QuestionError`. A
    ``retryable`` record is unanswered: its every metric and :data:`SCORES` entry is None. What the metrics noted
    about how they decided (``evaluation.metrics.note``) is in ``noted``."""
    rec = {"id": example.id, "question": example.question, "gold": example.answer,
           "answer": getattr(pred, "answer", None), "failed": pred is None} | ({"retryable": True} if retryable else {})
    rec.update({g: example.get(g) for g in groups})
    if example.get("base_id"):
        rec["base_id"] = example.base_id  # a circular multiple-choice copy (``data.circular``)
    errors = {}
    with noted() as notes:
        for name, fn in metrics.items():
            try:
                rec[name] = float(fn(example, pred)) if pred is not None else 0.0
            except (UnreadableVerdict, *UNREADABLE_ERRORS, *TRANSIENT_ERRORS) as err:
                rec[name], errors[name] = None, describe(err)
                if isinstance(err, TRANSIENT_ERRORS):
                    rec["retryable"] = True
            except ServerError:
                raise
            except Exception as err:
                raise stopped(example, f"metric {name}", err) from err
    if errors:
        rec["metric_errors"] = errors
    if notes:
        rec["noted"] = notes  # how the metrics decided (``metrics.note``), counted by :func:`summarize`
    passages = list(getattr(pred, "passages", None) or [])
    gold, key = gold_passages(example)  # paragraph ids where the data has them (MuSiQue, XRAG), else titles
    retrieved = list(getattr(pred, "retrieved", None) or passages)  # everything retrieved, where the program says
    if k is not None and gold:
        rec.update(retrieval_record(example, retrieved, k))
    elif k is not None:  # no gold passages to score (BLEnD, CLIcK, open QA): the cost is still counted
        rec["retrieved_n"] = len({p.id for p in retrieved})
    rec["passages"] = [{"id": p.id, "title": p.title, "score": round(p.score, 4)} for p in passages]
    cited = getattr(pred, "citations", None)
    if cited is not None:  # an answer with cited passage ids (the evidence writer)
        rec["citations"] = list(cited)
        if gold:
            keys = {p.id: key(p) for p in passages}
            rec["citation_precision"] = citation_precision(gold, [keys.get(i) for i in cited])
    rec["trace"] = getattr(pred, "trace", None)
    if rec.get("retryable"):  # unanswered (or not scored yet): no score of any kind, asked again next run
        rec |= dict.fromkeys(key for key in (*metrics, *SCORES) if key in rec)
    return rec


def evaluate(program: dspy.Module, examples: list[dspy.Example], metrics: dict, *, k: int | None = None,
             retries: int = 1, checkpoint: Path | None = None, desc: str = "eval",
             groups: tuple[str, ...] = (), threads: int = 1, retry_failed: bool = False,
             traces=None, wait: bool = False) -> tuple[list[dict], dict]:
    """Evaluate ``program`` on ``examples``; resume from ``checkpoint`` (a JSONL path, or a :class:`Collected`)
    when it holds finished examples.

    The program's errors (see :func:`_run`): an unreadable reply, retried with sampling, may end as a ``failed``
    record scored 0; a question that ended on a transient error (the program's, or a metric's: :func:`record`) is
    ``retryable``: written, not scored, not resumed, so the next run asks it again, and ``RAG_ENDPOINT_ERRORS``
    (default 5) such questions in a row stop the run (:class:`EndpointDown`); any other error stops the run at once
    (:class:`QuestionError`). A failed record names its ``error``, ``error_class`` and ``tries``; it is final unless
    this run may try it more times (``retries`` raised) or ``retry_failed`` asks again every failed example. The
    run is the checkpoint's only writer (:class:`Checkpoint`): another run holding it is ``runtime.files.Busy``, or
    with ``wait`` waited for.
    ``threads`` > 1 evaluates that many examples at once (for endpoints that serve concurrent requests; a Ctrl-C
    starts no new question and records those in flight that finish within ``RAG_INTERRUPT_GRACE`` seconds, default
    10; a second Ctrl-C stops at once; a question still in flight is not recorded, so the next run asks it); each
    example's cost is metered on its own (its LM calls also by the predictor that made them, ``lm_calls_by``:
    ``evaluation.callers``) and the records come back in input order. ``traces`` (e.g.
    ``tracking.QuestionTraces``): called per example with the program, a context manager around its call and
    scoring that yields a function taking the finished record (only the questions this run asks: not those read
    back from the checkpoint).
    Returns the per-example records and a summary (:func:`summarize`): mean of every metric over the records that have
    it, ``failed_examples`` (count, with ``retryable_examples`` among them when any), the error counts, mean
    ``iterations``, ``at_rest`` and ``unparsed_verdicts`` (from ``pred.trace``), cost per question (``lm_calls``,
    ``oracle_calls``, ``searches``, ``prompt_tokens``, ``completion_tokens``, ``seconds``, ``lm_seconds``: the
    program's alone; the judge's calls are ``judge_lm_calls``), for each
    example field in ``groups`` (e.g. ``lang``) ``<metric>_by_<field>/<value>``, and for circular copies
    (``data.circular``) ``circular_<metric>``: per question the worst score over its copies."""
    sink = ((checkpoint if isinstance(checkpoint, Collected) else Checkpoint(checkpoint, wait, is_record))
            if checkpoint else None)
    prior = answered(sink.done, examples, checkpoint) if sink else {}
    done = {i: r for i, r in prior.items()  # a failure tried fewer times than now is asked again
            if not r.get("retryable") and not (r["failed"] and (retry_failed or r["tries"] < retries + 1))}
    write, over = threading.Lock(), threading.Event()  # over: the run has stopped, a late answer is not recorded
    limit, streak = int(env_number("RAG_ENDPOINT_ERRORS", 5)), [0]

    def one(example: dspy.Example) -> dict:
        with asking(program), (traces(example, program) if traces else nullcontext(lambda rec: None)) as finish:
            with metered() as cost:
                try:
                    pred, error, tries = _run(program, example, retries)
                except ServerError:
                    raise  # the LM server is gone for good: its own message stops the run
                except Exception as err:
                    raise stopped(example, f"the program {type(program).__name__} ({desc})", err) from err
            with metered() as scoring:  # the judge's LM calls are the evaluation's cost, not the program's
                rec = record(example, pred, metrics, k, groups, isinstance(error, TRANSIENT_ERRORS))
            rec |= {"error": None if error is None else describe(error), "tries": tries}
            if error is not None:
                rec["error_class"] = type(error).__name__
            rec |= cost.as_dict() | {"judge_lm_calls": scoring.lm_calls}
            if example.id in prior:  # an earlier attempt that did not stand: its spend is this question's too
                rec = with_spend_of(rec, prior[example.id])
            finish(rec)
        with write:
            if over.is_set():
                return rec
            if sink:
                sink.append(rec)
            streak[0] = streak[0] + 1 if rec.get("retryable") else 0
            if streak[0] >= limit:
                last = rec["error"] or next(iter(rec["metric_errors"].values()))
                raise EndpointDown(f"an endpoint failed {limit} questions in a row (last: {last}); finished "
                                   "questions are in the checkpoint: run the same command again when it is back "
                                   "(RAG_ENDPOINT_ERRORS sets the limit)")
        return rec

    todo = [ex for ex in examples if ex.id not in done]
    fresh: dict[str, dict] = {}
    bar = tqdm(total=len(examples), initial=len(examples) - len(todo), desc=desc, unit="q")
    pool = Workers(one, todo, threads) if threads > 1 and len(todo) > 1 else None
    try:
        if pool is None:
            for example in todo:
                fresh[example.id] = one(example)
                bar.update()
        else:
            for example, rec in pool.results():
                fresh[example.id] = rec
                bar.update()
    except KeyboardInterrupt:
        if pool is not None:
            grace = env_number("RAG_INTERRUPT_GRACE", 10.0)
            print(f"\nstopping: no new question; waiting up to {grace:g} s for the {pool.busy} in flight "
                  "(Ctrl-C again to stop now)", file=sys.stderr, flush=True)
            if left := pool.stop(grace):
                print(f"{left} question(s) still in flight were not recorded", file=sys.stderr, flush=True)
        raise
    except BaseException:  # a stopping error: the questions in flight finish into the checkpoint
        if pool is not None:
            pool.stop()
        raise
    finally:
        with write:  # no record is half-written, and none is written after this
            over.set()
        bar.close()
        if sink:
            sink.close()
    records = [done.get(ex.id) or fresh[ex.id] for ex in examples]
    if retry := sum(bool(r.get("retryable")) for r in records):
        warnings.warn(f"{retry} question(s) ended on transient errors (an LM endpoint, a connection, a timeout) and "
                      "are not finished (recorded as retryable, not scored): run the same command again to ask "
                      "them", RuntimeWarning, stacklevel=2)
    return records, summarize(records, metrics, groups)


class Workers:
    """``fn`` over ``items`` on ``threads`` daemon threads, each call in a copy of the caller's context (DSPy settings,
    the retry attempt, left-out groups). :meth:`results` yields ``(item, result)`` as calls finish and raises a
    call's error; :meth:`stop` starts no more calls and waits for the running ones. Daemon threads: a process that
    stops never waits at exit for a request still in flight."""

    def __init__(self, fn, items: list, threads: int):
        self.fn, self.todo = fn, deque((contextvars.copy_context(), item) for item in items)
        self.count, self.out, self.busy, self.idle = len(self.todo), queue.SimpleQueue(), 0, threading.Condition()
        for n in range(min(threads, self.count)):
            threading.Thread(target=self._work, name=f"eval-{n}", daemon=True).start()

    def _work(self) -> None:
        while True:
            with self.idle:
                if not self.todo:
                    return
                context, item = self.todo.popleft()
                self.busy += 1
            try:
                self.out.put((item, context.run(self.fn, item), None))
            except BaseException as err:
                self.out.put((item, None, err))
            finally:
                with self.idle:
                    self.busy -= 1
                    self.idle.notify_all()

    def results(self):
        for _ in range(self.count):
            item, result, err = self.out.get()
            if err is not None:
                raise err
            yield item, result

    def stop(self, timeout: float | None = None) -> int:
        """Start no more calls; wait up to ``timeout`` seconds (None: as long as it takes) for the running ones to
        finish; return how many still run."""
        with self.idle:
            self.todo.clear()
            self.idle.wait_for(lambda: not self.busy, timeout)
            return self.busy


#: A record's spend: what asking its question cost (the program's, and the judge's calls).
SPEND = ("lm_calls", "oracle_calls", "searches", "prompt_tokens", "prompt_tokens_computed", "completion_tokens",
         "seconds", "lm_seconds", "judge_lm_calls")


def with_spend_of(rec: dict, earlier: dict) -> dict:
    """``rec`` with the spend of ``earlier`` added: an attempt at the same question that did not stand (left
    unanswered, or a failure asked again), itself holding the attempts before it. A question costs every attempt; its
    seconds are idle only if every attempt's were (the higher ``load``)."""
    both = [key for key in (*SPEND, "load")
            if isinstance(rec.get(key), (int, float)) and isinstance(earlier.get(key), (int, float))]
    by = Counter(rec.get("lm_calls_by") or {})
    by.update(earlier.get("lm_calls_by") or {})
    return rec | {key: max(rec[key], earlier[key]) if key == "load" else rec[key] + earlier[key] for key in both} | \
        ({"lm_calls_by": dict(by)} if by else {})


def answered(done: dict[str, dict], examples: list[dspy.Example], path: Path | None) -> dict[str, dict]:
    """The records of ``done`` that answered these very examples: a record whose question or gold differs from its
    example's (the data changed under the same id) is dropped with one warning, so that question runs again."""
    stale = {ex.id for ex in examples if ex.id in done
             and [done[ex.id].get("question"), done[ex.id].get("gold")]
             != json.loads(json.dumps([ex.question, ex.answer], ensure_ascii=False, default=str))}
    if stale:
        warnings.warn(f"checkpoint {path}: {len(stale)} record(s) answered another question or gold under the same "
                      "id (the data changed); asking them again", RuntimeWarning, stacklevel=3)
    return {key: rec for key, rec in done.items() if key not in stale}


class Checkpoint:
    """A checkpoint this run writes: locked (``runtime.files.locked``) from open to :meth:`close`, so a second run on
    the same key is refused (or waits) instead of asking the same questions and rewriting the file under this one's
    appends; its finished records (:attr:`done`) read under the lock, and each new record synced to disk."""

    def __init__(self, path: Path, wait: bool = False, readable: Callable[[dict], bool] | None = None):
        with ExitStack() as held:
            held.enter_context(locked(path, wait, "let it finish, or pass --wait-for-checkpoint to wait for it"))
            self.done = load_checkpoint(path, readable)
            self.sink = held.enter_context(open(path, "a", encoding="utf-8"))
            sync_folder(path.parent)  # the file's name, if this created it
            self._held = held.pop_all()

    def append(self, rec: dict) -> None:
        self.sink.write(json.dumps(rec, ensure_ascii=False, default=str) + "\n")
        self.sink.flush()
        os.fsync(self.sink.fileno())

    def close(self) -> None:
        self._held.close()


class Collected:
    """A checkpoint another process writes (a Ray cell's driver): its records ``done`` by id, as that process read
    them from the file ``name``, and the records this run appends kept in :attr:`new` for it."""

    def __init__(self, done: dict[str, dict], name: str):
        self.done, self.name, self.new = done, name, []

    def __str__(self) -> str:
        return self.name

    def append(self, rec: dict) -> None:
        self.new.append(rec)

    def close(self) -> None:
        pass


def load_checkpoint(path: Path, readable: Callable[[dict], bool] | None = None) -> dict[str, dict]:
    """The finished records of a checkpoint by id. A line that does not parse (a kill mid-write, bytes that are not
    UTF-8) or is no record (an object with an ``id`` that is ``readable``) is dropped with a warning, and the file is
    rewritten without it, so its question runs again and later appends stay whole. Lines are split at newline bytes
    only and decoded strictly: an answer holding U+2028 stays one record, and no damaged text is read back as an
    answer. A writer holds the file's lock (:class:`Checkpoint`)
    while this runs: the rewrite renames a new file over it."""
    if not path.exists():
        return {}
    done, bad = {}, 0
    raw = path.read_bytes()
    for line in filter(bytes.strip, raw.split(b"\n")):
        try:
            rec = json.loads(line.decode("utf-8"))
        except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
            rec = None
        if isinstance(rec, dict) and isinstance(rec.get("id"), (str, int)) and (readable is None or readable(rec)):
            done[rec["id"]] = rec
        else:
            bad += 1
    if bad:
        warnings.warn(f"checkpoint {path}: skipped {bad} unreadable line(s) (an interrupted write, not UTF-8, or not "
                      "a record this loop writes); those questions run again", RuntimeWarning, stacklevel=3)
    if bad or (raw and not raw.endswith(b"\n")):
        write_whole(path, "".join(json.dumps(r, ensure_ascii=False, default=str) + "\n" for r in done.values()))
    return done


def is_record(rec: dict) -> bool:
    """Whether ``rec`` (a checkpoint line's object with an id) has what resuming an evaluation reads: a boolean
    ``failed`` and the integer ``tries``."""
    return isinstance(rec.get("failed"), bool) and isinstance(rec.get("tries"), int)


#: Per-question counts a program's trace may hold, averaged over the questions that have them: rounds, decisions a
#: gate at rest took without a call, verdicts that could not be read.
TRACE_COUNTS = ("iterations", "at_rest", "unparsed_verdicts")


def summarize(records: list[dict], metrics: dict, groups: tuple[str, ...] = ()) -> dict:
    """What the records say, counted from them (so a resumed run reports what its checkpoint holds): ``n`` (asked),
    ``answered`` (not retryable), ``failed_examples``, ``retryable_examples``, ``failed_by_class/<error class>``, per
    metric the records it could not score ``<metric>_errors_by_class/<error class>``, per field the metrics noted
    ``<field>/<value>`` (e.g. ``verdict_by/exact``), the means of scores over the records that have one (answered
    ones), the means of :data:`SPEND` over every asked question (an unanswered one's spend is real cost; a record
    holds its question's earlier attempts' too: :func:`with_spend_of`), the circular, group and tier breakdowns."""
    if not records:
        return {"n": 0, "answered": 0}
    retry = sum(bool(r.get("retryable")) for r in records)
    summary = {"n": len(records), "answered": len(records) - retry,
               "failed_examples": sum(r["failed"] for r in records)}
    if retry:
        summary["retryable_examples"] = retry
    counts = Counter(f"failed_by_class/{r['error_class']}" for r in records if r["failed"] and r.get("error_class"))
    counts.update(f"{name}_errors_by_class/{error.split(':')[0]}" for r in records
                  for name, error in (r.get("metric_errors") or {}).items())
    counts.update(f"{field}/{value}" for r in records for field, value in (r.get("noted") or {}).items())
    summary.update(sorted(counts.items()))
    numeric = [*metrics, *SCORES, *SPEND]
    for key in numeric:
        values = [r[key] for r in records if r.get(key) is not None]
        if values:
            summary[key] = mean(values)
    summary.update(idle_timing(records))
    if any("base_id" in r for r in records):
        for name in metrics:
            if scores := per_question(records, name):
                summary[f"circular_{name}"] = mean(scores.values())
        summary["n_questions"] = len({r.get("base_id", r["id"]) for r in records})
    for key in TRACE_COUNTS:
        if values := [r["trace"][key] for r in records if (r.get("trace") or {}).get(key) is not None]:
            summary[key] = mean(values)
    for field in groups:
        for value in sorted({str(r.get(field)) for r in records}):
            subset = [r for r in records if str(r.get(field)) == value]
            for name in metrics:
                if scored := [r[name] for r in subset if r.get(name) is not None]:
                    summary[f"{name}_by_{field}/{value}"] = mean(scored)
            summary[f"n_by_{field}/{value}"] = len(subset)
    if {"tier", "source_lang"} <= set(groups):
        summary.update(language_means(records, metrics))
    return summary


def idle_timing(records: list[dict]) -> dict:
    """Seconds taken on a machine left to this run: ``timed_idle`` (how many questions ran at a load per core of at
    most ``runtime.metering.IDLE_LOAD``), ``seconds_idle`` and ``lm_seconds_idle`` (their means), ``load`` (the mean
    load per core); nothing for records that predate the load's recording."""
    loads = [r["load"] for r in records if r.get("load") is not None]
    if not loads:
        return {}
    idle = [r for r in records if r.get("load") is not None and r["load"] <= IDLE_LOAD and r.get("seconds")]
    out = {"load": mean(loads), "timed_idle": len(idle)}
    for key in ("seconds", "lm_seconds"):
        if values := [r[key] for r in idle if r.get(key) is not None]:
            out[f"{key}_idle"] = mean(values)
    return out


def language_means(records: list[dict], metrics: dict) -> dict:
    """``<metric>_by_tier_langmean/<tier>``: the mean of the per-language means within each resource tier (how the
    CORAL paper averages a tier), beside the pooled ``<metric>_by_tier/<tier>`` that weights languages by size."""
    by_tier: dict[str, dict[str, list[float]]] = {}
    for name in metrics:
        for r in records:
            if r.get(name) is not None:
                by_tier.setdefault(f"{name}_by_tier_langmean/{r.get('tier')}", {}).setdefault(
                    str(r.get("source_lang")), []).append(r[name])
    return {key: mean(map(mean, langs.values())) for key, langs in sorted(by_tier.items())}


def per_question(records: list[dict], metric: str) -> dict[str, float]:
    """Each question's ``metric`` score: the worst over its circular copies (same ``base_id``), else its own; a
    question with a copy not scored (None or missing: retryable, or the metric could not be computed) is left out."""
    scores: dict[str, float | None] = {}
    for r in records:
        key, value = r.get("base_id", r["id"]), r.get(metric)
        scores[key] = None if value is None or scores.get(key, 0.0) is None else min(scores.get(key, value), value)
    return {key: value for key, value in scores.items() if value is not None}
