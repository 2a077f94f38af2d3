"""The XRAG construction pipeline (paper §4) as DSPy modules over any article collection:

pair check (topic relevance) -> one summary per article (low lexical overlap with it) -> simple one-step QA pairs
per summary -> one cross-document question per requested type (aggregation, comparison, multi-hop, set) from the
two sets of pairs -> its answer from the summaries and pairs -> optional translation into a target language.
Each item comes out as an XRAG-format record (see ``data.xrag``) with provenance: the model ids, the two articles,
summaries, their lexical overlap, the simple pairs and the stated connection. Human quality control, which the
paper applies next, is not automated here.
"""
from __future__ import annotations

import re

import dspy

from programs.text import words
from programs.writer import language_name
from signatures.construct import (QUESTION_TYPES, AnswerFromSummaries, CrossDocumentQuestion, RelatedArticles,
                                  SimpleQuestions, SummarizeArticle, TranslateQA)

MAX_OVERLAP = 0.5  # share of the summary's word trigrams copied from the article above which it is redone once
_QA = re.compile(r"Q\s*[:：]\s*(?P<q>.+?)\s*A\s*[:：]\s*(?P<a>.+)", re.S)


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


def _format(pairs: list[tuple[str, str]]) -> str:
    return "\n".join(f"Q: {q} A: {a}" for q, a in pairs)


class XRAGBuilder(dspy.Module):
    """Cross-document QA items from one article pair (``{"id", "title", "text", "date", "language"}`` dicts)."""

    def __init__(self, types: tuple[str, ...] = tuple(QUESTION_TYPES), max_chars: int = 3000,
                 max_overlap: float = MAX_OVERLAP):
        super().__init__()
        unknown = [t for t in types if t not in QUESTION_TYPES]
        if unknown:
            raise ValueError(f"unknown question types {unknown}; choose from: {', '.join(QUESTION_TYPES)}")
        self.types, self.max_chars, self.max_overlap = types, max_chars, max_overlap
        self.relevance = dspy.Predict(RelatedArticles)
        self.summarize = dspy.Predict(SummarizeArticle)
        self.simple = dspy.Predict(SimpleQuestions)
        self.cross = dspy.Predict(CrossDocumentQuestion)
        self.answer = dspy.Predict(AnswerFromSummaries)
        self.translate = dspy.Predict(TranslateQA)

    def summary(self, article: dict) -> tuple[str, float]:
        """A summary and its lexical overlap with the article; redone once (fresh sample) when it copies."""
        text = article["text"][:self.max_chars]
        out = self.summarize(article=text).summary.strip()
        overlap = lexical_overlap(out, text)
        if overlap > self.max_overlap:
            retry = self.summarize(article=text, config={"rollout_id": 1, "temperature": 0.7}).summary.strip()
            if lexical_overlap(retry, text) < overlap:
                out, overlap = retry, lexical_overlap(retry, text)
        return out, round(overlap, 3)

    def forward(self, article_a: dict, article_b: dict, target_lang: str | None = None,
                check_relevance: bool = True) -> dspy.Prediction:
        trace = {"pair": [article_a["id"], article_b["id"]], "related": None, "dropped": []}
        if check_relevance:
            trace["related"] = bool(self.relevance(article_a=article_a["text"][:self.max_chars],
                                                   article_b=article_b["text"][:self.max_chars]).related)
            if not trace["related"]:
                return dspy.Prediction(records=[], trace=trace | {"stop_reason": "unrelated"})
        (sum_a, ov_a), (sum_b, ov_b) = self.summary(article_a), self.summary(article_b)
        pairs_a = parse_qa_pairs(self.simple(summary=sum_a).qa_pairs)
        pairs_b = parse_qa_pairs(self.simple(summary=sum_b).qa_pairs)
        trace.update(summaries=[sum_a, sum_b], overlap=[ov_a, ov_b], simple=[pairs_a, pairs_b])
        if not pairs_a or not pairs_b:
            return dspy.Prediction(records=[], trace=trace | {"stop_reason": "no_simple_pairs"})
        items = []
        for qtype in self.types:
            made = self.cross(qa_pairs_a=_format(pairs_a), qa_pairs_b=_format(pairs_b),
                              question_type=f"{qtype}: {QUESTION_TYPES[qtype]}")
            question = made.question.strip()
            if not question:
                trace["dropped"].append(qtype)
                continue
            answer = self.answer(summary_a=sum_a, summary_b=sum_b, question=question,
                                 facts=_format(pairs_a + pairs_b)).answer.strip()
            if not answer:
                trace["dropped"].append(qtype)
                continue
            lang, q_out, a_out = "en", question, answer
            if target_lang and target_lang != "en":
                t = self.translate(question=question, answer=answer, target_language=language_name(target_lang))
                if t.translated_question.strip() and t.translated_answer.strip():
                    lang, q_out, a_out = target_lang, t.translated_question.strip(), t.translated_answer.strip()
            items.append({"id": f"{article_a['id']}+{article_b['id']}:{qtype}:{lang}", "question": q_out,
                          "answer": a_out, "language": lang, "setting": "mono", "type": qtype,
                          "en_question": question, "en_answer": answer,
                          "supporting": [article_a, article_b], "distracting": [],
                          "provenance": {"connection": made.connection.strip(), "summaries": [sum_a, sum_b],
                                         "summary_overlap": [ov_a, ov_b],
                                         "simple_pairs": [_format(pairs_a), _format(pairs_b)]}})
        return dspy.Prediction(records=items, trace=trace | {"stop_reason": "built"})
