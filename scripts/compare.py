"""Evaluate several programs on the same split in one process and print one markdown table.

``python scripts/compare.py --programs direct rag --dataset hotpotqa --dev 50 --judge [--lm local:qwen-1.5b]``
Every program is also logged as its own MLflow run (see evaluate.py)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import evaluate  # noqa: E402

COLUMNS = ("em", "f1", "judge", "accuracy", "title_recall", "recall_any", "ndcg", "failed_examples", "lm_calls",
           "prompt_tokens", "completion_tokens", "seconds")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--programs", nargs="+", required=True)
    args, rest = p.parse_known_args()
    rows = {name: evaluate.main(["--program", name, *rest]) for name in args.programs}
    cols = [c for c in COLUMNS if any(c in r for r in rows.values())]
    print("\n| program | n | " + " | ".join(cols) + " |\n|---|---|" + "---|" * len(cols))
    for name, r in rows.items():
        cells = [f"{r[c]:.3f}" if isinstance(r.get(c), float) else str(r.get(c, "")) for c in cols]
        print(f"| {name} | {r['n']} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
