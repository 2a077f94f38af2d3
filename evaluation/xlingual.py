"""XRAG scoring: the answer must be in the question's language (language ID by ``lingua``), a panel of LLM judges
decides correctness by majority vote, and accuracy = judge AND language. Script-independent string metrics
(EM/F1 against the gold span, character 3-gram recall as in BERGEN) need no judge.

Language rule for short answers: wrong when lingua is confident the answer is in another language than the
question AND that language differs from the one lingua gives the gold answer. So numbers and golds copied as they
are ("Denver Broncos", "308") are not penalised, while an English phrase answering a Chinese question is. When
lingua cannot tell (short answers with letters), the judge panel decides whether the answer is written in the
question's language (:meth:`JudgePanel.language`); without a panel such answers pass (an upper bound)."""
from __future__ import annotations

import re
import threading
import unicodedata
from collections import Counter

import dspy
from dspy.dsp.utils import DPR_normalize, has_answer
from dspy.evaluate.metrics import normalize_text

from evaluation.metrics import Judge, UnreadableVerdict, exact_match, f1, note, read
from runtime.language import in_language, language_name, language_verdict
from signatures.judge import JudgeAnswerLanguage

ECHO_SHARE = 0.8  # share of an answer's 3-grams found in the question from which it counts as an echo
STATED_SLACK = 20  # words beyond a gold span that an answer stating it may have (longer ones go to the judges)


def language_correct(example, pred, trace=None):
    """Response language correctness (empty answers count as correct here; the judge fails them)."""
    lang = example.get("lang") or "en"
    ok = in_language(pred.answer or "", lang, example.answers, example.question)
    return ok if trace is not None else float(ok)


def _trigrams(text: str) -> Counter:
    text = " ".join(unicodedata.normalize("NFKC", text).lower().split())
    text = re.sub(r"[^\w\s]", "", text)
    return Counter(text[i:i + 3] for i in range(max(len(text) - 2, 1 if text else 0)))


def char3_recall(example, pred, trace=None):
    """Share of the gold answer's character 3-grams found in the prediction (best gold), case- and
    punctuation-insensitive: works across scripts without word segmentation."""
    got = _trigrams(pred.answer or "")
    best = 0.0
    for gold in example.answers:
        want = _trigrams(gold)
        if want:
            best = max(best, sum((want & got).values()) / sum(want.values()))
    return best >= 0.5 if trace is not None else best


def echoes_question(example, answer: str) -> bool:
    """Whether ``answer`` only repeats the question: at least ``ECHO_SHARE`` of its character 3-grams occur in the
    question and none of a gold answer's own 3-grams do (those it does not share with the question; all of them
    when the gold is a phrase of the question). The 1.5B judge accepts such answers (the Arabic question copied
    verbatim as the "answer", a German restatement without the name asked for)."""
    got, asked = _trigrams(answer), _trigrams(example.question)
    if not got:
        return False
    share = sum((got & asked).values()) / sum(got.values())
    # a gold's own 3-grams, not the ones it shares with the question ("سنة 1992": "year" is in the question)
    return share >= ECHO_SHARE and not any(got & ((want - asked) or want) for want in map(_trigrams, example.answers))


def states_gold(example, answer: str) -> bool:
    """Whether ``answer`` is a short statement of a gold answer: it contains the gold as whole tokens (DSPy's DPR
    ``has_answer``), has at most ``STATED_SLACK`` more tokens, and the gold is not a phrase of the question (there
    containing it proves nothing: "Rhein oder Elbe?"). The 1.5B judge rejects such sentences ("Joseph Priestley
    recognized oxygen in 1774." for "1774"); a copied passage that mentions the gold goes to the judges."""
    text, asked = normalize_text(answer), normalize_text(example.question)
    n_words = len(DPR_normalize(text))
    golds = [DPR_normalize(normalize_text(g)) for g in example.answers]
    return any(gold and n_words <= len(gold) + STATED_SLACK and has_answer([gold], text)
               and not has_answer([gold], asked) for gold in golds)


def majority(votes: list[bool | None], what: str) -> bool:
    """Whether most ``votes`` say yes (a tie says no), where None is a judge whose reply could not be read: decided
    when the unread votes could not change it, else :class:`UnreadableVerdict`."""
    yes, unread = votes.count(True), votes.count(None)
    if yes * 2 > len(votes) or (yes + unread) * 2 <= len(votes):
        return yes * 2 > len(votes)
    raise UnreadableVerdict(f"{unread} of {len(votes)} judges gave no readable {what}, and their votes decide it")


class JudgePanel:
    """1-3 LLM judges (question-aware :class:`Judge`), majority vote (:func:`majority`): a tie counts as wrong, and
    a judge whose reply could not be read counts only where the others' votes do not decide. Without a judge call:
    an answer that only echoes the question (:func:`echoes_question`) is wrong, one that states a gold answer in a
    short sentence (:func:`states_gold`) is right; which decided is noted in the answer's record (``verdict_by``:
    ``echo``, ``stated`` or ``judges``; ``evaluation.metrics.note``). The verdict of each (example, answer) is
    memoised, so ``judge`` and ``accuracy`` cost one panel call. The response language (:meth:`language`) is
    lingua's verdict where it has one, else the panel's majority (``language_by``: ``lingua`` or ``judges``)."""

    def __init__(self, lms: list):
        if not 1 <= len(lms) <= 3:
            raise ValueError(f"a judge panel takes 1 to 3 judge LMs, got {len(lms)}; use --judge-lms A,B,C")
        self.judges = [Judge(lm, with_question=True) for lm in lms]
        self.readers = [dspy.Predict(JudgeAnswerLanguage) for _ in lms]
        for reader, lm in zip(self.readers, lms):
            reader.lm = lm
        self._memo: dict[tuple, tuple[bool, str]] = {}  # (example, answer) -> (verdict, what decided it)
        self._lock = threading.Lock()

    def language(self, example, pred, trace=None):
        """Whether the answer is in the question's language: lingua's verdict, or when lingua cannot tell, the
        panel's :func:`majority`."""
        answer, lang = (pred.answer or "").strip(), example.get("lang") or "en"
        key = ("language", example.get("id"), example.question, answer)
        with self._lock:
            ok, path = self._memo.get(key, (None, None))
        if ok is None:
            ok, path = language_verdict(answer, lang, example.answers, example.question), "lingua"
            if ok is None:
                votes = [_vote(read, r, language=language_name(lang), question=example.question, answer=answer)
                         for r in self.readers]
                ok, path = majority([None if v is None else bool(v.in_language) for v in votes], "language"), "judges"
            with self._lock:
                self._memo[key] = ok, path
        note(language_by=path)
        return ok if trace is not None else float(ok)

    def verdict(self, example, pred) -> bool:
        key = (example.get("id"), example.question, pred.answer or "")
        with self._lock:
            ok, how = self._memo.get(key, (None, None))
        if ok is None:
            answer = pred.answer or ""
            how = "echo" if echoes_question(example, answer) else "stated" if states_gold(example, answer) else "judges"
            ok = how == "stated" or (how == "judges" and majority(
                [_vote(judge, example, pred, trace=True) for judge in self.judges], "verdict"))
            with self._lock:
                self._memo[key] = ok, how
        note(verdict_by=how)
        return ok

    def __call__(self, example, pred, trace=None):
        ok = self.verdict(example, pred)
        return ok if trace is not None else float(ok)

    def accuracy(self, example, pred, trace=None):
        """XRAG accuracy: the panel accepts the answer AND it is in the question's language."""
        ok = self.language(example, pred, trace=True) and self.verdict(example, pred)
        return ok if trace is not None else float(ok)


def _vote(ask, *args, **kwargs):
    """``ask(*args, **kwargs)``, or None when the judge's reply could not be read."""
    try:
        return ask(*args, **kwargs)
    except UnreadableVerdict:
        return None


def xrag_metrics(panel: JudgePanel | None = None) -> dict:
    """What an XRAG evaluation reports: EM/F1 vs the gold span, char 3-gram recall, language correctness, and
    with a panel the judge verdict and accuracy (judge AND language)."""
    metrics = {"em": exact_match, "f1": f1, "char3_recall": char3_recall, "lang_ok": language_correct}
    if panel is not None:
        metrics.update(lang_ok=panel.language, judge=panel, accuracy=panel.accuracy)
    return metrics
