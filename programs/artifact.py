"""The compiled-program format: one JSON file (DSPy state + what rebuilds the program), written by
:func:`save_compiled`, checked by :func:`check_artifact` against the settings' declarations and loaded by
:func:`load_compiled`."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import dspy

from data import corpora
from data import settings as data_settings
from decoding.choice import MCScoring
from decoding.decisions import Gate, gates
from programs.registry import REGISTRY, accepted_config, build, names, spec
from retrieval import settings as retrieval_settings
from retrieval.retriever import Retriever
from runtime.roles import assign_roles
from runtime.store import download, tracking_uri

ARTIFACT_FORMAT = "agentic-rag-dspy/1"
#: An artifact's ``data``: what rebuilds its retriever and its split (written by optimize.py from the settings of the
#: same names, so evaluating it asks the questions its compile asked).
DATA = {s.name: s for s in (*data_settings.SETTINGS, *retrieval_settings.SETTINGS)}


#: How deeply a compiled program's JSON may nest: its own structure is 4 levels (state, predictor, demos, demo), a
#: demo's field values a few more.
MAX_DEPTH = 32


def nesting(value) -> int:
    """How many levels of lists and objects ``value`` (parsed JSON) nests, counted without recursion."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        value, level = todo.pop()
        items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else None
        if items is not None:
            deepest = max(deepest, level)
            todo.extend((item, level + 1) for item in items)
    return deepest


def check_artifact(artifact: dict, given: dict | None = None) -> None:
    """Refuse (ValueError, one line) an artifact whose program, ``config`` or ``data`` is not what optimize.py
    writes: nested deeper than :data:`MAX_DEPTH`, an unknown program, a key it does not take, a value of the wrong
    type, out of range or naming an unknown choice (as the settings' declarations say), or a value pointing outside
    the project (``Setting.external``) that ``given`` (the settings the caller vouches for: the command line's) does
    not hold too. Its ``state`` is checked by :func:`check_compiled`."""
    source, name, given = artifact.get("source", "the compiled program"), artifact.get("program"), given or {}

    def refuse(problem: str):
        raise ValueError(f"{source}: {problem}; not loaded: recompile it with optimize.py")

    if nesting(artifact) > MAX_DEPTH:  # what reads it recurses
        refuse(f"it nests deeper than a compiled program does (at most {MAX_DEPTH} levels)")
    if not isinstance(name, str) or name not in REGISTRY:
        refuse(f"unknown program {name!r} (this checkout has: {', '.join(names())})")
    program = spec(name)
    for part, allowed in (("config", program.compiled), ("data", list(DATA))):
        if not isinstance(artifact[part], dict):
            refuse(f"{part} is a {type(artifact[part]).__name__}, not an object")
        for key, value in artifact[part].items():
            if key not in allowed:
                refuse(f"unexpected key {part}[{key!r}] in a compiled program of {name} "
                       f"(it holds {', '.join(allowed)})")
            setting = program.settings[key] if part == "config" else DATA[key]
            if problem := program.problem(key, value, name) if part == "config" else setting.problem(value):
                refuse(f"{part}[{key!r}] {problem}")
            if setting.points_outside(value) and given.get(key) != value:
                raise ValueError(f"{source}: its {key} {value!r} points outside the project; it is used only when "
                                 f"the command line names it too: pass {setting.flag} {value}")


#: A predictor's saved state: demos, instructions and field texts, DSPy's decision-field settings and bookkeeping;
#: no LM (roles bind LMs at load time). Anything else would be set as an attribute by ``load_state``: a per-call
#: ``config`` can send every request to another ``api_base``.
PREDICTOR_STATE = {"demos": [dict], "traces": list, "train": list, "fields": dict, "lm": None,
                   "signature": {"instructions": str, "fields": [{"prefix": str, "description": str}]}}

#: A decision gate's saved state (``decoding.decisions.Gate``, which checks the values when it loads them).
GATE_STATE = {"thresholds": dict, "weights": object}


def portable_state(program: dspy.Module) -> dict:
    """``program.dump_state()`` without per-predictor LMs (their endpoints include the embedded server's port,
    which changes every process): what identifies the program's prompts and demos."""
    state = program.dump_state()
    for value in state.values():
        if isinstance(value, dict) and "lm" in value:
            value["lm"] = None
    return state


def program_version(program: dspy.Module) -> str:
    """A short hash of the program's shape (predictor names, their input and output fields): it changes exactly
    when a new version of the program could no longer take the saved state."""
    shape = [(name, list(p.signature.input_fields), list(p.signature.output_fields))
             for name, p in program.named_predictors()]
    return hashlib.sha256(json.dumps(shape).encode()).hexdigest()[:12]


def save_compiled(program: dspy.Module, path, name: str, config: dict, data: dict) -> dict:
    """Write a compiled program as one JSON file: DSPy state (demos, instructions) + what rebuilds it.

    Per-predictor LMs are stripped from the state: the artifact is LM-agnostic and roles are bound at load time.
    ``data`` records the dataset/embedder/index the retriever was built from."""
    artifact = {"format": ARTIFACT_FORMAT, "program": name, "program_version": program_version(program),
                "config": accepted_config(name, config), "data": data, "state": portable_state(program)}
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(artifact, fh, ensure_ascii=False, indent=1, default=str)
    return artifact


def strays(value, schema, path: str = "") -> list[str]:
    """The paths in ``value`` that ``schema`` does not allow. A schema is a dict (allowed keys -> their schema), a
    one-item list (a list of that schema), None (only null) or a type (any value of it)."""
    if schema is None or isinstance(schema, type):
        return [] if (value is None if schema is None else isinstance(value, schema)) else [path]
    if isinstance(schema, list):
        if not isinstance(value, list):
            return [path]
        return [p for i, item in enumerate(value) for p in strays(item, schema[0], f"{path}[{i}]")]
    if not isinstance(value, dict):
        return [path]
    paths = {key: f"{path}[{key!r}]" if path else str(key) for key in value}
    return [p for key, item in value.items()
            for p in (strays(item, schema[key], paths[key]) if key in schema else [paths[key]])]


def artifact_schema(name: str, program: dspy.Module) -> dict:
    """Everything a compiled ``program`` (of registered program ``name``) may hold: see :func:`strays`."""
    return {"format": str, "program": str, "program_version": str, "source": str,
            "config": dict, "data": dict,  # checked by check_artifact
            "state": {**{predictor: PREDICTOR_STATE for predictor, _ in program.named_predictors()},
                      **{gate: GATE_STATE for gate, param in program.named_parameters() if isinstance(param, Gate)}}}


def read_artifact(path_or_run_id: str) -> dict:
    """The JSON of a compiled program, from a path or an MLflow run id of this project's store."""
    path = Path(path_or_run_id)
    if not path.exists():
        if path.suffix == ".json" or "/" in path_or_run_id:
            raise FileNotFoundError(f"compiled program not found: {path}; pass a program.json path or an MLflow run id")
        from mlflow.exceptions import MlflowException

        try:
            path = download(path_or_run_id, "program.json")
        except (MlflowException, OSError) as err:  # no such run, or a run without a compiled program
            cause = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
            raise FileNotFoundError(f"compiled program not found: '{path_or_run_id}' is no file, and no run of the "
                                    f"MLflow store {tracking_uri()} with a program.json ({cause}); pass a program.json "
                                    "path or the run id optimize.py printed") from None
    try:
        artifact = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:
        raise ValueError(f"{path} is not valid JSON ({err}); it is damaged or not a compiled program: recompile "
                         "it with optimize.py") from None
    except RecursionError:  # deeper than the parser goes
        raise ValueError(f"{path} nests deeper than a compiled program does (at most {MAX_DEPTH} levels); it is "
                         "damaged or crafted: recompile it with optimize.py") from None
    if not isinstance(artifact, dict) or artifact.get("format") != ARTIFACT_FORMAT:
        found = artifact.get("format") if isinstance(artifact, dict) else type(artifact).__name__
        raise ValueError(f"{path} is not a compiled program of this project (format {found!r}, "
                         f"expected {ARTIFACT_FORMAT!r})")
    missing = [key for key in ("program", "config", "data", "state") if key not in artifact]
    if missing:
        raise ValueError(f"{path} lacks {', '.join(missing)}: it is damaged; recompile it with optimize.py")
    return artifact | {"source": str(path)}


def load_compiled(path_or_run_id: str | dict, search=None, data_dir=None, roles=None, oracle: str = "",
                  mc: MCScoring | None = None, given: dict | None = None) -> dspy.Module:
    """A ready module from a compiled artifact: a JSON path, an MLflow run id of this project's store, or the
    artifact dict itself, checked first (:func:`check_compiled`; ``given``: the settings the caller vouches for).

    Without ``search`` the retriever is rebuilt from the recorded dataset corpora (cached index, no re-embedding).
    With ``roles`` (``runtime.roles.Roles``) the predictors are bound to their LMs; otherwise the default LM
    configured with ``dspy.configure`` is used. ``oracle``: the program's oracle roles (``programs.shared.oracle``); ``mc``:
    its multiple-choice scoring (:func:`build`)."""
    artifact = path_or_run_id if isinstance(path_or_run_id, dict) else read_artifact(path_or_run_id)
    check_compiled(artifact, given)
    name, data = artifact["program"], artifact["data"]
    if spec(name).needs_search and search is None:
        bundle = corpora.load(data["dataset"], data_dir, data.get("corpus"), data.get("leave_question_out", True),
                              data.get("max_docs"))
        options = {s.name: data[s.name] for s in retrieval_settings.OPTIONS if s.name in data}
        search = Retriever(bundle.corpora, embedder=data["embedder"], index_type=data["index"], **options)
    program = build(name, search=search, mc=mc, **{**artifact["config"], **({"oracle": oracle} if oracle else {})})
    load_state(program, artifact)
    if roles is not None:
        assign_roles(program, roles)
    return program


class NoSearch:
    """The retriever of a program built only to check a compiled program's state (:func:`check_compiled`): its
    predictors do not depend on it, and it is never called."""


def check_compiled(artifact: dict, given: dict | None = None) -> None:
    """Everything :func:`load_compiled` checks (:func:`check_artifact`, the program's version, the state's keys and
    values), before anything is built: the state is loaded into the program built with no retriever or LM."""
    check_artifact(artifact, given)
    name = artifact["program"]
    load_state(build(name, search=NoSearch() if spec(name).needs_search else None, **artifact["config"]), artifact)


def load_state(program: dspy.Module, artifact: dict) -> None:
    """Load ``artifact``'s state into ``program`` (built from it), refusing in one line (ValueError) a state saved by
    another version of the program, holding a key a compiled program does not hold, or not fitting it."""
    name, source = artifact["program"], artifact.get("source", "the compiled program")
    saved, current = artifact.get("program_version"), program_version(program)
    if saved and saved != current:
        raise ValueError(f"{source} holds {name} version {saved}, but this checkout builds {name} version "
                         f"{current} (its predictors or fields changed); recompile: python optimize.py --program {name}")
    if unexpected := strays(artifact, artifact_schema(name, program)):
        more = f" (and {len(unexpected) - 1} more)" if len(unexpected) > 1 else ""
        raise ValueError(f"{source}: unexpected key {unexpected[0]}{more} in a compiled program, which holds only "
                         "demos, instructions, field texts, config and data (a stray key could redirect LM calls); "
                         "not loaded: recompile it with optimize.py")
    # an artifact saved before its program's gates always existed (``--decisions generate``) holds none: unfitted
    state = {**{gate: g.dump_state() for gate, g in gates(program).items()}, **artifact["state"]}
    try:
        program.load_state(state)
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise ValueError(f"{source}: its saved state does not fit {name} ({type(err).__name__}: {err}); "
                         f"recompile: python optimize.py --program {name}") from None
