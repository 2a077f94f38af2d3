"""CLIcK, Culture category (Korean multiple choice from Korean exams and textbooks), as used by the CORAL paper.

Files: ``RAG_DATA_DIR/click/Culture/<Korean Subject>/<Subject>_<Source>.json``, each a list of
``{id, paragraph, question, choices, answer}`` with the answer given as choice text (mapped to its letter here).
Ids repeat across files, so examples are keyed ``<file stem>/<id>``. A non-empty paragraph is put before the
question. Questions are Korean: ``lang`` = ``source_lang`` = ``ko`` (mid resource tier, as in ``data.blend``).

The default corpora are BLEnD's knowledge corpora (``blend_kb``: survey answers on everyday life -- food, sports,
family, education, holidays, work). They can speak to the :data:`SERVED` categories only (Korean tradition and
society); Economy, Geography, History, Law, Politics and Popular (pop culture) questions have no document there, so
every arm would read evidence unrelated to the question by construction. ``click`` is therefore the served
categories; ``click_all`` is all eight, for a ``--corpus jsonl:DIR`` that covers the rest.
"""
from __future__ import annotations

from pathlib import Path

import dspy

from data import Bundle, require_file
from data.blend import blend_kb
from runtime.files import read_json

LETTERS = "ABCDEFGH"
SERVED = ("Tradition", "Society")  # the CLIcK Culture categories blend_kb has documents for


def _same(a: str, b: str) -> bool:
    return " ".join(a.split()) == " ".join(b.split())


def to_example(path: Path, record: dict) -> dspy.Example | None:
    """One record -> example, or None when its answer is none of its choices."""
    choices = [str(c).strip() for c in record["choices"]]
    match = [i for i, c in enumerate(choices) if _same(c, str(record["answer"]))]
    if len(match) != 1:
        return None
    paragraph = (record.get("paragraph") or "").strip()
    question = f"{paragraph}\n{record['question'].strip()}" if paragraph else record["question"].strip()
    letter = LETTERS[match[0]]
    return dspy.Example(id=f"{path.stem}/{record['id']}", question=question, options=dict(zip(LETTERS, choices)),
                        answer=letter, answers=[letter], lang="ko", source_lang="ko", tier="mid",
                        category=path.parent.name.removeprefix("Korean "), source=path.stem.split("_")[-1]
                        ).with_inputs("question", "options", "lang")


def load(root: Path | None, categories: tuple[str, ...] | None = SERVED) -> Bundle:
    """The CLIcK Culture questions of ``categories`` (None: every category)."""
    folder = require_file(root, "click/Culture")
    examples, skipped = [], 0
    for path in sorted(folder.glob("**/*.json")):
        if categories is not None and path.parent.name.removeprefix("Korean ") not in categories:
            continue
        for n, record in enumerate(read_json(path)):
            try:
                example = to_example(path, record)
            except (KeyError, TypeError) as err:  # a record without its fields, or no record at all
                raise ValueError(f"{path} record {n}: not a question with id, question, choices and answer "
                                 f"({type(err).__name__}: {err}); fix the file or fetch it again") from None
            if example is None:
                skipped += 1
            else:
                examples.append(example)
    name, scope = ("click", f"categories {', '.join(categories)}") if categories else ("click_all", "all categories")
    return Bundle(name, examples, blend_kb(root), "mcq",
                  f"{folder} {scope} (answer not among choices: {skipped})", groups=("category", "tier"))


def load_all(root: Path | None) -> Bundle:
    return load(root, None)
