"""BLEnD (everyday cultural knowledge, 16 countries) from its annotation release: a multiple-choice set built the
way BLEnD builds its MCQ (``blend``) and the short-answer set (``blend_short``).

Files: ``RAG_DATA_DIR/blend/annotations/<Country>_data.json`` (per question id: local and English question,
annotated answers with vote counts, "I don't know" tallies) and ``blend/questions/<Country>_questions.csv``
(topic). Questions are the English versions, which name the country, so ``lang`` (the language the question is
written in, a program input) is ``en`` for every example; the country's own language is ``source_lang`` and its
resource tier ``tier``. Both break metrics down; no program reads them as an input, but ``source_lang`` is the
gold culture label (``evaluation.metrics.gold_of``) that the own-corpus scope C_own searches (``mono_rag``,
``own_en_rag``, ``coral_fixed_own``, ``coral_fixed_own_en``: the paper's oracle own-corpus rows) and the planner
oracle picks. Each example also
carries ``leave_out``: the group of the knowledge-corpus documents rendered from its question id -- the documents of
every country, since the other countries' answers to the same question are where its distractors come from (see
:func:`blend_kb`) -- hidden while it is evaluated.
"""
from __future__ import annotations

import csv
import json
import random
import re
from collections import Counter
from pathlib import Path

import dspy

from data import Bundle, require_file
from retrieval.corpus import Corpus
from runtime.files import read_json

# country -> (source language, resource tier). Tiers follow the CORAL paper (Sec. 5.1): Joshi et al. (2020)
# classes 1-2 low, 3-4 mid, 5 high; the language sets match its tier averages (Table 1 vs. per-language Table 8).
COUNTRIES: dict[str, tuple[str, str]] = {
    "US": ("en", "high"), "UK": ("en", "high"), "Spain": ("es", "high"), "Mexico": ("es", "high"),
    "China": ("zh", "high"), "Algeria": ("ar", "high"),
    "South_Korea": ("ko", "mid"), "North_Korea": ("ko", "mid"), "Indonesia": ("id", "mid"),
    "Greece": ("el", "mid"), "Iran": ("fa", "mid"),
    "Azerbaijan": ("az", "low"), "West_Java": ("su", "low"), "Assam": ("as", "low"),
    "Northern_Nigeria": ("ha", "low"), "Ethiopia": ("am", "low"),
}
N_OPTIONS = 4
MIN_VOTES = 2  # BLEnD: the top answer and every distractor need at least two annotators
LETTERS = "ABCDEFGH"
_FILLER = frozenset("a an the of and or in on at to for with".split())


def country_name(country: str) -> str:
    return country.replace("_", " ")


def read_annotations(root: Path | None, countries=COUNTRIES) -> dict[str, dict]:
    """``{country: {question id: record}}`` for every country."""
    return {c: read_json(require_file(root, f"blend/annotations/{c}_data.json")) for c in countries}


def read_topics(root: Path | None, country: str) -> dict[str, str]:
    with open(require_file(root, f"blend/questions/{country}_questions.csv"), encoding="utf-8", newline="") as fh:
        return {row["ID"]: row["Topic"] for row in csv.DictReader(fh)}


def voted_answers(record: dict) -> list[tuple[str, int, list[str]]]:
    """``(representative English answer, votes, all English spellings)`` per annotated answer, in file order."""
    return [(a["en_answers"][0].strip(), int(a["count"]), [s.strip() for s in a["en_answers"]])
            for a in record.get("annotations", []) if a.get("en_answers")]


def _words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower())) - _FILLER


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def clash(a: str, b: str) -> bool:
    """Whether two answers could name the same thing (BLEnD's test): equal numbers, equal after case/space
    normalisation, one inside the other, or a shared content word."""
    x, y = " ".join(a.lower().split()), " ".join(b.lower().split())
    if _number(x) is not None and _number(y) is not None:
        return _number(x) == _number(y)
    return x == y or x in y or y in x or bool(_words(x) & _words(y))


def build_mcq(qid: str, country: str, annotations: dict[str, dict], seed: int = 13) -> tuple[dict | None, str]:
    """One option set for (question, country) -> (``{"options", "answer", "correct"}`` or None, outcome).

    - skipped ("idk") when the target country's annotators often could not answer (any "not applicable", or more
      than two "I don't know"-type replies), and ("weak") when the top answer has fewer than two votes (BLEnD);
    - correct option = the country's most voted English answer. Tie rule: BLEnD writes one MCQ per tied top
      answer; one option set per question is kept here, so one of the tied answers is drawn with a seeded RNG
      (the other tied answers are annotated answers too, so they can never be distractors);
    - distractors = the most voted answers (>= 2 votes) to the same question in other countries, one per
      country, most votes first (equal votes in seeded random order), each clashing neither with any annotated
      answer of the target country (every spelling) nor with an option already taken; "few_distractors" when
      fewer than three remain;
    - the four options are shuffled with the seeded RNG."""
    rng = random.Random(f"{seed}:{country}:{qid}")
    record = annotations[country][qid]
    idks = record.get("idks", {})
    if idks.get("not-applicable", 0) > 0 or sum(idks.values()) > 2:
        return None, "idk"
    votes = voted_answers(record)
    top = max((n for _, n, _ in votes), default=0)
    if top < MIN_VOTES:
        return None, "weak"
    tied = [answer for answer, n, _ in votes if n == top]
    correct = rng.choice(tied)
    own = [spelling for _, _, spellings in votes for spelling in spellings]
    pool = [(n, answer, other) for other, records in sorted(annotations.items()) if other != country
            and qid in records for answer, n, _ in voted_answers(records[qid]) if n >= MIN_VOTES]
    rng.shuffle(pool)
    pool.sort(key=lambda item: -item[0])
    chosen: dict[str, str] = {}
    for _, answer, other in pool:
        if other in chosen or any(clash(answer, a) for a in own) or any(clash(answer, c) for c in chosen.values()):
            continue
        chosen[other] = answer
        if len(chosen) == N_OPTIONS - 1:
            break
    else:
        return None, "few_distractors"
    texts = [correct, *chosen.values()]
    rng.shuffle(texts)
    options = dict(zip(LETTERS, texts))
    return {"options": options, "answer": LETTERS[texts.index(correct)], "correct": correct}, "built"


def _example(qid: str, country: str, record: dict, topic: str, **fields) -> dspy.Example:
    source_lang, tier = COUNTRIES[country]
    return dspy.Example(id=f"{country}/{qid}", question=record["en_question"].strip(), lang="en",
                        source_lang=source_lang, tier=tier, country=country, topic=topic,
                        local_question=record.get("question", ""), leave_out=[kb_group(qid)], **fields)


def kb_group(qid: str) -> str:
    """The knowledge-corpus group of one question id: its documents for every country."""
    return f"q:{qid}"


def load_mcq(root: Path | None, seed: int = 13) -> Bundle:
    """Multiple choice: one option set per (question, country); construction counts go into ``Bundle.source``."""
    annotations = read_annotations(root)
    examples, stats = [], {}
    for country in COUNTRIES:
        topics, outcomes = read_topics(root, country), Counter()
        for qid, record in annotations[country].items():
            mcq, outcome = build_mcq(qid, country, annotations, seed)
            outcomes[outcome] += 1
            if mcq:
                examples.append(_example(qid, country, record, topics.get(qid, ""), options=mcq["options"],
                                         answer=mcq["answer"], answers=[mcq["answer"]],
                                         answer_text=mcq["correct"]).with_inputs("question", "options", "lang"))
        stats[country] = dict(sorted(outcomes.items()))
    source = f"{root / 'blend'} mcq(seed={seed}) {json.dumps(stats, separators=(',', ':'))}"
    return Bundle("blend", examples, blend_kb(root, annotations), "mcq", source,
                  groups=("source_lang", "tier", "country"))


def load_short(root: Path | None) -> Bundle:
    """Short answers: correct when the answer matches any English spelling annotated for the country."""
    annotations = read_annotations(root)
    examples = []
    for country in COUNTRIES:
        topics = read_topics(root, country)
        for qid, record in annotations[country].items():
            votes = voted_answers(record)
            if not votes:
                continue
            top = max(votes, key=lambda v: v[1])[0]
            spellings = list(dict.fromkeys(s for _, _, spellings in votes for s in spellings))
            examples.append(_example(qid, country, record, topics.get(qid, ""), answer=top, answers=spellings)
                            .with_inputs("question", "lang"))
    return Bundle("blend_short", examples, blend_kb(root, annotations), "short", str(root / "blend"),
                  groups=("source_lang", "tier", "country"))


def blend_kb(root: Path | None, annotations: dict[str, dict] | None = None, top: int = 5) -> list[Corpus]:
    """One corpus per BLEnD source language; per (country, question) one document listing the ``top`` most
    voted answers (English spellings with vote counts, then the local-language question and answers)."""
    annotations = annotations or read_annotations(root)
    by_lang: dict[str, list[dict]] = {}
    for country, records in annotations.items():
        for qid, record in records.items():
            answers = sorted(record.get("annotations", []), key=lambda a: -a["count"])[:top]
            english = [f"{' / '.join(a['en_answers'][:2])} ({a['count']})" for a in answers if a.get("en_answers")]
            if not english:
                continue
            local = ", ".join(dict.fromkeys(s for a in answers for s in a.get("answers", [])[:1]))
            text = (f"Most common answers in {country_name(country)}: {'; '.join(english)}. "
                    f"{record.get('question', '').strip()} {local}").strip()
            by_lang.setdefault(COUNTRIES[country][0], []).append(
                {"id": f"{country}/{qid}", "title": record["en_question"].strip(), "text": text,
                 "group": kb_group(qid)})
    return [Corpus(lang, docs, lang) for lang, docs in sorted(by_lang.items())]
