"""Multilingual RAG baselines of the CORAL paper (one retrieval over a fixed scope of language corpora) and the
corpus-scope and translation helpers that CORAL shares with them.

- ``mono_rag``: the question's own corpus, C_own (below);
- ``en_rag``: the English corpus (the paper's monoRAG on BLEnD, whose questions are English);
- ``own_en_rag``: C_own and the English corpus pooled;
- ``multi_rag``: all corpora pooled (top-``k`` by score over their union);
- ``cross_rag``: ``multi_rag`` with the retrieved passages translated into English before writing;
- ``t_rag``: the question translated into English, then the English corpus.

``lang`` is the language the question is written in (English when not given). C_own is the corpus of the language
of the culture the question is about where the data names one (BLEnD, CLIcK: ``source_lang``, read from the
question's gold labels, ``programs.shared.oracle.own_language``), else of the question's language.

Oracle roles: ``writer``; ``t_rag``'s question translation is its one query (``query``: the oracle's, from nothing
held); ``cross_rag``'s passage translations only feed the writer, so under the writer oracle they are not made.
"""
from __future__ import annotations

from dataclasses import replace

import dspy

from decoding.choice import MCScoring
from programs.shared.oracle import check_roles, own_language
from programs.shared.steps import Role
from programs.shared.writer import Writer
from retrieval.corpus import Passage
from retrieval.retriever import Retriever
from runtime.language import LANGUAGE_NAMES
from signatures.translate import TranslateDocument, TranslateQuery

DEFAULT_LANG = "en"
SCOPES = ("own", "en", "own_en", "all")


def corpus_of(search: Retriever, lang: str | None) -> str | None:
    """The corpus holding documents in ``lang`` (one named after the language first), or None."""
    matches = [name for name, code in search.languages().items() if code == lang]
    return min(matches, key=lambda name: name != lang) if matches else None


def scope_corpora(scope: str, search: Retriever, own: str) -> list[str]:
    """Corpora of a fixed scope: ``own`` (the corpus in language ``own``), ``en``, ``own_en`` (both) or ``all``."""
    if scope == "all":
        return list(search.corpora)
    wanted = {"own": [own], "en": ["en"], "own_en": [own, "en"]}[scope]
    return list(dict.fromkeys(c for c in (corpus_of(search, code) for code in wanted) if c))


def language_label(code: str) -> str:
    return f"{code}: {LANGUAGE_NAMES.get(code, code)}"


def with_options(question: str, options: dict[str, str] | None) -> str:
    """The question as the planner-side agents see it: with the answer options when there are any."""
    if not options:
        return question
    return question + "\nOptions: " + " | ".join(f"{letter}. {text}" for letter, text in options.items())


def answer_writer(max_chars: int | None, temperature: float = 0.0, mc: MCScoring | None = None) -> Writer:
    """The shared evidence-based writer (short answers and option letters, scored by ``mc``), decoding at
    ``temperature``."""
    writer = Writer(use_passages=True, max_chars=max_chars, mc=mc)
    for predictor in writer.predictors():
        predictor.update_config(temperature=temperature)
    return writer


def clipped_text(passage: Passage, max_chars: int | None) -> str:
    """The passage text cut exactly as the writer would show it (without the ``[title]`` prefix)."""
    return passage.clip(max_chars)


class Translator(dspy.Module):
    """Into-English translation of questions and passages with the writer's LM."""

    def __init__(self):
        super().__init__()
        self.query = dspy.Predict(TranslateQuery)
        self.document = dspy.Predict(TranslateDocument)

    def question(self, text: str, lang: str) -> str:
        return self.query(question=text, source_language=LANGUAGE_NAMES.get(lang, lang)).english.strip() or text

    def passage(self, passage: Passage, max_chars: int | None) -> Passage:
        if passage.lang == "en":
            return passage
        english = self.document(passage=clipped_text(passage, max_chars)).english.strip()
        return replace(passage, text=english or passage.text, lang="en")


class MultilingualRAG(dspy.Module):
    """Retrieve top-``k`` once over a fixed corpus scope (optionally translating), then write the answer.

    Args:
        search: the retriever.
        k: passages retrieved.
        scope: the corpora searched (:data:`SCOPES`, :func:`scope_corpora`).
        translate_query: search with the question translated into English.
        translate_docs: translate the passages into English for the writer.
        max_chars: each passage shown to the LM cut after this many characters (None: whole).
        oracle: the oracle roles (``--oracle``).
        mc: how the writer picks multiple-choice letters.
    """

    DEFAULT_DATASET = "demo_culture"
    ORACLE_ROLES = ("query", "writer")

    def __init__(self, search: Retriever, *, k: int = 5, scope: str = "own", translate_query: bool = False,
                 translate_docs: bool = False, max_chars: int | None = None, oracle: str = "",
                 mc: MCScoring | None = None):
        super().__init__()
        if scope not in SCOPES:
            raise ValueError(f"unknown scope '{scope}'; choose one of: {', '.join(SCOPES)}")
        self.oracle = check_roles(oracle, self.oracle_roles(translate_query), "multilingual rag")
        self.search, self.k, self.scope, self.max_chars = search, k, scope, max_chars
        self.translate_query, self.translate_docs = translate_query, translate_docs
        self.translator = Translator() if translate_query or translate_docs else None
        self.query_role, self.reader = Role("query", self.oracle), Role("writer", self.oracle)
        self.writer = answer_writer(max_chars, mc=mc)

    @classmethod
    def oracle_roles(cls, translate_query: bool = False, **_) -> tuple[str, ...]:
        """The oracle roles of a variant: a query only where the question is translated."""
        return cls.ORACLE_ROLES if translate_query else ("writer",)

    def forward(self, question: str, options: dict[str, str] | None = None,
                lang: str | None = None) -> dspy.Prediction:
        lang = lang or DEFAULT_LANG
        query = self.query_role.over(lambda: self.translator.question(question, lang)  # the oracle's: nothing held
                                     if self.translate_query and lang != "en" else question, [])
        corpora = scope_corpora(self.scope, self.search, own_language(lang))
        passages = self.search.search(query, self.k, corpora) if corpora else []
        if self.translate_docs and not self.reader.from_gold:  # the perfect reader reads no translation
            passages = [self.translator.passage(p, self.max_chars) for p in passages]
        out = self.writer(question=question, passages=passages, options=options, lang=lang)
        trace = {"iterations": 1 if corpora else 0, "queries": [query], "corpora": [corpora],
                 "stop_reason": "single_pass" if corpora else "no_corpus_for_language"}
        return dspy.Prediction(answer=out.answer, passages=passages, trace=trace)
