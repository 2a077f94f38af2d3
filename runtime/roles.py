"""Per-role LMs and the process-wide DSPy setup (cache dir, adapter, usage tracking, call counting).

Programs map predictor names to roles in ``ROLES`` (e.g. ``{"planner": "planner", "critic": "critic"}``, matched
as name prefixes); unmapped predictors are writers and use the default LM. Roles are bound with DSPy's
per-predictor ``lm`` attribute, never by globals inside ``forward()``.
"""
from __future__ import annotations

from dataclasses import dataclass

import dspy

from runtime.caps import CappedChatAdapter, note_truncations
from runtime.metering import COUNTER
from runtime.paths import project_cache

ROLE_NAMES = ("writer", "planner", "critic", "judge")


@dataclass
class Roles:
    writer: dspy.LM
    planner: dspy.LM | None = None
    critic: dspy.LM | None = None
    judge: dspy.LM | None = None

    def lm(self, role: str) -> dspy.LM:
        return getattr(self, role) or self.writer


def role_of(program: dspy.Module, predictor_name: str) -> str:
    for prefix, role in getattr(program, "ROLES", {}).items():
        if predictor_name == prefix or predictor_name.startswith(prefix + "."):
            return role
    return "writer"


def assign_roles(program: dspy.Module, roles: Roles) -> dspy.Module:
    """Give every predictor the LM of its role (planner/critic predictors may use a different model)."""
    for name, predictor in program.named_predictors():
        predictor.lm = roles.lm(role_of(program, name))
    return program


def init_dspy(lm: dspy.LM | None, cache: bool = True) -> None:
    """Configure DSPy once per process: project-local disk cache (restricted unpickling), the ChatAdapter with
    per-signature output caps (``runtime.caps``), metering."""
    dspy.configure_cache(enable_disk_cache=cache, enable_memory_cache=cache,
                         disk_cache_dir=str(project_cache() / "dspy"), restrict_pickle=True)
    callbacks = [cb for cb in dspy.settings.callbacks if cb is not COUNTER] + [COUNTER]
    dspy.configure(lm=lm, adapter=CappedChatAdapter(), track_usage=True, callbacks=callbacks)
    note_truncations()
