"""The headline tables, each declared once: the paper it reproduces, its arms (suite entries: a method, the baselines
it is paired with, its datasets, per-arm settings as a one-point grid), the test questions per dataset, the settings
it fixes (flags: retriever, k, corpus, ...), its LM and the metrics it reports (``judge`` among them asks the LLM
judge). Pairs are each entry's method against each of its baselines (``experiments.suite.plan``).

A table's settings are what it is: a run refuses a flag that would change one (``run`` with ``--k`` on a table that
fixes k), but takes any ``--lm``/``--api-base``/roles/``--threads``/``--ray``: the same table against another LM."""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field

from experiments.suite import Entry

LOCAL_LM = "local:qwen-0.5b"


@dataclass(frozen=True)
class Table:
    name: str
    paper: str  # what it reproduces
    entries: tuple[Entry, ...]
    sizes: dict  # dataset -> test questions (train and dev 0: every question is a test question)
    metrics: tuple[str, ...] = ("em", "f1")  # "judge" asks the LLM judge (--judge)
    settings: dict = field(default_factory=dict)  # flag name (``experiments.cli.SETTINGS``) -> value
    lm: str = LOCAL_LM
    kind: str = "suite"  # "suite": run here; "compile": scripts/optimizer_table.py runs its cells
    variants: tuple[str, ...] = ()  # a compile table's arms per program (uncompiled, each optimizer)
    note: str = ""  # what a reader must know: the size the LM time allowed, a default it relies on

    @property
    def datasets(self) -> list[str]:
        return list(dict.fromkeys(d for e in self.entries for d in e.datasets))

    @property
    def judge(self) -> bool:
        return "judge" in self.metrics

    @property
    def programs(self) -> list[str]:
        return list(dict.fromkeys(p for e in self.entries for p in (e.method, *e.baselines)))

    def declaration(self) -> dict:
        """What the table's cells run with, as data: its settings, sizes, metrics, kind, variants and grids. Its LM is
        not in it (a table may run against any LM), nor what only the rendering reads (its arms' pairing, paper, note):
        pairing an arm anew re-renders the runs already made, it does not stale them."""
        out = asdict(self)
        for key in ("lm", "name", "paper", "note", "entries"):
            out.pop(key)
        out["grids"] = [e.grid for e in self.entries if e.grid]
        return out

    def settings_hash(self) -> str:
        return hashlib.sha256(json.dumps(self.declaration(), sort_keys=True, default=str).encode()).hexdigest()[:12]


HOTPOT, TWOWIKI, MUSIQUE = 198, 110, 134  # the shared files' whole sizes (docs/results: the headline sizes)
XRAG_LANGS = ("de", "es", "zh", "ar")

TABLES: dict[str, Table] = {t.name: t for t in (
    Table("demo", "smoke test: rag against the closed-book writer on the bundled demo set",
          (Entry("rag", ("direct",), ("demo",)),), {"demo": 4}),
    Table("hotpot_smoke", "smoke test: rag against the closed-book writer on 4 HotpotQA questions, exported in "
                          "HotpotQA's official format",
          (Entry("rag", ("direct",), ("hotpotqa",)),), {"hotpotqa": 4}, settings={"retriever": "bm25"},
          note="BM25 first stage: no corpus to embed"),
    Table("seal", "SEAL-RAG (Table 2): SEAL vs Self-RAG, CRAG and a single pass under SEAL's writer, at the paper's "
                  "k = 3 and L = 3 (the methods' own defaults)",
          (Entry("seal", ("self_rag", "crag", "rag_cited"), ("hotpotqa", "2wiki")),),
          {"hotpotqa": HOTPOT, "2wiki": TWOWIKI}, ("judge", "em", "f1")),
    Table("par2", "PAR2-RAG: PAR2 vs IRCoT, ReAct, a single pass under its writer (rag_cot), and its ablations "
                  "(anchor only, chain only)",
          (Entry("par2", ("ircot", "react", "rag_cot", "par2_anchor", "par2_chain"), ("musique", "2wiki")),),
          {"musique": MUSIQUE, "2wiki": TWOWIKI}),
    Table("rag_critic", "RAG-Critic: the critic-guided corrector vs its baselines at k = 5",
          (Entry("rag_critic", ("rag", "self_rag", "self_refine", "flare", "metarag"), ("hotpotqa", "2wiki")),
           Entry("rag_critic_cot", ("rag_cot", "self_refine_cot"), ("hotpotqa", "2wiki"))),
          {"hotpotqa": HOTPOT, "2wiki": TWOWIKI}, settings={"k": 5},
          note="method-only pairs: rag_critic - rag (draft and corrections by rag's plain writer) and rag_critic_cot - "
               "rag_cot (both think step by step); self_rag, flare and metarag answer with their own writers"),
    Table("coral", "CORAL: CORAL vs its monolingual, multilingual and translation baselines on BLEnD and CLIcK",
          (Entry("coral", ("direct", "en_rag", "mono_rag", "multi_rag", "own_en_rag", "cross_rag", "t_rag",
                           "coral_select"), ("blend", "click")),),
          {"blend": 48, "click": 30}, ("accuracy",),
          note="n = the default test splits (48, 30), what the 0.5B's time allows; generate-mode decisions "
               "(--mc-scoring generate): calibrated decisions replace them only where they hold its answers"),
    Table("xrag_table4", "XRAG (Table 4 shape): rag vs the closed-book writer per question language, in the full "
                         "(k = 8: supporting + distractors), oracle and open retrieval settings",
          tuple(Entry("rag", ("direct",), tuple(f"{prefix}:{lang}" for lang in XRAG_LANGS), grid)
                for prefix, grid in (("xrag_mono", {"k": (8,)}), ("xrag_mono_oracle", {}), ("xrag_mono_open", {}))),
          {f"{prefix}:{lang}": 20 for prefix in ("xrag_mono", "xrag_mono_oracle", "xrag_mono_open")
           for lang in XRAG_LANGS}, ("judge",),
          note="n = 20 XQuAD questions per language and setting (the size the LM time allows), judged by the 1.5B "
               "alone (the default panel: the writer's 0.5B never judges its own answers)"),
    Table("compile", "Compiling: each seed method uncompiled vs bootstrapped (self and oracle teacher) vs MIPROv2, "
                     "paired on held-out test questions",
          (Entry("rag", (), ("hotpotqa",)), Entry("seal", (), ("hotpotqa",)), Entry("par2", (), ("musique",))),
          {"hotpotqa": 98, "musique": 84}, settings={"train": 50, "dev": 50},
          kind="compile", variants=("uncompiled", "bootstrap", "bootstrap (oracle teacher)", "mipro"),
          note="train 50 / dev 50 / test the rest of the shared file; run by scripts/optimizer_table.py per program "
               "(the oracle-teacher cell: optimize.py --teacher oracle)"),
)}
