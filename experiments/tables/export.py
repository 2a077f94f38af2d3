"""``export NAME``: each arm's predictions in its benchmark's official prediction format, so the official evaluation
scripts score them: HotpotQA's (and 2WikiMultiHopQA's) ``{"answer": {id: text}, "sp": {id: [[title, sentence]]}}``,
MuSiQue's jsonl ``{"id", "predicted_answer", "predicted_support_idxs", "predicted_answerable"}``. Supporting facts
are paragraph-level: every sentence of each passage the answer cites (else of each passage the writer read), as our
programs pick passages, not sentences. A question the run left unanswered (retryable) is left out and counted.

Beside each prediction file, the gold file its official script reads, cut to the questions exported (the scripts
average over every gold question, so the shared file's others would count as misses), our EM and F1 on the same
questions and the command to score it."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import data as datasets
from data import hotpotqa, load_records, musique, require_file, twowiki
from experiments.tables import stored
from experiments.tables.declared import Table


def support(rec: dict) -> list[dict]:
    """The passages an answer rests on: those it cites, else those its writer read."""
    cited = set(rec.get("citations") or ())
    return [p for p in rec.get("passages") or [] if p["id"] in cited] if cited else list(rec.get("passages") or [])


def _raw(files: tuple[str, ...]) -> list[dict]:
    return list(load_records([require_file(datasets.data_dir(), *files)]))


def hotpot_format(records: list[dict], files: tuple[str, ...]) -> dict:
    """The HotpotQA prediction file: answers, and as supporting facts every sentence of each supporting passage
    (2WikiMultiHopQA's script also reads ``evidence``: none predicted)."""
    sentences = {title: len(lines) for rec in _raw(files) for title, lines in rec["context"]}
    out = {"answer": {r["id"]: r["answer"] or "" for r in records},
           "sp": {r["id"]: [[p["title"], i] for p in support(r) for i in range(sentences.get(p["title"], 1))]
                  for r in records}}
    return out | ({"evidence": {r["id"]: [] for r in records}} if files == twowiki.FILES else {})


def musique_format(records: list[dict]) -> str:
    """MuSiQue's prediction jsonl: the answer, and the positions in the question's own paragraph list of the
    passages it rests on (a pooled passage ``musique:<doc id>`` is the question's paragraph with that text)."""
    raw = _raw(musique.FILES)
    docs = musique.paragraphs(raw)
    position = {rec["id"]: {f"musique:{docs[musique._key(p)]['id']}": p.get("idx", i)
                            for i, p in enumerate(rec["paragraphs"])} for rec in raw}
    lines = [{"id": r["id"], "predicted_answer": r["answer"] or "",
              "predicted_support_idxs": sorted({position[r["id"]][p["id"]] for p in support(r)
                                                if p["id"] in position.get(r["id"], {})}),
              "predicted_answerable": True} for r in records]
    return "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)


#: The official scorer of each format (docs/cli.md: where each comes from), run as ``python SCRIPT PREDICTIONS GOLD``;
#: 2Wiki's takes an alias file too (an empty file: no aliases).
SCRIPTS = {"hotpotqa": "hotpot_evaluate_v1.py", "2wiki": "2wikimultihop_evaluate_v1.1.py",
           "musique": "evaluate_v1.0.py"}


def gold(dataset: str, ids: set[str]) -> tuple[str, str]:
    """The shared file's records of questions ``ids``, in its own format (HotpotQA/2Wiki: a JSON list; MuSiQue:
    jsonl), and the file suffix."""
    if dataset == "musique":
        return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in _raw(musique.FILES) if r["id"] in ids), \
            ".gold.jsonl"
    files = hotpotqa.FILES if dataset == "hotpotqa" else twowiki.FILES
    return json.dumps([r for r in _raw(files) if r["_id"] in ids], ensure_ascii=False), ".gold.json"


def ours(answered: list[dict]) -> str:
    """Our EM and F1 on the exported questions, to set beside the official script's."""
    mean = {m: sum(r[m] for r in answered) / len(answered) if answered else float("nan") for m in ("em", "f1")}
    return f"ours on them: EM {mean['em']:.4f}, F1 {mean['f1']:.4f}"


def export(table: Table, out: Path) -> list[Path]:
    """Write each arm's predictions under ``out``; returns the files written."""
    written = []
    out.mkdir(parents=True, exist_ok=True)
    for row in stored.rows(table):
        cell, records = row.result.cell, row.result.records
        answered = [r for r in records if not r.get("retryable")]
        if skipped := len(records) - len(answered):
            print(f"{cell.label}@{cell.dataset}: {skipped} unanswered question(s) left out", file=sys.stderr)
        name = f"{table.name}-{cell.label}-{cell.dataset}"
        if cell.dataset in ("hotpotqa", "2wiki"):
            path = out / f"{name}.json"
            files = hotpotqa.FILES if cell.dataset == "hotpotqa" else twowiki.FILES
            path.write_text(json.dumps(hotpot_format(answered, files), ensure_ascii=False), encoding="utf-8")
        elif cell.dataset == "musique":
            path = out / f"{name}.jsonl"
            path.write_text(musique_format(answered), encoding="utf-8")
        else:
            print(f"{cell.label}@{cell.dataset}: no official prediction format for {cell.dataset}; not exported",
                  file=sys.stderr)
            continue
        text, suffix = gold(cell.dataset, {r["id"] for r in answered})
        truth = out / f"{name}{suffix}"
        truth.write_text(text, encoding="utf-8")
        written += [path, truth]
        print(f"{path} ({len(answered)} predictions, run {row.result.run_id[:8]}); {ours(answered)}; score it: "
              f"python {SCRIPTS[cell.dataset]} {path} {truth}{' ALIASES' if cell.dataset == '2wiki' else ''}")
    return written
