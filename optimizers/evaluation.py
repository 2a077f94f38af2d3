"""Resumable, cost-metered evaluation: one JSON record per example, failures scored and counted, never fatal."""
from __future__ import annotations

import contextvars
import json
import sys
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import nullcontext
from pathlib import Path
from statistics import mean

import dspy
from tqdm.auto import tqdm

from optimizers.metrics import ALL_RETRIEVED, citation_precision, gold_of, gold_passages, retrieval_record
from programs.oracle import gold_labels
from retrieval.corpus import excluded
from runtime.files import write_whole
from runtime.lm import ATTEMPT, ENDPOINT_ERRORS, ContextOverflow, ServerError, env_number
from runtime.metering import metered


def _run(program: dspy.Module, example: dspy.Example, retries: int):
    """Call the program, retrying up to ``retries`` times; return (prediction|None, error, tries, retryable).

    A parse failure is retried with cache-bypassing sampling (``ATTEMPT``); an LM endpoint error (transport,
    authentication, rate limit, timeout, server error) is retried greedily after a backoff, and when it is the last
    error the example is ``retryable``: not answered, to be asked again by the next run. Documents of the groups in
    ``example.leave_out`` (if any) are not retrievable during the call, and the example's gold labels are there for
    the program's oracle roles (``programs.oracle``; never in its inputs)."""
    error, retryable, sampled = None, False, 0
    for tries in range(1, retries + 2):
        token = ATTEMPT.set(sampled)
        try:
            with excluded(example.get("leave_out") or ()), gold_labels(gold_of(example)):
                return program(**example.inputs()), None, tries, False
        except ServerError:
            raise  # the LM server is gone for good: stop the run with its own message
        except ENDPOINT_ERRORS as err:  # the request never got a model answer: ask the same again, greedily
            error, retryable = _describe(err), True
            if tries <= retries:
                time.sleep(endpoint_backoff(err, tries))
        except Exception as err:  # parse failures, malformed model output: sample another answer
            error, retryable, sampled = _describe(err), False, sampled + 1
        finally:
            ATTEMPT.reset(token)
    return None, error, retries + 1, retryable


def _describe(err: Exception) -> str:
    return f"{type(err).__name__}: {str(err)[:300]}"


def endpoint_backoff(err: Exception, tries: int) -> float:
    """Seconds before retrying an endpoint error: the server's ``retry_after``, else ``RAG_ENDPOINT_BACKOFF``
    (default 2) doubled per try, at most 30."""
    base = env_number("RAG_ENDPOINT_BACKOFF", 2.0)
    return min(30.0, getattr(err, "retry_after", None) or base * 2 ** (tries - 1))


class EndpointDown(RuntimeError):
    """``RAG_ENDPOINT_ERRORS`` (default 5) examples in a row ended on LM endpoint errors: the run stops."""


def record(example: dspy.Example, pred, metrics: dict, k: int | None, groups: tuple[str, ...] = ()) -> dict:
    rec = {"id": example.id, "question": example.question, "gold": example.answer,
           "answer": getattr(pred, "answer", None), "failed": pred is None}
    rec.update({g: example.get(g) for g in groups})
    if example.get("base_id"):
        rec["base_id"] = example.base_id  # a circular multiple-choice copy (``data.circular``)
    for name, fn in metrics.items():
        rec[name] = float(fn(example, pred)) if pred is not None else 0.0
    passages = list(getattr(pred, "passages", None) or [])
    gold, key = gold_passages(example)  # paragraph ids where the data has them (MuSiQue, XRAG), else titles
    if k is not None and gold:  # scored on everything retrieved, where the program says
        rec.update(retrieval_record(example, list(getattr(pred, "retrieved", None) or passages), k))
    rec["passages"] = [{"id": p.id, "title": p.title, "score": round(p.score, 4)} for p in passages]
    cited = getattr(pred, "citations", None)
    if cited is not None:  # an answer with cited passage ids (the evidence writer)
        rec["citations"] = list(cited)
        if gold:
            keys = {p.id: key(p) for p in passages}
            rec["citation_precision"] = citation_precision(gold, [keys.get(i) for i in cited])
    rec["trace"] = getattr(pred, "trace", None)
    return rec


def evaluate(program: dspy.Module, examples: list[dspy.Example], metrics: dict, *, k: int | None = None,
             retries: int = 1, checkpoint: Path | None = None, desc: str = "eval",
             groups: tuple[str, ...] = (), threads: int = 1, retry_failed: bool = False,
             traces=None) -> tuple[list[dict], dict]:
    """Evaluate ``program`` on ``examples``; resume from ``checkpoint`` (JSONL) when it holds finished examples.

    A record of an example that ended on LM endpoint errors is ``retryable``: it is written but not resumed, so the
    next run asks it again; ``RAG_ENDPOINT_ERRORS`` (default 5) such examples in a row stop the run
    (:class:`EndpointDown`). ``retry_failed`` also asks again the examples recorded as failed.
    ``threads`` > 1 evaluates that many examples at once (for endpoints that serve concurrent requests); each
    example's cost is metered on its own and the records come back in input order. ``traces`` (e.g.
    ``tracking.QuestionTraces``): called per example, a context manager around its call that yields a function
    taking the finished record.
    Returns the per-example records and a summary: mean of every metric, ``failed_examples`` (count, with
    ``retryable_examples`` among them when any), mean ``iterations`` (from ``pred.trace``), cost per question
    (``lm_calls``, ``prompt_tokens``, ``completion_tokens``, ``seconds``, ``lm_seconds``), for each example field in
    ``groups`` (e.g. ``lang``) ``<metric>_by_<field>/<value>``, and for circular copies (``data.circular``)
    ``circular_<metric>``: per question the worst score over its copies."""
    done = {i: r for i, r in (load_checkpoint(checkpoint) if checkpoint else {}).items()
            if not r.get("retryable") and not (retry_failed and r["failed"])}
    if checkpoint:
        checkpoint.parent.mkdir(parents=True, exist_ok=True)
    sink = open(checkpoint, "a", encoding="utf-8") if checkpoint else None
    write = threading.Lock()
    limit, streak = int(env_number("RAG_ENDPOINT_ERRORS", 5)), [0]

    def one(example: dspy.Example) -> dict:
        with (traces(example) if traces else nullcontext(lambda rec: None)) as finish:
            with metered() as cost:
                pred, error, tries, retryable = _run(program, example, retries)
                try:
                    rec = record(example, pred, metrics, k, groups)
                except ENDPOINT_ERRORS as err:  # a judge metric could not reach its LM
                    error, retryable = _describe(err), True
                    rec = record(example, None, metrics, k, groups)
            rec |= {"error": error, "tries": tries, **({"retryable": True} if retryable else {})} | cost.as_dict()
            finish(rec)
        with write:
            if sink:
                sink.write(json.dumps(rec, ensure_ascii=False, default=str) + "\n")
                sink.flush()
            streak[0] = streak[0] + 1 if retryable else 0
            if streak[0] >= limit:
                raise EndpointDown(f"the LM endpoint failed {limit} questions in a row (last: {error}); finished "
                                   "questions are in the checkpoint: run the same command again when it is back "
                                   "(RAG_ENDPOINT_ERRORS sets the limit)")
        return rec

    done = answered(done, examples, checkpoint)
    todo = [ex for ex in examples if ex.id not in done]
    fresh: dict[str, dict] = {}
    bar = tqdm(total=len(examples), initial=len(examples) - len(todo), desc=desc, unit="q")
    pool = ThreadPoolExecutor(threads, thread_name_prefix="eval") if threads > 1 and len(todo) > 1 else None
    try:
        if pool is None:
            for example in todo:
                fresh[example.id] = one(example)
                bar.update()
        else:  # each example runs in a copy of this context: DSPy settings, retry attempt, left-out groups
            futures = {pool.submit(contextvars.copy_context().run, one, ex): ex.id for ex in todo}
            for future in as_completed(futures):
                fresh[futures[future]] = future.result()
                bar.update()
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        bar.close()
        if sink:
            sink.close()
    report_overflows(fresh.values())
    records = [done.get(ex.id) or fresh[ex.id] for ex in examples]
    if retry := sum(bool(r.get("retryable")) for r in records):
        warnings.warn(f"{retry} question(s) ended on LM endpoint errors and are not answered (recorded as "
                      "retryable, scored 0 here): run the same command again to ask them", RuntimeWarning,
                      stacklevel=2)
    return records, summarize(records, metrics, groups)


def report_overflows(records) -> None:
    """One line per question whose prompt did not fit the model's context window (its record says by how much)."""
    for rec in records:
        if (rec.get("error") or "").startswith(ContextOverflow.__name__):
            print(f"warning: question {rec['id']} failed: {rec['error']}", file=sys.stderr)


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


def load_checkpoint(path: Path) -> dict[str, dict]:
    """The finished records of a checkpoint by id. A line that does not parse (a kill mid-write, bytes that are not
    UTF-8) is dropped with a warning, and the file is rewritten without it, so its question runs again and later
    appends stay whole. Lines are split at newline bytes only and decoded strictly: an answer holding U+2028 stays
    one record, and no damaged text is read back as an answer."""
    if not path.exists():
        return {}
    done, bad = {}, 0
    raw = path.read_bytes()
    for line in filter(bytes.strip, raw.split(b"\n")):
        try:
            rec = json.loads(line.decode("utf-8"))
            done[rec["id"]] = rec
        except (ValueError, TypeError, KeyError):  # UnicodeDecodeError is a ValueError
            bad += 1
    if bad:
        warnings.warn(f"checkpoint {path}: skipped {bad} unreadable line(s) (an interrupted write, or not UTF-8); "
                      "those questions run again", RuntimeWarning, stacklevel=3)
    if bad or (raw and not raw.endswith(b"\n")):
        write_whole(path, "".join(json.dumps(r, ensure_ascii=False, default=str) + "\n" for r in done.values()))
    return done


def summarize(records: list[dict], metrics: dict, groups: tuple[str, ...] = ()) -> dict:
    if not records:
        return {"n": 0}
    summary = {"n": len(records), "failed_examples": sum(r["failed"] for r in records)}
    if retry := sum(bool(r.get("retryable")) for r in records):
        summary["retryable_examples"] = retry
    numeric = [*metrics, "title_precision", "title_recall", "title_f1", "recall_any", "all_pass", "ndcg",
               *ALL_RETRIEVED, "retrieved_n", "citation_precision", "lm_calls", "prompt_tokens", "completion_tokens",
               "seconds", "lm_seconds", "prompt_tokens_computed"]
    for key in numeric:
        values = [r[key] for r in records if r.get(key) is not None]
        if values:
            summary[key] = mean(values)
    if any("base_id" in r for r in records):
        for name in metrics:
            summary[f"circular_{name}"] = mean(per_question(records, name).values())
        summary["n_questions"] = len({r.get("base_id", r["id"]) for r in records})
    iterations = [r["trace"]["iterations"] for r in records if (r.get("trace") or {}).get("iterations") is not None]
    if iterations:
        summary["iterations"] = mean(iterations)
    for field in groups:
        for value in sorted({str(r.get(field)) for r in records}):
            subset = [r for r in records if str(r.get(field)) == value]
            for name in metrics:
                summary[f"{name}_by_{field}/{value}"] = mean(r[name] for r in subset)
            summary[f"n_by_{field}/{value}"] = len(subset)
    if {"tier", "source_lang"} <= set(groups):
        summary.update(language_means(records, metrics))
    return summary


def language_means(records: list[dict], metrics: dict) -> dict:
    """``<metric>_by_tier_langmean/<tier>``: the mean of the per-language means within each resource tier (how the
    CORAL paper averages a tier), beside the pooled ``<metric>_by_tier/<tier>`` that weights languages by size."""
    by_tier: dict[str, dict[str, list[dict]]] = {}
    for r in records:
        by_tier.setdefault(str(r.get("tier")), {}).setdefault(str(r.get("source_lang")), []).append(r)
    return {f"{name}_by_tier_langmean/{tier}": mean(mean(r[name] for r in recs) for recs in langs.values())
            for tier, langs in sorted(by_tier.items()) for name in metrics}


def per_question(records: list[dict], metric: str) -> dict[str, float]:
    """Each question's ``metric`` score: the worst over its circular copies (same ``base_id``), else its own."""
    scores: dict[str, float] = {}
    for r in records:
        key, value = r.get("base_id", r["id"]), r.get(metric, 0.0)
        scores[key] = min(scores[key], value) if key in scores else value
    return scores
