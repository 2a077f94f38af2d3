"""The docs show what the table mechanism wrote and lead somewhere: docs/results.md holds no hand-pasted table outside
its generated block, every archived result file says what code it was measured on and which declared table (if any)
supersedes it, and every relative link in README.md and docs/ names an existing file and, in a markdown file, an
existing heading. No LM, no data."""
import re
from pathlib import Path
from urllib.parse import unquote

import pytest

from experiments.tables.declared import TABLES
from experiments.tables.render import INDEX

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results.md"
ARCHIVE = ROOT / "docs" / "results" / "archive"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
ROW = re.compile(r"^\s*\|.*\|\s*$", re.M)


def prose(path: Path) -> str:
    """The page without its fenced code blocks (a link or heading in a code sample is not one)."""
    return FENCE.sub("", path.read_text(encoding="utf-8"))


def anchors(path: Path) -> set[str]:
    """The heading anchors GitHub gives a markdown page: lower case, punctuation dropped, spaces as hyphens, a
    repeated heading suffixed -1, -2, ..."""
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#{1,6}\s+(.*?)\s*#*\s*$", prose(path), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        out.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    return out


def test_results_md_holds_no_table_outside_its_generated_block():
    text = RESULTS.read_text(encoding="utf-8")
    assert INDEX.search(text), "docs/results.md lost its <!-- tables:begin --> ... <!-- tables:end --> markers"
    pasted = ROW.findall(INDEX.sub("", text))
    assert not pasted, f"docs/results.md holds a hand-pasted table (render it, or archive it): {pasted[:3]}"


def test_each_archived_file_says_what_it_was_measured_on_and_results_md_lists_it():
    files = sorted(p for p in ARCHIVE.glob("*.md") if p.name != "README.md")
    assert files, "docs/results/archive/ holds no archived result file"
    listed = set(LINK.findall(RESULTS.read_text(encoding="utf-8")))
    for path in files:
        head = re.sub(r"\n> ", " ", path.read_text(encoding="utf-8").split("\n\n", 2)[1])  # the block, one line
        assert head.startswith("> **Archived on "), f"{path.name}: no archive block under its title"
        assert re.search(r"last measured in [0-9a-f]{7,}", head), f"{path.name}: names no commit it was measured on"
        assert "not regenerated and may not hold for today's code" in head, path.name
        named = re.findall(r"declared table `(\w+)`", head)
        assert named or "No declared table" in head, f"{path.name}: says nothing of the declared table"
        assert set(named) <= set(TABLES), f"{path.name}: names a table nobody declares: {named}"
        assert f"results/archive/{path.name}" in listed, f"docs/results.md does not list {path.name}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    broken = []
    for target in LINK.findall(prose(page)):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, mailto:, ...
            continue
        name, _, anchor = unquote(target).partition("#")
        path = (page.parent / name).resolve() if name else page
        if not path.exists():
            broken.append(f"{target} (no file)")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{target} (no such heading)")
    assert not broken, f"{page.relative_to(ROOT)}: broken links: {broken}"
