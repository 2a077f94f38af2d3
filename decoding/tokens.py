"""Token probabilities of a free-text output field, read from the endpoint's token logprobs: how sure the model was
of each token it wrote (FLARE's look-ahead sentence)."""
from __future__ import annotations

import math

from decoding.choice import _get


def field_tokens(logprobs, field: str) -> list[tuple[str, float]] | None:
    """Each token of output field ``field``'s written value with its probability, from an OpenAI-format ``logprobs``
    (``{"content": [{"token", "logprob"}, ...]}``): the tokens after the ChatAdapter's ``[[ ## field ## ]]`` header
    (from the start of the reply when it wrote none) up to the next ``[[ ##`` header, each placed by its first
    visible character. Whitespace-only tokens and tokens without a logprob are left out. None when the reply carries
    no logprobs."""
    content = _get(logprobs, "content") if logprobs is not None else None
    if not content:
        return None
    tokens = [(_get(t, "token") or "", _get(t, "logprob")) for t in content]
    text = "".join(token for token, _ in tokens)
    header = f"[[ ## {field} ## ]]"
    start = text.find(header)
    start = 0 if start < 0 else start + len(header)
    end = text.find("[[ ##", start)
    end = len(text) if end < 0 else end
    out, at = [], 0
    for token, logprob in tokens:
        first = at + len(token) - len(token.lstrip())
        at += len(token)
        if token.strip() and logprob is not None and start <= first < end:
            out.append((token, math.exp(logprob)))
    return out


def spelling(tokens: list[tuple[str, float]], text: str) -> list[tuple[str, float]]:
    """The leading ``tokens`` that spell ``text`` (its visible characters: whitespace is ignored), e.g. the tokens of
    a reply's first sentence; a token that runs past the end of ``text`` is kept."""
    need, out = len("".join(text.split())), []
    for token, prob in tokens:
        if need <= 0:
            break
        out.append((token, prob))
        need -= len("".join(token.split()))
    return out
