"""Output-token caps: every output field of a signature says how long it may be, and each call is capped at the
sum, so no call runs on to the LM's global ``max_tokens`` (a looping 0.5B writes until it hits 512 tokens, ~13 s).

Text fields declare their cap in the annotation (``answer: Text[32] = dspy.OutputField(...)``, lists ``Items[48]``);
closed types (bool, int, float, ``Literal``) need a few tokens; DSPy's ChainOfThought adds a ``reasoning`` field of
its own, capped at :data:`REASONING_TOKENS`. A signature with an uncapped text field is left to the LM's default."""
from __future__ import annotations

import logging
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Annotated, Any, Literal, get_origin

import dspy

CLOSED_TOKENS = 8  # a bool, number or Literal value
FIELD_TOKENS = 8  # a field's "[[ ## name ## ]]" header and line breaks (and the closing marker)
REASONING_TOKENS = 256  # ChainOfThought's own ``reasoning`` field
_CALL_CAP: ContextVar[int | None] = ContextVar("call_cap", default=None)


@dataclass(frozen=True)
class Cap:
    tokens: int


class _Capped:
    def __init__(self, kind: type):
        self.kind = kind

    def __getitem__(self, tokens: int):
        return Annotated[self.kind, Cap(tokens)]


Text = _Capped(str)
Items = _Capped(list[str])


def field_cap(name: str, field) -> int | None:
    """The declared token cap of one output field; None for a text field that declares none."""
    if caps := [m.tokens for m in field.metadata if isinstance(m, Cap)]:
        return caps[0]
    if field.annotation in (bool, int, float) or get_origin(field.annotation) is Literal:
        return CLOSED_TOKENS
    return REASONING_TOKENS if name == "reasoning" else None


def output_cap(signature: type[dspy.Signature]) -> int | None:
    """Tokens a reply to ``signature`` may need: its fields' caps plus their headers; None if any field is uncapped."""
    caps = [field_cap(name, field) for name, field in signature.output_fields.items()]
    return None if None in caps else sum(caps) + FIELD_TOKENS * (len(caps) + 1)


def capped(lm: dspy.BaseLM, lm_kwargs: dict[str, Any], signature: type[dspy.Signature]) -> dict[str, Any]:
    """``lm_kwargs`` with ``max_tokens`` at the signature's cap (never above the LM's own); a per-call
    ``max_tokens`` the program set wins."""
    cap = output_cap(signature)
    if cap is None or "max_tokens" in lm_kwargs:
        return lm_kwargs
    return {**lm_kwargs, "max_tokens": min(cap, lm.kwargs.get("max_tokens") or cap)}


class CappedChatAdapter(dspy.ChatAdapter):
    """DSPy's ChatAdapter with every call capped at its signature's :func:`output_cap`."""

    def __call__(self, lm, lm_kwargs, signature, demos, inputs):
        with _under_cap(lm, lm_kwargs, signature) as lm_kwargs:
            return super().__call__(lm, lm_kwargs, signature, demos, inputs)

    async def acall(self, lm, lm_kwargs, signature, demos, inputs):
        with _under_cap(lm, lm_kwargs, signature) as lm_kwargs:
            return await super().acall(lm, lm_kwargs, signature, demos, inputs)


@contextmanager
def _under_cap(lm, lm_kwargs: dict[str, Any], signature):
    """The call's :func:`capped` kwargs, with its cap remembered for :class:`TruncationNote` while it runs."""
    lm_kwargs = capped(lm, lm_kwargs, signature)
    token = _CALL_CAP.set(lm_kwargs.get("max_tokens"))
    try:
        yield lm_kwargs
    finally:
        _CALL_CAP.reset(token)


class TruncationNote(logging.Filter):
    """DSPy's "truncated due to exceeding max_tokens=N" names the LM's global N even when the call ran under a
    smaller cap; rewrite it to name the cap the call actually had."""

    def filter(self, record: logging.LogRecord) -> bool:
        cap = _CALL_CAP.get()
        if cap is not None and str(record.msg).startswith("LM response was truncated"):
            record.msg, record.args = (f"LM reply reached this call's output cap (max_tokens={cap}, from its "
                                       "signature's field caps in runtime.caps); the last field may be cut"), ()
        return True


def note_truncations() -> None:
    """Install :class:`TruncationNote` on DSPy's LM logger (once)."""
    log = logging.getLogger("dspy.clients.lm")
    if not any(isinstance(f, TruncationNote) for f in log.filters):
        log.addFilter(TruncationNote())
