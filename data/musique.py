"""MuSiQue-Answerable dev (original jsonl release) as open retrieval over the pooled paragraphs."""
from __future__ import annotations

from pathlib import Path

import dspy

from data import Bundle, load_records, require_file
from retrieval.corpus import Corpus, Passage

FILES = ("musique/musique_ans_dev_sample.jsonl", "musique/musique_ans_v1.0_dev.jsonl")


def _key(para: dict) -> tuple[str, str]:
    return para["title"], para["paragraph_text"].strip()


def paragraphs(records) -> dict[tuple[str, str], dict]:
    """One document per distinct (title, text) paragraph across all records: MuSiQue often holds several
    paragraphs of one article, so titles alone would merge different passages."""
    docs: dict[tuple[str, str], dict] = {}
    for rec in records:
        for para in rec["paragraphs"]:
            key = _key(para)
            if key not in docs:
                docs[key] = {"id": f"{len(docs):05d}", "title": key[0], "text": key[1]}
    return docs


def contexts(root: Path | None) -> list[dict]:
    """Each question's own paragraphs, in file order: ``{qid, question, gold, distractors}``, the supporting
    paragraphs and the others as passages with ids ``<qid>:<position>``."""
    out = []
    for rec in load_records([require_file(root, *FILES)]):
        paras = [(Passage(f"{rec['id']}:{i}", *_key(p)), p["is_supporting"]) for i, p in enumerate(rec["paragraphs"])]
        out.append({"qid": rec["id"], "question": rec["question"], "gold": [p for p, s in paras if s],
                    "distractors": [p for p, s in paras if not s]})
    return out


def hops(rec: dict, docs: dict[tuple[str, str], dict]) -> list[dict]:
    """The record's gold decomposition: per hop its question, answer and supporting paragraph as a gold key
    (``musique:<id>``, as in ``gold_ids``; None when the hop names none). ``paragraph_support_idx`` is a paragraph's
    ``idx`` (its position where the record has no ``idx``)."""
    by_idx = {p.get("idx", i): p for i, p in enumerate(rec["paragraphs"])}
    out = []
    for hop in rec.get("question_decomposition") or ():
        para = by_idx.get(hop.get("paragraph_support_idx"))
        out.append({"question": hop["question"], "answer": hop["answer"],
                    "key": f"musique:{docs[_key(para)]['id']}" if para else None})
    return out


def load(root: Path | None) -> Bundle:
    path = require_file(root, *FILES)
    records = load_records([path])
    docs = paragraphs(records)
    examples = [
        dspy.Example(id=rec["id"], question=rec["question"], answer=rec["answer"],
                     answers=[rec["answer"], *rec["answer_aliases"]],
                     gold_titles=sorted({p["title"] for p in rec["paragraphs"] if p["is_supporting"]}),
                     gold_ids=sorted({f"musique:{docs[_key(p)]['id']}" for p in rec["paragraphs"]
                                      if p["is_supporting"]}),  # paragraph identity: titles repeat
                     hops=hops(rec, docs),
                     type=rec["id"].split("__")[0]).with_inputs("question")
        for rec in records
    ]
    return Bundle("musique", examples, [Corpus("musique", list(docs.values()), "en")], "short", str(path))
