"""The evaluation settings, declared once (``runtime.settings.Setting``): the LMs a run asks (each role's, and the
endpoint), how answers are scored (the judge, the multiple-choice scoring, circular evaluation) and how questions are
asked (retries, threads, the cache, the run's checkpoint and MLflow experiment). The command line's flags and a run's
MLflow params are read from here. (Not answer code: ``experiments.code`` keys no checkpoint by this file.)"""
from __future__ import annotations

import urllib.parse

from decoding.choice import MODES
from runtime.lm import LOCAL_PREFIX
from runtime.models import MODELS
from runtime.roles import ROLE_NAMES
from runtime.settings import Setting


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


def named(text: str) -> bool:
    """Whether ``text`` names something (is not blank), else ValueError."""
    if not text.strip():
        raise ValueError(f"must name something (got {text!r})")
    return True


#: The LMs: the writer's, the endpoint that serves it and each other role's.
LMS = (Setting("lm", str, f"{LOCAL_PREFIX}qwen-0.5b",
               " | ".join(LOCAL_PREFIX + name for name in MODELS) + " | DSPy/LiteLLM model"),
       Setting("api_base", str, None, "OpenAI-compatible base URL for --lm (vLLM, llama.cpp, Ollama, ...)",
               check=endpoint),
       *(Setting(f"{role}_lm", str, None, f"LM for the {role} role (default: --lm)") for role in ROLE_NAMES[1:]))
JUDGE = Setting("judge", bool, False, "also score answers with the LLM judge (--judge-lm)", switch=True)
JUDGE_LMS = Setting("judge_lms", str, None, "XRAG datasets: comma-separated panel of 1-3 judge LMs, majority vote; a "
                    "tie is a split: recorded, not scored (default: every local LM but --lm's, which never judges its "
                    "own answers)")
MC_SCORING = Setting("mc_scoring", str, "generate", "multiple choice: parse the written letter (generate), take the "
                     "most probable option letter from the LM's token logprobs (logprob), or divide out the option-ID "
                     "prior estimated on --mc-calibration train questions (pride, Zheng et al. 2024); no logprobs -> "
                     "generate", choices=MODES)
MC_CALIBRATION = Setting("mc_calibration", int, 8, "pride: train-split questions asked at every option shift to "
                         "estimate the prior", 1)
#: What changes the scores a run logs.
SCORING = (
    JUDGE, JUDGE_LMS,
    Setting("no_retrieval", bool, False, "parametric mode: answer with the closed-book writer (direct, or cot for "
            "--program cot) on the same examples, in the question's language", switch=True),
    Setting("circular", bool, False, "multiple choice: evaluate each question once per cyclic shift of its options "
            "and report circular_<metric> (right at every shift), which a letter-position bias cannot inflate; costs "
            "one evaluation per option", switch=True),
    MC_SCORING, MC_CALIBRATION,
)
#: How a run asks its questions: what it logs besides its scores, none of which changes one.
ASKING = (
    Setting("retries", int, 1, "retries of an example whose LM output fails to parse (sampled) or whose LM endpoint "
            "fails (greedy; still failing, it is recorded as retryable and asked again by the next run)", 0),
    Setting("retry_failed", bool, False, "ask again the questions the checkpoint records as failed (default: resume "
            "them as final)", switch=True),
    Setting("wait_for_checkpoint", bool, False, "when another run is writing the same checkpoint, wait for it to "
            "finish, then resume what it answered (default: stop with one line naming its pid, exit 75)",
            switch=True),
    Setting("no_cache", bool, False, "disable DSPy's LM response cache", switch=True),
    Setting("threads", int, 1, "examples evaluated at once (for endpoints that serve concurrent requests; the "
            "embedded server answers one at a time)", 1),
    Setting("experiment", str, "agentic-rag", "MLflow experiment", check=named),
    Setting("trace", bool, True, "one MLflow trace per evaluated question (its DSPy calls, score and the method's "
            "decisions); --no-trace turns it off"),
)
SETTINGS = (*LMS, *SCORING, *ASKING)
