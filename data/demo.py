"""The bundled demo sets in ``data/demo/`` (hand-written for this project; no data dir needed)."""
from __future__ import annotations

from pathlib import Path

import dspy

from data import Bundle
from retrieval.corpus import Corpus
from runtime.files import read_jsonl

DEMO_DIR = Path(__file__).resolve().parent / "demo"


def load_multihop(_root: Path | None = None) -> Bundle:
    """English two-hop questions over one small English corpus."""
    rows = list(read_jsonl(DEMO_DIR / "multihop.jsonl"))
    examples = [dspy.Example(id=r["id"], question=r["question"], answer=r["answer"], answers=[r["answer"]],
                             gold_titles=r["gold_titles"], type=r["type"]).with_inputs("question") for r in rows]
    corpus = Corpus.from_jsonl(DEMO_DIR / "multihop_corpus.jsonl", name="demo_en", lang="en")
    return Bundle("demo", examples, [corpus], "short", str(DEMO_DIR / "multihop.jsonl"))


def load_culture(_root: Path | None = None) -> Bundle:
    """Culturally grounded multiple-choice questions with one corpus per language. The questions are English
    (``lang``, a program input); ``source_lang`` is the language of the culture they ask about."""
    rows = list(read_jsonl(DEMO_DIR / "culture.jsonl"))
    examples = [dspy.Example(id=r["id"], question=r["question"], options=r["options"], answer=r["answer"],
                             answers=[r["answer"]], country=r["country"], lang="en", source_lang=r["lang"]
                             ).with_inputs("question", "options", "lang")
                for r in rows]
    corpora = [Corpus.from_jsonl(path, name=path.stem, lang=path.stem)
               for path in sorted((DEMO_DIR / "corpora").glob("*.jsonl"))]
    return Bundle("demo_culture", examples, corpora, "mcq", str(DEMO_DIR / "culture.jsonl"), groups=("source_lang",))
