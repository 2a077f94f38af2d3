"""XRAG: the release loader, the XQuAD-based settings (on tiny made-up XQuAD-format files), the scoring protocol
(language ID, judge panel, char 3-gram recall), the bounds, the language-aware writer and the construction
pipeline, all on DummyLM."""
import json
import os

import dspy
import pytest
from dspy.utils.dummies import DummyLM

import data
import evaluate
from data import xrag
from experiments import cli
from experiments import sessions
from evaluation.loop import evaluate as run_eval
from evaluation.metrics import noted
from evaluation.xlingual import JudgePanel, SplitVerdict, char3_recall, language_correct, xrag_metrics
from runtime.language import in_language, language_verdict
from programs import build
from retrieval.corpus import Corpus, excluded
from retrieval.retriever import Retriever
from programs.shared.writer import Writer
from construction.xrag import (XRAGBuilder, entity_names, lexical_overlap, parse_qa_pairs, question_problem,
                               shared_entities, translation_problem)

REAL = pytest.mark.skipif(not os.environ.get("RAG_DATA_DIR"), reason="needs RAG_DATA_DIR with the shared files")

# made-up parallel "articles": 2 articles x 5 paragraphs, one question per paragraph, in en / de / zh
EN_TOPICS = [("Glass_Harbor", "harbor lighthouse ferry"), ("Copper_Valley", "mine river bridge")]
DE = {"harbor": "Hafen", "mine": "Bergwerk"}


def xquad_file(lang: str) -> dict:
    arts = []
    for a, (title, words) in enumerate(EN_TOPICS):
        pars = []
        for p in range(5):
            value = str(1900 + 10 * a + p)
            if lang == "en":
                ctx, q, ans = f"The {words} number {p} was built in {value}.", f"When was {words} {p} built?", value
            elif lang == "de":
                ctx = f"Der {DE[words.split()[0]]} Nummer {p} wurde {value} gebaut."
                q, ans = f"Wann wurde der {DE[words.split()[0]]} {p} gebaut?", value
            else:
                ctx, q, ans = f"第{p}号建筑建于{value}年。", f"第{p}号建筑是哪一年建的？", f"{value}年"
            pars.append({"context": ctx, "qas": [{"id": f"q{a}{p}", "question": q,
                                                  "answers": [{"text": ans, "answer_start": 0}]}]})
        arts.append({"title": title, "paragraphs": pars})
    return {"version": "1.1", "data": arts}


@pytest.fixture
def xquad_dir(tmp_path):
    (tmp_path / "xquad").mkdir()
    for lang in ("en", "de", "zh"):
        (tmp_path / "xquad" / f"xquad.{lang}.json").write_text(json.dumps(xquad_file(lang)), encoding="utf-8")
    return tmp_path


RACE = ["Lena Ohm won the city race on 3 May.", "Ohm trains in Graz."] + [  # 2 supporting, then 6 distracting
    "Tom Berg won the race in 2023.", "The city council met on Tuesday.", "A new bridge opened in Linz.",
    "Rain is expected over the weekend.", "The museum extends its opening hours.", "Ticket prices rose by 5%."]
RELEASE_ROWS = [  # an invented row in the public release's layout (its dataset card's keys), then one of ours
    {"id": "r1", "question": "Wer gewann das Stadtrennen am 3. Mai in diesem Jahr?", "answer": "Lena Ohm",
     "en_question": "Who won the city race on 3 May this year?", "en_answer": "Lena Ohm", "q_type": "multihop",
     "a_type": "original", "crossdoc_type": 2, "articles": RACE,
     "dates": ["2024-05-04", "2024-05-06", "2023-05-04", "2024-04-02", "2024-03-30", "2024-05-01", "2024-04-11",
               "2024-04-20"]},
    {"id": "r2", "question": "¿Dónde entrena Ohm?", "answer": "Graz", "language": "es", "setting": "multi",
     "supporting": [{"title": "Runner", "text": "Ohm trains in Graz.", "date": "2024-05-06"}],
     "distracting": [{"text": "Las carreras populares de Madrid reúnen a miles de corredores cada primavera.",
                      "date": "2024-04-20"}]},
]


def test_release_rows_map_through_one_field_table_and_read_via_datasets(tmp_path):
    (tmp_path / "xrag").mkdir()
    with open(tmp_path / "xrag" / "xrag.dev.jsonl", "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in RELEASE_ROWS)
    recs, source = xrag.records(tmp_path)
    assert source.endswith("xrag") and [r["setting"] for r in recs] == ["mono", "multi"]
    first = recs[0]
    assert first["answers"] == ["Lena Ohm"] and first["language"] == "de"  # read from the question
    assert [a["text"] for a in first["supporting"]] == RACE[:2] and len(first["distracting"]) == 6
    assert [a["date"] for a in first["supporting"]] == ["2024-05-04", "2024-05-06"]
    assert first["distracting"][-1]["date"] == "2024-04-20"
    assert {a["language"] for a in first["supporting"] + first["distracting"]} == {"en"}  # monolingual: English
    assert recs[1]["distracting"][0]["language"] == "es" and recs[1]["supporting"][0]["language"] == "en"
    b = data.load("xrag", tmp_path)
    assert b.task == "xrag" and {c.name for c in b.corpora} == {"en", "es"}
    # the same "Ohm trains in Graz." in two records is one document
    assert sum(len(c) for c in b.corpora) == 9


FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")


def test_release_rows_without_a_setting_get_it_and_their_article_languages_from_the_articles():
    """Rows as the dataset card lays them out (id, question, answer, en_question, en_answer, q_type, a_type,
    crossdoc_type, articles, dates: no language, no setting) are monolingual when every article is English and
    multilingual when some are in the question's language, each article in the language lingua reads."""
    from pathlib import Path

    recs, _ = xrag.records(Path(FIXTURES))
    assert [(r["language"], r["setting"]) for r in recs] == [("de", "mono"), ("de", "multi"), ("es", "multi"),
                                                            ("zh", "mono")]
    langs = [[a["language"] for a in r["supporting"] + r["distracting"]] for r in recs]
    assert langs[0] == langs[3] == ["en"] * 8
    assert langs[1] == ["de", "en", "de", "de", "de", "en", "en", "en"]
    assert langs[2] == ["en", "es", "es", "es", "es", "en", "en", "en"]
    b = data.load("xrag", Path(FIXTURES))
    assert {c.name for c in b.corpora} == {"en", "de", "es"}
    assert [(e.lang, e.setting, e.support_lang) for e in b.examples][1] == ("de", "multi", "de")
    # a row that names its setting keeps it: monolingual articles are English whatever lingua reads
    named = xrag.normalize(dict(json.loads(open(os.path.join(FIXTURES, "xrag", "xrag.test.jsonl"),
                                                encoding="utf-8").readlines()[1]), setting="monolingual"))
    assert named["setting"] == "mono" and {a["language"] for a in named["supporting"]} == {"en"}


def test_release_dates_must_match_the_articles():
    with pytest.raises(ValueError, match="r1 has 2 dates for 8 articles"):
        xrag.normalize(dict(RELEASE_ROWS[0], dates=["2024-05-04", "2024-05-06"]))


def test_two_texts_under_one_article_id_fail_loudly():
    rows = [dict(RELEASE_ROWS[1], id=f"r{i}", supporting=[{"id": "a1", "text": text}])
            for i, text in enumerate(["Ohm trains in Graz.", "Berg trains in Linz."])]
    with pytest.raises(ValueError, match="article id 'a1' .*two different texts"):
        xrag.bundle("t", [xrag.normalize(r) for r in rows], "full", "fixture")


def test_a_release_row_without_a_question_names_the_field_table():
    with pytest.raises(ValueError, match="lacks 'question'.*data.xrag.FIELDS"):
        xrag.normalize({"answer": "x", "supporting_articles": ["t"]})


def test_missing_release_files_offline_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(FileNotFoundError, match="under .*xrag"):
        xrag.records(tmp_path)


def visible(bundle, example, embedder, k=20):
    search = Retriever(bundle.corpora, embedder)
    with excluded(example.leave_out):
        return {p.id for p in search.search(example.question, k)}


@pytest.mark.parametrize("context, expect", [("full", 8), ("oracle", 2), ("open", 9)])
def test_context_decides_what_an_item_can_retrieve(tmp_path, embedder, context, expect):
    recs = [xrag.normalize(r) for r in RELEASE_ROWS]
    b = xrag.bundle("t", recs, context, "fixture")
    first = b.examples[0]
    seen = visible(b, first, embedder)
    assert len(seen) == expect
    assert set(first.supporting) <= seen
    if context != "open":
        assert seen == set(first.supporting) | (set(first.distracting) if context == "full" else set())


def test_monolingual_setting_from_xquad(xquad_dir, embedder):
    de = data.load("xrag_mono:de", xquad_dir)
    en = data.load("xrag_mono:en", xquad_dir)
    assert [c.name for c in de.corpora] == ["en"] and len(de.examples) == 10
    ex = next(e for e in de.examples if e.id == "q02@de")
    assert ex.lang == "de" and ex.question.startswith("Wann") and ex.answers == ["1902"]
    assert ex.supporting == ["en:00-02"] and len(ex.distracting) == 6
    assert {d for d in ex.distracting if d.startswith("en:00-")} == {"en:00-00", "en:00-01", "en:00-03", "en:00-04"}
    twin = next(e for e in en.examples if e.id == "q02@en")  # the English baseline: same item, same documents
    assert twin.supporting == ex.supporting and twin.distracting == ex.distracting and twin.lang == "en"
    assert visible(de, ex, embedder) == {f"en:{g[3:]}" for g in ex.supporting + ex.distracting}


def test_multilingual_setting_from_xquad(xquad_dir):
    zh, en = data.load("xrag_multi:zh", xquad_dir), data.load("xrag_multi:en", xquad_dir)
    assert {c.name for c in zh.corpora} == {"en", "zh"} and zh.groups == ("lang",)
    for ex in zh.examples:
        article, par = int(ex.id[1]), int(ex.id[2])  # ids are "q<article><paragraph>@zh"
        assert ex.supporting == [f"zh:{article:02d}-{par:02d}", f"en:{article:02d}-{par:02d}"]  # 1 in X, 1 in en
        zh_d, en_d = [d for d in ex.distracting if d.startswith("zh:")], [d for d in ex.distracting if d[:3] == "en:"]
        assert len(zh_d) == len(en_d) == 3 and [d[3:] for d in zh_d] == [d[3:] for d in en_d]  # the same in en
        assert not set(ex.supporting) & set(ex.distracting)
        twin = next(e for e in en.examples if e.id.split("@")[0] == ex.id.split("@")[0])  # En + En_X baseline
        assert twin.lang == "en" and twin.supporting == ex.supporting[1:] and twin.distracting == en_d


def test_open_setting_pools_every_paragraph_and_hides_nothing(xquad_dir):
    b = data.load("xrag_multi_open:de", xquad_dir)
    assert {c.name: len(c) for c in b.corpora} == {"de": 10, "en": 10}
    assert all(ex.leave_out == [] for ex in b.examples)


def test_names_are_registered_for_every_language_and_context():
    names = set(data.names())
    assert {"xrag", "xrag_oracle", "xrag_open", "xrag_mono:de", "xrag_mono:en", "xrag_mono_oracle:ar",
            "xrag_mono_open:zh", "xrag_multi:es", "xrag_multi_open:all"} <= names
    assert "xrag_multi:en" in names  # Table 5's En + En_X baseline


# ---------------------------------------------------------------- scoring


def ex(question="Wann wurde der Hafen gebaut?", answers=("1902",), lang="de", id_="x"):
    return dspy.Example(id=id_, question=question, answer=answers[0], answers=list(answers), lang=lang)


def pred(answer):
    return dspy.Prediction(answer=answer)


def verdict(panel, example, answer):
    """The panel's score for ``answer`` and what it noted deciding it by (``verdict_by``)."""
    with noted() as notes:
        return panel(example, pred(answer)), notes.get("verdict_by")


def test_language_rule():
    assert in_language("im Jahr 1902 am Hafen gebaut", "de")
    assert not in_language("it was built in the year nineteen hundred", "de")
    assert in_language("1902", "zh")  # digits only: undecided, never penalised
    assert not in_language("The river bridge", "zh", ["河桥"])
    assert in_language("Denver Broncos", "de", ["Denver Broncos"])  # reads the same as the gold: allowed


@pytest.mark.parametrize("answer, lang, gold, question, verdict", [
    # a German name read as German made this English answer "wrong language": without it lingua cannot tell
    ("Friedrich Ratzel of Germany was born in 1858.", "en", "Germany", "Where was Friedrich Ratzel born?", None),
    # an English gold name ("Manning" reads as English) let any English answer to a German question pass
    ("No interceptions were played during the playoff games of the Broncos.", "de", "Manning",
     "Wer hat in den Playoff-Spielen der Broncos keinen Pass geworfen?", False),
    ("Europe", "en", "Russia", "Where did the plague go after Europe?", True),  # only copied words: language-neutral
    ("Die Hymne heißt Flung to the Heedless Winds", "de", "Flung to the Heedless Winds", "Wie heißt die Hymne?", True),
    ("Hoesung Lee", "zh", "伊斯梅尔·埃尔·吉周里", "谁是政府间气候变化专门委员会主席？", False),
])
def test_lingua_reads_only_the_words_an_answer_does_not_copy(answer, lang, gold, question, verdict):
    assert language_verdict(answer, lang, [gold], question) is verdict


def judges(*verdicts):
    return [DummyLM([{"same": v}]) for v in verdicts]


@pytest.mark.parametrize("verdicts, expected", [((True,), 1.0), ((False,), 0.0), ((True, False, True), 1.0),
                                                ((False, False, True), 0.0)])
def test_judge_panel_majority(dummy, verdicts, expected):
    dummy([])
    panel = JudgePanel(judges(*verdicts))
    assert panel(ex(), pred("im Jahre neunzehnhundertzwei")) == expected


def test_a_tie_is_no_verdict_not_wrong(dummy):
    """Issue 75 item 8: two judges that disagree give no verdict (the answer is split, not scored), where a tie
    used to count as wrong."""
    dummy([])
    panel = JudgePanel(judges(True, False))
    with noted() as notes, pytest.raises(SplitVerdict, match="split 1 to 1"):
        panel(ex(), pred("im Jahre neunzehnhundertzwei"))
    assert notes == {"verdict_by": "judges", "panel": "split"}


def test_wrong_language_is_wrong_even_when_the_judges_agree(dummy):
    dummy([])
    panel = JudgePanel(judges(True, True, True))
    metrics = xrag_metrics(panel)
    e, p = ex(question="第2号建筑是哪一年建的？", answers=("1902年",), lang="zh"), pred("It was built in 1902")
    assert metrics["judge"](e, p) == 1.0 and metrics["lang_ok"](e, p) == 0.0 and metrics["accuracy"](e, p) == 0.0
    good = pred("一九〇二年建造")
    assert language_correct(e, good) == 1.0


def test_panel_verdict_is_asked_once_per_answer_and_the_judge_sees_the_question(dummy):
    dummy([])
    lm = DummyLM([{"same": True}, {"same": True}])
    panel = JudgePanel([lm])
    e, p = ex(), pred("neunzehnhundertzwei")
    panel(e, p), panel.accuracy(e, p)
    assert len(lm.history) == 1
    assert "Wann wurde der Hafen gebaut?" in str(lm.history[0]["messages"])


RACE_QUESTION = "Wer gewann das Stadtrennen am 3. Mai?"


@pytest.mark.parametrize("answer", ["not Lena Ohm", "It is not Lena Ohm", "Nicht Lena Ohm, sondern Tom Berg",
                                    "The winner was Tom Berg, not Lena Ohm.", "Lena Ohm did not win; Tom Berg did.",
                                    "Tom Berg won, although many expected that Lena Ohm would win"])
def test_an_answer_holding_the_gold_in_a_negated_clause_goes_to_the_judges(dummy, answer):
    """Only a normalized exact match is right without a judge: an answer that names the gold to deny it is the
    judges' to decide (before, any answer holding the gold span with up to 20 more words passed unasked)."""
    dummy([])
    lms = judges(False, False)
    e = ex(question=RACE_QUESTION, answers=("Lena Ohm",))
    assert verdict(JudgePanel(lms), e, answer) == (0.0, "judges") and all(len(lm.history) == 1 for lm in lms)


@pytest.mark.parametrize("answer", ["Lena Ohm", "“Lena Ohm”", "„Lena Ohm“", "«Lena Ohm»", "lena ohm.", "‘Lena Ohm’!"])
def test_a_normalized_exact_match_is_right_without_a_judge_whatever_its_quotes(dummy, answer):
    dummy([])
    lms = judges(False, False)
    e = ex(question=RACE_QUESTION, answers=("Lena Ohm",))
    assert verdict(JudgePanel(lms), e, answer) == (1.0, "exact") and not any(lm.history for lm in lms)
    assert verdict(JudgePanel(lms), ex(question="药剂咨询师倾向于在哪里工作？", answers=("疗养院",), lang="zh"),
                   "疗养院。") == (1.0, "exact")


def test_echoes_and_sentences_stating_the_gold_are_the_judges_to_decide(dummy):
    dummy([])
    lms = judges(True, True)
    question = "في أي عام تعرف جوزيف بريستلي على الأكسجين؟"
    e = ex(question=question, answers=("1774",), lang="ar")
    assert verdict(JudgePanel(lms), e, question) == (1.0, "judges")  # the panel's call, right or wrong
    year = ex(question="In what year did Joseph Priestley recognize oxygen?", answers=("1774",), lang="en", id_="y")
    with pytest.raises(SplitVerdict):  # two judges split: no majority, no verdict
        verdict(JudgePanel(judges(False, True)), year, "Joseph Priestley recognized oxygen in 1774.")
    assert verdict(JudgePanel(lms), year, "I don't know") == (0.0, "abstained")


def test_panel_size_is_one_to_three():
    with pytest.raises(ValueError, match="1 to 3 judge LMs"):
        JudgePanel(judges(True, True, True, True))


def test_char3_recall_works_across_scripts():
    assert char3_recall(ex(answers=("Denver Broncos",)), pred("the denver broncos!")) == 1.0
    assert char3_recall(ex(answers=("丹佛野马队",)), pred("丹佛野马")) == pytest.approx(2 / 3)
    assert char3_recall(ex(answers=("Broncos",)), pred("Panthers")) == 0.0


# ---------------------------------------------------------------- bounds and the writer


@pytest.mark.parametrize("name, program, n_passages", [("xrag_mono:de", "direct", 0),
                                                        ("xrag_mono_oracle:de", "rag", 1),
                                                        ("xrag_mono:de", "rag", 7)])
def test_bounds(xquad_dir, embedder, dummy, name, program, n_passages):
    lm = dummy({"question": {"answer": "1902"}})
    b = data.load(name, xquad_dir)
    examples = [e for e in b.examples if e.id == "q02@de"]
    search = Retriever(b.corpora, embedder)
    prog = build(program, search=search, k=8)
    records, summary = run_eval(prog, examples, xrag_metrics(), groups=("lang",))
    assert len(records[0]["passages"]) == n_passages
    if n_passages:
        assert records[0]["passages"][0]["id"] == "en:00-02" or n_passages > 1
        assert "en:00-02" in {p["id"] for p in records[0]["passages"]}
    assert summary["em"] == 1.0 and summary["lang_ok"] == 1.0 and summary["n_by_lang/de"] == 1
    assert "German" in str(lm.history[-1]["messages"])  # the writer is told the answer language


def test_cli_evaluates_an_xrag_setting_with_a_panel_and_no_retrieval(xquad_dir, monkeypatch):
    made = []

    def fake_lm(name, *a, **k):
        made.append(name)
        return DummyLM({"question": {"answer": "im Jahr 1902", "same": True}})
    monkeypatch.setattr(sessions, "make_lm", fake_lm)
    summary = evaluate.main(["--program", "rag", "--no-retrieval", "--dataset", "xrag_mono:de", "--data-dir",
                             str(xquad_dir), "--train", "0", "--dev", "3", "--test", "0", "--judge",
                             "--judge-lms", "a,b,c", "--embedder", "minilm"])
    assert made[-3:] == ["a", "b", "c"]
    assert summary["n"] == 3 and summary["lang_ok"] == 1.0 and summary["accuracy"] == 1.0
    assert "accuracy_by_lang/de" in summary and "char3_recall" in summary


def test_a_runs_judge_is_named_as_the_panel_on_xrag_and_as_the_judge_lm_elsewhere(xquad_dir, monkeypatch):
    """Report titles (suites, the ladder, par2_compare) name who judged from the session: an XRAG run is judged by the
    panel, not by --judge-lm (the ladder's title named --lm under the panel)."""
    monkeypatch.setattr(sessions, "make_lm", lambda name, *a, **k: DummyLM([]))
    common = ["--program", "rag", "--no-retrieval", "--data-dir", str(xquad_dir), "--train", "0", "--dev", "1",
              "--test", "0", "--lm", "openai/w"]

    def judged(*flags):
        return sessions.session(cli.parser("t").parse_args(common + list(flags)), needs_search=False).derived.judged_by
    assert judged("--dataset", "xrag_mono:de", "--judge", "--judge-lms", "a,b") == "a+b"
    assert judged("--dataset", "demo", "--judge", "--judge-lms", "a,b", "--judge-lm", "openai/j") == "openai/j"
    assert judged("--dataset", "xrag_mono:de") == "-"


# ---------------------------------------------------------------- construction pipeline

ART_A = {"id": "a", "title": "Glass Harbor", "text": "The harbor opened in 1902 with two piers.", "date": "2024-06-01",
         "language": "en"}
ART_B = {"id": "b", "title": "Glass Harbor", "text": "A ferry to the harbor started in 1910.", "date": "2024-06-20",
         "language": "en"}


def test_parse_qa_pairs_and_overlap():
    text = "Here are pairs:\n1. Q: When did it open? A: 1902\n- Q: How many piers?\nA: two\nnoise"
    assert parse_qa_pairs(text) == [("When did it open?", "1902"), ("How many piers?", "two")]
    assert lexical_overlap("the harbor opened in 1902", ART_A["text"]) == 1.0
    assert lexical_overlap("a port began service early last century", ART_A["text"]) == 0.0


SHARED_HARBOR = [{"entities": "harbor, piers"}, {"entities": "ferry, the harbor"}]  # "harbor" in both texts


def _through_simple_pairs(*rest):
    """DummyLM answers that take ART_A/ART_B through the entity check, summaries and simple pairs, then ``rest``."""
    return [*SHARED_HARBOR, {"summary": "A port began service early last century."},
            {"summary": "Boats to it followed eight years on."}, {"qa_pairs": "Q: When did the port open? A: 1902"},
            {"qa_pairs": "Q: When did the ferry start? A: 1910"}, *rest]


def test_pipeline_builds_translated_items_that_read_back(dummy):
    dummy(_through_simple_pairs(
        {"connection": "both give years", "question": "Which came first, the port or the ferry?"},
        {"answer": "the port"},
        {"translated_question": "Was kam zuerst, der Hafen oder die Fähre?", "translated_answer": "der Hafen"}))
    out = XRAGBuilder(types=("comparison",))(article_a=ART_A, article_b=ART_B, target_lang="de")
    assert out.trace["related"] is True and out.trace["overlap"] == [0.0, 0.0] and out.trace["shared"] == ["harbor"]
    (item,) = out.records
    assert item["language"] == "de" and item["answer"] == "der Hafen" and item["en_answer"] == "the port"
    assert item["type"] == "comparison" and item["provenance"]["connection"] == "both give years"
    rec = xrag.normalize(item)
    assert [a["date"] for a in rec["supporting"]] == ["2024-06-01", "2024-06-20"] and rec["setting"] == "mono"


def test_a_pair_of_an_x_article_and_an_english_one_is_a_multilingual_item():
    from construction.xrag import setting_of

    assert setting_of(ART_A, dict(ART_B, language="de")) == "multi" and setting_of(ART_A, ART_B) == "mono"


def test_pipeline_stops_at_a_pair_without_a_shared_entity(dummy):
    lm = dummy([{"entities": "piers, 1902"}, {"entities": "ferry, 1910"}])
    out = XRAGBuilder()(article_a=ART_A, article_b=ART_B)
    assert out.records == [] and out.trace["stop_reason"] == "unrelated" and len(lm.history) == 2
    assert out.trace["entities"] == [["piers", "1902"], ["ferry", "1910"]] and out.trace["shared"] == []


def test_entity_check_keeps_only_names_in_the_text_and_ignores_shared_numbers():
    assert entity_names("Harbor; Atlantis, \"piers\".\n1902", ART_A["text"]) == ["Harbor", "piers", "1902"]
    assert shared_entities(["Amazon rainforest", "Brazil"], ["the Amazon basin", "Peru"]) == ["Amazon rainforest"]
    assert shared_entities(["1973 oil crisis"], ["1973"]) == [] and shared_entities(["Rhine"], []) == []


def test_verification_can_overrule_the_entity_check_under_a_grammar(dummy):
    lm = dummy([*SHARED_HARBOR, {"related": False}])
    lm.server = object()  # an embedded-server LM: the verdict is decoded under the True/False grammar
    out = XRAGBuilder(verify_relevance=True)(article_a=ART_A, article_b=ART_B)
    assert out.trace["shared"] == ["harbor"] and out.trace["stop_reason"] == "unrelated" and len(lm.history) == 3
    assert '"[[ ## related ## ]]\\n" ("True" | "False")' in lm.history[2]["kwargs"]["extra_body"]["grammar"]


def test_quality_gates_name_what_is_wrong_with_a_question_or_translation():
    assert question_problem("Which came first, the port or the ferry?", "comparison") is None
    assert question_problem("Q: When did the port open? A: 1902", "comparison") == "qa_pair_in_question"
    assert question_problem("", "set") == "empty_question"
    description = "ask which of two things, one described in each article, is larger, earlier or longer"
    assert question_problem(description, "comparison") == "type_description"
    assert question_problem("What members do both articles have in common?", "set") == "refers_to_documents"
    assert question_problem("Which article describes a larger area?", "comparison") == "refers_to_documents"
    assert question_problem("Which of the two texts is older?", "comparison") == "refers_to_documents"
    assert question_problem("Which neighborhood of Fresno is the oldest?", "multi-hop",
                            ("Which neighbourhood of Fresno is the oldest", "which neighborhood of fresno is the "
                             "oldest ?")) == "duplicate_question"
    assert question_problem("Which neighborhood of Fresno is the oldest?", "multi-hop",
                            ("Which neighborhood of Fresno is the largest?",)) is None
    assert translation_problem("Was kam zuerst, der Hafen oder die Fähre?", "1902", "de", "1902") is None
    assert translation_problem("Which came first, the port or the ferry?", "der Hafen", "de",
                               "the port") == "question_not_translated"
    assert translation_problem("Was kam zuerst, der Hafen oder die Fähre?", "the port came first", "de",
                               "el puerto llegó primero") == "answer_not_translated"
    assert translation_problem("", "der Hafen", "de", "the port") == "empty_translation"


def test_pipeline_resamples_a_question_holding_a_qa_pair_and_keeps_the_fixed_one(dummy):
    lm = dummy(_through_simple_pairs({"connection": "years", "question": "Q: When did the port open? A: 1902"},
                {"connection": "years", "question": "Which came first, the port or the ferry?"},
                {"answer": "the port"}))
    out = XRAGBuilder(types=("comparison",))(article_a=ART_A, article_b=ART_B)
    assert [r["question"] for r in out.records] == ["Which came first, the port or the ferry?"]
    assert out.trace["dropped"] == [] and len(lm.history) == 9


def test_pipeline_drops_a_second_type_that_asks_the_same_question_again(dummy):
    same = {"connection": "years", "question": "Which came first, the port or the ferry?"}
    lm = dummy(_through_simple_pairs(same, {"answer": "the port"}, same, same))
    out = XRAGBuilder(types=("comparison", "multi-hop"))(article_a=ART_A, article_b=ART_B)
    assert [r["type"] for r in out.records] == ["comparison"]
    assert out.trace["dropped"] == [{"type": "multi-hop", "reason": "duplicate_question"}]
    assert len(lm.history) == 10  # the repeated question was sampled twice, and no answer was asked for it


def test_pipeline_drops_an_item_whose_translation_stays_english_instead_of_relabelling_it(dummy):
    english = {"translated_question": "Which came first, the port or the ferry?", "translated_answer": "the port"}
    lm = dummy(_through_simple_pairs({"connection": "years", "question": "Which came first, the port or the ferry?"},
                {"answer": "the port"}, english, english))
    out = XRAGBuilder(types=("comparison",))(article_a=ART_A, article_b=ART_B, target_lang="de")
    assert out.records == [] and out.trace["stop_reason"] == "built"
    assert out.trace["dropped"] == [{"type": "comparison", "reason": "question_not_translated"}]
    assert len(lm.history) == 10  # the translation was sampled twice


def test_pipeline_stops_when_a_summary_copies_its_article_twice(dummy):
    lm = dummy([*SHARED_HARBOR, {"summary": ART_A["text"]}, {"summary": "The harbor opened in 1902 with piers."}])
    out = XRAGBuilder()(article_a=ART_A, article_b=ART_B)
    assert out.records == [] and out.trace["stop_reason"] == "summary_copies"
    assert out.trace["overlap"] == [0.8] and len(lm.history) == 4  # the second sample is kept


def test_pipeline_rejects_unknown_types():
    with pytest.raises(ValueError, match="unknown question types"):
        XRAGBuilder(types=("bridge",))


@REAL
def test_real_xquad_settings_have_parallel_items():
    de, en = data.load("xrag_mono:de"), data.load("xrag_mono:en")
    assert len(de.examples) == len(en.examples) == 1190
    assert [e.supporting for e in de.examples] == [e.supporting for e in en.examples]
    multi = data.load("xrag_multi:ar")
    assert {c.name: len(c) for c in multi.corpora} == {"ar": 240, "en": 240}


def test_eval_script_runs_the_english_baseline_alone_when_asked():
    from argparse import Namespace

    import scripts.xrag_eval as script

    args = Namespace(langs=["en"], conditions=["none", "open"], programs=["rag", "coral"], multi=True,
                     baseline=True, k=5)
    assert script.cells(args) == [("mono", "none", "xrag_mono:en", "direct", 8),
                                  ("mono", "open", "xrag_mono_open:en", "rag", 5),
                                  ("mono", "open", "xrag_mono_open:en", "coral", 5),
                                  ("multi", "full", "xrag_multi:en", "rag", 8)]  # Table 5's En + En_X
    args.langs = ["zh", "en"]
    assert [c[2] for c in script.cells(args)].count("xrag_multi:zh") == 1
    args.langs, args.conditions, args.multi, args.baseline = ["zh"], ["full"], False, False
    assert [c[2] for c in script.cells(args)] == ["xrag_mono:zh", "xrag_mono:zh"]
    args.baseline = True
    assert [c[2] for c in script.cells(args)] == ["xrag_mono:zh"] * 2 + ["xrag_mono:en"] * 2


def test_eval_script_prints_both_table_shapes_and_logs_one_run(xquad_dir, embedder, monkeypatch, capsys):
    import mlflow

    import scripts.xrag_eval as script

    monkeypatch.setattr(sessions, "make_lm", lambda *a, **k: DummyLM({"question": {"answer": "1902", "same": True}}))
    monkeypatch.setattr(sessions, "Retriever", lambda corpora, *a, **kw: Retriever(corpora, embedder))
    results = script.main(["--n", "2", "--langs", "de", "zh", "--data-dir", str(xquad_dir), "--programs", "rag",
                           "direct"])
    assert len(results) == 3 * 7 + 3  # (de, zh, en) x (none, 3 retrieval conditions x 2 programs) + multi
    assert all(r["n"] == 2 for r in results.values())
    out = capsys.readouterr().out
    assert "| condition | program | de acc / lang | zh acc / lang | en acc / lang | avg X acc |" in out
    assert "| full | rag |" in out and "| none | direct |" in out and "Multilingual retrieval" in out
    runs = mlflow.search_runs(experiment_names=["agentic-rag"], output_format="list")
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    children = {(r.data.tags["cell"], r.data.tags["dataset"]): r for r in runs if r != parent}
    assert len(children) == 24 and "test_lang_ok" in children[("rag_k8_multi_full", "xrag_multi:zh")].data.metrics
    assert "xrag_mono_open:de_rag_k5_mono_open_vs_direct_mono_open_mcnemar_p" in parent.data.metrics
    assert "xrag_mono_oracle:zh_rag_k8_mono_oracle_vs_direct_mono_oracle_mcnemar_p" in parent.data.metrics


def test_relevance_only_counts_accepted_related_and_rejected_cross_article_pairs(xquad_dir, monkeypatch, capsys):
    import scripts.xrag_build as script

    # pair 1 shares a name and the verification agrees; in pair 2 and the cross-article pair a name is missing
    # from its text (every fixture paragraph says "number", none "Atlantis")
    lm = DummyLM([{"entities": "number"}, {"entities": "number"}, {"related": True},
                  {"entities": "number"}, {"entities": "Atlantis"}, {"entities": "Atlantis"}, {"entities": "Atlantis"}])
    monkeypatch.setattr(script, "make_lm", lambda *a, **k: lm)
    verdicts = script.main(["--pairs", "2", "--unrelated", "1", "--relevance-only", "--verify-relevance",
                            "--data-dir", str(xquad_dir)])
    assert [(v["expected"], v["related"]) for v in verdicts] == [(True, True), (True, False), (False, False)]
    assert "related pairs accepted 1/2, cross-article pairs rejected 1/1, accuracy 0.667" in capsys.readouterr().out
    assert len(lm.history) == 7  # nothing but the relevance check ran


def test_build_script_writes_xrag_jsonl_that_the_loader_reads(xquad_dir, tmp_path, monkeypatch):
    import scripts.xrag_build as script

    lm = DummyLM([{"entities": "number"}, {"entities": "number"}, {"summary": "A port began early."},
                  {"summary": "Boats came later."},
                  {"qa_pairs": "Q: When did the port open? A: 1900"}, {"qa_pairs": "Q: When did boats come? A: 1901"},
                  {"connection": "years", "question": "Which came first, the mine or the river bridge?"},
                  {"answer": "the mine"}, {"entities": "Atlantis"}, {"entities": "Atlantis"}])
    monkeypatch.setattr(script, "make_lm", lambda *a, **k: lm)
    out = tmp_path / "xrag" / "built.jsonl"
    items = script.main(["--pairs", "1", "--unrelated", "1", "--types", "comparison", "--data-dir", str(xquad_dir),
                         "--out", str(out)])
    assert len(items) == 1 and len(items[0]["distracting"]) == 6
    assert items[0]["supporting"][0]["title"] == "Copper Valley"
    # retrieved for the question: the mine-river-bridge article's other paragraphs first, then a random top-up
    assert [d["title"] for d in items[0]["distracting"][:3]] == ["Copper Valley"] * 3
    assert items[0]["provenance"]["lm"] == "local:qwen-0.5b"
    b = data.load("xrag", tmp_path)
    assert len(b.examples) == 1 and b.examples[0].question == "Which came first, the mine or the river bridge?"


def test_xrag_sessions_show_whole_passages_with_their_dates(xquad_dir, dummy):
    def session(name, *flags):
        args = cli.parser("t").parse_args(["--dataset", name, "--data-dir", str(xquad_dir), "--train", "0", "--dev",
                                           "0", "--test", "1", "--lm", "openai/unused", *flags])
        return sessions.session(args, needs_search=False)

    def config(name, *flags):
        return session(name, *flags).derived.config["max_chars"]
    assert config("xrag_mono_oracle:de") is None and config("demo") is None and config("xrag_mono:de", "--max-chars",
                                                                                         "300") == 300
    built = build("rag", search=object(), **session("xrag_mono_oracle:de").derived.program_config("rag"))
    assert built.writer.max_chars is None  # the program as built shows the whole passage, not the 600 default
    late = "Filler words about the harbor. " * 30 + "The lighthouse was built in 1902."  # gold past 900 chars
    passage = Corpus("en", [{"id": "1", "title": "Harbor", "text": late, "date": "2024-05-04"}], "en").passage(0)
    lm = dummy({"question": {"answer": "1902"}})
    Writer(use_passages=True, max_chars=None)(question="When was the lighthouse built?", passages=[passage])
    prompt = lm.history[-1]["messages"][-1]["content"]
    assert "built in 1902" in prompt and "(published 2024-05-04)" in prompt
    assert "built in 1902" not in passage.format(600)  # the old cut


@pytest.mark.parametrize("answer, votes, ok, path", [
    ("Oslo", (False,), 0.0, {"language_by": "judges", "language_panel": "agreed"}),  # lingua cannot tell: the panel
    ("Oslo", (True, False, True), 1.0, {"language_by": "judges", "language_panel": "majority"}),  # by majority
    ("Oslo", (True, False), None, {"language_by": "judges", "language_panel": "split"}),  # a tie: no verdict
    ("Graz", (False,), 1.0, {"language_by": "lingua"}),  # a word of the gold: language-neutral, no call
    ("in Graz", (False,), 1.0, {"language_by": "lingua"}),  # the gold as it is: no call
    ("1902", (False,), 1.0, {"language_by": "lingua"}),  # digits only: language-neutral, no call
    ("it was built in the year nineteen hundred", (True,), 0.0, {"language_by": "lingua"}),
])
def test_an_answer_lingua_cannot_place_goes_to_the_panel(dummy, answer, votes, ok, path):
    dummy([])
    readers = [DummyLM([{"in_language": v}]) for v in votes]
    panel = JudgePanel(readers)
    e = ex(question="Wo trainiert die Läuferin Ohm?", answers=("in Graz",))
    for _ in range(2):  # the second time memoised: no call, the same path noted
        with noted() as notes:
            if ok is None:
                with pytest.raises(SplitVerdict):
                    xrag_metrics(panel)["lang_ok"](e, pred(answer))
            else:
                assert xrag_metrics(panel)["lang_ok"](e, pred(answer)) == ok
        assert notes == path
        assert [len(r.history) for r in readers] == [int(path["language_by"] == "judges")] * len(readers)


def test_how_the_panel_decided_and_where_its_judges_split_is_counted_from_the_records(dummy, tmp_path):
    """What decided each verdict, and where the two judges disagreed (a tie: split, not scored), is in the records,
    so a run counts it and a resumed run reports it."""
    dummy([])
    first, second = DummyLM([{"same": True}] * 3), DummyLM([{"same": False}, {"same": True}, {"same": True}])
    answers = {"Wann wurde der Hafen gebaut?": "1902.",  # exact
               "Wann wurde die Brücke gebaut?": "Die Brücke wurde 1902 gebaut.",  # the judges split
               "Wann wurde das Haus gebaut?": "neunzehnhundertzwei"}  # the judges agree
    examples = [ex(question=q, id_=f"q{i}").with_inputs("question") for i, q in enumerate(answers)]
    for _ in range(2):  # the second run, a new process, resumes every record from the checkpoint
        records, summary = run_eval(lambda question: pred(answers[question]), examples,
                                    {"judge": JudgePanel([first, second])}, checkpoint=tmp_path / "x.jsonl")
        assert {k: v for k, v in summary.items() if k.startswith(("verdict_by/", "panel/"))} == {
            "verdict_by/exact": 1, "verdict_by/judges": 2, "panel/split": 1, "panel/agreed": 1}
        assert [r["judge"] for r in records] == [1.0, None, 1.0] and summary["judge"] == 1.0
        assert summary["judge_errors_by_class/SplitVerdict"] == 1
    assert len(first.history) == len(second.history) == 2


def test_xrag_answers_are_judged_by_the_local_lms_but_the_generators_and_keyed_by_them(xquad_dir, monkeypatch,
                                                                                         capsys):
    """Issue 75 item 8: the generator's LM (the 0.5B) is never on its own panel: the 1.5B judges alone, and the run
    says so; a panel a --lm leaves two of keeps both; --judge-lms naming the generator stops in one line."""
    made = []

    def fake_lm(name, *a, **k):
        made.append(name)
        return DummyLM({"question": {"answer": "im Jahr 1902", "same": True}})
    monkeypatch.setattr(sessions, "make_lm", fake_lm)
    argv = ["--program", "rag", "--no-retrieval", "--dataset", "xrag_mono:de", "--data-dir", str(xquad_dir),
            "--train", "0", "--dev", "2", "--test", "0", "--judge", "--embedder", "minilm"]
    evaluate.main(argv)
    assert made == ["local:qwen-0.5b", "local:qwen-1.5b"]  # the writer, then its panel: the 1.5B alone
    assert "judged by local:qwen-1.5b alone (the generator's LM local:qwen-0.5b" in capsys.readouterr().err
    s = sessions.session(evaluate.parser("t").parse_args(argv), needs_search=False)
    assert len(s.judge.judges) == 1 and s.params("rag")["judge_lms"] == "local:qwen-1.5b"
    assert [lm.split("@")[0] for lm in s.derived.model_ids()["judge_lms"]] == ["local:qwen-1.5b"]
    assert s.derived.judged_by.startswith("local:qwen-1.5b alone")
    other = sessions.session(evaluate.parser("t").parse_args([*argv, "--lm", "openai/x"]), needs_search=False)
    assert other.params("rag")["judge_lms"] == "local:qwen-0.5b,local:qwen-1.5b" and other.derived.judged_by == (
        "local:qwen-0.5b+local:qwen-1.5b")
    with pytest.raises(SystemExit) as stop:
        sessions.session(evaluate.parser("t").parse_args([*argv, "--judge-lms", "local:qwen-0.5b,openai/j"]),
                         needs_search=False)
    assert stop.value.code == 2 and "never judges its own answers" in capsys.readouterr().err


def test_the_judge_rubric_names_the_answer_language():
    from signatures.judge import JudgeAnswerToQuestion

    assert "in the language the question is asked in" in JudgeAnswerToQuestion.__doc__


def test_build_distractors_are_retrieved_for_the_question_not_picked_by_title():
    import random

    import scripts.xrag_build as script
    from retrieval.bm25 import BM25Index

    docs = [{"id": str(i), "title": title, "text": text} for i, (title, text) in enumerate([
        ("Harbor", "The harbor opened in 1902."), ("Harbor", "A ferry to the harbor started in 1910."),
        ("Harbor", "Gulls nest on the old pier."), ("Valley", "The ferry timetable changed when the harbor grew."),
        ("Valley", "Copper was mined in the valley.")])]
    index = BM25Index.from_corpus(Corpus("articles", docs))
    got = script.distractors("When did the ferry to the harbor start?", (docs[0], docs[1]), index, 2,
                             random.Random(0))
    assert got[0]["id"] == "3" and len(got) == 2  # the other title's passage about the ferry comes first


def test_dated_distractors_predate_the_pair_by_two_weeks():
    import random

    import scripts.xrag_build as script
    from retrieval.bm25 import BM25Index

    docs = [{"id": str(i), "title": "Harbor", "text": f"The ferry to the harbor, note {i}.", "date": d}
            for i, d in enumerate(["2024-06-01", "2024-06-03", "2024-05-25", "2024-05-10", "2024-04-01"])]
    index = BM25Index.from_corpus(Corpus("articles", docs))
    got = script.distractors("the ferry to the harbor", (docs[0], docs[1]), index, 3, random.Random(0))
    assert sorted(d["id"] for d in got) == ["3", "4"]  # 2024-05-25 is within two weeks of the pair: not allowed


def test_gold_span_cut_counts_answers_past_the_cut(xquad_dir):
    from scripts.gold_span_cut import cut_rates

    rates = cut_rates(xquad_dir, "en", [20, 30, 0])  # "The harbor lighthouse ferry number 0 was built in 1900."
    assert rates[0] == 0.0 and rates[30] == 1.0 and rates[20] == 1.0
    assert cut_rates(xquad_dir, "en", [200])[200] == 0.0
