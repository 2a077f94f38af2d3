"""Cost of token logprobs and prompt logits on the embedded model: llama-cpp-python vs ``runtime.llama_serve``.

``python -m scripts.bench_logprobs --model qwen-0.5b --tokens 80 --n 3 --documents 8``
Loads the model in this process (as its server does: ``logits_all``, every core) and times one completion of at most
``--tokens`` tokens on the same prompt (``--documents`` copies of a rating task's document: 8 is ~600 prompt tokens,
24 ~1,700 as in XRAG's full condition), ``--n`` times each after one untimed call, with the KV cache cleared before
every call, five ways: without logprobs and with 20 top logprobs as the library computes them; with its sort
replaced by a selection (``llama_serve.select_top_logprobs``); then without and with logprobs once the prompt's
logits are kept only for logprobs requests (``llama_serve.patch``). Prints one markdown table with seconds per call,
seconds per generated token over the first row, and each row's ratio to the first; checks that the rows without
logprobs write the same text and the logprobs rows return the same alternatives."""
from __future__ import annotations

import argparse
import os
import time

from runtime import llama_serve, models

TASK = "Rate the documents as evidence for the question, each scale an integer from 0 to 5, then explain.\n"
QUESTION = "Question: Which river flows through the city where the first printed Bible was made?\n"
DOCUMENT = ("Document {i}: [Mainz] Mainz is the capital of Rhineland-Palatinate, on the left bank of the Rhine opposite "
            "the mouth of the Main. Johannes Gutenberg printed his Bible there in the 1450s; the city's cathedral "
            "dates from the tenth century, and its university carries his name.\n")


def prompt(documents: int) -> str:
    return TASK + QUESTION + "".join(DOCUMENT.format(i=i + 1) for i in range(documents)) + "Ratings and explanation:"


def timed(llm, text: str, tokens: int, logprobs: int | None) -> tuple[float, dict]:
    llm.reset()
    start = time.perf_counter()
    out = llm.create_completion(text, max_tokens=tokens, temperature=0, logprobs=logprobs)
    return time.perf_counter() - start, out


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="qwen-0.5b", choices=sorted(models.MODELS))
    p.add_argument("--tokens", type=int, default=80, help="completion cap (greedy: the same tokens in every row)")
    p.add_argument("--n", type=int, default=3, help="calls per row")
    p.add_argument("--documents", type=int, default=1, help="copies of the document in the prompt (8: ~600 tokens)")
    args = p.parse_args(argv)
    from llama_cpp import Llama

    text = prompt(args.documents)
    llm = Llama(str(models.verify(args.model)), n_ctx=4096, n_threads=os.cpu_count(), logits_all=True,
                verbose=False)
    rows, texts, top = [], {}, {}
    for name, logprobs, change in (("no logprobs", None, None), ("logprobs, library sort", 20, None),
                                   ("logprobs, top selected", 20, llama_serve.select_top_logprobs),
                                   ("no logprobs, prompt logits only when asked", None, llama_serve.patch),
                                   ("logprobs, runtime.llama_serve", 20, None)):
        if change:
            change()
        timed(llm, text, args.tokens, logprobs)  # untimed: the first call of a row touches fresh logits pages
        seconds, out = [], None
        for _ in range(args.n):
            s, out = timed(llm, text, args.tokens, logprobs)
            seconds.append(s)
        choice = out["choices"][0]
        if logprobs:
            top[name] = choice["logprobs"]["top_logprobs"]
        else:
            texts[name] = choice["text"]
        rows.append({"row": name, "s_per_call": sum(seconds) / len(seconds),
                     "tokens": out["usage"]["completion_tokens"], "prompt_tokens": out["usage"]["prompt_tokens"]})
    base = rows[0]["s_per_call"]
    same_text, same_top = len(set(texts.values())) == 1, len({repr(v) for v in top.values()}) == 1
    print(f"{args.model}, {rows[0]['prompt_tokens']} prompt tokens, {rows[0]['tokens']} generated tokens, mean of "
          f"{args.n} calls each; rows without logprobs write the same text: {same_text}; logprobs rows return the "
          f"same alternatives: {same_top}\n")
    print("| row | s/call | extra s per generated token | ratio to no logprobs |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['row']} | {r['s_per_call']:.2f} | {(r['s_per_call'] - base) / r['tokens']:.3f} | "
              f"{r['s_per_call'] / base:.2f} |")
    return rows


if __name__ == "__main__":
    main()
