"""How often a character cut drops the gold answer from XQuAD's supporting paragraph (no LM).

``RAG_DATA_DIR=... python -m scripts.gold_span_cut --cuts 600 400 0``

For every XQuAD question of each language: is its first gold answer still in the paragraph as a prompt shows it
(``Passage.clip``: cut at a word boundary after N characters; 0 = the whole paragraph, as XRAG settings now show
it)? 600 was the writer's cut, 400 CORAL's critic's."""
from __future__ import annotations

import argparse

import data as datasets
from data.xrag import read_xquad
from retrieval.corpus import Passage


def cut_rates(root, lang: str, cuts: list[int]) -> dict[int, float]:
    """Share of ``lang``'s XQuAD questions whose gold answer is not in the paragraph cut at each of ``cuts``."""
    pairs = [(par["context"].strip(), qa["answers"][0]["text"]) for art in read_xquad(root, lang)
             for par in art["paragraphs"] for qa in par["qas"]]
    return {c: sum(gold not in Passage("", "", text).clip(c or None) for text, gold in pairs) / len(pairs)
            for c in cuts}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--langs", nargs="+", default=["en", "de", "es", "zh", "ar"])
    p.add_argument("--cuts", type=int, nargs="+", default=[600, 400, 0], help="characters shown (0: whole)")
    p.add_argument("--data-dir")
    args = p.parse_args(argv)
    root = datasets.data_dir(args.data_dir)
    rates = {lang: cut_rates(root, lang, args.cuts) for lang in args.langs}
    print("| lang | " + " | ".join(f"gold cut at {c or 'whole'}" for c in args.cuts) + " |")
    print("|---|" + "---|" * len(args.cuts))
    for lang, row in rates.items():
        print(f"| {lang} | " + " | ".join(f"{100 * v:.1f}%" for v in row.values()) + " |")
    return rates


if __name__ == "__main__":
    main()
