"""NQ-open and TriviaQA-open (the DPR test splits as Anserini ships them): short-answer questions with every accepted
answer (TriviaQA's aliases included; EM/F1 take the best of them). They bring no retrieval corpus: a run that
searches names one with ``--corpus`` (``data.corpora.require``)."""
from __future__ import annotations

import ast
import csv
import io
from pathlib import Path

import dspy

from data import Bundle, require_file
from runtime.files import utf8_text

NQ = "nq_open/topics.nq.test.txt"
TRIVIAQA = "triviaqa_open/topics.dpr.trivia.test.txt"
FORMAT = "question<TAB>a Python list of answer strings, e.g. who wrote it?\t['Ann Berg']"


def answers_of(text: str) -> list[str] | None:
    """The answers of a row's second field: a non-empty Python list literal of strings (read by
    ``ast.literal_eval``, which evaluates no code); None when it is anything else."""
    try:
        value = ast.literal_eval(text.strip())
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(value, list) or not value or not all(isinstance(a, str) and a.strip() for a in value):
        return None
    return [a.strip() for a in value]


def rows(path: Path) -> list[tuple[str, list[str]]]:
    """(question, answers) of every row of a CSV-quoted TSV file; a row of another shape is a one-line ValueError
    naming the file and line."""
    reader = csv.reader(io.StringIO(utf8_text(path)), delimiter="\t")
    out = []
    try:
        for row in reader:
            if not row:
                continue
            answers = answers_of(row[1]) if len(row) == 2 and row[0].strip() else None
            if answers is None:
                raise ValueError(f"{path} line {reader.line_num}: not {FORMAT}; fix or delete that line")
            out.append((row[0].strip(), answers))
    except csv.Error as err:
        raise ValueError(f"{path} line {reader.line_num}: {err}; each line must be {FORMAT}") from None
    return out


def bundle(name: str, root: Path | None, file: str) -> Bundle:
    path = require_file(root, file)
    examples = [dspy.Example(id=f"{name}-{i:05d}", question=question, answer=answers[0],
                             answers=answers).with_inputs("question")
                for i, (question, answers) in enumerate(rows(path))]
    return Bundle(name, examples, [], "short", str(path))


def load_nq(root: Path | None) -> Bundle:
    return bundle("nq", root, NQ)


def load_triviaqa(root: Path | None) -> Bundle:
    return bundle("triviaqa", root, TRIVIAQA)
