"""HotpotQA dev-distractor (original release format) as open retrieval over the pooled context paragraphs."""
from __future__ import annotations

from pathlib import Path

import dspy

from data import Bundle, load_records, require_file
from retrieval.corpus import Corpus

FILES = ("hotpotqa/dev_distractor_sample.json", "hotpotqa/hotpot_dev_distractor_v1.json")


def pooled_corpus(records, name: str) -> Corpus:
    """One document per distinct context title across all records (the distractor setting made open-retrieval)."""
    docs: dict[str, dict] = {}
    for rec in records:
        for title, sentences in rec["context"]:
            if title not in docs:
                docs[title] = {"id": f"{len(docs):05d}", "title": title, "text": "".join(sentences).strip()}
    return Corpus(name, list(docs.values()), "en")


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
