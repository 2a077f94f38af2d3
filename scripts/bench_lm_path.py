"""Prompt prefixes computed once: the same questions against the embedded server with its prompt cache off and on.

``python -m scripts.bench_lm_path --n 5``
Evaluates each program (``rag+demos``: rag compiled with bootstrap demos) on the first N demo dev questions, greedy,
past DSPy's cache and without retries, once against a private server started with ``RAG_PROMPT_CACHE_MB=0`` and once
with ``--cache-mb``: each in its own process, one after the other (the demos compiled once, before, by a third). Prints
one markdown table: s/q off and on and their ratio (one run's: time it on an idle machine), prompt tokens sent and
computed per question (the server's ``cached_tokens``), the server's prompt-cache hits and largest state kept, and
whether every answer is identical, else the first LM call where the two runs part: greedy, but llama.cpp's CPU kernels
give a token slightly different logits depending on where its evaluation batch starts and ends, which differs when a
request resumes from another prefix, so a near-tie can go the other way."""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from dspy.clients.base_lm import GLOBAL_HISTORY

from experiments.cli import compile_metric, parser

from experiments.sessions import session
from optimizers.compile import compile_program
from evaluation.loop import evaluate
from programs import portable_state
from runtime.lm import LOCAL_PREFIX, local_server

DEMOS = "+demos"
HIT = "Llama._create_completion: cache hit"  # llama-cpp-python's verbose line when a request loads a cached state
SAVED = re.compile(r"Llama\.save_state: saving (\d+) bytes")  # and when it keeps one


def compile_demos(s, names: list[str], demos: Path) -> None:
    """The ``+demos`` programs compiled by bootstrap on the train split, their states saved to ``demos``."""
    metric = compile_metric(s.bundle.task, None)[1]
    demos.write_text(json.dumps({name: portable_state(compile_program(s.build(name.removesuffix(DEMOS)), "bootstrap",
                                                                      s.splits.train, s.splits.dev, metric))
                                 for name in names if name.endswith(DEMOS)}))


def calls(entries: list[dict]) -> list[dict]:
    """The LM calls of ``entries`` (DSPy's history): prompt, reply, prompt tokens sent and reported cached."""
    return [{"prompt": json.dumps(e["messages"]), "reply": str(e["outputs"][0]),
             "sent": e["usage"].get("prompt_tokens"),
             "cached": (e["usage"].get("prompt_tokens_details") or {}).get("cached_tokens")} for e in entries]


def first_difference(off: list[dict], on: list[dict]) -> str:
    """Where two runs' LM calls part: the first call whose prompt or reply differs."""
    for i, (a, b) in enumerate(zip(off, on)):
        if a["prompt"] != b["prompt"]:
            return f"call {i + 1}: the prompts differ"
        if a["reply"] != b["reply"]:
            return (f"call {i + 1}: the same prompt ({a['sent']} tokens; {a['cached']} cached off, {b['cached']} on), "
                    f"replies {a['reply'][:60]!r} / {b['reply'][:60]!r}")
    return f"{len(off)} / {len(on)} calls"


def run(args) -> None:
    """One setting: the demos compiled, or every program evaluated on this process's private server (its results
    to ``args.out`` as JSON)."""
    flags = ["--dataset", "demo", "--train", str(args.train), "--dev", str(args.n), "--test", "0", "--k", str(args.k),
             "--loops", str(args.loops), "--lm", args.lm, "--no-cache"]
    s = session(parser("bench").parse_args(flags), needs_search=True)
    if args.setting == "demos":
        return compile_demos(s, args.programs, Path(args.demos))
    s.retriever.search(s.splits.dev[0].question, args.k)  # warm: embedder and index loaded before any timing
    demos, out = json.loads(Path(args.demos).read_text()) if os.path.exists(args.demos) else {}, {}
    for name in args.programs:
        program = s.build(name.removesuffix(DEMOS))
        if name in demos:
            program.load_state(demos[name])
        start = len(GLOBAL_HISTORY)
        records, summary = evaluate(program, s.splits.dev, s.metrics, k=args.k, retries=0,
                                    desc=f"{name} cache {args.setting}")
        out[name] = {"s_q": summary["seconds"], "sent": summary["prompt_tokens"],
                     "computed": summary["prompt_tokens_computed"], "failed": summary["failed_examples"],
                     "answers": [r["answer"] for r in records], "calls": calls(GLOBAL_HISTORY[start:])}
    log = local_server(args.lm.removeprefix(LOCAL_PREFIX)).log_path.read_text(errors="replace")
    sizes = [int(n) for n in SAVED.findall(log)]
    out["cache_hits"], out["state_mb"] = log.count(HIT), max(sizes, default=0) / 2**20
    Path(args.out).write_text(json.dumps(out))


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=5, help="demo dev questions")
    p.add_argument("--train", type=int, default=3, help="demo train questions the demos are bootstrapped from")
    p.add_argument("--k", type=int, default=2)
    p.add_argument("--loops", type=int, default=2)
    p.add_argument("--programs", nargs="+", default=["rag", "rag" + DEMOS, "coral", "seal", "par2"])
    p.add_argument("--lm", default="local:qwen-0.5b", help="an embedded model (local:...)")
    p.add_argument("--cache-mb", type=int, default=1024, help="the prompt cache of the 'on' run (RAG_PROMPT_CACHE_MB)")
    p.add_argument("--setting", choices=["demos", "off", "on"], help=argparse.SUPPRESS)  # a child: one step
    p.add_argument("--out", help=argparse.SUPPRESS)
    p.add_argument("--demos", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if not args.lm.startswith(LOCAL_PREFIX):
        p.error("--lm must be an embedded model (local:...): the prompt cache is its server's")
    if args.setting:
        run(args)
        return []
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        steps = [("demos", 0)] * any(name.endswith(DEMOS) for name in args.programs)
        for setting, mb in (*steps, ("off", 0), ("on", args.cache_mb)):
            out = Path(tmp) / f"{setting}.json"
            child = [sys.executable, "-m", "scripts.bench_lm_path", *(argv if argv is not None else sys.argv[1:]),
                     "--setting", setting, "--out", str(out), "--demos", str(Path(tmp) / "demos.json")]
            env = os.environ | {"RAG_PROMPT_CACHE_MB": str(mb), "RAG_SHARED_SERVER": "0"}
            subprocess.run(child, env=env, check=True)
            if setting != "demos":
                results[setting] = json.loads(out.read_text())
    off, on = results["off"], results["on"]
    rows = [{"program": name, "off_s_q": off[name]["s_q"], "on_s_q": on[name]["s_q"],
             "ratio": on[name]["s_q"] / off[name]["s_q"], "sent": on[name]["sent"],
             "computed_off": off[name]["computed"], "computed_on": on[name]["computed"],
             "failed": off[name]["failed"] + on[name]["failed"],
             "identical": off[name]["answers"] == on[name]["answers"] and off[name]["sent"] == on[name]["sent"]}
            for name in args.programs]
    print(f"\n{args.lm} on {args.n} demo questions (k={args.k}, loops={args.loops}), greedy, DSPy cache off; prompt "
          f"cache off, then on ({args.cache_mb} MB): {off['cache_hits']} and {on['cache_hits']} cache hits, the "
          f"largest state kept {on['state_mb']:.1f} MB\n")
    print("| program | s/q off | s/q on | on/off | prompt tok/q sent | computed off | computed on | computed/sent on "
          "| failed | answers identical |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['program']} | {r['off_s_q']:.1f} | {r['on_s_q']:.1f} | {r['ratio']:.2f}x | {r['sent']:.0f} | "
              f"{r['computed_off']:.0f} | {r['computed_on']:.0f} | {r['computed_on'] / r['sent']:.2f} | {r['failed']} "
              f"| {'yes' if r['identical'] else 'NO'} |")
    for r in rows:
        if not r["identical"]:
            print(f"\n{r['program']}: {first_difference(off[r['program']]['calls'], on[r['program']]['calls'])}")
    return rows


if __name__ == "__main__":
    main()
