"""Program registry: ``build(name, search=..., **config)``, ``names()``, ``load_compiled(path_or_run_id)``."""
from __future__ import annotations

import hashlib
import inspect
import json
from dataclasses import dataclass, field
from pathlib import Path

import dspy

import data as datasets
from data import corpora
from decoding.choice import MCScoring
from decoding.decisions import MODES, Gate, gates
from programs.baselines.rag import RAG, Direct
from programs.coral.coral import CORAL
from programs.baselines.crag import CRAG
from programs.baselines.iterative import IRCoT, ReAct
from programs.coral.mrag import MultilingualRAG
from programs.par2.par2 import PAR2
from programs.rag_critic.rag_critic import RAGCritic
from programs.seal.seal import SEAL
from programs.baselines.self_rag import SelfRAG
from programs.rag_critic.self_refine import SelfRefine
from programs.shared.oracle import parse_roles
from retrieval.dense import INDEX_TYPES
from retrieval.rerank import RERANKERS
from retrieval.retriever import RetrievalConfig, Retriever
from runtime.embedders import EMBEDDERS
from runtime.roles import assign_roles
from runtime.store import download, tracking_uri


@dataclass(frozen=True)
class ProgramSpec:
    cls: type[dspy.Module]
    description: str
    fixed: dict = field(default_factory=dict)  # constructor arguments that define this variant
    defaults: dict = field(default_factory=dict)  # the method's own defaults (its paper's), where a flag is unset

    @property
    def settings(self) -> dict[str, inspect.Parameter]:
        """The keyword settings the program is built with: its constructor's, a ``config`` dataclass (the class's
        ``Config``) standing for its fields."""
        params = dict(inspect.signature(self.cls.__init__).parameters)
        if "config" in params:
            del params["config"]
            params.update(inspect.signature(self.cls.Config).parameters)
        return params

    @property
    def params(self) -> list[str]:
        return [n for n in self.settings if n not in ("self", "search", "mc", *self.fixed)]

    def construct(self, **kwargs) -> dspy.Module:
        """The program from keyword settings (those of a ``Config`` gathered into it)."""
        if config := getattr(self.cls, "Config", None):
            fields = inspect.signature(config).parameters
            kwargs["config"] = config(**{k: kwargs.pop(k) for k in list(kwargs) if k in fields})
        return self.cls(**kwargs)

    @property
    def default_dataset(self) -> str:
        """The bundled demo set the program runs on when no ``--dataset`` is given."""
        return getattr(self.cls, "DEFAULT_DATASET", "demo")

    @property
    def needs_search(self) -> bool:
        return "search" in inspect.signature(self.cls.__init__).parameters


#: Defaults of config keys a program takes but whose method sets none of its own (``--loops`` when not given).
SHARED_DEFAULTS = {"loops": 3}
#: Settings whose None is a setting, not a flag left out: ``max_chars=None`` shows whole passages (the session
#: resolves ``--max-chars`` to 600, or to None on XRAG, before it builds a program); ``max_docs=None`` reads them all.
NONE_IS_A_VALUE = ("max_chars", "max_docs")
#: The settings a run passes to programs (``experiments.cli``'s flags of the same names), which a compiled program
#: records in its ``config``: ``(type, lowest, highest)`` for a number (a method may ask more: its class's
#: ``AT_LEAST``), else the type. Checked on the command line and in an artifact before anything is built.
SETTINGS = {"k": (int, 1, 100), "loops": (int, 0, 50), "subqueries": (int, 1, 50), "context_tokens": (int, 1, 10**6),
            "search_depth": (int, 1, 1000), "rounds": (int, 1, 10), "max_chars": (int, 1, 10**6),
            "search_rerank": str, "ledger_to_writer": bool, "decisions": str, "oracle": str}
#: PAR2-RAG's step and sub-query budgets in its paper: H = m = 5.
PAR2_PAPER = {"loops": 5, "subqueries": 5}

REGISTRY: dict[str, ProgramSpec] = {
    "direct": ProgramSpec(Direct, "closed-book answer, no retrieval"),
    "cot": ProgramSpec(Direct, "closed-book chain of thought", {"reasoning": True}),
    "rag": ProgramSpec(RAG, "retrieve top-k once, then answer"),
    "rag_cited": ProgramSpec(RAG, "rag with the evidence loops' writer (2-4 words citing passages, or I don't "
                                  "know): single pass under the same writer as seal, self_rag and crag",
                             {"cite": True}),
    "mono_rag": ProgramSpec(MultilingualRAG, "top-k from the question-language corpus", {"scope": "own"}),
    "multi_rag": ProgramSpec(MultilingualRAG, "top-k pooled over all language corpora", {"scope": "all"}),
    "cross_rag": ProgramSpec(MultilingualRAG, "multi_rag with the passages translated into English",
                             {"scope": "all", "translate_docs": True}),
    "t_rag": ProgramSpec(MultilingualRAG, "question translated into English, English corpus",
                         {"scope": "en", "translate_query": True}),
    "coral": ProgramSpec(CORAL, "CORAL: planner-selected corpora, critic-filtered evidence, replanning loop"),
    "coral_probe": ProgramSpec(CORAL, "CORAL whose planner also sees each corpus's top passage title and score for "
                                      "the question (a retrieval probe the paper's planner does not have)",
                               {"probe": True}),
    "coral_select": ProgramSpec(CORAL, "CORAL ablation: corpus re-selection only, original query",
                                {"rewrite": False}),
    "coral_fixed_own": ProgramSpec(CORAL, "CORAL loop ablation: critic loop over the fixed question-language "
                                          "corpus (the single-pass fixed scope is mono_rag)", {"scope": "own"}),
    "coral_fixed_all": ProgramSpec(CORAL, "CORAL loop ablation: critic loop over the fixed pool of all corpora "
                                          "(the single-pass fixed scope is multi_rag)", {"scope": "all"}),
    "coral_fixed_own_en": ProgramSpec(CORAL, "CORAL loop ablation: critic loop over the fixed question-language + "
                                             "English corpora (the single-pass fixed scope is own_en_rag)",
                                      {"scope": "own_en"}),
    "own_en_rag": ProgramSpec(MultilingualRAG, "top-k pooled over the question-language and English corpora, one "
                                               "pass (CORAL's fixed C_own ∪ C_en scope)", {"scope": "own_en"}),
    "seal": ProgramSpec(SEAL, "SEAL-RAG: entity ledger, sufficiency gate, one micro-query per repair at fixed k"),
    "seal_ledger": ProgramSpec(SEAL, "seal whose writer also sees the verified ledger facts",
                               {"ledger_to_writer": True}),
    "self_rag": ProgramSpec(SelfRAG, "Self-RAG-style loop: draft, critique, retrieve again or stop (SEAL baseline)"),
    "par2": ProgramSpec(PAR2, "PAR2-RAG: planned sub-queries anchor the context, then ESC-gated draft/search steps",
                        defaults=PAR2_PAPER),
    "par2_anchor": ProgramSpec(PAR2, "PAR2-RAG ablation: Coverage Anchor, then one write", {"chain": False},
                               PAR2_PAPER),
    "par2_chain": ProgramSpec(PAR2, "PAR2-RAG ablation: Iterative Chain from the question's own hits",
                              {"anchor": False}, PAR2_PAPER),
    "react": ProgramSpec(ReAct, "dspy.ReAct agent with a search tool, loops steps (PAR2 baseline)"),
    "ircot": ProgramSpec(IRCoT, "IRCoT: one chain-of-thought sentence, one search, repeat (PAR2 baseline)"),
    "crag": ProgramSpec(CRAG, "CRAG-style: grade the top-k, then keep, refine or re-search with a rewritten query "
                              "(SEAL baseline)"),
    "rag_critic": ProgramSpec(RAGCritic, "RAG-Critic: error critic with the 3-tier taxonomy, typed correction plan, "
                                         "dispatcher"),
    "rag_critic_2r": ProgramSpec(RAGCritic, "RAG-Critic with a second critic/plan/execute round", {"rounds": 2}),
    "self_refine": ProgramSpec(SelfRefine, "Self-Refine: draft, self-feedback, revise (RAG-Critic baseline)"),
}


def names() -> list[str]:
    return sorted(REGISTRY)


def spec(name: str) -> ProgramSpec:
    if name not in REGISTRY:
        raise ValueError(f"unknown program '{name}'; choose one of: {', '.join(names())}")
    return REGISTRY[name]


def oracle_roles(name: str) -> tuple[str, ...]:
    """The oracle roles (``programs.shared.oracle``) program ``name`` has a decision for."""
    s = spec(name)
    return s.cls.oracle_roles(**s.fixed) if hasattr(s.cls, "oracle_roles") else getattr(s.cls, "ORACLE_ROLES", ())


def accepted_config(name: str, config: dict) -> dict:
    """The subset of ``config`` that program ``name`` takes (this is what gets logged as its config); a None value
    (a flag not given) becomes the program's default: its method's (``ProgramSpec.defaults``), else
    :data:`SHARED_DEFAULTS`, else its constructor's -- except for :data:`NONE_IS_A_VALUE`."""
    s = spec(name)
    params = s.settings
    return {k: (s.defaults.get(k, SHARED_DEFAULTS.get(k, params[k].default))
                if v is None and k not in NONE_IS_A_VALUE else v)
            for k, v in config.items() if k in s.params}


def build(name: str, search=None, mc: MCScoring | None = None, **config) -> dspy.Module:
    """Build program ``name``; config keys it does not take (e.g. ``loops`` for ``rag``) are left out. ``mc``: how
    its writers pick multiple-choice letters (``decoding.choice``; default: the written letter), a choice of the
    run, not of the program's config (a compiled program does not record it)."""
    s = spec(name)
    kwargs = {**accepted_config(name, config), **s.fixed, **({"mc": mc} if mc is not None else {})}
    if s.needs_search:
        if search is None:
            raise ValueError(f"program '{name}' needs a retriever: build('{name}', search=Retriever(...))")
        kwargs["search"] = search
    return s.construct(**kwargs)


def range_problem(value, kind: type, low, high=None, scope: str = "") -> str:
    """Why ``value`` is no ``kind`` (int or float) from ``low`` to ``high`` (None: no upper bound), said ``scope``
    (e.g. " for coral"); '' when it is one."""
    if isinstance(value, bool) or not isinstance(value, (int, float) if kind is float else int):
        return f"must be {'a number' if kind is float else 'an integer'}{scope} (got {value!r})"
    if value < low or high is not None and value > high:
        return f"must be {f'from {low} to {high}' if high is not None else f'>= {low}'}{scope} (got {value})"
    return ""


def setting_problem(key: str, value, program: str | None = None) -> str:
    """Why ``value`` is no valid setting ``key`` (:data:`SETTINGS`, :data:`DATA`) -- of ``program`` when given,
    whose method may ask more (its class's ``AT_LEAST``); '' when it is valid."""
    rule = SETTINGS[key] if key in SETTINGS else DATA[key]
    if value is None and key in NONE_IS_A_VALUE:
        return ""
    if not (isinstance(rule, tuple) and len(rule) == 3):
        kinds = rule if isinstance(rule, tuple) else (rule,)
        if not isinstance(value, kinds):
            return f"must be a {kinds[0].__name__} (got {value!r})"
        check, choices = CHOICES.get(key, (None, ""))
        try:
            return "" if check is None or value is None or check(value) is not False else \
                f"must be one of {choices} (got {value!r})"
        except ValueError as err:
            return str(err)
    kind, low, high = rule
    stricter = getattr(spec(program).cls, "AT_LEAST", {}).get(key) if program else None
    return range_problem(value, kind, stricter or low, high, f" for {program}" if stricter else "")


#: The settings that may point outside the project (a path, a server, a model to download), with how: such a value
#: in an artifact is used only when the command line names the same one.
EXTERNAL = {"corpus": lambda v: v.startswith(corpora.PREFIXED), "retriever": lambda v: bool(RetrievalConfig(v).milvus),
            "embedder": lambda v: v.startswith("st:"), "rerank": lambda v: v.startswith("cross:"),
            "search_rerank": lambda v: v.startswith("cross:")}
#: What a string setting may name: (a check that returns False or raises ValueError, the choices to name).
CHOICES = {"dataset": (lambda v: v in datasets.names(), ", ".join(datasets.names())),
           "index": (lambda v: v in (*INDEX_TYPES, "ivf"), ", ".join((*INDEX_TYPES, "ivf"))),
           "embedder": (lambda v: v in EMBEDDERS[:-1] or v.startswith("st:") and len(v) > 3, ", ".join(EMBEDDERS)),
           "corpus": (lambda v: v in corpora.SOURCES[:5] or v.startswith(corpora.PREFIXED), ", ".join(corpora.SOURCES)),
           "retriever": (RetrievalConfig, ""), "oracle": (parse_roles, ""), "decisions": (MODES.__contains__,
                                                                                         ", ".join(MODES)),
           **dict.fromkeys(("rerank", "search_rerank"),
                           (lambda v: v in RERANKERS or v.startswith("cross:") and len(v) > 6,
                            ", ".join(RERANKERS) + ", cross:<model>"))}


def check_artifact(artifact: dict, given: dict | None = None) -> None:
    """Refuse (ValueError, one line) an artifact whose program, ``config`` or ``data`` is not what optimize.py
    writes: an unknown program, a key it does not take, a value of the wrong type, out of range or naming an unknown
    choice, or a value pointing outside the project (:data:`EXTERNAL`) that ``given`` (the settings the caller vouches
    for: the command line's) does not hold too. Its ``state`` is checked by :func:`load_compiled` against the
    program's predictors."""
    source, name, given = artifact.get("source", "the compiled program"), artifact.get("program"), given or {}

    def refuse(problem: str):
        raise ValueError(f"{source}: {problem}; not loaded: recompile it with optimize.py")

    if not isinstance(name, str) or name not in REGISTRY:
        refuse(f"unknown program {name!r} (this checkout has: {', '.join(names())})")
    compiled = [k for k in SETTINGS if k in spec(name).params and k != "oracle"]  # an oracle is the evaluation's
    for part, allowed in (("config", compiled), ("data", list(DATA))):
        if not isinstance(artifact[part], dict):
            refuse(f"{part} is a {type(artifact[part]).__name__}, not an object")
        for key, value in artifact[part].items():
            if key not in allowed:
                refuse(f"unexpected key {part}[{key!r}] in a compiled program of {name} "
                       f"(it holds {', '.join(allowed)})")
            if problem := setting_problem(key, value, name if part == "config" else None):
                refuse(f"{part}[{key!r}] {problem}")
            if isinstance(value, str) and key in EXTERNAL and EXTERNAL[key](value) and given.get(key) != value:
                flag = f"--{key.replace('_', '-')}"
                raise ValueError(f"{source}: its {key} {value!r} points outside the project; it is used only when "
                                 f"the command line names it too: pass {flag} {value}")


ARTIFACT_FORMAT = "agentic-rag-dspy/1"
#: An artifact's ``data``: what rebuilds its retriever (written by optimize.py from the flags of the same names), as
#: :data:`SETTINGS` says.
DATA = {"dataset": str, "embedder": str, "index": str, "corpus": (str, type(None)), "leave_question_out": bool,
        "max_docs": (int, 1, None), "retriever": str, "rerank": str, "rerank_depth": (int, 1, 1000),
        "fuse_depth": (int, 1, 1000), "rrf_k": (float, 0, None)}
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
    artifact dict itself, checked first (:func:`check_artifact`; ``given``: the settings the caller vouches for).

    Without ``search`` the retriever is rebuilt from the recorded dataset corpora (cached index, no re-embedding).
    With ``roles`` (``runtime.roles.Roles``) the predictors are bound to their LMs; otherwise the default LM
    configured with ``dspy.configure`` is used. ``oracle``: the program's oracle roles (``programs.shared.oracle``); ``mc``:
    its multiple-choice scoring (:func:`build`)."""
    artifact = path_or_run_id if isinstance(path_or_run_id, dict) else read_artifact(path_or_run_id)
    check_artifact(artifact, given)
    name, data = artifact["program"], artifact["data"]
    if spec(name).needs_search and search is None:
        bundle = corpora.load(data["dataset"], data_dir, data.get("corpus"), data.get("leave_question_out", True),
                              data.get("max_docs"))
        options = {k: data[k] for k in ("retriever", "rerank", "rerank_depth", "fuse_depth", "rrf_k") if k in data}
        search = Retriever(bundle.corpora, embedder=data["embedder"], index_type=data["index"], **options)
    program = build(name, search=search, mc=mc, **{**artifact["config"], **({"oracle": oracle} if oracle else {})})
    source = artifact.get("source", "the compiled program")
    saved, current = artifact.get("program_version"), program_version(program)
    if saved and saved != current:
        raise ValueError(f"{source} holds {name} version {saved}, but this checkout builds {name} version "
                         f"{current} (its predictors or fields changed); recompile: python optimize.py --program {name}")
    unexpected = strays(artifact, artifact_schema(name, program))
    if unexpected:
        more = f" (and {len(unexpected) - 1} more)" if len(unexpected) > 1 else ""
        raise ValueError(f"{source}: unexpected key {unexpected[0]}{more} in a compiled program, which holds only "
                         "demos, instructions, field texts, config and data (a stray key could redirect LM calls); "
                         "not loaded: recompile it with optimize.py")
    # an artifact saved before its program's gates always existed (``--decisions generate``) holds none: unfitted
    state = {**{name: gate.dump_state() for name, gate in gates(program).items()}, **artifact["state"]}
    try:
        program.load_state(state)
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise ValueError(f"{source}: its saved state does not fit {name} ({type(err).__name__}: {err}); "
                         f"recompile: python optimize.py --program {name}") from None
    if roles is not None:
        assign_roles(program, roles)
    return program
