"""XRAG (cross-lingual RAG, Liu et al. 2025): the release format, its loader, and offline XRAG-style settings
built from XQuAD.

**Release format** (one JSON object per line, or parquet): question, answer, language, setting, supporting and
distracting articles, each with text and date. :data:`FIELDS` is the one place that maps the release's keys
(and the alternatives seen across versions) to ours; :func:`records` reads ``RAG_DATA_DIR/xrag/*.jsonl|*.parquet``
through HF ``datasets``, or the hub id :data:`HUB_ID` when no local file exists and a hub is reachable.

**Contexts** (how much of an item's grounding a program may see), chosen by the dataset name:

- ``full`` (default): supporting + distracting articles only (every other document is hidden through the
  example's ``leave_out`` groups, see ``programs.retrieval.excluded``); ``rag --k 8`` then reads all of them;
- ``oracle``: the supporting articles only;
- ``open``: nothing hidden, every article pooled into one corpus per language (open retrieval);
- no retrieval: run a closed-book program (``direct``) on any of them.

**XQuAD settings** (``xrag_mono:X``, ``xrag_multi:X``, each with ``_oracle``/``_open`` variants, X in de, es, zh,
ar or ``all``; ``xrag_mono:en`` is the English-question baseline on the same items): XQuAD gives one paragraph
per question in 12 parallel languages, so every item has ONE supporting paragraph; XRAG's questions need two
articles. The settings test cross-lingual reading and answer language, not cross-document reasoning.

- monolingual retrieval: question and gold in X; supporting = the English paragraph; 6 English distractors:
  the other paragraphs of the same article (XQuAD articles have about 5), topped up from a seeded other article;
- multilingual retrieval: supporting paragraph in X or English (seeded per item, field ``support_lang``);
  3 distractors in English and 3 in X, drawn from the article's other paragraphs.
"""
from __future__ import annotations

import hashlib
import os
import random
from pathlib import Path

import dspy

from data import Bundle, load_records, read_json, require_file
from programs.retrieval import Corpus

HUB_ID = "AmazonScience/XRAG"
LANGS = ("de", "es", "zh", "ar")
SETTINGS = ("mono", "multi")
CONTEXTS = ("full", "oracle", "open")
N_DISTRACTORS = 6

# our key -> the keys a release may use for it, first match wins (the one place the release format is mapped)
FIELDS = {
    "id": ("id", "qid", "example_id"),
    "question": ("question", "query"),
    "answer": ("answer", "gold_answer", "answers"),
    "language": ("language", "lang", "question_language"),
    "setting": ("setting", "task", "subset"),
    "en_question": ("en_question", "english_question"),
    "en_answer": ("en_answer", "english_answer"),
    "supporting": ("supporting_articles", "supporting", "supporting_documents", "positive_docs"),
    "distracting": ("distracting_articles", "distracting", "distracting_documents", "negative_docs"),
}
ARTICLE_FIELDS = {
    "text": ("text", "content", "article", "body"),
    "title": ("title", "headline"),
    "date": ("date", "published_date", "publish_date", "time"),
    "language": ("language", "lang"),
    "id": ("id", "doc_id", "url"),
}
SETTING_NAMES = {"monolingual": "mono", "mono": "mono", "monolingual_retrieval": "mono",
                 "multilingual": "multi", "multi": "multi", "multilingual_retrieval": "multi"}


def _pick(row: dict, keys: tuple[str, ...], default=None):
    return next((row[k] for k in keys if row.get(k) not in (None, "")), default)


def article(raw, lang: str) -> dict:
    """One supporting/distracting article in our shape: ``{"id", "title", "text", "date", "language"}``."""
    if isinstance(raw, str):
        raw = {"text": raw}
    out = {key: _pick(raw, keys) for key, keys in ARTICLE_FIELDS.items()}
    if not out["text"]:
        raise ValueError(f"XRAG article without text (keys {sorted(raw)}); expected one of {ARTICLE_FIELDS['text']}")
    if hasattr(out["date"], "isoformat"):  # datasets parses ISO dates into datetimes
        out["date"] = out["date"].isoformat().removesuffix("T00:00:00")
    out["language"] = out["language"] or lang
    out["title"] = out["title"] or out["text"][:60]
    out["id"] = str(out["id"] or hashlib.sha1(out["text"].encode()).hexdigest()[:12])
    return out


def normalize(row: dict) -> dict:
    """A release row in our record shape (see :data:`FIELDS`); a missing required key is a one-line error."""
    rec = {key: _pick(row, keys) for key, keys in FIELDS.items()}
    for key in ("question", "answer", "supporting"):
        if rec[key] in (None, "", []):
            raise ValueError(f"XRAG row {row.get('id', '?')} lacks '{key}' (looked for {FIELDS[key]}); "
                             "map the file's key in data.xrag.FIELDS")
    answers = rec["answer"] if isinstance(rec["answer"], list) else [rec["answer"]]
    lang = rec["language"] or "en"
    rec.update(answer=str(answers[0]), answers=[str(a) for a in answers], language=lang,
               setting=SETTING_NAMES.get(str(rec["setting"] or "mono").lower(), str(rec["setting"])),
               id=str(rec["id"] or hashlib.sha1(rec["question"].encode()).hexdigest()[:12]),
               supporting=[article(a, lang) for a in rec["supporting"]],
               distracting=[article(a, lang) for a in rec["distracting"] or []])
    return rec


def records(root: Path | None) -> tuple[list[dict], str]:
    """Normalised rows of ``root/xrag/*.jsonl|*.parquet`` (or of the hub release when none is local)."""
    from datasets import load_dataset

    folder = root / "xrag" if root else None
    files = sorted(folder.glob("*.jsonl")) + sorted(folder.glob("*.parquet")) if folder and folder.is_dir() else []
    if files:
        rows = load_records([f for f in files if f.suffix == files[0].suffix])
        source = str(folder)
    elif os.environ.get("HF_HUB_OFFLINE") != "1":
        try:
            rows = load_dataset(HUB_ID, split="test")
        except Exception as err:
            raise FileNotFoundError(f"no XRAG files in {folder} and the hub release {HUB_ID} is unreachable "
                                    f"({type(err).__name__}); put xrag.*.jsonl under RAG_DATA_DIR/xrag/") from err
        source = f"hf:{HUB_ID}"
    else:
        raise FileNotFoundError(f"no XRAG files: put xrag.*.jsonl (or .parquet) under "
                                f"{folder or 'RAG_DATA_DIR/xrag'}/, or unset HF_HUB_OFFLINE to read {HUB_ID}")
    return [normalize(dict(r)) for r in rows], source


def bundle(name: str, recs: list[dict], context: str, source: str, groups=("lang", "setting"),
           pool: list[dict] = ()) -> Bundle:
    """Examples and per-language corpora from XRAG-format records; ``context`` (:data:`CONTEXTS`) decides which
    documents each example may retrieve. Articles (the records' and the extra ``pool``) are deduplicated per
    language by id."""
    if context not in CONTEXTS:
        raise ValueError(f"unknown XRAG context '{context}'; choose one of: {', '.join(CONTEXTS)}")
    docs: dict[str, dict[str, dict]] = {}
    for art in [a for rec in recs for a in rec["supporting"] + rec["distracting"]] + list(pool):
        docs.setdefault(art["language"], {}).setdefault(art["id"], {
            "id": art["id"], "title": art["title"], "text": art["text"], "date": art.get("date"),
            "group": group_of(art)})
    every = [d["group"] for lang_docs in docs.values() for d in lang_docs.values()]
    examples = []
    for rec in recs:
        visible = [group_of(a) for a in rec["supporting"]]
        if context == "full":
            visible += [group_of(a) for a in rec["distracting"]]
        keep = set(visible)
        leave_out = [] if context == "open" else [g for g in every if g not in keep]
        examples.append(dspy.Example(
            id=rec["id"], question=rec["question"], answer=rec["answer"], answers=rec["answers"],
            lang=rec["language"], setting=rec["setting"], en_question=rec.get("en_question"),
            en_answer=rec.get("en_answer"), support_lang=rec["supporting"][0]["language"],
            supporting=[group_of(a) for a in rec["supporting"]],
            distracting=[group_of(a) for a in rec["distracting"]],
            leave_out=leave_out).with_inputs("question", "lang"))
    # sorted by id, so every setting over the same documents shares one cached index
    corpora = [Corpus(lang, sorted(lang_docs.values(), key=lambda d: d["id"]), lang)
               for lang, lang_docs in sorted(docs.items())]
    return Bundle(name, examples, corpora, "xrag", f"{source} context={context}", groups=groups)


def group_of(art: dict) -> str:
    """The retrieval group (and passage id) of an article: ``<language>:<id>``."""
    return f"{art['language']}:{art['id']}"


def load_release(context: str):
    """Loader of the XRAG release files (``xrag``, ``xrag_oracle``, ``xrag_open``)."""
    def load(root: Path | None) -> Bundle:
        recs, source = records(root)
        return bundle("xrag" if context == "full" else f"xrag_{context}", recs, context, source)
    return load


# ---------------------------------------------------------------- XQuAD-based settings

def read_xquad(root: Path | None, lang: str) -> list[dict]:
    """XQuAD articles of ``lang``: ``[{"title", "paragraphs": [{"context", "qas"}]}]``."""
    return read_json(require_file(root, f"xquad/xquad.{lang}.json"))["data"]


def paragraph(articles: list[dict], lang: str, a: int, p: int) -> dict:
    return {"id": f"{a:02d}-{p:02d}", "title": articles[a]["title"].replace("_", " "),
            "text": articles[a]["paragraphs"][p]["context"].strip(), "date": None, "language": lang}


def xquad_records(root: Path | None, setting: str, lang: str, seed: int = 13) -> list[dict]:
    """XRAG-format records for every XQuAD question in ``lang`` (``en``: the English-question baseline of the
    monolingual setting, same items and documents). Paragraph (a, p) is parallel across languages."""
    if setting not in SETTINGS:
        raise ValueError(f"unknown XRAG setting '{setting}'; choose one of: {', '.join(SETTINGS)}")
    if setting == "multi" and lang == "en":
        raise ValueError("the multilingual setting needs a non-English question language (de, es, zh or ar)")
    en, local = read_xquad(root, "en"), read_xquad(root, lang)
    if [len(a["paragraphs"]) for a in en] != [len(a["paragraphs"]) for a in local]:
        raise ValueError(f"xquad.{lang}.json is not paragraph-parallel with xquad.en.json")
    out = []
    for a, art in enumerate(local):
        for p, par in enumerate(art["paragraphs"]):
            for q, qa in enumerate(par["qas"]):
                rng = random.Random(f"{seed}:{qa['id']}")
                others = [i for i in range(len(art["paragraphs"])) if i != p]
                en_qa = en[a]["paragraphs"][p]["qas"][q]
                if setting == "mono":
                    supporting = [paragraph(en, "en", a, p)]
                    distracting = [paragraph(en, "en", a, i) for i in others]
                    while len(distracting) < N_DISTRACTORS:  # articles are short: top up from another article
                        b = rng.choice([i for i in range(len(en)) if i != a])
                        extra = [paragraph(en, "en", b, i) for i in range(len(en[b]["paragraphs"]))]
                        distracting += rng.sample(extra, min(len(extra), N_DISTRACTORS - len(distracting)))
                else:
                    support = rng.choice([lang, "en"])
                    supporting = [paragraph(local if support == lang else en, support, a, p)]
                    half = N_DISTRACTORS // 2
                    distracting = ([paragraph(en, "en", a, i) for i in sorted(rng.sample(others, min(half, len(others))))]
                                   + [paragraph(local, lang, a, i)
                                      for i in sorted(rng.sample(others, min(half, len(others))))])
                out.append({"id": f"{qa['id']}@{lang}", "question": qa["question"].strip(),
                            "answer": qa["answers"][0]["text"].strip(),
                            "answers": list(dict.fromkeys(x["text"].strip() for x in qa["answers"])),
                            "language": lang, "setting": setting, "en_question": en_qa["question"].strip(),
                            "en_answer": en_qa["answers"][0]["text"].strip(), "source": "xquad",
                            "supporting": supporting, "distracting": distracting})
    return out


def load_xquad(setting: str, lang: str, context: str):
    """Loader of one XQuAD-based setting (``lang`` ``all`` = de, es, zh and ar together)."""
    suffix = "" if context == "full" else f"_{context}"
    name = f"xrag_{setting}{suffix}:{lang}"

    def load(root: Path | None) -> Bundle:
        langs = LANGS if lang == "all" else (lang,)
        recs = [r for code in langs for r in xquad_records(root, setting, code)]
        pool_langs = {"en", *langs} if setting == "multi" else {"en"}
        pool = [paragraph(arts, code, a, p) for code in sorted(pool_langs) for arts in [read_xquad(root, code)]
                for a in range(len(arts)) for p in range(len(arts[a]["paragraphs"]))] if context == "open" else []
        return bundle(name, recs, context, f"{root / 'xquad' if root else 'xquad'} xrag_{setting}",
                      groups=("lang", "support_lang") if setting == "multi" else ("lang",), pool=pool)
    return load


def loaders() -> dict:
    """Every XRAG dataset name -> loader (registered in ``data._loaders``)."""
    out = {("xrag" if c == "full" else f"xrag_{c}"): load_release(c) for c in CONTEXTS}
    for setting in SETTINGS:
        for context in CONTEXTS:
            suffix = "" if context == "full" else f"_{context}"
            langs = (*LANGS, "all") + (("en",) if setting == "mono" else ())
            out.update({f"xrag_{setting}{suffix}:{lang}": load_xquad(setting, lang, context) for lang in langs})
    return out
