"""Program registry: ``build(name, search=..., **config)``, ``names()``, ``load_compiled(path_or_run_id)``."""
from __future__ import annotations

import inspect
import json
from dataclasses import dataclass, field
from pathlib import Path

import dspy

from programs.baselines import RAG, Direct
from programs.coral import CORAL
from programs.mrag import MultilingualRAG
from programs.rag_critic import RAGCritic
from programs.seal import SEAL
from programs.self_rag import SelfRAG
from programs.self_refine import SelfRefine


@dataclass(frozen=True)
class ProgramSpec:
    cls: type[dspy.Module]
    description: str
    fixed: dict = field(default_factory=dict)  # constructor arguments that define this variant

    @property
    def params(self) -> list[str]:
        names = inspect.signature(self.cls.__init__).parameters
        return [n for n in names if n not in ("self", "search", *self.fixed)]

    @property
    def default_dataset(self) -> str:
        """The bundled demo set the program runs on when no ``--dataset`` is given."""
        return getattr(self.cls, "DEFAULT_DATASET", "demo")

    @property
    def needs_search(self) -> bool:
        return "search" in inspect.signature(self.cls.__init__).parameters


REGISTRY: dict[str, ProgramSpec] = {
    "direct": ProgramSpec(Direct, "closed-book answer, no retrieval"),
    "cot": ProgramSpec(Direct, "closed-book chain of thought", {"reasoning": True}),
    "rag": ProgramSpec(RAG, "retrieve top-k once, then answer"),
    "mono_rag": ProgramSpec(MultilingualRAG, "top-k from the question-language corpus", {"scope": "own"}),
    "multi_rag": ProgramSpec(MultilingualRAG, "top-k pooled over all language corpora", {"scope": "all"}),
    "cross_rag": ProgramSpec(MultilingualRAG, "multi_rag with the passages translated into English",
                             {"scope": "all", "translate_docs": True}),
    "t_rag": ProgramSpec(MultilingualRAG, "question translated into English, English corpus",
                         {"scope": "en", "translate_query": True}),
    "coral": ProgramSpec(CORAL, "CORAL: planner-selected corpora, critic-filtered evidence, replanning loop"),
    "coral_select": ProgramSpec(CORAL, "CORAL ablation: corpus re-selection only, original query",
                                {"rewrite": False}),
    "coral_fixed_own": ProgramSpec(CORAL, "CORAL ablation: fixed question-language corpus", {"scope": "own"}),
    "coral_fixed_all": ProgramSpec(CORAL, "CORAL ablation: fixed pool of all corpora", {"scope": "all"}),
    "coral_fixed_own_en": ProgramSpec(CORAL, "CORAL ablation: fixed question-language + English corpora",
                                      {"scope": "own_en"}),
    "seal": ProgramSpec(SEAL, "SEAL-RAG: entity ledger, sufficiency gate, one micro-query per repair at fixed k"),
    "self_rag": ProgramSpec(SelfRAG, "Self-RAG-style loop: draft, critique, retrieve again or stop (SEAL baseline)"),
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


def accepted_config(name: str, config: dict) -> dict:
    """The subset of ``config`` that program ``name`` takes (this is what gets logged as its config)."""
    params = spec(name).params
    return {k: v for k, v in config.items() if k in params}


def build(name: str, search=None, **config) -> dspy.Module:
    """Build program ``name``; config keys it does not take (e.g. ``loops`` for ``rag``) are left out."""
    s = spec(name)
    kwargs = {**accepted_config(name, config), **s.fixed}
    if s.needs_search:
        if search is None:
            raise ValueError(f"program '{name}' needs a retriever: build('{name}', search=Retriever(...))")
        kwargs["search"] = search
    return s.cls(**kwargs)


ARTIFACT_FORMAT = "agentic-rag-dspy/1"


def portable_state(program: dspy.Module) -> dict:
    """``program.dump_state()`` without per-predictor LMs (their endpoints include the embedded server's port,
    which changes every process): what identifies the program's prompts and demos."""
    state = program.dump_state()
    for value in state.values():
        if isinstance(value, dict) and "lm" in value:
            value["lm"] = None
    return state


def save_compiled(program: dspy.Module, path, name: str, config: dict, data: dict) -> dict:
    """Write a compiled program as one JSON file: DSPy state (demos, instructions) + what rebuilds it.

    Per-predictor LMs are stripped from the state: the artifact is LM-agnostic and roles are bound at load time.
    ``data`` records the dataset/embedder/index the retriever was built from."""
    artifact = {"format": ARTIFACT_FORMAT, "program": name, "config": accepted_config(name, config), "data": data,
                "state": portable_state(program)}
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(artifact, fh, ensure_ascii=False, indent=1, default=str)
    return artifact


def read_artifact(path_or_run_id: str) -> dict:
    """The JSON of a compiled program, from a path or an MLflow run id of this project's store."""
    path = Path(path_or_run_id)
    if not path.exists():
        if path.suffix == ".json" or "/" in path_or_run_id:
            raise FileNotFoundError(f"compiled program not found: {path}; pass a program.json path or an MLflow run id")
        from optimizers.tracking import download

        path = download(path_or_run_id, "program.json")
    artifact = json.loads(path.read_text(encoding="utf-8"))
    if artifact.get("format") != ARTIFACT_FORMAT:
        raise ValueError(f"{path} is not a compiled program of this project (format {artifact.get('format')!r}, "
                         f"expected {ARTIFACT_FORMAT!r})")
    return artifact


def load_compiled(path_or_run_id: str | dict, search=None, data_dir=None, roles=None) -> dspy.Module:
    """A ready module from a compiled artifact: a JSON path, an MLflow run id of this project's store, or the
    artifact dict itself.

    Without ``search`` the retriever is rebuilt from the recorded dataset corpora (cached index, no re-embedding).
    With ``roles`` (``runtime.roles.Roles``) the predictors are bound to their LMs; otherwise the default LM
    configured with ``dspy.configure`` is used."""
    artifact = path_or_run_id if isinstance(path_or_run_id, dict) else read_artifact(path_or_run_id)
    name, data = artifact["program"], artifact["data"]
    if spec(name).needs_search and search is None:
        from data import corpora
        from programs.retrieval import Retriever

        bundle = corpora.load(data["dataset"], data_dir, data.get("corpus"), data.get("leave_question_out", True),
                              data.get("max_docs"))
        search = Retriever(bundle.corpora, embedder=data["embedder"], index_type=data["index"])
    program = build(name, search=search, **artifact["config"])
    program.load_state(artifact["state"])
    if roles is not None:
        from runtime.roles import assign_roles

        assign_roles(program, roles)
    return program
