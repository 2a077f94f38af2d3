"""BLEnD and CLIcK loaders on tiny made-up fixtures in the original release layouts, plus checks against the real
files when RAG_DATA_DIR is set."""
import csv
import json
import os
from collections import Counter

import dspy
import pytest

import data
from data import corpora
from data.blend import COUNTRIES, blend_kb, build_mcq, clash, kb_group, read_annotations
from evaluation.loop import evaluate
from retrieval.corpus import excluded as corpora_excluded
from retrieval.retriever import Retriever

NO_IDK = {"idk": 0, "no-answer": 0, "not-applicable": 0}
REAL = pytest.mark.skipif(not os.environ.get("RAG_DATA_DIR"),
                          reason="needs RAG_DATA_DIR with the shared benchmark files")


def record(en_question: str, answers: list[tuple[list[str], int]], idks=None) -> dict:
    return {"question": f"(local) {en_question}", "en_question": en_question, "idks": idks or NO_IDK,
            "annotations": [{"answers": [f"local-{spellings[0]}"], "en_answers": spellings, "count": n}
                            for spellings, n in answers]}


def own_word(country: str) -> str:
    return country.lower().replace("_", "") + "ade"  # a single word no other country answers


def made_up_annotations() -> dict[str, dict]:
    """Five invented questions for all 16 countries; the US records exercise each construction rule."""
    drinks = {"UK": [(["tea"], 5)], "China": [(["soy milk"], 4)], "Mexico": [(["hot chocolate"], 3)],
              "Spain": [(["coffee with milk"], 3)], "South_Korea": [(["barley tea"], 3)]}
    out = {}
    for country in COUNTRIES:
        word = own_word(country)
        out[country] = {
            "Q-1": record(f"What do people drink at breakfast in {country}?", drinks.get(country, [([word], 2)])),
            "Q-2": record(f"What do people eat at parties in {country}?", [([word], 2)]),
            "Q-3": record(f"What is a common pet in {country}?", [([word], 3)]),
            "Q-4": record(f"What is a popular flower in {country}?", [([word], 2)]),
            "Q-5": record(f"What fruit is most popular in {country}?", [(["apple", word], 4)]),
        }
    out["US"] = {
        "Q-1": record("What do people drink at breakfast in US?", [(["coffee", "black coffee"], 4), (["juice"], 2)]),
        "Q-2": record("What do people eat at parties in US?", [(["pizza"], 3), (["burger"], 3), (["chips"], 1)]),
        "Q-3": record("What is a common pet in US?", [(["dog"], 4)], idks={**NO_IDK, "not-applicable": 1}),
        "Q-4": record("What is a popular flower in US?", [(["rose"], 1), (["tulip"], 1)]),
        "Q-5": record("What fruit is most popular in US?", [(["apple"], 5)]),
    }
    return out


@pytest.fixture
def blend_dir(tmp_path):
    (tmp_path / "blend" / "annotations").mkdir(parents=True)
    (tmp_path / "blend" / "questions").mkdir()
    for country, records in made_up_annotations().items():
        (tmp_path / "blend" / "annotations" / f"{country}_data.json").write_text(
            json.dumps(records, ensure_ascii=False), encoding="utf-8")
        questions = tmp_path / "blend" / "questions" / f"{country}_questions.csv"
        with open(questions, "w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh)
            writer.writerow(["", "ID", "Topic", "Source", "Question", "Translation"])
            for i, (qid, rec) in enumerate(records.items()):
                writer.writerow([i, qid, "Food", "English (US)", rec["question"], rec["en_question"]])
    return tmp_path


def test_correct_option_is_the_top_answer_and_distractors_the_top_other_answers():
    annotations = made_up_annotations()
    mcq, outcome = build_mcq("Q-1", "US", annotations)
    assert outcome == "built" and mcq["correct"] == "coffee" and mcq["options"][mcq["answer"]] == "coffee"
    # most voted in other countries first; "coffee with milk" clashes with the US answer, "barley tea" with "tea"
    assert sorted(mcq["options"].values()) == ["coffee", "hot chocolate", "soy milk", "tea"]
    assert list(mcq["options"]) == ["A", "B", "C", "D"]
    assert build_mcq("Q-1", "US", annotations) == (mcq, outcome)  # seeded
    letters = Counter(build_mcq("Q-1", "US", annotations, seed)[0]["answer"] for seed in range(40))
    assert len(letters) == 4  # the options are shuffled


def test_ties_draw_one_top_answer_and_never_offer_the_other():
    annotations = made_up_annotations()
    drawn = {build_mcq("Q-2", "US", annotations, seed)[0]["correct"] for seed in range(20)}
    assert drawn == {"pizza", "burger"}
    for seed in range(20):
        options = build_mcq("Q-2", "US", annotations, seed)[0]["options"].values()
        assert len({"pizza", "burger"} & set(options)) == 1


@pytest.mark.parametrize("qid, outcome", [("Q-3", "idk"), ("Q-4", "weak"), ("Q-5", "few_distractors")])
def test_questions_without_a_clear_answer_or_enough_distractors_are_skipped(qid, outcome):
    assert build_mcq(qid, "US", made_up_annotations()) == (None, outcome)


def test_answer_clashes_follow_blend():
    assert clash("Coffee", " coffee ") and clash("coffee", "black coffee") and clash("7", "7.0")
    assert clash("rice cake", "fried rice") and not clash("the beach", "the park") and not clash("7", "8")


def test_mcq_loader_tags_language_tier_and_counts_what_it_skips(blend_dir):
    bundle = data.load("blend", blend_dir)
    us = {ex.id: ex for ex in bundle.examples if ex.country == "US"}
    assert set(us) == {"US/Q-1", "US/Q-2"}
    ex = us["US/Q-1"]
    assert ex.question == "What do people drink at breakfast in US?" and ex.options[ex.answer] == "coffee"
    assert (ex.lang, ex.source_lang, ex.tier, ex.topic) == ("en", "en", "high", "Food")
    assert set(ex.inputs().keys()) == {"question", "options", "lang"} and ex.leave_out == [kb_group("Q-1")]
    west_java = next(e for e in bundle.examples if e.country == "West_Java")
    assert (west_java.source_lang, west_java.tier) == ("su", "low")
    stats = json.loads(bundle.source[bundle.source.index("{"):])
    assert stats["US"] == {"built": 2, "few_distractors": 1, "idk": 1, "weak": 1}
    assert bundle.task == "mcq" and bundle.groups == ("source_lang", "tier", "country")
    for ex in bundle.examples:  # no distractor clashes with an annotated answer of the target country
        spellings = [s for a in made_up_annotations()[ex.country][ex.id.split("/")[1]]["annotations"]
                     for s in a["en_answers"]]
        wrong = [text for letter, text in ex.options.items() if letter != ex.answer]
        assert not any(clash(w, s) for w in wrong for s in spellings)


def test_short_answer_loader_accepts_every_annotated_spelling(blend_dir):
    bundle = data.load("blend_short", blend_dir)
    ex = next(e for e in bundle.examples if e.id == "US/Q-1")
    assert ex.answer == "coffee" and ex.answers == ["coffee", "black coffee", "juice"]
    assert bundle.task == "short" and set(ex.inputs().keys()) == {"question", "lang"}


def test_knowledge_corpus_files_each_country_under_its_language(blend_dir):
    kb = {c.name: c for c in blend_kb(blend_dir)}
    assert set(kb) == {lang for lang, _ in COUNTRIES.values()}
    doc = next(d for d in kb["en"].docs if d["id"] == "US/Q-1")
    assert doc["group"] == kb_group("Q-1") and "coffee / black coffee (4)" in doc["text"]
    assert "local-coffee" in doc["text"] and doc["title"] == "What do people drink at breakfast in US?"
    assert {d["id"].split("/")[0] for d in kb["ko"].docs} == {"South_Korea", "North_Korea"}


def test_leave_question_out_hides_every_document_of_the_question_id(blend_dir, embedder):
    bundle = data.load("blend", blend_dir)
    search = Retriever(bundle.corpora, embedder)
    example = next(ex for ex in bundle.examples if ex.id == "US/Q-1")

    class Lookup(dspy.Module):
        def forward(self, question, options=None, lang=None):
            return dspy.Prediction(answer="A", passages=search.search(question, 10, ["en"]))

    def found(records):
        return {p["id"] for p in records[0]["passages"]}

    records, _ = evaluate(Lookup(), [example], {})
    assert len(found(records)) == 8 and not {"en:US/Q-1", "en:UK/Q-1"} & found(records)  # its own and the UK's
    assert "en:US/Q-1" in {p.id for p in search.search(example.question, 10, ["en"])}  # found outside evaluation
    everywhere = {p.id for p in search.search(example.question, 1000)}
    with corpora_excluded(example.leave_out):  # every country's document for Q-1, in every language corpus
        left = {p.id for p in search.search(example.question, 1000)}
    assert {i for i in everywhere - left} == {i for i in everywhere if i.endswith("/Q-1")} and len(everywhere - left) == 16
    corpora.apply(bundle, None, leave_question_out=False, root=blend_dir)
    records, _ = evaluate(Lookup(), [example], {})
    assert example.leave_out == [] and "en:US/Q-1" in found(records)


# -- CLIcK --------------------------------------------------------------------------------------------------------
def test_click_reads_the_culture_category_and_maps_answers_to_letters(blend_dir):
    root = blend_dir  # CLIcK's default corpora are the BLEnD knowledge corpora
    tradition = root / "click" / "Culture" / "Korean Tradition"
    tradition.mkdir(parents=True)
    (root / "click" / "Language" / "Grammar").mkdir(parents=True)
    rows = [{"id": "T_1", "paragraph": "", "question": "설날에 먹는 음식은?", "choices": ["떡국", "송편", "팥죽", "냉면"],
             "answer": "떡국"},
            {"id": "T_2", "paragraph": "다음 글을 읽고 답하시오.", "question": "추석의 다른 이름은?",
             "choices": ["한가위", "단오", "동지", "한식", "정월"], "answer": "동지 "},
            {"id": "T_3", "paragraph": "", "question": "?", "choices": ["가", "나"], "answer": "다"}]
    (tradition / "Tradition_Kedu.json").write_text(json.dumps(rows, ensure_ascii=False), encoding="utf-8")
    (tradition / "Tradition_KIIP.json").write_text(json.dumps(rows[:1], ensure_ascii=False), encoding="utf-8")
    (root / "click" / "Language" / "Grammar" / "Grammar_X.json").write_text(json.dumps(rows[:1]), encoding="utf-8")
    bundle = data.load("click", root)
    assert sorted(ex.id for ex in bundle.examples) == ["Tradition_KIIP/T_1", "Tradition_Kedu/T_1",
                                                       "Tradition_Kedu/T_2"]  # same id, two files: two examples
    assert "answer not among choices: 1" in bundle.source
    t2 = next(ex for ex in bundle.examples if ex.id.endswith("T_2"))
    assert t2.answer == "C" and list(t2.options) == list("ABCDE") and t2.question.startswith("다음 글을 읽고")
    assert (t2.lang, t2.category, t2.tier) == ("ko", "Tradition", "mid")
    assert set(t2.inputs().keys()) == {"question", "options", "lang"} and "ko" in {c.name for c in bundle.corpora}
    law = root / "click" / "Culture" / "Korean Law"  # blend_kb has nothing on Korean law: only in click_all
    law.mkdir()
    (law / "Law_Kedu.json").write_text(json.dumps([dict(rows[0], id="L_1")], ensure_ascii=False), encoding="utf-8")
    assert len(data.load("click", root).examples) == 3 and len(data.load("click_all", root).examples) == 4


# -- the real files -----------------------------------------------------------------------------------------------
@REAL
def test_real_blend_matches_the_manifest_and_builds_a_clean_mcq_set():
    annotations = read_annotations(data.data_dir())
    assert len(annotations) == 16 and all(len(records) == 500 for records in annotations.values())
    bundle = data.load("blend")
    per_country = Counter(ex.country for ex in bundle.examples)
    assert set(per_country) == set(COUNTRIES) and min(per_country.values()) >= 250  # observed 266-400, 5,216 total
    for ex in bundle.examples:
        assert len(set(ex.options.values())) == 4 and ex.options[ex.answer] == ex.answer_text
        own = [s for a in annotations[ex.country][ex.id.split("/", 1)[1]]["annotations"] for s in a["en_answers"]]
        assert not any(clash(text, s) for letter, text in ex.options.items() if letter != ex.answer for s in own)
    assert sum(len(c) for c in bundle.corpora) > 7000 and len(bundle.corpora) == 13


@REAL
def test_real_click_culture_subset():
    root = data.data_dir()
    assert sum(len(json.loads(p.read_text())) for p in (root / "click").glob("**/*.json")) == 1995  # MANIFEST
    bundle = data.load("click_all")
    assert len(bundle.examples) == 1345 and len({ex.id for ex in bundle.examples}) == 1345  # as in the CORAL paper
    assert Counter(ex.category for ex in bundle.examples)["Society"] == 309
    assert {ex.category for ex in data.load("click").examples} == {"Tradition", "Society"}
