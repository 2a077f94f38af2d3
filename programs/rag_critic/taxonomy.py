"""RAG-Critic's three-tier error taxonomy (tier-1 -> tier-2 -> tier-3 labels), read at run time, and the snapping
of model-written labels onto it (a closed set: nearest valid label by string similarity, or dropped).

The file is the RAG-Critic release's ``all_tags_structure_final.json`` under ``$RAG_DATA_DIR/rag_critic/``: a list of
``{"idx", "tag1", "tag2", "tag3": [...]}`` objects, one per tier-2 label.
"""
from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from data import data_dir, require_file
from programs.shared.text import normalize

TAXONOMY_FILE = "rag_critic/all_tags_structure_final.json"
SNAP_CUTOFF = 0.6  # difflib ratio below which a written label is dropped instead of snapped


@dataclass(frozen=True)
class Taxonomy:
    """tier1/tier2: labels in file order; parent: tier-2 -> tier-1; children: tier-2 -> its tier-3 labels;
    tier3_parent: tier-3 -> tier-2 (kept apart: some tier-3 labels reuse a tier-2 label's words)."""

    tier1: tuple[str, ...]
    tier2: tuple[str, ...]
    parent: dict[str, str] = field(repr=False)
    children: dict[str, tuple[str, ...]] = field(repr=False)
    tier3_parent: dict[str, str] = field(repr=False)

    @classmethod
    def from_entries(cls, entries: list[dict]) -> "Taxonomy":
        tier1, parent, children, tier3_parent = [], {}, {}, {}
        for i, e in enumerate(entries):
            if not {"tag1", "tag2", "tag3"} <= e.keys():
                raise ValueError(f"taxonomy entry #{i} lacks tag1/tag2/tag3; expected the RAG-Critic "
                                 f"all_tags_structure_final.json format")
            if e["tag1"] not in tier1:
                tier1.append(e["tag1"])
            parent[e["tag2"]] = e["tag1"]
            children[e["tag2"]] = tuple(e["tag3"])
            tier3_parent.update({t3: e["tag2"] for t3 in e["tag3"]})
        return cls(tuple(tier1), tuple(children), parent, children, tier3_parent)

    @property
    def tier3(self) -> tuple[str, ...]:
        return tuple(t for labels in self.children.values() for t in labels)

    def tier2_of(self, tier1: str) -> tuple[str, ...]:
        return tuple(t2 for t2 in self.tier2 if self.parent[t2] == tier1)

    def tier2_lines(self) -> list[str]:
        """``tier-1: tier-2`` for every tier-2 label: the menu the critic picks from."""
        return [f"{self.parent[t2]}: {t2}" for t2 in self.tier2]


def load_taxonomy(data_dir_: str | Path | None = None) -> Taxonomy:
    """The taxonomy from ``<data dir>/rag_critic/all_tags_structure_final.json`` (one-line error when missing)."""
    return _load(require_file(data_dir(data_dir_), TAXONOMY_FILE))


@cache
def _load(path: Path) -> Taxonomy:
    return Taxonomy.from_entries(json.loads(path.read_text(encoding="utf-8")))


@cache
def _keys(choices: tuple[str, ...]) -> dict[str, str]:
    return {normalize(c): c for c in choices}


def snap(label: str, choices: tuple[str, ...], cutoff: float = SNAP_CUTOFF) -> str | None:
    """The valid label ``label`` means: itself (case/punctuation aside), else the most similar one by difflib
    ratio if at least ``cutoff``, else None (drop it)."""
    keys = _keys(choices)
    key = normalize(label)
    if not key:
        return None
    if key in keys:
        return keys[key]
    close = difflib.get_close_matches(key, list(keys), n=1, cutoff=cutoff)
    return keys[close[0]] if close else None
