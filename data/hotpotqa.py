"""HotpotQA dev-distractor (original release format) as open retrieval over the pooled context paragraphs."""
from __future__ import annotations

from pathlib import Path

import dspy

from data import Bundle, load_records, require_file
from retrieval.corpus import Corpus, Passage

FILES = ("hotpotqa/dev_distractor_sample.json", "hotpotqa/hotpot_dev_distractor_v1.json")


def pooled_corpus(records, name: str) -> Corpus:
    """One document per distinct context title across all records (the distractor setting made open-retrieval)."""
    docs: dict[str, dict] = {}
    for rec in records:
        for title, sentences in rec["context"]:
            if title not in docs:
                docs[title] = {"id": f"{len(docs):05d}", "title": title, "text": _text(sentences)}
    return Corpus(name, list(docs.values()), "en")


def _text(sentences: list[str]) -> str:
    return "".join(sentences).strip()


def contexts(root: Path | None) -> list[dict]:
    """Each question's own context paragraphs, in file order: ``{qid, question, gold, distractors}``, the
    supporting paragraphs and the others as passages with ids ``<qid>:<title>``."""
    out = []
    for rec in load_records([require_file(root, *FILES)]):
        gold = {t for t, _ in rec["supporting_facts"]}
        paras = [Passage(f"{rec['_id']}:{t}", t, _text(s)) for t, s in rec["context"]]
        out.append({"qid": rec["_id"], "question": rec["question"], "gold": [p for p in paras if p.title in gold],
                    "distractors": [p for p in paras if p.title not in gold]})
    return out


def load(root: Path | None) -> Bundle:
    path = require_file(root, *FILES)
    records = load_records([path])
    examples = [
        dspy.Example(id=rec["_id"], question=rec["question"], answer=rec["answer"], answers=[rec["answer"]],
                     gold_titles=sorted({title for title, _ in rec["supporting_facts"]}), type=rec["type"],
                     level=rec["level"]).with_inputs("question")
        for rec in records
    ]
    return Bundle("hotpotqa", examples, [pooled_corpus(records, "hotpotqa")], "short", str(path))
