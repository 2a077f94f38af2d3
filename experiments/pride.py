"""``--mc-scoring``: a program built with the multiple-choice scoring a run asks for; for ``pride`` its option-ID
prior is estimated first (``optimizers.calibration.calibrate_pride``) on the first ``--mc-calibration`` train
questions, and kept like a checkpoint, so a re-run reuses it and its evaluation checkpoint (keyed by it) resumes."""
from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import dspy

from decoding.choice import MCScoring
from optimizers.calibration import calibrate_pride
from runtime.files import write_whole


def scored(program_name: str, make: Callable[[MCScoring | None], dspy.Module], mode: str, slice_: list[dspy.Example],
           retries: int, checkpoint: Callable[..., Path]) -> tuple[dspy.Module, dict | None]:
    """``make(mc)``, program ``program_name`` built with multiple-choice scoring ``mode`` (``generate``: none), and
    its PriDe calibration (None unless ``pride``). For ``pride`` a ``logprob`` build is calibrated first on the
    questions of ``slice_`` (asked with ``retries``), its prior kept where ``checkpoint`` (the run's
    ``Session.checkpoint``) keys the program as built before calibration and the questions as it sees them."""
    if mode != "pride":
        return make(MCScoring(mode) if mode != "generate" else None), None
    seen = tuple(json.dumps(ex.inputs().toDict(), sort_keys=True, default=str) for ex in slice_)
    saved = checkpoint("pride", program_name, make(None), seen).with_suffix(".json")
    info = saved_calibration(saved)
    reused = info is not None
    if not reused:
        info = calibrate_pride(make(MCScoring("logprob")), slice_, retries)
        write_whole(saved, json.dumps(info))
    print(f"pride calibration of {program_name} on {len(info['used'])}/{len(slice_)} train questions "
          f"({', '.join(info['used'])}): prior " + " ".join(f"{k}={v:.3f}" for k, v in info["prior"].items())
          + (f" (reused: {saved})" if reused else ""),
          file=sys.stderr)
    return make(MCScoring("pride", prior=info["prior"])), info


def saved_calibration(path: Path) -> dict | None:
    """The PriDe calibration an earlier run saved at ``path``; None when there is none, or when it is unreadable
    (then one warning line: it is computed again)."""
    if not path.exists():
        return None
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
        prior = info["prior"]
        if prior and all(isinstance(v, (int, float)) for v in prior.values()) and isinstance(info["used"], list):
            return info
        problem = "no numeric prior in it"
    except (ValueError, KeyError, TypeError, AttributeError) as err:  # not JSON, not UTF-8, not a calibration
        problem = f"{type(err).__name__}: {str(err)[:80]}"
    print(f"warning: saved PriDe prior {path} is unreadable ({problem}); calibrating again", file=sys.stderr)
    return None
