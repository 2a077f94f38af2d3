import json
import os
from pathlib import Path

import pytest

import data
from data import demo

# Made-up records in the original HotpotQA dev-distractor layout (not benchmark text).
FIXTURE = [
    {"_id": "q1", "answer": "Lyon", "question": "Where was the painter of Blue Fox born?",
     "supporting_facts": [["Blue Fox", 0], ["Ana Berg", 1]],
     "context": [["Blue Fox", ["Blue Fox is a painting", " by Ana Berg."]], ["Ana Berg", ["Ana Berg is a painter.",
                 " She was born in Lyon."]], ["Red Owl", ["Red Owl is a sculpture."]]],
     "type": "bridge", "level": "easy"},
    {"_id": "q2", "answer": "Red Owl", "question": "Which is older, Red Owl or Blue Fox?",
     "supporting_facts": [["Red Owl", 0], ["Blue Fox", 0]],
     "context": [["Red Owl", ["Red Owl is a sculpture."]], ["Blue Fox", ["Blue Fox is a painting", " by Ana Berg."]]],
     "type": "comparison", "level": "hard"},
]


@pytest.fixture
def hotpot_dir(tmp_path):
    (tmp_path / "hotpotqa").mkdir()
    (tmp_path / "hotpotqa" / "dev_distractor_sample.json").write_text(json.dumps(FIXTURE))
    return tmp_path


def test_hotpotqa_pools_context_paragraphs_once_per_title(hotpot_dir):
    bundle = data.load("hotpotqa", hotpot_dir)
    (corpus,) = bundle.corpora
    assert sorted(d["title"] for d in corpus.docs) == ["Ana Berg", "Blue Fox", "Red Owl"]
    assert next(d["text"] for d in corpus.docs if d["title"] == "Ana Berg") == "Ana Berg is a painter. She was born in Lyon."
    q1 = next(ex for ex in bundle.examples if ex.id == "q1")
    assert q1.gold_titles == ["Ana Berg", "Blue Fox"] and q1.answers == ["Lyon"] and set(q1.inputs().keys()) == {"question"}


def test_missing_data_file_names_path_and_env(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match=r"hotpotqa/dev_distractor_sample.json.*RAG_DATA_DIR"):
        data.load("hotpotqa", tmp_path)
    monkeypatch.delenv("RAG_DATA_DIR", raising=False)
    with pytest.raises(FileNotFoundError, match="RAG_DATA_DIR"):
        data.load("hotpotqa")


def test_unknown_dataset_names_the_choices():
    with pytest.raises(ValueError, match="demo, demo_culture, hotpotqa"):
        data.load("squad")


def test_splits_are_seeded_disjoint_and_order_independent():
    examples = demo.load_multihop().examples
    a = data.split(examples, 5, 5, 5, seed=1)
    b = data.split(list(reversed(examples)), 5, 5, 5, seed=1)
    assert a.ids() == b.ids()
    ids = a.ids()
    assert len(set(ids["train"]) | set(ids["dev"]) | set(ids["test"])) == 15
    assert data.split(examples, 5, 5, 5, seed=2).ids() != ids
    with pytest.raises(ValueError, match="lower --train/--dev/--test"):
        data.split(examples, 10, 10, 10)


def test_circular_copies_put_every_option_at_every_letter():
    ex = data.load("demo_culture").examples[0]
    copies = data.circular([ex])
    assert [c.id for c in copies] == [f"{ex.id}#r{i}" for i in range(4)] and {c.base_id for c in copies} == {ex.id}
    assert copies[0].options == ex.options and copies[0].answer == ex.answer
    for letter in ex.options:  # each text, the gold one included, stands at this letter in exactly one copy
        assert sorted(c.options[letter] for c in copies) == sorted(ex.options.values())
    assert sorted(c.answer for c in copies) == list("ABCD")
    assert all(c.options[c.answer] == ex.options[ex.answer] and c.answers == [c.answer] for c in copies)
    assert copies[2].inputs().keys() == ex.inputs().keys()


def test_circular_refuses_examples_without_options():
    with pytest.raises(ValueError, match="has no options"):
        data.circular(data.load("demo").examples[:1])


def test_demo_sets_are_consistent():
    mh = demo.load_multihop()
    titles = {d["title"] for d in mh.corpora[0].docs}
    assert len(mh.examples) == 20 and all(set(ex.gold_titles) <= titles for ex in mh.examples)
    cu = demo.load_culture()
    langs = {c.name for c in cu.corpora}
    assert len(cu.examples) >= 40 and {"en"} < langs and len(langs) >= 6
    assert all(ex.answer in ex.options and ex.lang in langs for ex in cu.examples)
    assert cu.task == "mcq" and set(cu.examples[0].inputs().keys()) == {"question", "options", "lang"}


@pytest.mark.skipif(not os.environ.get("RAG_DATA_DIR"), reason="needs RAG_DATA_DIR with the shared benchmark files")
def test_real_hotpotqa_matches_manifest_counts():
    bundle = data.load("hotpotqa")
    assert len(bundle.examples) == 198  # MANIFEST: 198 shared examples (140 bridge, 58 comparison)
    assert sum(ex.type == "bridge" for ex in bundle.examples) == 140
    titles = {d["title"] for d in bundle.corpora[0].docs}
    assert all(set(ex.gold_titles) <= titles for ex in bundle.examples)
    assert Path(bundle.source).name == "dev_distractor_sample.json"
