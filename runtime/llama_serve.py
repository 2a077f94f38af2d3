"""``python -m runtime.llama_serve ARGS``: ``llama_cpp.server`` (same ARGS) with token logprobs selected, not sorted,
every prompt token's logits kept only for requests that ask for logprobs, the prompt tokens each request did not
compute reported, and prompt-cache states without logits.

llama-cpp-python 0.3.x builds each generated token's ``top_logprobs`` by sorting (logprob, token id) pairs over the
whole vocabulary in Python (``list(sorted(zip(logprobs, range(n_vocab)), reverse=True))``, then the first
``logprobs`` of them): 0.2-0.26 s per generated token for Qwen2.5's 151,936 tokens on 2 cores, so a decision whose
reply runs to 80 tokens (CORAL's four scores and critique) took 26 s with logprobs against 9 s without
(abetlen/llama-cpp-python#1983). Here that module's ``sorted`` is a top-``TOP`` selection for the reversed sort
(``heapq.nlargest``: the same first elements in the same order, 10-25x faster); our clients ask for at most 20
alternatives (OpenAI's maximum for chat), so the pairs past ``TOP`` are never read; a request for more than ``TOP``
gets ``TOP``.

Second, llama-cpp-python computes and keeps the vocabulary logits of every prompt token when the model is loaded with
``logits_all`` -- which it must be for any request to get logprobs -- so every generation call pays for a prompt-length
output projection and a copy of n_prompt x 151,936 floats it never reads. Here a request decodes with every row
kept only when it asks for logprobs (:func:`keep_logits_when_asked`); the others keep the last position's logits
only, as a model loaded without ``logits_all`` does. Third, every completion reports the prompt prefix it resumed
from, as OpenAI's ``usage.prompt_tokens_details.cached_tokens`` (:func:`report_cached_tokens`), and the seconds its
prompt and its generated tokens took (:func:`report_timings`); fourth, the prompt
cache (``--cache true``, ``runtime.lm.prompt_cache``) keeps its states without vocabulary logits
(:func:`cache_without_logits`). Only the server process runs patched: the project's LM clients never import this
module."""
from __future__ import annotations

import builtins
import heapq
import sys

TOP = 100  # alternatives kept per token: more than any client of ours asks for (``decoding.choice.TOP_LOGPROBS``)


def top_sorted(iterable, *, key=None, reverse: bool = False) -> list:
    """``sorted`` where a reversed sort keeps only its first ``TOP`` elements (all a top-logprobs reader uses)."""
    if reverse:
        return heapq.nlargest(TOP, iterable, key=key)
    return builtins.sorted(iterable, key=key)


def select_top_logprobs() -> None:
    """Route ``llama_cpp.llama``'s calls of ``sorted`` (only its top-logprobs code calls it) to :func:`top_sorted`."""
    import llama_cpp.llama

    llama_cpp.llama.sorted = top_sorted


def keep_logits_when_asked() -> None:
    """Make ``logits_all`` a per-request setting of a model loaded with it: on for a completion that asks for
    logprobs, off for the others. A logprobs request also replays its last prompt token, whose row an earlier
    request that matched the same prompt may not have kept (the rows it reads: that one and its own tokens')."""
    from llama_cpp.llama import Llama

    create = Llama.create_completion

    def create_completion(self, *args, **kwargs):
        self._logits_all = kwargs.get("logprobs") is not None
        self._requires_eval = self._requires_eval or self._logits_all
        return create(self, *args, **kwargs)

    Llama.create_completion = create_completion


def report_cached_tokens() -> None:
    """Every completion's usage names the prompt tokens it did not compute, as OpenAI reports them
    (``usage.prompt_tokens_details.cached_tokens``): the prefix the request resumed from, left by the previous request
    or loaded from the prompt cache. They are counted where the request's prompt evaluation starts: its first
    ``eval`` (one with no tokens when the whole prompt was already there)."""
    from typing_extensions import NotRequired, TypedDict

    from llama_cpp import llama_types
    from llama_cpp.llama import Llama

    class PromptTokensDetails(TypedDict):
        cached_tokens: int

    usage = llama_types.CompletionUsage  # the server's response model drops keys its TypedDict does not name
    usage.__annotations__["prompt_tokens_details"] = NotRequired[PromptTokensDetails]
    usage.__optional_keys__ = usage.__optional_keys__ | {"prompt_tokens_details"}
    create, evaluate = Llama.create_completion, Llama.eval

    def counting(self, tokens):  # Llama.eval, noting the tokens already in the context at the first call
        if self._prompt_cached is None:
            self._prompt_cached = self.n_tokens
        evaluate(self, tokens)

    def create_completion(self, *args, **kwargs):
        self._prompt_cached = None
        out = create(self, *args, **kwargs)
        if isinstance(out, dict) and self._prompt_cached is not None:  # not a stream
            out["usage"]["prompt_tokens_details"] = {"cached_tokens": self._prompt_cached}
        return out

    Llama._prompt_cached = None
    Llama.eval, Llama.create_completion = counting, create_completion


def report_timings() -> None:
    """Every completion's usage says how long llama.cpp took over its prompt and its generated tokens, in
    milliseconds, as llama.cpp's own server names them (``usage.timings.prompt_ms`` / ``predicted_ms``): the wall time
    of the request's evaluations, a batch of prompt tokens or one generated token each, synchronised so the compute is
    counted where it happens (llama.cpp's own performance counters missed most of it on this path: 3.4 of 27 s)."""
    import threading
    import time

    from typing_extensions import NotRequired, TypedDict

    import llama_cpp
    from llama_cpp import llama_types
    from llama_cpp.llama import Llama

    class Timings(TypedDict):
        prompt_ms: float
        predicted_ms: float

    usage = llama_types.CompletionUsage  # as in report_cached_tokens: the response model passes named keys only
    usage.__annotations__["timings"] = NotRequired[Timings]
    usage.__optional_keys__ = usage.__optional_keys__ | {"timings"}
    create, evaluate = Llama.create_completion, Llama.eval
    spent = threading.local()

    def timed_eval(self, tokens):
        t0 = time.perf_counter()
        try:
            return evaluate(self, tokens)
        finally:
            llama_cpp.llama_synchronize(self.ctx)
            if (ms := getattr(spent, "ms", None)) is not None:
                ms[len(tokens) == 1] += (time.perf_counter() - t0) * 1000

    def create_completion(self, *args, **kwargs):
        spent.ms = [0.0, 0.0]  # prompt batches, single generated tokens
        try:
            out = create(self, *args, **kwargs)
        finally:
            ms, spent.ms = spent.ms, None
        if isinstance(out, dict):  # not a stream
            out["usage"]["timings"] = {"prompt_ms": round(ms[0], 3), "predicted_ms": round(ms[1], 3)}
        return out

    Llama.create_completion, Llama.eval = create_completion, timed_eval


def cache_without_logits() -> None:
    """The prompt cache's states without their vocabulary logits. ``Llama.save_state`` copies the logits of every
    evaluated token (n_tokens x 151,936 floats: 0.6 MB a token, 1.2 GB for a 2,000-token prompt, uncounted by the
    cache's capacity) and ``load_state`` scans the whole n_ctx x n_vocab array; a restored state's rows are never
    read, since a request that loads one evaluates at least its prompt's last token again (``load_state`` sets
    ``_requires_eval``), and logprobs are read from that token on (no client of ours echoes the prompt). Both run
    here against an array of no columns."""
    import numpy as np
    from llama_cpp.llama import Llama

    def without_logits(method):
        def run(self, *args):
            scores, self.scores = self.scores, np.empty((len(self.scores), 0), dtype=np.single)
            try:
                return method(self, *args)
            finally:
                self.scores = scores
        return run

    Llama.save_state, Llama.load_state = without_logits(Llama.save_state), without_logits(Llama.load_state)


def patch() -> None:
    """The changes to ``llama_cpp.llama`` (see the module docstring)."""
    select_top_logprobs()
    keep_logits_when_asked()
    report_cached_tokens()
    report_timings()
    cache_without_logits()


def main() -> None:
    patch()
    from llama_cpp.server.__main__ import main as serve

    sys.argv[0] = "llama_cpp.server"
    serve()


if __name__ == "__main__":
    main()
