"""Cost of token logprobs on the embedded model: llama-cpp-python's full sort vs ``runtime.llama_serve``'s selection.

``python scripts/bench_logprobs.py --model qwen-0.5b --tokens 80 --n 3``
Loads the model in this process (as its server does: ``logits_all``, every core) and times one completion of
at most ``--tokens`` tokens on the same prompt three ways, ``--n`` times each with the KV cache cleared before every call:
without logprobs, with 20 top logprobs as the library computes them, and with ``runtime.llama_serve.patch()``
applied. Prints one markdown table with seconds per call, seconds per generated token over the no-logprobs row,
and each row's ratio to the first; checks that both logprobs rows return the same alternatives."""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from runtime import llama_serve, models  # noqa: E402

PROMPT = ("Rate the document as evidence for the question, each scale an integer from 0 to 5, then explain.\n"
          "Question: Which river flows through the city where the first printed Bible was made?\n"
          "Document: [Mainz] Mainz is the capital of Rhineland-Palatinate, on the left bank of the Rhine opposite "
          "the mouth of the Main. Johannes Gutenberg printed his Bible there in the 1450s; the city's cathedral "
          "dates from the tenth century.\nRatings and explanation:")


def timed(llm, tokens: int, logprobs: int | None) -> tuple[float, dict]:
    llm.reset()
    start = time.perf_counter()
    out = llm.create_completion(PROMPT, max_tokens=tokens, temperature=0, logprobs=logprobs)
    return time.perf_counter() - start, out


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="qwen-0.5b", choices=sorted(models.MODELS))
    p.add_argument("--tokens", type=int, default=80, help="completion cap (greedy: the same tokens in every row)")
    p.add_argument("--n", type=int, default=3, help="calls per row")
    args = p.parse_args(argv)
    from llama_cpp import Llama

    llm = Llama(str(models.verify(args.model)), n_ctx=2048, n_threads=os.cpu_count(), logits_all=True,
                verbose=False)
    rows, top = [], {}
    for name, logprobs, patched in (("no logprobs", None, False), ("logprobs, library sort", 20, False),
                                    ("logprobs, runtime.llama_serve", 20, True)):
        if patched:
            llama_serve.patch()
        seconds, out = [], None
        for _ in range(args.n):
            s, out = timed(llm, args.tokens, logprobs)
            seconds.append(s)
        if logprobs:
            top[name] = out["choices"][0]["logprobs"]["top_logprobs"]
        rows.append({"row": name, "s_per_call": sum(seconds) / len(seconds),
                     "tokens": out["usage"]["completion_tokens"]})
    base = rows[0]["s_per_call"]
    same = len({repr(v) for v in top.values()}) == 1
    print(f"{args.model}, {rows[0]['tokens']} generated tokens, mean of {args.n} calls each; "
          f"the two logprobs rows return the same alternatives: {same}\n")
    print("| row | s/call | extra s per generated token | ratio to no logprobs |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['row']} | {r['s_per_call']:.2f} | {(r['s_per_call'] - base) / r['tokens']:.3f} | "
              f"{r['s_per_call'] / base:.2f} |")
    return rows


if __name__ == "__main__":
    main()
