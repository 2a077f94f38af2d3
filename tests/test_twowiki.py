import json
import os
from pathlib import Path

import pytest

import data
from data.settings import SPLIT_SIZES

# Made-up records in the original 2WikiMultiHopQA dev layout (not benchmark text): sentences carry no leading space.
FIXTURE = [
    {"_id": "w1", "type": "compositional", "question": "Where was the director of film Blue Fox born?",
     "context": [["Blue Fox", ["Blue Fox is a 1931 film.", "It was directed by Ana Berg."]],
                 ["Ana Berg", ["Ana Berg was a director.", "She was born in Lyon."]],
                 ["Red Owl", ["Red Owl is a sculpture."]]],
     "supporting_facts": [["Blue Fox", 1], ["Ana Berg", 1]],
     "evidences": [["Blue Fox", "director", "Ana Berg"], ["Ana Berg", "place of birth", "Lyon"]],
     "answer": "Lyon", "entity_ids": "Q1_Q2",
     "evidences_id": [["Q1", "director", "Q2"], ["Q2", "place of birth", "Q3"]], "answer_id": "Q3"},
    {"_id": "w2", "type": "comparison", "question": "Which was made first, Red Owl or Blue Fox?",
     "context": [["Red Owl", ["Red Owl is a sculpture."]], ["Blue Fox", ["Blue Fox is a 1931 film.",
                                                                          "It was directed by Ana Berg."]]],
     "supporting_facts": [["Red Owl", 0], ["Blue Fox", 0]],
     "evidences": [["Red Owl", "inception", "1920"], ["Blue Fox", "publication date", "1931"]],
     "answer": "Red Owl", "entity_ids": "Q4_Q1", "evidences_id": [], "answer_id": "Q4"},
]


def write(tmp_path, name="dev_sample.json"):
    (tmp_path / "2wikimultihopqa").mkdir()
    (tmp_path / "2wikimultihopqa" / name).write_text(json.dumps(FIXTURE))
    return tmp_path


def test_twowiki_pools_paragraphs_once_per_title_with_spaced_sentences(tmp_path):
    bundle = data.load("2wiki", write(tmp_path))
    (corpus,) = bundle.corpora
    assert bundle.name == "2wiki" and bundle.task == "short" and corpus.name == "2wiki"
    assert sorted(d["title"] for d in corpus.docs) == ["Ana Berg", "Blue Fox", "Red Owl"]
    assert next(d["text"] for d in corpus.docs if d["title"] == "Blue Fox") == \
        "Blue Fox is a 1931 film. It was directed by Ana Berg."
    w1 = next(ex for ex in bundle.examples if ex.id == "w1")
    assert w1.gold_titles == ["Ana Berg", "Blue Fox"] and w1.answers == ["Lyon"] and w1.type == "compositional"
    assert set(w1.inputs().keys()) == {"question"}
    assert SPLIT_SIZES["2wiki"] == (20, 30, 50)


def test_twowiki_accepts_the_full_dev_file_name_and_names_the_missing_path(tmp_path):
    assert len(data.load("2wiki", write(tmp_path, "dev.json")).examples) == 2
    with pytest.raises(FileNotFoundError, match=r"2wikimultihopqa/dev_sample.json.*RAG_DATA_DIR"):
        data.load("2wiki", tmp_path / "empty")


def test_a_file_replaced_with_its_mtime_kept_is_read_and_keyed_as_the_new_data(tmp_path):
    """``cp -p``, ``rsync -a`` and ``tar x`` keep a file's mtime: HF ``datasets`` keys its Arrow cache by path and
    mtime, so the loader must key it by content, or it serves the old gold answers under the old fingerprint."""
    root = write(tmp_path)
    path = root / "2wikimultihopqa" / "dev_sample.json"
    before = data.load("2wiki", root)
    stat = path.stat()
    path.write_text(json.dumps(FIXTURE).replace('"answer": "Lyon"', '"answer": "Nice"'))  # the same size
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == stat.st_size and path.stat().st_mtime_ns == stat.st_mtime_ns
    after = data.load("2wiki", root)
    assert next(ex.answer for ex in before.examples if ex.id == "w1") == "Lyon"
    assert next(ex.answer for ex in after.examples if ex.id == "w1") == "Nice"
    assert after.fingerprint != before.fingerprint  # result checkpoints are keyed by it
    path.write_text(json.dumps(FIXTURE))  # the old content again: its cached rows and its key
    assert data.load("2wiki", root).fingerprint == before.fingerprint


@pytest.mark.skipif(not os.environ.get("RAG_DATA_DIR"), reason="needs RAG_DATA_DIR with the shared benchmark files")
def test_real_twowiki_matches_manifest_counts():
    bundle = data.load("2wiki")
    assert len(bundle.examples) == 110  # MANIFEST: 110 shared examples
    titles = {d["title"] for d in bundle.corpora[0].docs}
    assert all(ex.gold_titles and set(ex.gold_titles) <= titles for ex in bundle.examples)
    assert Path(bundle.source).name == "dev_sample.json"
