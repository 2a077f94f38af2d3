"""Closed-set decisions decoded under a grammar where the endpoint supports one.

The embedded llama.cpp server takes a GBNF ``grammar`` in the chat-completion request; with it, a reply in the
ChatAdapter's layout (``[[ ## field ## ]]`` blocks) can only name allowed values (corpus names, True/False, ...),
so an invalid name cannot be produced. Other endpoints get no grammar: their replies go through the same
validation as before (``constrained_config`` returns ``{}``)."""
from __future__ import annotations

import dspy

#: A one-line free-text value (a query, a reason, a critique) of at most 160 characters (~40 tokens): a small model
#: that pastes the document back as its critique ends the line there instead of running into the completion cap.
FREE_LINE = r"[^\n]{1,160}"
BOOL = '("True" | "False")'


def literal(text: str) -> str:
    """A GBNF string literal."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def one_of(values: list[str]) -> str:
    """Exactly one of ``values``."""
    return "(" + " | ".join(literal(v) for v in values) + ")"


def name_list(names: list[str], max_items: int) -> str:
    """A JSON list of 1..``max_items`` quoted names from ``names``."""
    item = one_of([f'"{n}"' for n in names])
    rest = ""
    for _ in range(max(0, max_items - 1)):
        rest = f'(", " {item} {rest})?'
    return f'"[" {item} {rest} "]"'


def chat_grammar(fields: list[tuple[str, str]], rules: str = "", optional: frozenset[str] = frozenset()) -> str:
    """GBNF for a ChatAdapter reply: each output field's header and value rule in order (those named in
    ``optional`` may be left out, as the signature lets them), then the end marker; ``rules`` holds the definitions of
    any named rules the value rules use."""
    blocks = [(name, f"{literal(f'[[ ## {name} ## ]]' + chr(10))} {rule} {literal(chr(10) + chr(10))}")
              for name, rule in fields]
    body = " ".join(f"({block})?" if name in optional else block for name, block in blocks)
    return f"root ::= {body} {literal('[[ ## completed ## ]]')}" + (f"\n{rules}" if rules else "")


def grammar_supported(lm) -> bool:
    """Whether ``lm`` is served by the embedded llama.cpp server (which takes a GBNF ``grammar``)."""
    return getattr(lm, "server", None) is not None


def constrained_config(predictor: dspy.Predict, fields: dict[str, str], rules: str = "") -> dict:
    """Per-call config that constrains ``predictor``'s reply: ``fields`` maps output field -> GBNF value rule
    (fields left out are free one-line text; ``rules`` defines named rules they use; a field with a default may be left
    out of the reply). ``{}`` where the
    predictor's LM takes no grammar."""
    lm = predictor.lm or dspy.settings.lm
    if not grammar_supported(lm):
        return {}
    outputs = predictor.signature.output_fields
    values = [(name, fields.get(name, FREE_LINE)) for name in outputs]
    optional = frozenset(name for name, field in outputs.items() if not field.is_required())
    return {"extra_body": {**(lm.kwargs.get("extra_body") or {}), "grammar": chat_grammar(values, rules, optional)}}
