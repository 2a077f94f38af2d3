"""Who asks each LM call of an evaluated question: :func:`asking` names the program's predictors for the question,
and :data:`CALLERS` (a DSPy callback) sets ``runtime.lm.CALLER`` around each predictor's call, so the call's trace
span names its predictor and role (``runtime.lm.mark_span``) and the question's Cost counts it by predictor
(``runtime.metering``: the record's ``lm_calls_by``)."""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field

import dspy
from dspy.utils.callback import BaseCallback

from runtime.lm import CALLER
from runtime.roles import role_of

_KEY = "asked"  # DSPy settings key: the question's Asked, so a program's own threads (dspy.Parallel) see it too


@dataclass
class Asked:
    """What one question's predictors were asked: the ``program``, its predictors' names by ``id``, whether a call
    of the program is under way (``depth``), and the judges' models and replies (what the question's judge
    feedback cites)."""

    program: object
    names: dict
    depth: int = 0
    judges: set = field(default_factory=set)
    replies: list = field(default_factory=list)

    def caller(self, predictor: dspy.Predict) -> dict:
        """``predictor``'s name in the program and its role (``runtime.roles.role_of``); one the program does not
        name (a reranker's) is a writer, one asked outside the program's call (a metric's) a judge, each named
        by its signature."""
        if (name := self.names.get(id(predictor))) is not None:
            return {"predictor": name, "role": role_of(self.program, name)}
        return {"predictor": predictor.signature.__name__, "role": "writer" if self.depth else "judge"}

    def rationale(self, rec: dict) -> str:
        """Why the judge feedback says what it says: the judges' replies and how the metrics decided."""
        said = [*self.replies, *(f"{k}: {v}" for k, v in (rec.get("noted") or {}).items())]
        return "; ".join(said) or "decided without asking a judge"


class Callers(BaseCallback):
    """Inside a question (:func:`asking`), sets :data:`runtime.lm.CALLER` around each predictor's call and keeps the
    judges' replies."""

    def __init__(self):
        self.open: dict[str, tuple] = {}  # call id -> what its end undoes

    def on_module_start(self, call_id, instance, inputs):
        if (asked := dspy.settings.get(_KEY)) is None:
            return
        if instance is asked.program:
            asked.depth += 1
            self.open[call_id] = (asked, None, None)
        elif isinstance(instance, dspy.Predict):
            caller = asked.caller(instance)
            if caller["role"] == "judge":
                asked.judges.add(getattr(instance.lm or dspy.settings.lm, "model", "judge"))
            self.open[call_id] = (asked, caller, CALLER.set(caller))

    def on_module_end(self, call_id, outputs, exception=None):
        if (opened := self.open.pop(call_id, None)) is None:
            return
        asked, caller, token = opened
        if caller is None:
            asked.depth -= 1
            return
        CALLER.reset(token)
        if caller["role"] == "judge" and isinstance(outputs, dspy.Prediction):
            asked.replies.append(f"{caller['predictor']} replied " + ", ".join(f"{k}={v}" for k, v in outputs.items()))


CALLERS = Callers()


@contextmanager
def asking(program):
    """Within the block (and the threads it starts through DSPy) one question of ``program``: each of its LM calls
    named by the predictor that made it; yields the question's :class:`Asked`, the enclosing block's if that one
    asks the same program."""
    if (asked := dspy.settings.get(_KEY)) is not None and asked.program is program:
        yield asked
        return
    named = getattr(program, "named_predictors", None)  # a plain function evaluated as a program names none
    asked = Asked(program, {id(p): name for name, p in named()} if named else {})
    callbacks = dspy.settings.get("callbacks") or []
    with dspy.context(**{_KEY: asked}, callbacks=callbacks if CALLERS in callbacks else [CALLERS, *callbacks]):
        yield asked
