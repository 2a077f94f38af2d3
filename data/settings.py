"""The data settings, declared once (``runtime.settings.Setting``): the dataset, its corpora and the seeded split. The
command line's flags, the checkpoint key and a compiled program's ``data`` (which evaluating it reuses: the same test
questions as its compile's) are read from here."""
from __future__ import annotations

import data as datasets
from data import corpora
from runtime.settings import Setting

#: Split sizes (train, dev, test) where ``--train``/``--dev``/``--test`` are not given.
SPLIT_SIZES = {"demo": (8, 6, 6), "demo_culture": (12, 15, 15), "hotpotqa": (20, 30, 50), "2wiki": (20, 30, 50),
               "blend": (16, 16, 48), "blend_short": (16, 16, 48), "click": (16, 16, 30), "musique": (20, 30, 50),
               "nq": (20, 30, 100), "triviaqa": (20, 30, 100)}  # the open sets: RAG-Critic scores 100 test questions
OTHER_SIZES = (20, 30, 50)

DATASET = Setting("dataset", str, None, "default: the program's demo set (demo, or demo_culture for multilingual "
                  "programs)", choices=tuple(datasets.names()))
CORPUS = Setting("corpus", str, None, "retrieval corpora (default per dataset: blend_kb for blend/blend_short/click, "
                 "else bundled)", check=corpora.known, choices=tuple(corpora.SOURCES),
                 external=lambda v: v.startswith(corpora.PREFIXED))
SOURCE = (
    CORPUS,
    Setting("leave_question_out", bool, True, "hide the blend_kb documents rendered from the evaluated question's own "
            "annotations"),
    Setting("max_docs", int, None, "documents per language read by --corpus jsonl:DIR (default all) and "
            "wikipedia:LANGS (default 1000), before cutting into passages", 1, none_ok=True),
)
#: The seeded split: sizes None take the dataset's (:data:`SPLIT_SIZES`).
SPLIT = (Setting("train", int, None, "train size (default per dataset)"),
         Setting("dev", int, None, "dev size (default per dataset)"),
         Setting("test", int, None, "test size (default per dataset)"),
         Setting("seed", int, 13, "split seed"))
SETTINGS = (DATASET, *SOURCE, *SPLIT)


def split_sizes(dataset: str, train: int | None, dev: int | None, test: int | None) -> tuple[int, int, int]:
    """The (train, dev, test) sizes of ``dataset``'s split: those given, the dataset's own for those left out."""
    return tuple(n if n is not None else d
                 for n, d in zip((train, dev, test), SPLIT_SIZES.get(dataset, OTHER_SIZES)))
