"""``scripts/embed_corpora.py`` (run by ``make setup``): builds a dataset's indexes into the index cache once, and
a bad spec stops it with one line naming the spec."""
import os
from pathlib import Path

import pytest

from scripts.embed_corpora import main


@pytest.mark.parametrize("spec, problem", [("nosuch", "unknown dataset 'nosuch'"),
                                           ("demo=nosuch", "unknown retriever 'nosuch'")])
def test_a_bad_spec_stops_with_one_line_naming_it(spec, problem):
    with pytest.raises(SystemExit) as stop:
        main(["demo=bm25", spec])
    assert str(stop.value).startswith(f"error: {spec}: {problem}") and "\n" not in str(stop.value)


def test_indexes_are_built_once_into_the_index_cache(capsys):
    main(["demo=bm25"])
    built = [p for p in Path(os.environ["RAG_INDEX_DIR"]).glob("demo_en-*-bm25s-*") if p.is_dir()]
    assert len(built) == 1 and (built[0] / "meta.json").exists()
    stamp = (built[0] / "meta.json").stat().st_mtime_ns
    main(["demo=bm25"])
    assert (built[0] / "meta.json").stat().st_mtime_ns == stamp  # found in the cache, not built again
    assert capsys.readouterr().out.splitlines()[0].startswith("demo=bm25: 65 documents in 1 corpora indexed")
