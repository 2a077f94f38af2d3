"""PriDe calibration for ``--mc-scoring pride``: the option-ID prior of one program on a calibration slice.

Each calibration question is asked once per cyclic shift of its options in ``logprob`` mode (its own
knowledge-corpus documents hidden, as in evaluation); the letter distributions of the program's final writer call
give the prior (``programs.choice.estimate_prior``). The slice must not overlap the evaluated questions."""
from __future__ import annotations

import dspy

import data as datasets
from optimizers.evaluation import _run
from programs.choice import MCScoring, estimate_prior
from programs.writer import set_mc_scoring
from runtime.metering import metered


def calibrate_pride(program: dspy.Module, examples: list[dspy.Example], retries: int = 1) -> dict:
    """Estimate the prior on ``examples`` and switch ``program`` to ``pride`` scoring with it. Returns what to log:
    the prior, the questions asked and those used (every shift read), and the calibration's LM cost."""
    observed: list[dict] = []
    set_mc_scoring(program, MCScoring("logprob", observed=observed))
    samples, used = [], []
    with metered() as cost:
        for example in examples:
            shifts = []
            for copy in datasets.circular([example]):
                before = len(observed)
                _run(program, copy, retries)
                if len(observed) > before:
                    shifts.append(observed[-1]["probs"])  # the last writer call answers the question
            if len(shifts) == len(example.options):
                samples.append(shifts)
                used.append(example.id)
    prior = estimate_prior(samples)
    set_mc_scoring(program, MCScoring("pride", prior=prior))
    return {"prior": prior, "asked": [ex.id for ex in examples], "used": used,
            **{f"cost_{k}": v for k, v in cost.as_dict().items()}}
