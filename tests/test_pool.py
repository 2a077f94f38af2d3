"""The harder English open-retrieval settings: every multi-hop source searched as one pool, and its windowed form."""
import json

import pytest

from data import corpora
from tests.test_corpora import XQUAD
from tests.test_data import FIXTURE as HOTPOT
from tests.test_twowiki import FIXTURE as TWOWIKI


@pytest.fixture
def pool_dir(tmp_path):
    for folder, name, records in (("hotpotqa", "dev_distractor_sample.json", HOTPOT),
                                  ("2wikimultihopqa", "dev_sample.json", TWOWIKI),
                                  ("xquad", "xquad.en.json", XQUAD)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / name).write_text(json.dumps(records), encoding="utf-8")
    return tmp_path  # no MuSiQue file: a missing source is skipped


def test_pool_searches_every_present_source_and_the_hotpotqa_questions_keep_their_gold(pool_dir):
    bundle = corpora.load("hotpotqa", str(pool_dir), "multihop_pool", True)
    assert [c.name for c in bundle.corpora] == ["hotpotqa", "2wiki", "xquad_en"]
    assert bundle.examples[0].gold_titles == ["Ana Berg", "Blue Fox"] and all(c.lang == "en" for c in bundle.corpora)
    assert corpora.load("hotpotqa", str(pool_dir), "bundled", True).corpora[0].docs == bundle.corpora[0].docs


def test_windowed_pool_cuts_distinct_paragraphs_into_titled_sentence_windows(pool_dir):
    pool = corpora.multihop_pool(pool_dir, window=1)
    assert pool.name == "pool_en" and len({d["id"] for d in pool.docs}) == len(pool)
    berg = [d for d in pool.docs if d["title"] == "Ana Berg" and d["id"].startswith("hotpotqa/")]
    assert [d["text"] for d in berg] == ["Ana Berg is a painter.", "She was born in Lyon."]
    assert berg[1]["id"].endswith("#w1") and any(d["id"].startswith("2wiki/") for d in pool.docs)
    assert corpora.sentence_windows([{"id": "a", "title": "t", "text": "One. Two! Three? Four."}], 3) == [
        {"id": "a#w0", "title": "t", "text": "One. Two! Three?"}, {"id": "a#w1", "title": "t", "text": "Four."}]


def test_pool_needs_some_multihop_data(tmp_path):
    assert corpora.source_arg("multihop_pool") == "multihop_pool"
    with pytest.raises(FileNotFoundError, match="RAG_DATA_DIR"):
        corpora.multihop_sources(tmp_path)
