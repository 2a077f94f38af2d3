"""XRAG (cross-lingual RAG, Liu et al. 2025): the release format, its loader, and offline XRAG-style settings
built from XQuAD.

**Release format** (``AmazonScience/XRAG``, one JSON object per line: ``xrag.dev.jsonl``, ``xrag.test.jsonl``):
id, question, answer, en_question, en_answer, q_type, a_type, crossdoc_type, ``articles`` (one list: the 2
supporting articles, then the 6 distracting ones) and ``dates`` (each article's publication date). :data:`FIELDS`
is the one place that maps the release's keys (and those of our own construction pipeline, which writes
``supporting`` / ``distracting`` lists) to ours; :func:`records` reads ``RAG_DATA_DIR/xrag/*.jsonl|*.parquet``
through HF ``datasets``, or the hub id :data:`HUB_ID` when no local file exists and a hub is reachable. The
release's rows name neither their language nor their setting, so both are read from the text with lingua: a row is
in the language of its question; an article without a language is in the question's language when lingua reads
its opening so, else English (:func:`article_language`); a row without a setting is multilingual when any of its
articles is in the question's (non-English) language, else monolingual (:func:`infer_setting`). A row that names
its setting keeps it (monolingual: every article without a language is English).

**Contexts** (how much of an item's grounding a program may see), chosen by the dataset name:

- ``full`` (default): supporting + distracting articles only (every other document is hidden through the
  example's ``leave_out`` groups, see ``retrieval.corpus.excluded``); ``rag --k 8`` then reads all of them;
- ``oracle``: the supporting articles only;
- ``open``: nothing hidden, every article pooled into one corpus per language (open retrieval);
- no retrieval: run a closed-book program (``direct``) on any of them.

**XQuAD settings** (``xrag_mono:X``, ``xrag_multi:X``, each with ``_oracle``/``_open`` variants, X in de, es, zh,
ar or ``all``; ``xrag_mono:en`` is the English-question baseline on the same items): XQuAD gives one paragraph
per question in 12 parallel languages, so every item has ONE supporting paragraph; XRAG's questions need two
articles. The settings test cross-lingual reading and answer language, not cross-document reasoning.

- monolingual retrieval: question and gold in X; supporting = the English paragraph; 6 English distractors:
  the other paragraphs of the same article (XQuAD articles have about 5), topped up from a seeded other article;
- multilingual retrieval (the paper's Table 5): 1 supporting + 3 distracting paragraphs in X and the same in
  English (XQuAD's are parallel: the X paragraphs translate the English ones); the distractors are drawn from the
  article's other paragraphs. ``xrag_multi:en`` is Table 5's En + En_X baseline on the same items: the English
  question over the English paragraphs and the English versions of the X ones, which on XQuAD are the English
  originals themselves (so the baseline reads 1 supporting + 3 distracting English paragraphs).
"""
from __future__ import annotations

import hashlib
import os
import random
from pathlib import Path

import dspy

from data import Bundle, load_records, require_file
from retrieval.corpus import Corpus
from runtime.files import read_json
from runtime.language import detect

HUB_ID = "AmazonScience/XRAG"
LANGS = ("de", "es", "zh", "ar")
SETTINGS = ("mono", "multi")
CONTEXTS = ("full", "oracle", "open")
N_DISTRACTORS = 6

N_SUPPORTING = 2  # the release's ``articles`` list: this many supporting articles first, then the distracting ones
# our key -> the keys a release may use for it, first match wins (the one place the release format is mapped)
FIELDS = {
    "id": ("id", "qid", "example_id"),
    "question": ("question", "query"),
    "answer": ("answer", "gold_answer", "answers"),
    "language": ("language", "lang", "question_language"),
    "setting": ("setting", "task", "subset"),
    "en_question": ("en_question", "english_question"),
    "en_answer": ("en_answer", "english_answer"),
    "articles": ("articles",),  # the release: supporting (N_SUPPORTING) then distracting, in one list
    "dates": ("dates",),  # the release: each article's publication date, parallel to ``articles``
    "supporting": ("supporting", "supporting_articles"),  # scripts/xrag_build.py output
    "distracting": ("distracting", "distracting_articles"),
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


def article(raw, lang: str, setting: str | None, date=None) -> dict:
    """One supporting/distracting article in our shape: ``{"id", "title", "text", "date", "language"}``; ``date``
    is the release's ``dates`` entry for it. The id is the release's, else a hash of the text."""
    if isinstance(raw, str):
        raw = {"text": raw}
    out = {key: _pick(raw, keys) for key, keys in ARTICLE_FIELDS.items()}
    if not out["text"]:
        raise ValueError(f"XRAG article without text (keys {sorted(raw)}); expected one of {ARTICLE_FIELDS['text']}")
    out["date"] = out["date"] or date
    if hasattr(out["date"], "isoformat"):  # datasets parses ISO dates into datetimes
        out["date"] = out["date"].isoformat().removesuffix("T00:00:00")
    out["language"] = out["language"] or article_language(out["text"], lang, setting)
    out["title"] = out["title"] or out["text"][:60]
    out["id"] = str(out["id"] or hashlib.sha1(out["text"].encode()).hexdigest()[:12])
    return out


def article_language(text: str, lang: str, setting: str | None) -> str:
    """The language of an article the release gives none for: English in the monolingual setting (its documents
    are English whatever the question's language); otherwise (multilingual, or no setting given) the question's
    language when lingua reads it in the text's opening, else English."""
    if setting == "mono" or lang == "en":
        return "en"
    return lang if detect(text[:500]) == lang else "en"


def infer_setting(lang: str, articles: list[dict]) -> str:
    """The setting of a row that names none: ``multi`` when any article is in the question's language (other than
    English: the multilingual setting retrieves documents in English and in it), else ``mono``."""
    return "multi" if lang != "en" and any(a["language"] == lang for a in articles) else "mono"


def normalize(row: dict) -> dict:
    """A release row in our record shape (see :data:`FIELDS`); a missing required key is a one-line error."""
    rec = {key: _pick(row, keys) for key, keys in FIELDS.items()}
    rid = rec["id"] or "?"
    if rec["articles"] and not rec["supporting"]:  # the release's layout: one list, supporting first
        arts, dates = list(rec["articles"]), list(rec["dates"] or [])
        if dates and len(dates) != len(arts):
            raise ValueError(f"XRAG row {rid} has {len(dates)} dates for {len(arts)} articles; expected one each")
        dates += [None] * (len(arts) - len(dates))
        rec["supporting"], rec["distracting"] = arts[:N_SUPPORTING], arts[N_SUPPORTING:]
        support_dates, distract_dates = dates[:N_SUPPORTING], dates[N_SUPPORTING:]
    else:
        support_dates, distract_dates = [None] * len(rec["supporting"] or []), [None] * len(rec["distracting"] or [])
    for key in ("question", "answer", "supporting"):
        if rec[key] in (None, "", []):
            looked = FIELDS[key] + (FIELDS["articles"] if key == "supporting" else ())
            raise ValueError(f"XRAG row {rid} lacks '{key}' (looked for {looked}); map the file's key in "
                             "data.xrag.FIELDS")
    answers = rec["answer"] if isinstance(rec["answer"], list) else [rec["answer"]]
    lang = rec["language"] or _question_language(rec["question"])
    given = SETTING_NAMES.get(str(rec["setting"]).lower(), str(rec["setting"])) if rec["setting"] else None
    supporting = [article(a, lang, given, d) for a, d in zip(rec["supporting"], support_dates)]
    distracting = [article(a, lang, given, d) for a, d in zip(rec["distracting"] or [], distract_dates)]
    rec.update(answer=str(answers[0]), answers=[str(a) for a in answers], language=lang,
               setting=given or infer_setting(lang, supporting + distracting),
               id=str(rec["id"] or hashlib.sha1(rec["question"].encode()).hexdigest()[:12]),
               supporting=supporting, distracting=distracting)
    for key in ("articles", "dates"):
        rec.pop(key)
    return rec


def _question_language(question: str) -> str:
    return detect(question) or "en"


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
    documents each example may retrieve. Articles (the records' and the extra ``pool``) are one document per
    language and id; two different texts under one id are an error, not silently merged."""
    if context not in CONTEXTS:
        raise ValueError(f"unknown XRAG context '{context}'; choose one of: {', '.join(CONTEXTS)}")
    docs: dict[str, dict[str, dict]] = {}
    for art in [a for rec in recs for a in rec["supporting"] + rec["distracting"]] + list(pool):
        held = docs.setdefault(art["language"], {}).setdefault(art["id"], {
            "id": art["id"], "title": art["title"], "text": art["text"], "date": art.get("date"),
            "group": group_of(art)})
        if held["text"] != art["text"]:
            raise ValueError(f"XRAG article id '{art['id']}' ({art['language']}) names two different texts "
                             f"({held['title'][:40]!r}, {art['title'][:40]!r}); article ids must be unique "
                             "across items")
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
    setting on the same items). Paragraph (a, p) is parallel across languages."""
    if setting not in SETTINGS:
        raise ValueError(f"unknown XRAG setting '{setting}'; choose one of: {', '.join(SETTINGS)}")
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
                else:  # X and English (for ``en``: English only, see the module docstring)
                    picked = sorted(rng.sample(others, min(N_DISTRACTORS // 2, len(others))))
                    versions = [(local, lang), (en, "en")] if lang != "en" else [(en, "en")]
                    supporting = [paragraph(arts, code, a, p) for arts, code in versions]
                    distracting = [paragraph(arts, code, a, i) for arts, code in versions for i in picked]
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
                      groups=("lang",), pool=pool)
    return load


def loaders() -> dict:
    """Every XRAG dataset name -> loader (registered in ``data._loaders``)."""
    out = {("xrag" if c == "full" else f"xrag_{c}"): load_release(c) for c in CONTEXTS}
    for setting in SETTINGS:
        for context in CONTEXTS:
            suffix = "" if context == "full" else f"_{context}"
            langs = (*LANGS, "all", "en")
            out.update({f"xrag_{setting}{suffix}:{lang}": load_xquad(setting, lang, context) for lang in langs})
    return out
