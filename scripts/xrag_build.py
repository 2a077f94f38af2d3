"""Run the XRAG construction pipeline (``construction.xrag``) on article pairs and write XRAG-format JSONL.

``python -m scripts.xrag_build --pairs 3 --out xrag_items.jsonl``                   (XQuAD demo pairs)
``python -m scripts.xrag_build --articles my_news.jsonl --pairs 10 --translate de --out xrag/xrag.de.jsonl``
``python -m scripts.xrag_build --pairs 20 --unrelated 20 --relevance-only``                  (the first gate alone)

Articles: ``--articles FILE`` (one ``{"id", "title", "text", "date", "language"}`` JSON per line; consecutive
lines are paired) or, by default, XQuAD: two paragraphs of the same English article form a related pair
(``--unrelated`` adds pairs across articles, which the relevance check should reject). Distractors: the
``--distractors`` other articles of the collection BM25 retrieves for the item's question. The output reads back
through the ``xrag`` dataset when placed under ``RAG_DATA_DIR/xrag/``."""
from __future__ import annotations

import argparse
import json
import random
from collections import Counter
from datetime import date, timedelta
from pathlib import Path

import data as datasets
from construction.xrag import XRAGBuilder
from data.xrag import paragraph, read_xquad
from retrieval.bm25 import BM25Index
from retrieval.corpus import Corpus
from runtime.lm import make_lm
from runtime.metering import metered
from runtime.roles import init_dspy
from signatures.construct import QUESTION_TYPES


def xquad_pairs(root, n: int, unrelated: int, seed: int) -> tuple[list[tuple[dict, dict]], list[dict]]:
    """``n`` same-article paragraph pairs (+ ``unrelated`` cross-article ones) and the whole paragraph pool."""
    arts = read_xquad(root, "en")
    pool = [paragraph(arts, "en", a, p) for a in range(len(arts)) for p in range(len(arts[a]["paragraphs"]))]
    rng = random.Random(seed)
    related = [(paragraph(arts, "en", a, 0), paragraph(arts, "en", a, 1))
               for a in rng.sample(range(len(arts)), n)]
    cross = [(paragraph(arts, "en", a, 0), paragraph(arts, "en", b, 0))
             for a, b in (rng.sample(range(len(arts)), 2) for _ in range(unrelated))]
    return related + cross, pool


def file_pairs(path: Path, n: int) -> tuple[list[tuple[dict, dict]], list[dict]]:
    with open(path, encoding="utf-8") as fh:
        docs = [json.loads(line) for line in fh if line.strip()]
    for i, doc in enumerate(docs):
        doc.setdefault("id", str(i))
        doc.setdefault("language", "en")
        doc.setdefault("date", None)
        doc.setdefault("title", doc["text"][:60])
    return [(docs[i], docs[i + 1]) for i in range(0, min(2 * n, len(docs) - 1), 2)], docs


def distractors(question: str, pair: tuple[dict, dict], index: BM25Index, n: int, rng: random.Random) -> list[dict]:
    """The ``n`` other articles BM25 ranks highest for the item's (English) question -- retrieved, as XRAG's are,
    so they look relevant -- topped up at random from the rest of the collection when fewer match. Where the
    articles are dated, only those published at least two weeks before the pair qualify (so they cannot answer)."""
    dates = [day(a) for a in pair]
    cutoff = min(dates) - timedelta(days=14) if None not in dates else None

    def allowed(d: dict) -> bool:
        return d["id"] not in {pair[0]["id"], pair[1]["id"]} and (cutoff is None or (day(d) or cutoff) <= cutoff)
    docs = {d["id"]: d for d in index.corpus.docs}
    hits = [docs[p.id.split(":", 1)[1]] for p in index.search(question, len(docs))]
    chosen = [d for d in hits if allowed(d)][:n]
    rest = [d for d in index.corpus.docs if allowed(d) and d not in chosen]
    return chosen + rng.sample(rest, min(n - len(chosen), len(rest)))


def day(article: dict) -> date | None:
    """An article's publication date (ISO ``YYYY-MM-DD...``), or None."""
    return date.fromisoformat(str(article["date"])[:10]) if article.get("date") else None


def relevance_check(builder: XRAGBuilder, pairs: list[tuple[dict, dict]], n_related: int) -> list[dict]:
    """The relevance verdict on every pair (the first ``n_related`` should be related, the rest not), printed as
    accept / reject rates with the cost."""
    with metered() as cost:
        verdicts = [{"pair": [a["id"], b["id"]], "expected": i < n_related} | builder.related(a, b)
                    for i, (a, b) in enumerate(pairs)]
    pos = [v["related"] for v in verdicts if v["expected"]]
    neg = [not v["related"] for v in verdicts if not v["expected"]]
    print(f"related pairs accepted {sum(pos)}/{len(pos)}, cross-article pairs rejected {sum(neg)}/{len(neg)}, "
          f"accuracy {(sum(pos) + sum(neg)) / len(verdicts):.3f}; cost {cost.as_dict()}")
    return verdicts


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--articles", type=Path, help="JSONL of articles (default: XQuAD English paragraphs)")
    p.add_argument("--pairs", type=int, default=3, help="related article pairs")
    p.add_argument("--unrelated", type=int, default=1, help="XQuAD only: cross-article pairs (relevance check)")
    p.add_argument("--types", nargs="+", default=list(QUESTION_TYPES), choices=list(QUESTION_TYPES))
    p.add_argument("--translate", help="also translate each item into this language code (e.g. de)")
    p.add_argument("--distractors", type=int, default=6, help="distracting articles per item")
    p.add_argument("--lm", default="local:qwen-0.5b")
    p.add_argument("--api-base")
    p.add_argument("--data-dir")
    p.add_argument("--seed", type=int, default=13)
    p.add_argument("--out", type=Path, default=Path("xrag_items.jsonl"))
    p.add_argument("--verify-relevance", action="store_true",
                   help="after the shared-entity check, also ask the LM whether the pair shares a topic (the paper's "
                        "verification; near chance with the 0.5B/1.5B models)")
    p.add_argument("--relevance-only", action="store_true",
                   help="run only the relevance check and print how often it accepts the related pairs and "
                        "rejects the cross-article ones (a classifier check of the first gate)")
    args = p.parse_args(argv)
    if args.articles:
        pairs, pool = file_pairs(args.articles, args.pairs)
    else:
        pairs, pool = xquad_pairs(datasets.data_dir(args.data_dir), args.pairs, args.unrelated, args.seed)
    lm = make_lm(args.lm, args.api_base)
    init_dspy(lm)
    builder = XRAGBuilder(types=tuple(args.types), verify_relevance=args.verify_relevance)
    rng, items = random.Random(args.seed), []
    index = BM25Index.from_corpus(Corpus("articles", pool))
    if args.relevance_only:
        return relevance_check(builder, pairs, n_related=len(pairs) - (0 if args.articles else args.unrelated))
    outcomes = Counter()
    with metered() as cost:
        for a, b in pairs:
            out = builder(article_a=a, article_b=b, target_lang=args.translate)
            dropped = Counter(d["reason"] for d in out.trace["dropped"])
            outcomes.update({f"pair {out.trace['stop_reason']}": 1} | {f"item {r}": n for r, n in dropped.items()})
            print(f"{a['id']} + {b['id']}: {out.trace['stop_reason']} ({len(out.records)} items"
                  + "".join(f", {n} dropped: {r}" for r, n in dropped.items()) + ")", flush=True)
            for item in out.records:
                item["distracting"] = distractors(item["en_question"], (a, b), index, args.distractors, rng)
                item["provenance"].update(lm=args.lm, pair_related=out.trace["related"])
                items.append(item)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as fh:
        for item in items:
            fh.write(json.dumps(item, ensure_ascii=False) + "\n")
    print(f"{len(items)} items from {len(pairs)} pairs -> {args.out}; {dict(sorted(outcomes.items()))}; "
          f"cost {cost.as_dict()}")
    return items


if __name__ == "__main__":
    main()
