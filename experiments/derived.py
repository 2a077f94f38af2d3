"""What a run's resolved settings derive, with no data read and no LM started: the config and oracle roles each
program is built with, the settings a compiled program keeps, and the LMs the run asks (as its params name them and
as its checkpoints pin them). A session holds one (:class:`experiments.sessions.Session`); a test builds one from
parsed settings alone."""
from __future__ import annotations

from dataclasses import dataclass

import programs
from data import corpora as sources
from data import settings as data_settings
from evaluation import settings as evaluation_settings
from experiments.cli import fail
from programs import registry
from programs.shared.oracle import ALL, expand, parse_roles
from retrieval import settings as retrieval_settings
from runtime import models
from runtime.lm import LOCAL_PREFIX, engine, prompt_cache_mb
from runtime.settings import Settings


@dataclass(frozen=True)
class Derived:
    """``args``: the run's settings as resolved (``experiments.sessions.session``); ``task``: its dataset's (an
    XRAG dataset's answers are judged by a panel)."""
    args: Settings
    task: str

    @property
    def config(self) -> dict:
        """The settings the run passes to programs (``registry.SETTINGS``); an ``omit_default`` one is left out at it.
        ``max_chars`` None is whole passages."""
        values = self.args.of(registry.SETTINGS)
        return {s.name: values[s.name] for s in registry.SETTINGS
                if not (s.omit_default and values[s.name] == s.default)}

    @property
    def data(self) -> dict:
        """What rebuilds the run's retriever and its split (``data.settings``, ``retrieval.settings``): a compiled
        program's ``data``."""
        return self.args.of((*data_settings.SETTINGS, *retrieval_settings.SETTINGS))

    def oracle(self, program_name: str) -> str:
        """The ``--oracle`` roles program ``program_name`` has (``""`` when none), as it is built: ``all`` for
        ``--oracle all`` (every role it has)."""
        return program_oracle(self.args.oracle, program_name)

    def program_config(self, program_name: str, oracle: str | None = None) -> dict:
        """:attr:`config` as program ``program_name`` takes it, its own ``--oracle`` roles only (``oracle``: roles
        asked in place of ``--oracle``'s, e.g. ``all`` for an oracle teacher)."""
        config = self.config
        config.pop("oracle", None)
        if roles := program_oracle(self.args.oracle if oracle is None else oracle, program_name):
            config["oracle"] = roles  # none of its roles: as a run without --oracle
        return programs.accepted_config(program_name, config)

    def lm_ids(self) -> dict:
        """The LM settings (``evaluation.settings.LMS``) as run: a role's LM left out is ``--lm``."""
        a = self.args
        return {s.name: getattr(a, s.name) or (a.lm if s.name.endswith("_lm") else "") for s in evaluation_settings.LMS}

    @property
    def judge_lms(self) -> list[str]:
        """The LMs of the XRAG judge panel that scores this run's answers (:func:`judge_panel`); none when no panel
        does (no ``--judge``, or not an XRAG dataset)."""
        return judge_panel(self.args) if self.args.judge and self.task == "xrag" else []

    @property
    def judged_by(self) -> str:
        """Who judges this run's answers, as report titles name it: the XRAG panel (``+``-joined), else the judge LM;
        ``-`` without ``--judge``."""
        a = self.args
        return (panel_note(self.judge_lms, a.lm) or "+".join(self.judge_lms)
                or (a.judge_lm or a.lm if a.judge else "-"))

    def model_ids(self) -> dict:
        """The models behind the answers and their scores, as checkpoints are keyed: :meth:`lm_ids` with each local
        model pinned by its file's sha256 (the one ``runtime.models.verify`` checks) and the XRAG judge panel."""
        return ({role: pinned(lm) for role, lm in self.lm_ids().items()}
                | ({"judge_lms": [pinned(lm) for lm in self.judge_lms]} if self.judge_lms else {}))

    def corpus_params(self) -> dict:
        """Where the run's corpus comes from (``data.corpora.provenance``)."""
        a = self.args
        return sources.provenance(a.dataset, a.corpus, a.leave_question_out, a.max_docs)


def program_oracle(text: str, program_name: str) -> str:
    """The ``--oracle`` roles (``text``) program ``program_name`` has, as its run is named and it is built: ``all``
    for ``all`` when it has any role, else those it has, comma-separated ("" when none)."""
    requested, own = parse_roles(text), programs.oracle_roles(program_name)
    return ALL if ALL in requested and own else ",".join(expand(requested, own))


def judge_panel(args: Settings) -> list[str]:
    """The XRAG judge panel: ``--judge-lms``, else the local LMs (``runtime.models``) but the generator's (``--lm``):
    the paper judges by a panel's majority, and no judge judges its own answers (with one other LM, that one judges
    alone: :func:`panel_note`). ``--judge-lms`` naming the generator's LM stops the run in one line."""
    if not args.judge_lms:
        return [LOCAL_PREFIX + name for name in models.MODELS if LOCAL_PREFIX + name != args.lm]
    panel = [m.strip() for m in args.judge_lms.split(",") if m.strip()]
    if args.lm in panel:
        fail(f"--judge-lms names the generator's LM {args.lm}: a judge never judges its own answers; "
             f"name other judge LMs (e.g. --judge-lms {','.join(m for m in panel if m != args.lm) or 'A,B,C'})")
    return panel


def panel_note(panel: list[str], lm: str) -> str:
    """What a report says of a one-judge panel: that judge alone, the generator's LM never on its panel."""
    return f"{panel[0]} alone (the generator's LM {lm} never judges its own answers)" if len(panel) == 1 else ""


def pinned(lm: str) -> str:
    """``lm`` with a local model's sha256, its server's prompt cache and its engine build (resuming another prefix,
    or other kernels, can move a near tie: docs/results/infrastructure.md):
    ``local:qwen-0.5b@sha256:...+cache1024MB+llama-cpp-python-0.3.36[AVX,...]``; any other LM as it is named."""
    if not lm.startswith(LOCAL_PREFIX):
        return lm
    return f"{lm}@sha256:{models.spec(lm[len(LOCAL_PREFIX):]).sha256}+cache{prompt_cache_mb()}MB+{engine()}"
