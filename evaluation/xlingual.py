"""XRAG scoring as the paper scores: the answer must be in the question's language (language ID by ``lingua``), a
panel of LLM judges decides correctness by majority vote, and accuracy = judge AND language. By default the panel is
the local LMs but the generator's own (``experiments.sessions.judge_panel``: a judge never judges its own answers).
A tie (two judges that disagree) is no verdict: the answer is recorded as split (``panel/split`` in the summary,
its judge and accuracy not scored), reported beside the accuracy, never folded into wrong. The one verdict taken without a judge is a normalized
exact match (:func:`exact`); an abstention ("I don't know", empty) is wrong without one (``evaluation.metrics.Judge``).
Script-independent string metrics (EM/F1 against the gold span, character 3-gram recall as in BERGEN) need no judge.

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
from dspy.evaluate.metrics import EM

from evaluation.metrics import Judge, UnreadableVerdict, exact_match, f1, note, read
from programs.shared.text import abstained
from runtime.language import in_language, language_name, language_verdict
from signatures.judge import JudgeAnswerLanguage


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


def without_punctuation(text: str) -> str:
    """``text`` in Unicode compatibility form (NFKC) with every punctuation mark removed, any script's: curly and
    angle quotes, CJK and Arabic full stops and commas (DSPy's normalisation removes only ASCII punctuation)."""
    text = unicodedata.normalize("NFKC", text)
    return "".join(ch for ch in text if not unicodedata.category(ch).startswith("P"))


def exact(example, answer: str) -> bool:
    """Whether ``answer`` is a gold answer after normalisation: punctuation of any script removed
    (:func:`without_punctuation`), then DSPy's (case, English articles, spacing). The panel's only verdict without
    a judge call: '“Lena Ohm”' is 'Lena Ohm'; 'not Lena Ohm' is not, and goes to the judges."""
    return bool(EM(without_punctuation(answer), [without_punctuation(g) for g in example.answers]))


class SplitVerdict(UnreadableVerdict):
    """The judges' votes tie: the panel gives no verdict, and the answer is not scored (counted as ``split``)."""


def majority(votes: list[bool | None], what: str) -> bool:
    """Whether most ``votes`` say yes, where None is a judge whose reply could not be read: decided when the unread
    votes could not change it; a tie is :class:`SplitVerdict`, an undecided vote :class:`UnreadableVerdict`."""
    yes, unread, n = votes.count(True), votes.count(None), len(votes)
    if yes * 2 > n or (yes + unread) * 2 < n:
        return yes * 2 > n
    if not unread:
        raise SplitVerdict(f"the {n} judges split {yes} to {n - yes} on the {what}: no majority")
    raise UnreadableVerdict(f"{unread} of {n} judges gave no readable {what}, and their votes decide it")


def panel_path(votes: list[bool | None]) -> str:
    """How the judges whose votes could be read decided: ``agreed``, ``majority`` (they disagree, most of them
    decide) or ``split`` (a tie: no verdict)."""
    read_votes = [v for v in votes if v is not None]
    if len(set(read_votes)) < 2:
        return "agreed"
    return "split" if read_votes.count(True) * 2 == len(votes) else "majority"


def _decide(votes: list[bool | None], what: str, field: str, notes: dict) -> tuple[bool | SplitVerdict, dict]:
    """The panel's (verdict, notes) on ``votes``: a tie's verdict is its :class:`SplitVerdict` (memoised, raised
    at each ask)."""
    notes = notes | {field: panel_path(votes)}
    try:
        return majority(votes, what), notes
    except SplitVerdict as tie:
        return tie, notes


def _given(ok: bool | SplitVerdict, notes: dict) -> bool:
    """``ok`` with its ``notes`` noted (``evaluation.metrics.note``); a tie noted, then raised: no score."""
    note(**notes)
    if isinstance(ok, SplitVerdict):
        raise ok
    return ok


class JudgePanel:
    """1-3 LLM judges (question-aware :class:`Judge`), majority vote (:func:`majority`): a tie is no verdict (the
    metric is not scored), and a judge whose reply could not be read counts only where the others' votes do not
    decide. Without a judge call: a normalized exact match (:func:`exact`) is right, an abstention wrong. Noted in
    the answer's record (``evaluation.metrics.note``): what decided (``verdict_by``: ``exact``, ``abstained`` or
    ``judges``) and, where the judges voted, how (``panel``: :func:`panel_path`). The verdict of each (example,
    answer) is memoised, so ``judge`` and ``accuracy`` cost one panel call. The response language (:meth:`language`)
    is lingua's verdict where it has one, else the panel's majority (``language_by``: ``lingua`` or ``judges``;
    ``language_panel``: :func:`panel_path`)."""

    def __init__(self, lms: list):
        if not 1 <= len(lms) <= 3:
            raise ValueError(f"a judge panel takes 1 to 3 judge LMs, got {len(lms)}; use --judge-lms A,B,C")
        self.judges = [Judge(lm, with_question=True) for lm in lms]
        self.readers = [dspy.Predict(JudgeAnswerLanguage) for _ in lms]
        for reader, lm in zip(self.readers, lms):
            reader.lm = lm
        self._memo: dict[tuple, tuple[bool, dict]] = {}  # (example, answer) -> (verdict, what the metric notes)
        self._lock = threading.Lock()

    def language(self, example, pred, trace=None):
        """Whether the answer is in the question's language: lingua's verdict, or when lingua cannot tell, the
        panel's :func:`majority`."""
        answer, lang = (pred.answer or "").strip(), example.get("lang") or "en"
        key = ("language", example.get("id"), example.question, answer)
        with self._lock:
            ok, notes = self._memo.get(key, (None, None))
        if ok is None:
            ok, notes = language_verdict(answer, lang, example.answers, example.question), {"language_by": "lingua"}
            if ok is None:
                votes = [_vote(read, r, language=language_name(lang), question=example.question, answer=answer)
                         for r in self.readers]
                votes = [None if v is None else bool(v.in_language) for v in votes]
                ok, notes = _decide(votes, "language", "language_panel", {"language_by": "judges"})
            with self._lock:
                self._memo[key] = ok, notes
        ok = _given(ok, notes)
        return ok if trace is not None else float(ok)

    def verdict(self, example, pred) -> bool:
        answer = pred.answer or ""
        key = (example.get("id"), example.question, answer)
        with self._lock:
            ok, notes = self._memo.get(key, (None, None))
        if ok is None:
            if exact(example, answer):
                ok, notes = True, {"verdict_by": "exact"}
            elif abstained(answer):
                ok, notes = False, {"verdict_by": "abstained"}
            else:
                votes = [_vote(judge, example, pred, trace=True) for judge in self.judges]
                ok, notes = _decide(votes, "verdict", "panel", {"verdict_by": "judges"})
            with self._lock:
                self._memo[key] = ok, notes
        return _given(ok, notes)

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
