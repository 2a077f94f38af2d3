"""The XRAG construction pipeline (paper §4) as DSPy modules over any article collection:

pair check (a shared named entity, as the paper pairs articles; optionally an LM topic verdict) -> one summary per
article (low lexical overlap with it) -> simple one-step QA pairs per summary -> one cross-document question per
requested type (aggregation, comparison, multi-hop, set) from the two sets of pairs -> its answer from the summaries
and pairs -> optional translation into a target language.
Each item comes out as an XRAG-format record (see ``data.xrag``) with provenance: the model ids, the two articles,
summaries, their lexical overlap, the simple pairs and the stated connection.

Automatic quality gates stand in for the first pass of the paper's human control: a summary that copies its
article, a question that is empty, holds a ``Q: .. A:`` pair, restates the type description, points at "the
articles" (so it cannot be asked without them) or repeats an earlier question of the pair, and a translation
whose question is not in the target language (lingua, as the scorer) are each sampled once more and, if still
failing, dropped with the reason in the trace -- never passed on or relabelled.
"""
from __future__ import annotations

import re

import dspy

from decoding.constrained import BOOL, constrained_config
from programs.shared.text import content_words, mentions, normalize, words
from runtime.language import detect, in_language, language_name
from signatures.construct import (
    QUESTION_TYPES,
    AnswerFromSummaries,
    CrossDocumentQuestion,
    MainEntities,
    RelatedArticles,
    SimpleQuestions,
    SummarizeArticle,
    TranslateQA,
)

MAX_OVERLAP = 0.5  # share of the summary's word trigrams copied from the article above which it is redone once
_QA = re.compile(r"Q\s*[:：]\s*(?P<q>.+?)\s*A\s*[:：]\s*(?P<a>.+)", re.S)
_QA_MARK = re.compile(r"(?<!\w)[QA]\s*[:：]")
_DOCS = re.compile(r"\b(articles?|summar(y|ies))\b|\b(the|both|each|either|two|first|second|these|those|which)\s+"
                   r"(texts?|passages?|documents?|paragraphs?)\b", re.I)


def parse_qa_pairs(text: str) -> list[tuple[str, str]]:
    """``Q: ... A: ...`` pairs, one per line (a pair split over two lines is joined); other lines are ignored."""
    lines = [ln.strip(" -*\t") for ln in (text or "").splitlines() if ln.strip()]
    pairs, pending = [], ""
    for line in lines:
        candidate = f"{pending} {line}".strip() if pending else line
        m = _QA.search(candidate)
        if m:
            pairs.append((m["q"].strip(), m["a"].strip()))
            pending = ""
        elif re.match(r"Q\s*[:：]", line):
            pending = line
    return pairs


def lexical_overlap(summary: str, article: str) -> float:
    """Share of the summary's word trigrams that also occur in the article."""
    def grams(text):
        tokens = words(text)
        return {tuple(tokens[i:i + 3]) for i in range(len(tokens) - 2)}
    got = grams(summary)
    return len(got & grams(article)) / len(got) if got else 0.0


def entity_names(line: str, text: str) -> list[str]:
    """The comma-separated names of ``line`` that occur in ``text`` as whole words (a name the model did not copy
    from the text is dropped), without repeats."""
    names = [n.strip(" .;:*\"'-") for n in re.split(r"[,;\n]", line or "")]
    return list(dict.fromkeys(n for n in names if n and mentions(text, n)))


def name_words(name: str) -> set[str]:
    """The content words of a name, numbers left out (a shared year does not make two texts one topic)."""
    return {w for w in content_words(name) if not w.isdigit()}


def shared_entities(names_a: list[str], names_b: list[str]) -> list[str]:
    """The names of A that share a content word with a name of B ("Amazon rainforest" ~ "Amazon basin")."""
    words_b = set().union(*map(name_words, names_b))
    return [n for n in names_a if name_words(n) & words_b]


def question_problem(question: str, qtype: str, asked: tuple[str, ...] = ()) -> str | None:
    """Why a generated cross-document question is unusable (None when it is usable); ``asked``: the questions
    already kept for the same pair."""
    if not question:
        return "empty_question"
    if _QA_MARK.search(question):
        return "qa_pair_in_question"
    if lexical_overlap(question, QUESTION_TYPES[qtype]) > MAX_OVERLAP:
        return "type_description"
    if _DOCS.search(question):
        return "refers_to_documents"
    if normalize(question) in {normalize(q) for q in asked}:
        return "duplicate_question"
    return None


def translation_problem(question: str, answer: str, lang: str, en_answer: str) -> str | None:
    """Why a translated item is unusable: empty, a question lingua does not read as ``lang``, or an answer in
    another language than ``lang`` and the English answer (names and numbers pass, as in the scorer)."""
    if not question or not answer:
        return "empty_translation"
    if detect(question) != lang:
        return "question_not_translated"
    if not in_language(answer, lang, golds=(en_answer,), question=question):
        return "answer_not_translated"
    return None


def setting_of(article_a: dict, article_b: dict) -> str:
    """XRAG's setting of an item built from two articles: ``multi`` (multilingual retrieval) for a pair in two
    languages (an X article and an English one), else ``mono``."""
    return "multi" if (article_a.get("language") or "en") != (article_b.get("language") or "en") else "mono"


def _twice(predict, problem, **inputs):
    """``predict(**inputs)``, sampled once more when ``problem(out)`` names a problem; returns (out, problem)."""
    out = predict(**inputs)
    found = problem(out)
    if found:
        out = predict(**inputs, config={"rollout_id": 1, "temperature": 0.7})
        found = problem(out)
    return out, found


def _format(pairs: list[tuple[str, str]]) -> str:
    return "\n".join(f"Q: {q} A: {a}" for q, a in pairs)


class XRAGBuilder(dspy.Module):
    """Cross-document QA items from one article pair (``{"id", "title", "text", "date", "language"}`` dicts)."""

    def __init__(self, types: tuple[str, ...] = tuple(QUESTION_TYPES), max_chars: int = 3000,
                 max_overlap: float = MAX_OVERLAP, verify_relevance: bool = False):
        super().__init__()
        unknown = [t for t in types if t not in QUESTION_TYPES]
        if unknown:
            raise ValueError(f"unknown question types {unknown}; choose from: {', '.join(QUESTION_TYPES)}")
        self.types, self.max_chars, self.max_overlap = types, max_chars, max_overlap
        self.verify_relevance = verify_relevance
        self.entities = dspy.Predict(MainEntities)
        self.relevance = dspy.Predict(RelatedArticles)
        self.summarize = dspy.Predict(SummarizeArticle)
        self.simple = dspy.Predict(SimpleQuestions)
        self.cross = dspy.Predict(CrossDocumentQuestion)
        self.answer = dspy.Predict(AnswerFromSummaries)
        self.translate = dspy.Predict(TranslateQA)

    def related(self, article_a: dict, article_b: dict) -> dict:
        """The pair check, as the paper finds pairs: the two texts must share a named entity (listed by the LM,
        kept only where the text contains it, matched in Python), then, with ``verify_relevance``, an LM verdict
        on the shared topic (True/False under a grammar where the endpoint takes one). Small models answer that
        verdict almost always the same way, so it is off by default."""
        texts = [a["text"][:self.max_chars] for a in (article_a, article_b)]
        names = [entity_names(self.entities(text=t).entities, t) for t in texts]
        shared = shared_entities(*names)
        out = {"entities": names, "shared": shared, "related": bool(shared)}
        if out["related"] and self.verify_relevance:
            config = constrained_config(self.relevance, {"related": BOOL})
            out["related"] = bool(self.relevance(article_a=texts[0], article_b=texts[1], config=config).related)
        return out

    def summary(self, article: dict) -> tuple[str, float, bool]:
        """A summary, its lexical overlap with the article and whether it stays under the cap (one resample)."""
        text = article["text"][:self.max_chars]
        out, copies = _twice(self.summarize, lambda o: lexical_overlap(o.summary, text) > self.max_overlap,
                             article=text)
        return out.summary.strip(), round(lexical_overlap(out.summary, text), 3), not copies

    def forward(self, article_a: dict, article_b: dict, target_lang: str | None = None,
                check_relevance: bool = True) -> dspy.Prediction:
        trace = {"pair": [article_a["id"], article_b["id"]], "related": None, "dropped": []}
        if check_relevance:
            trace.update(self.related(article_a, article_b))
            if not trace["related"]:
                return dspy.Prediction(records=[], trace=trace | {"stop_reason": "unrelated"})
        summaries, overlap = trace.setdefault("summaries", []), trace.setdefault("overlap", [])
        for article in (article_a, article_b):
            text, ov, ok = self.summary(article)
            summaries.append(text)
            overlap.append(ov)
            if not ok:
                return dspy.Prediction(records=[], trace=trace | {"stop_reason": "summary_copies"})
        (sum_a, sum_b), (ov_a, ov_b) = summaries, overlap
        pairs_a = parse_qa_pairs(self.simple(summary=sum_a).qa_pairs)
        pairs_b = parse_qa_pairs(self.simple(summary=sum_b).qa_pairs)
        trace["simple"] = [pairs_a, pairs_b]
        if not pairs_a or not pairs_b:
            return dspy.Prediction(records=[], trace=trace | {"stop_reason": "no_simple_pairs"})
        items = []
        for qtype in self.types:
            asked = tuple(it["en_question"] for it in items)
            made, problem = self.item(qtype, sum_a, sum_b, pairs_a, pairs_b, target_lang, asked)
            if problem:
                trace["dropped"].append({"type": qtype, "reason": problem})
                continue
            connection = made.pop("connection")
            items.append(made | {"id": f"{article_a['id']}+{article_b['id']}:{qtype}:{made['language']}",
                                 "setting": setting_of(article_a, article_b), "type": qtype, "supporting": [article_a, article_b],
                                 "distracting": [],
                                 "provenance": {"connection": connection, "summaries": [sum_a, sum_b],
                                                "summary_overlap": [ov_a, ov_b],
                                                "simple_pairs": [_format(pairs_a), _format(pairs_b)]}})
        return dspy.Prediction(records=items, trace=trace | {"stop_reason": "built"})

    def item(self, qtype, sum_a, sum_b, pairs_a, pairs_b, target_lang, asked=()) -> tuple[dict | None, str | None]:
        """Question, answer, language, English originals and connection of one ``qtype`` item (its question
        not among ``asked``), or the gate it failed."""
        made, problem = _twice(self.cross, lambda o: question_problem(o.question.strip(), qtype, asked),
                               qa_pairs_a=_format(pairs_a), qa_pairs_b=_format(pairs_b),
                               question_type=f"{qtype}: {QUESTION_TYPES[qtype]}")
        if problem:
            return None, problem
        question = made.question.strip()
        answer = self.answer(summary_a=sum_a, summary_b=sum_b, question=question,
                             facts=_format(pairs_a + pairs_b)).answer.strip()
        if not answer:
            return None, "empty_answer"
        out = {"question": question, "answer": answer, "language": "en", "en_question": question,
               "en_answer": answer, "connection": made.connection.strip()}
        if target_lang and target_lang != "en":
            t, problem = _twice(self.translate, lambda o: translation_problem(
                o.translated_question.strip(), o.translated_answer.strip(), target_lang, answer),
                question=question, answer=answer, target_language=language_name(target_lang))
            if problem:
                return None, problem
            out.update(question=t.translated_question.strip(), answer=t.translated_answer.strip(),
                       language=target_lang)
        return out, None
