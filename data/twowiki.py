"""2WikiMultiHopQA dev (original release format) as open retrieval over the pooled context paragraphs."""
from __future__ import annotations

from pathlib import Path

import dspy

from data import Bundle, load_records, require_file
from data.hotpotqa import pooled_corpus

FILES = ("2wikimultihopqa/dev_sample.json", "2wikimultihopqa/dev.json")


def _spaced(record) -> dict:
    """2Wiki sentences carry no leading space (HotpotQA's do): join each paragraph's sentences with one."""
    return {"context": [[title, [" ".join(s.strip() for s in sentences)]] for title, sentences in record["context"]]}


def load(root: Path | None) -> Bundle:
    path = require_file(root, *FILES)
    records = load_records([path])
    examples = [
        dspy.Example(id=rec["_id"], question=rec["question"], answer=rec["answer"], answers=[rec["answer"]],
                     gold_titles=sorted({title for title, _ in rec["supporting_facts"]}),
                     type=rec["type"]).with_inputs("question")
        for rec in records
    ]
    return Bundle("2wiki", examples, [pooled_corpus(map(_spaced, records), "2wiki")], "short", str(path))
