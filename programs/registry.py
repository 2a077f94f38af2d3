"""Program registry: each method's settings declared once (type, default per its paper, range, help), and
``build(name, search=..., **config)``, ``names()``, ``spec(name)``."""
from __future__ import annotations

import inspect
from collections import Counter
from dataclasses import dataclass, field

import dspy

from decoding.choice import MCScoring
from decoding.decisions import MODES
from programs.baselines.crag import CRAG
from programs.baselines.flare import FLARE
from programs.baselines.iterative import IRCoT, ReAct
from programs.baselines.metarag import MetaRAG
from programs.baselines.rag import RAG, Direct
from programs.baselines.self_rag import SelfRAG
from programs.coral.coral import CORAL
from programs.coral.mrag import MultilingualRAG
from programs.par2.par2 import PAR2
from programs.rag_critic.rag_critic import RAGCritic
from programs.rag_critic.self_refine import SelfRefine
from programs.seal.seal import SEAL
from programs.shared.oracle import ALL, OWN, ROLES, parse_roles
from programs.shared.writer import oracle_writers
from retrieval.settings import RERANK
from runtime.settings import Setting

# The settings a run passes to programs, each with its command-line default; None: each method's own (``at``).
K = Setting("k", int, None, "passages per search", 1, 100)
LOOPS = Setting("loops", int, None, "loop budget for iterative programs", 0, 50)
SUBQUERIES = Setting("subqueries", int, None, "par2: sub-queries m the planner writes", 1, 50)
CONTEXT_TOKENS = Setting("context_tokens", int, None, "par2, ircot, react, flare: estimated tokens of passage text the "
                         "writer (and par2's controller) sees of the context; a longer context loses its "
                         "lowest-ranked passages first (par2: each search's; the others rank the newest search's "
                         "hits first, then the rest in order of first retrieval)",
                         1, 10**6)
SEARCH_RERANK = Setting("search_rerank", str, None, "par2: the program's own reranker over each search's "
                        "--search-depth candidates (the paper reranks 100 to 5)", check=RERANK.check,
                        choices=RERANK.choices, external=RERANK.external)
SEARCH_DEPTH = Setting("search_depth", int, None, "par2: candidates per search for --search-rerank", 1, 1000)
ROUNDS = Setting("rounds", int, None, "rag_critic, self_refine, metarag: critique/correct rounds at most, each "
                 "stopping early once judged correct", 1, 10)
MAX_CHARS = Setting("max_chars", int, None, "cut each passage shown to the LM after this many characters, at a word "
                    "boundary (default: whole passages; a cut can drop the sentence that holds the answer)", 1, 10**6,
                    none_ok=True)
LEDGER_TO_WRITER = Setting("ledger_to_writer", bool, False, "seal: also show the final writer the verified ledger "
                           "facts (default: passages only)", omit_default=True)
DECISIONS = Setting("decisions", str, "generate", "gates and filters (CRAG's grade, Self-RAG's reflection, SEAL's and "
                    "CORAL's sufficiency, CORAL's criteria, PAR2's controller, RAG-Critic's verdict, Self-Refine's "
                    "stop): parse the written label (generate), read label probabilities from the LM's token logprobs "
                    "(logprob), or also fuse a passage's probability with its retrieval score (fused); no logprobs -> "
                    "generate", choices=MODES, omit_default=True)
#: Not compiled into a program: an oracle is the evaluation's (``--oracle``), checked against the gold labels.
ORACLE = Setting("oracle", str, "", "replace a role's decisions by the question's gold labels (an upper bound, and a "
                 "check of the loop): relevance (gold passages), sufficiency (every gold passage held), controller "
                 "(STOP once every gold passage is retrieved), verdict (the answer is right by the task metric), "
                 "planner (the corpora holding a gold passage not yet held, else the culture's own corpus), gap "
                 "(missing gold titles the program has read of), query (the next unresolved gold hop, from what is "
                 "held), plan (search the oracle query while a gold passage is missing, else regenerate), writer "
                 "(the gold answer when the context supports it, else I don't know), all (every role the program "
                 "has); programs without the role run as usual; runs are marked "
                 "+oracle:ROLE", check=parse_roles, choices=(*ROLES, ALL), omit_default=True)
SETTINGS = (K, LOOPS, SUBQUERIES, CONTEXT_TOKENS, SEARCH_RERANK, SEARCH_DEPTH, ROUNDS, MAX_CHARS, LEDGER_TO_WRITER,
            DECISIONS, ORACLE)

#: PAR2's hop budget H (its paper's) and context budget, which its baselines IRCoT and ReAct take as their defaults
#: (and FLARE the context budget: the step programs' reader, ``programs.baselines.iterative.reader_context``).
PAR2_H, PAR2_CONTEXT_TOKENS = 5, 3000

#: What each program class takes of :data:`SETTINGS`, at its method's defaults (its paper's: SEAL's k = 3, PAR2's
#: H = m = 5); a flag given on the command line (``--k 5``) overrides them for every program.
TAKES: dict[type, tuple[Setting, ...]] = {
    Direct: (ORACLE,),
    RAG: (K.at(5), MAX_CHARS, ORACLE),
    MultilingualRAG: (K.at(5), MAX_CHARS, ORACLE),
    CORAL: (K.at(5), LOOPS.at(3, low=1), MAX_CHARS, DECISIONS, ORACLE),
    SEAL: (K.at(3), LOOPS.at(3), MAX_CHARS, LEDGER_TO_WRITER, DECISIONS, ORACLE),
    SelfRAG: (K.at(3), LOOPS.at(3), MAX_CHARS, DECISIONS, ORACLE),
    CRAG: (K.at(3), LOOPS.at(3), MAX_CHARS, DECISIONS, ORACLE),
    PAR2: (K.at(5), LOOPS.at(PAR2_H, low=1), SUBQUERIES.at(5), SEARCH_RERANK.at("none"), SEARCH_DEPTH.at(20),
           CONTEXT_TOKENS.at(PAR2_CONTEXT_TOKENS), MAX_CHARS, DECISIONS, ORACLE),
    ReAct: (K.at(5), LOOPS.at(PAR2_H), CONTEXT_TOKENS.at(PAR2_CONTEXT_TOKENS), MAX_CHARS, ORACLE),
    IRCoT: (K.at(5), LOOPS.at(PAR2_H), CONTEXT_TOKENS.at(PAR2_CONTEXT_TOKENS), MAX_CHARS, ORACLE),
    RAGCritic: (K.at(5), MAX_CHARS, ROUNDS.at(1), DECISIONS, ORACLE),
    SelfRefine: (K.at(5), MAX_CHARS, ROUNDS.at(3), DECISIONS, ORACLE),
    FLARE: (K.at(5), LOOPS.at(5, low=1), CONTEXT_TOKENS.at(PAR2_CONTEXT_TOKENS), MAX_CHARS, ORACLE),
    MetaRAG: (K.at(5), MAX_CHARS, ROUNDS.at(3), DECISIONS, ORACLE),
}


@dataclass(frozen=True)
class ProgramSpec:
    cls: type[dspy.Module]
    description: str
    fixed: dict = field(default_factory=dict)  # constructor arguments that define this variant
    reads: tuple[str, ...] = ()  # gold labels it reads in every run, no --oracle role (OWN: C_own's culture)

    @property
    def settings(self) -> dict[str, Setting]:
        """The settings this program takes (its class's, less those its variant fixes), by name."""
        return {s.name: s for s in TAKES[self.cls] if s.name not in self.fixed}

    @property
    def compiled(self) -> list[str]:
        """The settings a compiled program of this one records (its ``config``): all but the evaluation's oracle."""
        return [key for key in self.settings if key != ORACLE.name]

    def problem(self, key: str, value, name: str) -> str:
        """Why ``value`` is no valid setting ``key`` of this program (called ``name``); '' when it is valid."""
        setting = self.settings[key]
        base = next(s for s in SETTINGS if s.name == key)
        return setting.problem(value, f" for {name}" if setting.low != base.low else "")

    def construct(self, **kwargs) -> dspy.Module:
        """The program from keyword settings (those of its class's ``Config`` dataclass, if it has one, gathered into
        it)."""
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


REGISTRY: dict[str, ProgramSpec] = {
    "direct": ProgramSpec(Direct, "closed-book answer, no retrieval"),
    "cot": ProgramSpec(Direct, "closed-book chain of thought", {"reasoning": True}),
    "rag": ProgramSpec(RAG, "retrieve top-k once, then answer"),
    "rag_cited": ProgramSpec(RAG, "rag with the evidence loops' writer (2-4 words citing passages, or I don't "
                                  "know): single pass under the same writer as seal, self_rag and crag",
                             {"cite": True}),
    "rag_cot": ProgramSpec(RAG, "rag with the chain-of-thought writer of rag_critic_cot's and self_refine_cot's "
                                "drafts (and par2's steps): reasoning, then the answer", {"reasoning": True}),
    "mono_rag": ProgramSpec(MultilingualRAG, "top-k from the culture's own corpus (C_own; else the question's "
                                           "language)", {"scope": "own"}, reads=(OWN,)),
    "en_rag": ProgramSpec(MultilingualRAG, "top-k from the English corpus (the CORAL paper's monoRAG row on BLEnD, "
                                           "whose questions are English)", {"scope": "en"}),
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
    "coral_fixed_own": ProgramSpec(CORAL, "CORAL loop ablation: critic loop over the fixed C_own corpus (the "
                                          "single-pass fixed scope is mono_rag)", {"scope": "own"}, reads=(OWN,)),
    "coral_fixed_all": ProgramSpec(CORAL, "CORAL loop ablation: critic loop over the fixed pool of all corpora "
                                          "(the single-pass fixed scope is multi_rag)", {"scope": "all"}),
    "coral_fixed_own_en": ProgramSpec(CORAL, "CORAL loop ablation: critic loop over the fixed C_own + English "
                                             "corpora (the single-pass fixed scope is own_en_rag)",
                                      {"scope": "own_en"}, reads=(OWN,)),
    "own_en_rag": ProgramSpec(MultilingualRAG, "top-k pooled over C_own and the English corpus, one "
                                               "pass (CORAL's fixed C_own ∪ C_en scope)", {"scope": "own_en"},
                              reads=(OWN,)),
    "seal": ProgramSpec(SEAL, "SEAL-RAG: entity ledger, sufficiency gate, one micro-query per repair at fixed k"),
    "seal_ledger": ProgramSpec(SEAL, "seal whose writer also sees the verified ledger facts",
                               {"ledger_to_writer": True}),
    "self_rag": ProgramSpec(SelfRAG, "Self-RAG-style loop: draft, critique, retrieve again or stop (SEAL baseline)"),
    "par2": ProgramSpec(PAR2, "PAR2-RAG: planned sub-queries anchor the context, then ESC-gated draft/search steps"),
    "par2_anchor": ProgramSpec(PAR2, "PAR2-RAG ablation: Coverage Anchor, then one write", {"chain": False}),
    "par2_chain": ProgramSpec(PAR2, "PAR2-RAG ablation: Iterative Chain from the question's own hits",
                              {"anchor": False}),
    "react": ProgramSpec(ReAct, "dspy.ReAct agent with a search tool, loops steps (PAR2 baseline)"),
    "ircot": ProgramSpec(IRCoT, "IRCoT: one chain-of-thought sentence, one search, repeat; PAR2's writer reads what "
                                "was collected (PAR2 baseline)"),
    "crag": ProgramSpec(CRAG, "CRAG-style: grade the top-k, then keep, refine or re-search with a rewritten query "
                              "(SEAL baseline)"),
    "rag_critic": ProgramSpec(RAGCritic, "RAG-Critic: error critic with the 3-tier taxonomy, typed correction plan, "
                                         "dispatcher; draft and corrections by rag's writer"),
    "rag_critic_cot": ProgramSpec(RAGCritic, "rag_critic with rag_cot's chain-of-thought writer for its draft and "
                                             "its corrections", {"cot": True}),
    "rag_critic_2r": ProgramSpec(RAGCritic, "RAG-Critic with a second critic/plan/execute round", {"rounds": 2}),
    "self_refine": ProgramSpec(SelfRefine, "Self-Refine: draft, self-feedback, revise, by rag's writer (RAG-Critic "
                                           "baseline)"),
    "self_refine_cot": ProgramSpec(SelfRefine, "self_refine with rag_cot's chain-of-thought writer for its draft and "
                                               "its revisions", {"cot": True}),
    "flare": ProgramSpec(FLARE, "FLARE: a look-ahead sentence with a token below theta searches with its sure words "
                                "and is written again (RAG-Critic baseline)"),
    "metarag": ProgramSpec(MetaRAG, "MetaRAG: monitor the draft against an expert reader, check own knowledge, "
                                    "passages and reasoning, plan a fix (RAG-Critic baseline)"),
}


def names() -> list[str]:
    return sorted(REGISTRY)


def spec(name: str) -> ProgramSpec:
    if name not in REGISTRY:
        raise ValueError(f"unknown program '{name}'; choose one of: {', '.join(names())}")
    return REGISTRY[name]


def gold_reads(name: str) -> tuple[str, ...]:
    """The gold labels program ``name`` reads in every run, without an oracle role (its spec's ``reads``)."""
    return spec(name).reads


def oracle_roles(name: str) -> tuple[str, ...]:
    """The oracle roles (``programs.shared.oracle``) program ``name`` has a decision for."""
    s = spec(name)
    return s.cls.oracle_roles(**s.fixed) if hasattr(s.cls, "oracle_roles") else getattr(s.cls, "ORACLE_ROLES", ())


def defaults(setting: Setting) -> str:
    """The programs' own defaults of ``setting`` in words, for its flag's help: ``5 for par2, ...; else 3``."""
    by_default: dict = {}
    for name in names():
        if (own := spec(name).settings.get(setting.name)) is not None:
            by_default.setdefault(own.default, []).append(name)
    if len(by_default) == 1:
        return str(next(iter(by_default)))
    most = Counter({d: len(n) for d, n in by_default.items()}).most_common(1)[0][0]
    return "; ".join([*(f"{d} for {', '.join(n)}" for d, n in by_default.items() if d != most), f"else {most}"])


def accepted_config(name: str, config: dict) -> dict:
    """The subset of ``config`` that program ``name`` takes (this is what gets logged as its config); a None value
    (a flag not given) becomes the program's own default, unless None is a value of that setting (``none_ok``)."""
    taken = spec(name).settings
    return {k: taken[k].default if v is None and not taken[k].none_ok else v
            for k, v in config.items() if k in taken}


def run_k(name: str, k: int | None) -> int | None:
    """The k program ``name`` runs at: ``k`` (``--k``) when given, else its method's own; ``k`` as given for a
    program that takes none."""
    return accepted_config(name, {K.name: k}).get(K.name, k)


def build(name: str, search=None, mc: MCScoring | None = None, **config) -> dspy.Module:
    """Build program ``name``; run settings it does not take (e.g. ``loops`` for ``rag``) are left out, anything else
    is refused (ValueError). ``mc``: how its writers pick multiple-choice letters (``decoding.choice``; default: the
    written letter), a choice of the run, not of the program's config (a compiled program does not record it)."""
    s = spec(name)
    if unknown := sorted(set(config) - {setting.name for setting in SETTINGS}):
        raise ValueError(f"build({name!r}): {', '.join(unknown)} is no run setting (those are "
                         f"{', '.join(setting.name for setting in SETTINGS)}); a variant's own arguments are its "
                         "registry entry's: build the registered variant, or ProgramSpec.construct")
    kwargs = {**accepted_config(name, config), **s.fixed, **({"mc": mc} if mc is not None else {})}
    if s.needs_search:
        if search is None:
            raise ValueError(f"program '{name}' needs a retriever: build('{name}', search=Retriever(...))")
        kwargs["search"] = search
    program = s.construct(**kwargs)
    return oracle_writers(program, getattr(program, "oracle", frozenset()))  # the writer role, for every writer
