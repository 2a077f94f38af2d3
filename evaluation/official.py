"""Each benchmark's answer F1 as its official evaluation script scores it, written from those scripts' rules:

- HotpotQA (``hotpot_evaluate_v1.py``) and 2WikiMultiHopQA (its ``evaluate.py``, HotpotQA's rules): SQuAD-normalized
  token F1, except that when the normalized prediction or the gold answer is ``yes``, ``no`` or ``noanswer`` and the
  two differ, F1 is 0 (a sentence that says yes is not the answer "yes").
- MuSiQue and the rest: SQuAD's token F1, the best over the gold answer and its aliases."""
from __future__ import annotations

from dspy.evaluate.metrics import F1, f1_score, normalize_text

from evaluation.metrics import F1_PASS

SPECIAL = ("yes", "no", "noanswer")  # HotpotQA's answers that score only when matched exactly


def hotpot_f1(prediction: str, answers: list[str]) -> float:
    """HotpotQA's F1 of ``prediction`` against its best gold answer."""
    guess = normalize_text(prediction)
    return max(0.0 if (guess in SPECIAL or normalize_text(gold) in SPECIAL) and guess != normalize_text(gold)
               else f1_score(prediction, gold) for gold in answers)


#: Datasets whose official scorer is not SQuAD's token F1, by name.
RULES = {"hotpotqa": hotpot_f1, "2wiki": hotpot_f1}


def f1_metric(dataset: str | None):
    """The answer F1 metric (``metric(example, pred, trace=None)``) of ``dataset``'s official scorer."""
    score_of = RULES.get(dataset or "", lambda prediction, answers: float(F1(prediction, answers)))

    def f1(example, pred, trace=None):
        score = float(score_of(pred.answer or "", example.answers))
        return score >= F1_PASS if trace is not None else score
    return f1
