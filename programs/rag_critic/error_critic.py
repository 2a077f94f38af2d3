"""RAG-Critic's error critic, prompted coarse to fine as the paper's critic is trained: it first decides Correct or
Error for a predicted answer from the question, its passages and the generator's reasoning (no gold answer); an
Error is then labelled with the three-tier taxonomy one tier at a time -- tier-1 categories, tier-2 types among the
chosen categories' children, tier-3 labels among the chosen types' labels, shortlisted by similarity to the
critic's analysis (embedding cosine when an embedder is given, else shared content words). Every tier is a closed
set: a written label that is not an option is snapped to the most similar option or dropped (both counted); a tier
with a single option takes it without a call. The verdict is ``verdict_gate`` (``programs.shared.gates``): as written
(:func:`parse_verdict`) or P(Error) against its threshold (``decisions``); a gate at rest says Correct without a call,
a one-class gate always Error (``Critique.decided`` names either). With ``oracle="verdict"`` the verdict is the task
metric's on the prediction: a right one is Correct without a call, a wrong one is Error with the critic's analysis
and labels.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

import dspy

from programs.shared.evidence import lenient
from programs.shared.gates import LabelGate
from programs.shared.oracle import check_roles
from programs.shared.steps import Role
from programs.rag_critic.taxonomy import Taxonomy, load_taxonomy, snap
from programs.shared.text import APOSTROPHES, jaccard, mentions, normalize
from retrieval.corpus import Passage
from signatures.critic import CheckAnswer, PickErrorLabels

CORRECT, ERROR = "Correct", "Error"


def parse_verdict(text: str | None) -> str | None:
    """"Correct" only when the reply clearly says so: a correct-word ("Correct", "The answer is accurate", "no
    errors") and no error-word, negation or hedge anywhere ("not entirely correct", "isn't fully correct",
    "Partially correct", "Yes, there is an error", "the passages are correct but the answer is wrong" are Error);
    "Error" for any other reply with a verdict word; None when there is none (unparsed: callers act on Error only).
    The critic's and Self-Refine's one Correct/Error decision."""
    text = _NO_ERRORS.sub(" correct ", (text or "").translate(APOSTROPHES).lower())
    ws = set(re.findall(r"[a-z]+", text.replace("n't", " not ")))
    if ws & _ERROR_WORDS or (ws & _CORRECT_WORDS and ws & _HEDGES):
        return ERROR
    return CORRECT if ws & _CORRECT_WORDS else None


def verdict_of(field: str):
    """A gate's ``parse`` of a Correct/Error ``field`` (:func:`parse_verdict`; a label decided elsewhere stands)."""
    return lambda out, label=None: label or parse_verdict(out.get(field))


_NO_ERRORS = re.compile(r"\b(?:no|without|free of)\s+(?:errors?|mistakes?|issues?|problems?)\b")
_CORRECT_WORDS = frozenset({"correct", "right", "accurate", "true"})
_ERROR_WORDS = frozenset({"error", "errors", "incorrect", "wrong", "false", "inaccurate", "mistake", "mistakes",
                          "incomplete", "unsupported", "partially", "partly", "partial"})
_HEDGES = frozenset({"not", "no", "never", "nor", "but", "however", "although", "though", "except", "mostly",
                     "largely", "somewhat", "almost", "nearly", "half", "may", "might", "unclear", "uncertain"})


@dataclass
class Critique:
    verdict: str | None  # Correct | Error | None (unparsed: neither, so nothing is corrected)
    analysis: str = ""
    tier1: list[str] = field(default_factory=list)
    tier2: list[str] = field(default_factory=list)
    tier3: list[str] = field(default_factory=list)
    snapped: int = 0  # written labels replaced by their nearest valid label
    dropped: int = 0  # written labels with no valid label close enough
    p_error: float | None = None  # P(Error) read from logprobs (``decisions``), None when the verdict was parsed
    decided: str | None = None  # at rest / one-class: the gate decided whatever the probability (``decided_by``)

    @property
    def flagged(self) -> bool:
        """An Error verdict: the one the paper corrects (an unparsed verdict is not)."""
        return self.verdict == ERROR

    def text(self) -> str:
        """The critique as the planner reads it."""
        labels = "; ".join(self.tier1 + self.tier2 + self.tier3) or "none"
        return f"{self.analysis.strip() or 'no analysis'} (labels: {labels})"

    def as_dict(self) -> dict:
        return asdict(self)


def chosen(text: str | None, options: list[str], critique: Critique) -> list[str]:
    """The options a label reply picks, in its order: by number ("2", "1. ..."), by whole label (commas and colons
    inside a label stay: only whole option texts are matched), else the line snapped to its nearest option or
    dropped (counted in ``critique``)."""
    picked = []
    for line in (text or "").replace(";", "\n").splitlines():
        line = line.strip().strip("-*•[]\"'` ").strip()
        if not line or normalize(line) in ("none", "n a"):
            continue
        if numbers := re.fullmatch(r"\d+(?:\s*[,.)]\s*\d+)*[.)]?", line):
            found = [options[int(n) - 1] for n in re.findall(r"\d+", numbers.group()) if 0 < int(n) <= len(options)]
        elif lead := re.match(r"(\d+)[.)]\s+", line):  # "2. Wrong Entity": the number says which
            n = int(lead.group(1))
            found = [options[n - 1]] if 0 < n <= len(options) else []
        else:
            named = [o for o in options if mentions(line, o)]
            found = [o for o in named if not any(o != other and mentions(other, o) for other in named)]
        if not found:
            valid = snap(line, tuple(options))
            if valid is None:
                critique.dropped += 1
                continue
            critique.snapped += 1
            found = [valid]
        picked += [o for o in found if o not in picked]
    return picked


class ErrorCritic(dspy.Module):
    """question + passages + prediction (+ the generator's reasoning) -> :class:`Critique`: one verdict call, then
    at most one call per tier for an Error.

    Args:
        taxonomy: the three-tier error taxonomy (default: the bundled one, :func:`load_taxonomy`).
        max_chars: each passage shown to the LM cut after this many characters (None: whole).
        embedder: a :class:`runtime.embedders.Embedder` measuring a label's similarity to the analysis.
        shortlist: tier-3 picks among this many labels most similar to the analysis.
        max_labels: labels kept per tier.
        mode: the decision mode of the verdict: written, or P(Error) (``--decisions``; see the module).
        oracle: the oracle roles, of ``verdict`` and ``plan``.
    """

    LEVELS = ("error category", "error type", "specific mistake")

    def __init__(self, *, taxonomy: Taxonomy | None = None, max_chars: int | None = None, embedder=None,
                 shortlist: int = 8, max_labels: int = 2, mode: str = "generate", oracle: str = ""):
        super().__init__()
        self.oracle = check_roles(oracle, ("verdict", "plan"), "the error critic")
        self.taxonomy = taxonomy or load_taxonomy()
        self.max_chars, self.embedder, self.shortlist, self.max_labels = max_chars, embedder, shortlist, max_labels
        self.judge = dspy.Predict(CheckAnswer)
        self.label = dspy.Predict(PickErrorLabels)
        self.planned = Role("plan", self.oracle)  # the plan oracle reads no labels
        self.verdict_gate = LabelGate(self.judge, "judgement", (ERROR, CORRECT), kind="error", mode=mode,
                                      roles=self.oracle, role="verdict", parse=verdict_of("judgement"),
                                      oracle_asks=not self.planned.from_gold)

    def forward(self, question: str, passages: list[Passage], prediction: str, reasoning: str = "") -> Critique:
        inputs = {"question": question,
                  "passages": [f"[{i}] {p.format(self.max_chars)}" for i, p in enumerate(passages)],
                  "reasoning": reasoning or "", "prediction": prediction or "(no answer)"}
        ruling = self.verdict_gate(inputs, gold=prediction or "", answer=prediction or "")
        if ruling.oracle and (ruling.label == CORRECT or ruling.output is None):  # no labels asked
            return Critique(verdict=ruling.label, analysis="none")
        if ruling.output is None:
            return Critique(verdict=None, analysis="critic output not parsed")
        critique = Critique(verdict=ruling.label, analysis=(ruling.output.get("analysis") or "").strip(),
                            p_error=ruling.prob, decided=ruling.decided)
        if not critique.flagged or self.planned.from_gold:  # Correct, no verdict, or a plan oracle that reads none
            return critique
        tax = self.taxonomy
        ask = {"question": question, "prediction": prediction or "(no answer)", "critique": critique}
        critique.tier1 = self._pick(self.LEVELS[0], list(tax.tier1), **ask)
        critique.tier2 = self._pick(self.LEVELS[1], [t2 for t1 in critique.tier1 for t2 in tax.tier2_of(t1)], **ask)
        labels = [t3 for t2 in critique.tier2 for t3 in tax.children[t2]]
        critique.tier3 = self._pick(self.LEVELS[2], self._closest(critique.analysis or prediction, labels), **ask)
        return critique

    def _pick(self, level: str, options: list[str], question: str, prediction: str, critique: Critique) -> list[str]:
        options = list(dict.fromkeys(options))
        if len(options) <= 1:
            return options
        out = lenient(self.label, question=question, prediction=prediction, analysis=critique.analysis or "none",
                      level=level, options=[f"{i}. {o}" for i, o in enumerate(options, 1)])
        return chosen(out.picks if out is not None else "", options, critique)[:self.max_labels]

    def _closest(self, analysis: str, labels: list[str]) -> list[str]:
        """The ``shortlist`` labels most similar to ``analysis`` (all of them when there are no more)."""
        labels = list(dict.fromkeys(labels))
        if len(labels) <= self.shortlist:
            return labels
        if self.embedder is not None:
            scores = (self.embedder.encode_passages(labels) @ self.embedder.encode_queries([analysis])[0]).tolist()
        else:
            scores = [jaccard(analysis, label) for label in labels]
        ranked = sorted(range(len(labels)), key=lambda i: -scores[i])  # stable: file order breaks ties
        return [labels[i] for i in ranked[:self.shortlist]]
