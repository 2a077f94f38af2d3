"""Multiple-choice scoring without trusting the letter the model writes (``--mc-scoring``).

- ``generate``: the written reply, parsed into a letter (``programs.shared.writer.parse_choice``);
- ``logprob``: the probability of each option letter at the first token of the answer, read from the token
  log-probabilities that llama.cpp's server and OpenAI-compatible endpoints return (``logprobs`` /
  ``top_logprobs`` on chat completions), renormalised over the option letters; the answer is the most probable;
- ``pride``: PriDe (Zheng et al., 2024, "Large Language Models Are Not Robust Multiple Choice Selectors"): the
  observed letter probabilities are divided by an option-ID prior, estimated beforehand by asking each question
  of a small calibration slice once per cyclic shift of its options (``estimate_prior``).

An endpoint that returns no logprobs gets the ``generate`` answer, with one warning line per LM.
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field

MODES = ("generate", "logprob", "pride")
TOP_LOGPROBS = 20  # alternatives per token asked for (OpenAI's maximum)
_WARNED: set[tuple[str, str]] = set()


@dataclass
class MCScoring:
    """How every multiple-choice writer of a program picks its letter (the program is built with it:
    ``programs.build(name, mc=MCScoring(...))``).

    ``prior``: option-ID prior (letter -> probability) for ``pride``; ``observed``: when a list, every call
    that read letter probabilities appends ``{"written", "probs", "answer"}`` to it: the letter parsed from the
    reply (what ``generate`` answers), the observed distribution, and the letter chosen."""

    mode: str = "generate"
    prior: dict[str, float] | None = None
    observed: list | None = field(default=None, repr=False)

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"unknown --mc-scoring '{self.mode}'; choose one of: {', '.join(MODES)}")
        if self.mode == "pride" and not self.prior:
            raise ValueError("--mc-scoring pride needs an option-ID prior: calibrate first (optimizers.calibration)")

    @property
    def reads_logprobs(self) -> bool:
        return self.mode != "generate"

    def pick(self, probs: dict[str, float]) -> str:
        """The chosen letter from observed letter probabilities (debiased in ``pride`` mode)."""
        scores = debias(probs, self.prior) if self.mode == "pride" else probs
        return max(scores, key=scores.get)


def _get(obj, key: str, default=None):
    """A field of a logprobs entry, whether the client gave a dict or an object."""
    return obj.get(key, default) if isinstance(obj, dict) else getattr(obj, key, default)


def answer_token(content: list, field: str = "answer") -> int | None:
    """Index of the first token of output field ``field`` in a completion's token list: the first token with a
    letter or digit after the ChatAdapter's ``[[ ## field ## ]]`` header (or from the start when the model wrote
    no header)."""
    header = f"## {field} ## ]]"
    text, start = "", 0
    for i, token in enumerate(content):
        text += _get(token, "token") or ""
        if header in text:
            start, text = i + 1, ""
            break
    for i in range(start, len(content)):
        if any(ch.isalnum() for ch in _get(content[i], "token") or ""):
            return i
    return None


def _label_of(word: str, labels) -> str | None:
    """The label a token spells the start of: one-character labels (letters, digits) exactly, longer labels by
    a case-insensitive prefix ("In" -> "incorrect"); None when it starts no label or more than one."""
    if word in labels and len(word) == 1:
        return word
    hits = [label for label in labels if len(label) > 1 and label.casefold().startswith(word.casefold())]
    return hits[0] if len(hits) == 1 else None


def label_logprobs(logprobs, labels, field: str = "answer") -> dict[str, float] | None:
    """Log-probability of each label at the first token of output field ``field``, from an OpenAI-format
    ``logprobs`` (``{"content": [{"token", "logprob", "top_logprobs": [...]}, ...]}``). Labels must differ at
    their first token. Spellings of one label (``"B"``, ``" B"``, ``"(B"``; ``"Yes"``, ``" yes"``) are summed.
    Labels outside the returned alternatives get the smallest returned log-probability (an upper bound on
    theirs). None when there is no such token or no label among its alternatives."""
    content = _get(logprobs, "content") if logprobs is not None else None
    if not content:
        return None
    at = answer_token(content, field)
    if at is None:
        return None
    alternatives = _get(content[at], "top_logprobs") or [content[at]]
    probs: dict[str, float] = {}
    for alt in alternatives:
        word = (_get(alt, "token") or "").strip().lstrip("(*[\"'\u201c\u2018").rstrip(".):*]\"',\u201d\u2019")
        if word and (label := _label_of(word, labels)) is not None:
            probs[label] = probs.get(label, 0.0) + math.exp(_get(alt, "logprob"))
    if not probs:
        return None
    floor = min(_get(alt, "logprob") for alt in alternatives)
    return {label: math.log(probs[label]) if label in probs else floor for label in labels}


def letter_logprobs(logprobs, letters: str) -> dict[str, float] | None:
    """Log-probability of each option letter at the answer's first token (see :func:`label_logprobs`)."""
    return label_logprobs(logprobs, list(letters))


def normalized(logps: dict[str, float]) -> dict[str, float]:
    """Log-probabilities -> probabilities summing to 1 over the given letters."""
    top = max(logps.values())
    weights = {k: math.exp(v - top) for k, v in logps.items()}
    total = sum(weights.values())
    return {k: w / total for k, w in weights.items()}


def debias(probs: dict[str, float], prior: dict[str, float]) -> dict[str, float]:
    """PriDe's debiased distribution: observed probability / prior of the letter, renormalised."""
    ratio = {k: p / prior[k] for k, p in probs.items()}
    total = sum(ratio.values())
    return {k: r / total for k, r in ratio.items()}


def sample_prior(shifts: list[dict[str, float]]) -> dict[str, float]:
    """One calibration question's prior: softmax over letters of the mean log-probability of each letter across
    its cyclic shifts (every option text stands at every letter once, so what stays is the letter's own pull)."""
    letters = list(shifts[0])
    mean_log = {k: sum(math.log(s[k]) for s in shifts) / len(shifts) for k in letters}
    return normalized(mean_log)


def estimate_prior(samples: list[list[dict[str, float]]]) -> dict[str, float]:
    """PriDe's option-ID prior: the mean of the per-question priors over the calibration questions, each given
    as its letter distributions (probabilities) under all cyclic shifts."""
    if not samples:
        raise ValueError("PriDe calibration got no usable question (no logprobs read): use --mc-scoring generate")
    priors = [sample_prior(shifts) for shifts in samples]
    return {k: sum(p[k] for p in priors) / len(priors) for k in priors[0]}


def warn_no_logprobs(lm_name: str, what: str = "multiple choice falls back to --mc-scoring generate") -> None:
    """One warning line per LM (and fallback) that returned no token logprobs."""
    if (lm_name, what) not in _WARNED:
        _WARNED.add((lm_name, what))
        print(f"warning: {lm_name} returned no token logprobs; {what} for its calls", file=sys.stderr)
