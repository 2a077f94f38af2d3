"""Per-role LMs and the process-wide DSPy setup (cache dir, adapter, usage tracking, call counting).

Programs map predictor names to roles in ``ROLES`` (e.g. ``{"planner": "planner", "critic": "critic"}``, matched
as name prefixes); unmapped predictors are writers and use the default LM. Roles are bound with DSPy's
per-predictor ``lm`` attribute, never by globals inside ``forward()``.
"""
from __future__ import annotations

import urllib.parse
from dataclasses import dataclass

import dspy

from runtime.caps import CappedChatAdapter, note_truncations
from runtime.lm import LOCAL_PREFIX
from runtime.metering import COUNTER
from runtime.models import MODELS
from runtime.paths import project_cache
from runtime.settings import Setting

ROLE_NAMES = ("writer", "planner", "critic", "judge")


def endpoint(text: str) -> bool:
    """Whether ``text`` is an ``--api-base``: an http(s) URL with a host (and a port, if any, that can be one), else
    ValueError. A malformed one failed every request as a connection error, retried as transient."""
    url = urllib.parse.urlsplit(text)
    try:
        ok = url.scheme in ("http", "https") and bool(url.hostname) and url.port != 0
    except ValueError:  # a port that is no number or out of range
        ok = False
    if not ok:
        raise ValueError(f"must be an http(s) URL such as http://127.0.0.1:8000/v1 (got {text!r})")
    return True


#: The LM settings, declared once: the writer's LM, the endpoint that serves it and each other role's LM.
LM = Setting("lm", str, f"{LOCAL_PREFIX}qwen-0.5b",
             " | ".join(LOCAL_PREFIX + name for name in MODELS) + " | DSPy/LiteLLM model")
SETTINGS = (LM,
            Setting("api_base", str, None, "OpenAI-compatible base URL for --lm (vLLM, llama.cpp, Ollama, ...)",
                    check=endpoint),
            *(Setting(f"{role}_lm", str, None, f"LM for the {role} role (default: --lm)") for role in ROLE_NAMES[1:]))


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
