"""HotpotQA dev-distractor (original release format) as open retrieval over the pooled context paragraphs."""
from __future__ import annotations

from pathlib import Path

import dspy
from datasets import load_dataset

from data import Bundle, require_file
from programs.retrieval import Corpus
from runtime.paths import project_cache

FILES = ("hotpotqa/dev_distractor_sample.json", "hotpotqa/hotpot_dev_distractor_v1.json")


def read_json(path: Path):
    """Read an original-format JSON/JSONL release through HF ``datasets`` (offline, cached in the project)."""
    return load_dataset("json", data_files=str(path), split="train", cache_dir=str(project_cache() / "hf"))


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
    records = read_json(path)
    examples = [
        dspy.Example(id=rec["_id"], question=rec["question"], answer=rec["answer"], answers=[rec["answer"]],
                     gold_titles=sorted({title for title, _ in rec["supporting_facts"]}), type=rec["type"],
                     level=rec["level"]).with_inputs("question")
        for rec in records
    ]
    return Bundle("hotpotqa", examples, [pooled_corpus(records, "hotpotqa")], "short", str(path))
