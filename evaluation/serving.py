"""A compiled program as an MLflow Model, logged from code (``served_model.py`` is the model: no pickle anywhere).

The model holds the compiled ``program.json`` as its one artifact and, as its ``model_config``, the LMs it was
compiled with and how it picks a multiple-choice letter. Loading it (:meth:`ServedProgram.load_context`) checks the
artifact as ``evaluate.py --compiled`` does, rebuilds the retriever its ``data`` names from this checkout's corpora
(benchmark files from ``RAG_DATA_DIR``; a corpus folder, Milvus server or model outside the project only when
``RAG_SERVE_ALLOW`` names it: the serving process decides what a model opens, never the model) and binds the LMs:
a ``local:`` model through the embedded server on 127.0.0.1, any other through the endpoint in ``RAG_API_BASE``
(key in ``RAG_API_KEY``) when it was compiled against an ``--api-base``. It answers rows of ``question`` (optionally
``options``, ``lang``) with ``answer`` and the ids of the ``passages`` it read."""
from __future__ import annotations

import math
import os
import tomllib
from contextlib import contextmanager
from pathlib import Path

import mlflow
import pandas as pd
from mlflow.models import ModelSignature
from mlflow.types.schema import Array, ColSpec, Map, Schema

from decoding.choice import MCScoring
from programs.artifact import DATA, load_compiled, read_artifact
from programs.shared.writer import mc_state
from runtime.lm import make_lm
from runtime.paths import PROJECT_ROOT
from runtime.roles import Roles, init_dspy

#: The model's code, which MLflow copies into the model and runs to load it.
MODEL_CODE = Path(__file__).with_name("served_model.py")
#: The OpenAI-compatible endpoint of a model compiled against ``--api-base`` (it is not recorded: ports and hosts
#: change, and a URL may carry a key).
API_BASE = "RAG_API_BASE"
#: The settings pointing outside the project (``Setting.external``: a corpus folder, a Milvus server, a model to load)
#: that a served model may use, comma-separated, each as the compile's command line gave it: the serving process's
#: environment decides what a model opens, never the model's own config.
ALLOW = "RAG_SERVE_ALLOW"
#: The LM roles a served program binds (the judge scores answers; a served program writes them).
LM_ROLES = ("lm", "planner_lm", "critic_lm")
SIGNATURE = ModelSignature(
    inputs=Schema([ColSpec("string", "question"), ColSpec(Map("string"), "options", required=False),
                   ColSpec("string", "lang", required=False)]),
    outputs=Schema([ColSpec("string", "answer"), ColSpec(Array("string"), "passages")]))


class ServingError(Exception):
    """A served model that cannot load or a row it cannot answer: one line naming the problem and the fix."""


def model_name(program: str) -> str:
    """The registered model of a program's compiles."""
    return f"agentic-rag.{program}"


def serving_config(args, compiled) -> dict:
    """The ``model_config`` of a compile's model (under ``served``: MLflow logs it as the run's params
    ``served/...``, beside the run's own): its LMs (``--lm``, ``--planner-lm``, ``--critic-lm``), whether
    they answer at an ``--api-base``, and how the ``compiled`` program's writers pick a multiple-choice letter."""
    scoring = (mc_state(compiled) or [{"mode": "generate", "prior": None}])[0]  # one scoring for all its writers
    return {"served": {**{role: getattr(args, role) for role in LM_ROLES}, "api_base": bool(args.api_base),
                       "mc_scoring": scoring["mode"], "mc_prior": scoring["prior"]}}


def outside(data: dict) -> dict:
    """The settings of an artifact's ``data`` that point outside the project (``Setting.external``)."""
    return {key: value for key, value in data.items() if key in DATA and DATA[key].points_outside(value)}


def allowed(data: dict) -> dict:
    """:func:`outside` settings of ``data``, each of which :data:`ALLOW` in this process's environment must name;
    any other is refused before anything is opened or connected to (whatever the model's config says)."""
    listed = {value.strip() for value in os.environ.get(ALLOW, "").split(",")}
    wanted = outside(data)
    for key, value in wanted.items():
        if value not in listed:
            raise ServingError(f"the served model's {key} {value!r} points outside the project, which a served model "
                               f"opens only when the serving process allows it: to trust it, set {ALLOW}={value} "
                               "(comma-separated values)")
    return wanted


def roles(config: dict) -> Roles:
    """The LMs ``config`` names, at ``RAG_API_BASE`` when they were compiled against an endpoint."""
    if not config.get("lm"):
        raise ServingError("the served model's model_config names no served lm: log it again with optimize.py")
    api_base = None
    if config.get("api_base"):
        api_base = os.environ.get(API_BASE)
        if not api_base:
            raise ServingError(f"the served model was compiled with --lm {config['lm']} at an --api-base endpoint: "
                               f"set {API_BASE}=URL (its key in RAG_API_KEY) to the endpoint it should answer with")
    lms = {role: make_lm(config[role], api_base) for role in LM_ROLES if config.get(role)}
    return Roles(writer=lms["lm"], planner=lms.get("planner_lm"), critic=lms.get("critic_lm"))


class ServedProgram(mlflow.pyfunc.PythonModel):
    """The compiled program behind an MLflow pyfunc: ``predict`` answers each row's question."""

    def load_context(self, context) -> None:
        config = (context.model_config or {}).get("served", {})
        try:
            artifact = read_artifact(context.artifacts["program"])
            given = allowed(artifact["data"]) if isinstance(artifact["data"], dict) else {}  # else check_artifact's
            bound = roles(config)
            init_dspy(bound.writer)
            mc = config.get("mc_scoring", "generate")
            self.program = load_compiled(artifact, roles=bound, given=given,
                                         mc=MCScoring(mc, prior=config.get("mc_prior")) if mc != "generate" else None)
        except (FileNotFoundError, ValueError, KeyError) as err:  # a damaged artifact, missing data, a bad LM name
            problem = str(err).strip("'\"")  # a KeyError's message comes quoted
            raise ServingError(f"the served model cannot load: {problem}") from None

    def predict(self, context, model_input: pd.DataFrame, params=None) -> list[dict]:
        return [self.answer(row) for row in model_input.to_dict("records")]  # rows as SIGNATURE enforces them

    def answer(self, row: dict) -> dict:
        question = row.get("question")
        if not isinstance(question, str) or not question.strip():
            raise ServingError(f"each row needs a question (text); got {question!r}")
        inputs = {key: row[key] for key in ("options", "lang") if given(row.get(key))}
        pred = self.program(question=question, **inputs)
        return {"answer": pred.answer, "passages": [p.id for p in getattr(pred, "passages", None) or []]}


def given(value) -> bool:
    """Whether a row holds ``value`` (a DataFrame fills a missing optional column with None or NaN)."""
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def requirements() -> list[str]:
    """The project's dependencies (``pyproject.toml``): what the model's code imports, stated so MLflow does not
    load the model in a subprocess to infer them."""
    with open(PROJECT_ROOT / "pyproject.toml", "rb") as fh:
        return tomllib.load(fh)["project"]["dependencies"]


@contextmanager
def environment(values: dict[str, str]):
    """The environment variables ``values`` (those not empty) set for a block, as they were after."""
    before = {name: os.environ.get(name) for name in values}
    os.environ.update({name: value for name, value in values.items() if value})
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def log_served(program_json: Path, program: str, config: dict, example: dict, prompts: list[str],
               api_base: str | None = None, data: dict | None = None):
    """Log the compiled ``program_json`` to the active run as the model ``model`` from code, registered as
    :func:`model_name`, linked to its ``prompts`` (``prompts:/name/version``), with ``example`` as its input
    example. MLflow loads the logged model once and answers the example to check it (a failure is its warning):
    with ``api_base``, the compile's endpoint, and the settings of its ``data`` outside the project allowed (the
    compile's own command line named them)."""
    with environment({API_BASE: api_base or "", ALLOW: ",".join(outside(data or {}).values())}):
        return mlflow.pyfunc.log_model(name="model", python_model=str(MODEL_CODE),
                                       artifacts={"program": str(program_json)}, model_config=config,
                                       signature=SIGNATURE, input_example=[example], pip_requirements=requirements(),
                                       registered_model_name=model_name(program), prompts=prompts)
