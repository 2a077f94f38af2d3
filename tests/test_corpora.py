"""Corpus builders (--corpus) and the leave-one-out exclusion in shared retrieval."""
import json
import os

import pytest

import data
from data import corpora
from data.demo import load_culture
from experiments import cli
from retrieval.corpus import Corpus, excluded
from retrieval.retriever import Retriever

XQUAD = {"version": "1.1", "data": [
    {"title": "Blue_Lake", "paragraphs": [{"context": "Blue Lake is a made-up lake.", "qas": []},
                                          {"context": "Blue Lake is a made-up lake.", "qas": []},
                                          {"context": "Its water is cold all year.", "qas": []}]},
    {"title": "Red_Hill", "paragraphs": [{"context": "Red Hill is a made-up hill.", "qas": []}]}]}


def test_jsonl_source_cuts_long_texts_into_passages(tmp_path):
    long_text = " ".join(f"Sentence number {i} is here." for i in range(80))
    rows = [{"id": "a", "title": "Long", "text": long_text}, {"id": "b", "title": "Short", "text": "Hi there."}]
    (tmp_path / "ko.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    (tmp_path / "en.jsonl").write_text(json.dumps(rows[1]) + "\n", encoding="utf-8")
    built = {c.name: c for c in corpora.build(f"jsonl:{tmp_path}", None)}
    assert set(built) == {"en", "ko"} and built["ko"].lang == "ko"
    ids = [d["id"] for d in built["ko"].docs]
    assert ids[0] == "a#0" and ids[-1] == "b" and len(ids) > 2
    assert all(len(d["text"]) <= 1500 for d in built["ko"].docs)
    assert " ".join(d["text"] for d in built["ko"].docs[:-1]) == long_text
    capped = corpora.jsonl(tmp_path, max_chars=200, max_docs=1)[1]  # the first document, in passages
    assert len(capped) > 1 and {d["id"].split("#")[0] for d in capped.docs} == {"a"}
    with pytest.raises(FileNotFoundError, match="no <lang>.jsonl"):
        corpora.build(f"jsonl:{tmp_path / 'missing'}", None)


def test_wikipedia_source_streams_capped_articles_per_language(monkeypatch):
    import datasets

    asked = []

    def fake_load_dataset(name, config, split, streaming):
        asked.append((name, config, split, streaming))
        if config.endswith(".xx"):
            raise FileNotFoundError("Dataset 'wikimedia/wikipedia' doesn't exist on the Hub\nmore detail")
        lang = config.split(".")[1]
        return iter({"id": str(i), "title": f"{lang} {i}", "text": "Sentence. " * (i * 200 + 1), "url": "u"}
                    for i in range(10**6))  # an endless stream: only max_docs rows may be read

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    assert corpora.source_arg("wikipedia:en,ko") == "wikipedia:en,ko"
    en, ko = corpora.build("wikipedia:en,ko", None, max_docs=2)
    assert asked == [("wikimedia/wikipedia", "20231101.en", "train", True),
                     ("wikimedia/wikipedia", "20231101.ko", "train", True)]
    assert (en.name, ko.lang) == ("en", "ko") and {d["title"] for d in ko.docs} == {"ko 0", "ko 1"}
    assert [d["id"] for d in en.docs][:2] == ["0", "1#0"] and all(len(d["text"]) <= 1500 for d in en.docs)
    with pytest.raises(ValueError, match=r"cannot stream wikimedia/wikipedia 20231101.xx .*doesn't exist on the "
                                         r"Hub\); export articles to DIR/xx.jsonl and use --corpus jsonl:DIR$"):
        corpora.build("wikipedia:xx", None)
    assert corpora.provenance("blend", "wikipedia:en", True, 50)["max_docs"] == 50
    assert "max_docs" not in corpora.provenance("blend", "xquad", True, 50)  # xquad ignores the cap


def test_xquad_source_keeps_each_paragraph_once(tmp_path):
    (tmp_path / "xquad").mkdir()
    for lang in ("en", "el"):
        (tmp_path / "xquad" / f"xquad.{lang}.json").write_text(json.dumps(XQUAD), encoding="utf-8")
    en, el = corpora.xquad(tmp_path, langs=("en", "el"))
    assert (en.name, el.lang) == ("en", "el") and len(en) == 3
    assert en.docs[0] == {"id": "00-00", "title": "Blue Lake", "text": "Blue Lake is a made-up lake."}
    with pytest.raises(FileNotFoundError, match="xquad.ar.json"):
        corpora.xquad(tmp_path)


def test_corpus_flag_and_provenance():
    args = cli.parser("t").parse_args(["--dataset", "demo_culture"])
    assert args.corpus is None and args.leave_question_out is True
    args = cli.parser("t").parse_args(["--corpus", "jsonl:/x", "--no-leave-question-out"])
    assert args.corpus == "jsonl:/x" and args.leave_question_out is False
    with pytest.raises(SystemExit):
        cli.parser("t").parse_args(["--corpus", "wikipedia"])  # no languages
    assert corpora.provenance("blend", None, True) == {"corpus_source": "blend_kb (own question left out)",
                                                       "leave_question_out": True}
    assert corpora.provenance("demo_culture", None, True)["corpus_source"] == "bundled"
    assert corpora.provenance("click", "xquad", False)["corpus_source"] == "xquad"


def test_apply_swaps_corpora_only_for_another_source(tmp_path):
    (tmp_path / "xquad").mkdir()
    for lang in corpora.XQUAD_LANGS:
        (tmp_path / "xquad" / f"xquad.{lang}.json").write_text(json.dumps(XQUAD), encoding="utf-8")
    bundle = load_culture()
    names = [c.name for c in bundle.corpora]
    assert [c.name for c in corpora.apply(bundle, "bundled", True, tmp_path).corpora] == names
    swapped = corpora.apply(bundle, "xquad", True, tmp_path)
    assert [c.name for c in swapped.corpora] == list(corpora.XQUAD_LANGS)


def test_excluded_groups_cannot_be_retrieved(embedder):
    docs = [{"id": str(i), "title": f"lake {i}", "text": "a lake", "group": "g1" if i < 3 else f"g{i}"}
            for i in range(6)] + [{"id": "x", "title": "hill", "text": "a hill"}]
    search = Retriever([Corpus("en", docs)], embedder)
    everything = [p.id for p in search.search("lake", 7)]
    with excluded(["g1", "unknown"]):
        hidden = [p.id for p in search.search("lake", 4)]
        assert len(hidden) == 4 and not {"en:0", "en:1", "en:2"} & set(hidden)
        assert len(search.search("lake", 7)) == 4  # only four documents are left to find
    assert [p.id for p in search.search("lake", 7)] == everything  # restored after the block


def test_demo_culture_questions_are_english_with_the_culture_language_apart():
    bundle = load_culture()
    assert all(ex.lang == "en" and set(ex.inputs().keys()) == {"question", "options", "lang"} for ex in bundle.examples)
    assert {ex.source_lang for ex in bundle.examples} == {c.name for c in bundle.corpora}
    assert bundle.groups == ("source_lang",)


@pytest.mark.skipif(not os.environ.get("RAG_DATA_DIR"), reason="needs RAG_DATA_DIR with the shared benchmark files")
def test_real_xquad_has_240_paragraphs_per_language():
    built = corpora.xquad(data.data_dir())
    assert [c.name for c in built] == list(corpora.XQUAD_LANGS) and all(len(c) == 240 for c in built)
