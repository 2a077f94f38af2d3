import json
import os
from pathlib import Path

import pytest

import data
from data.settings import SPLIT_SIZES


def para(idx, title, text, supporting=False):
    return {"idx": idx, "title": title, "paragraph_text": text, "is_supporting": supporting}


# Made-up records in the original MuSiQue-Ans jsonl layout (not benchmark text). "Kel Ora" has two different
# paragraphs (both kept), and the "Moss Bay" paragraph recurs verbatim in the second record (kept once).
FIXTURE = [
    {"id": "2hop__11_22", "question": "In which country is the town where Tova Lind was born?",
     "paragraphs": [para(0, "Tova Lind", "Tova Lind was born in Kel Ora.", True),
                    para(1, "Kel Ora", "Kel Ora is a town in Norvania.", True),
                    para(2, "Kel Ora", "Kel Ora hosts a yearly fair."),
                    para(3, "Moss Bay", "Moss Bay is a lagoon.")],
     "question_decomposition": [{"id": 11, "question": "Tova Lind >> place of birth", "answer": "Kel Ora",
                                 "paragraph_support_idx": 0},
                                {"id": 22, "question": "#1 >> country", "answer": "Norvania",
                                 "paragraph_support_idx": 1}],
     "answer": "Norvania", "answer_aliases": ["Republic of Norvania"], "answerable": True},
    {"id": "3hop1__33_44_55", "question": "What lagoon lies next to the fair town's sister city?",
     "paragraphs": [para(0, "Moss Bay", "Moss Bay is a lagoon.", True),
                    para(1, "Kel Ora", "Kel Ora hosts a yearly fair.", True)],
     "question_decomposition": [], "answer": "Moss Bay", "answer_aliases": [], "answerable": True},
]


def write(tmp_path, name="musique_ans_dev_sample.jsonl"):
    (tmp_path / "musique").mkdir()
    (tmp_path / "musique" / name).write_text("\n".join(json.dumps(r) for r in FIXTURE) + "\n")
    return tmp_path


def test_musique_pools_paragraphs_once_per_title_and_text(tmp_path):
    bundle = data.load("musique", write(tmp_path))
    (corpus,) = bundle.corpora
    assert bundle.name == "musique" and bundle.task == "short" and corpus.name == "musique"
    assert sorted((d["title"], d["text"]) for d in corpus.docs) == [
        ("Kel Ora", "Kel Ora hosts a yearly fair."), ("Kel Ora", "Kel Ora is a town in Norvania."),
        ("Moss Bay", "Moss Bay is a lagoon."), ("Tova Lind", "Tova Lind was born in Kel Ora.")]
    first = next(ex for ex in bundle.examples if ex.id == "2hop__11_22")
    assert first.gold_titles == ["Kel Ora", "Tova Lind"]
    ids = {d["text"]: f"musique:{d['id']}" for d in corpus.docs}  # gold by paragraph: the fair paragraph is not
    assert first.gold_ids == sorted([ids["Tova Lind was born in Kel Ora."], ids["Kel Ora is a town in Norvania."]])
    assert first.answers == ["Norvania", "Republic of Norvania"] and first.type == "2hop"
    assert set(first.inputs().keys()) == {"question"}
    assert SPLIT_SIZES["musique"] == (20, 30, 50)


def test_musique_accepts_the_full_dev_file_name_and_names_the_missing_path(tmp_path):
    assert len(data.load("musique", write(tmp_path, "musique_ans_v1.0_dev.jsonl")).examples) == 2
    with pytest.raises(FileNotFoundError, match=r"musique/musique_ans_dev_sample.jsonl.*RAG_DATA_DIR"):
        data.load("musique", tmp_path / "empty")


@pytest.mark.skipif(not os.environ.get("RAG_DATA_DIR"), reason="needs RAG_DATA_DIR with the shared benchmark files")
def test_real_musique_matches_manifest_counts():
    bundle = data.load("musique")
    assert len(bundle.examples) == 134  # MANIFEST: 134 shared examples
    titles = {d["title"] for d in bundle.corpora[0].docs}
    assert all(ex.gold_titles and set(ex.gold_titles) <= titles for ex in bundle.examples)
    assert Path(bundle.source).name == "musique_ans_dev_sample.jsonl"
