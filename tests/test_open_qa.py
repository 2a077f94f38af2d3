"""NQ-open and TriviaQA-open: the CSV-quoted TSV rows read with their aliases, adversarial answer fields refused in
one line, alias scoring, and a retrieval run without ``--corpus`` stopped before any LM starts. The fixtures are
made-up rows in the real files' shape (quoted fields with doubled quotes, alias lists, non-ASCII)."""
import json
import os
from pathlib import Path

import dspy
import mlflow
import pytest
from dspy.utils.dummies import DummyLM

import data
import evaluate
from data.open_qa import answers_of, rows
from evaluation.metrics import exact_match, f1
from experiments import sessions

FIXTURES = Path(__file__).parent / "fixtures"


def test_nq_and_triviaqa_read_every_row_with_its_aliases():
    nq = data.load("nq", FIXTURES)
    assert [ex.id for ex in nq.examples] == ["nq-00000", "nq-00001", "nq-00002"]
    assert nq.examples[1].answers == ["1950", "March 3, 1950"] and nq.examples[1].answer == "1950"
    assert nq.corpora == [] and nq.task == "short" and set(nq.examples[0].inputs().keys()) == {"question"}
    trivia = data.load("triviaqa", FIXTURES)
    first, quoted, dashes = trivia.examples
    assert first.answers == ["Lyon", "Lyon's old town", "Lyons", "Lugdunum"]   # a quoted field, "" inside
    assert quoted.question == '"What is the ""Red Owl"" statue made of?"'       # verbatim after one CSV decode
    assert dashes.answers == ["1930\u2019s", "Thirties", "1930\u20131939", "1930s"]


def test_answers_are_scored_against_the_best_alias():
    ex = data.load("triviaqa", FIXTURES).examples[0]
    assert exact_match(ex, dspy.Prediction(answer="Lyons")) == 1.0
    assert f1(ex, dspy.Prediction(answer="the old town of Lyon")) > f1(ex, dspy.Prediction(answer="Paris")) == 0.0


@pytest.mark.parametrize("text", [
    "[]", "['Lyon', 3]", "'Lyon'", "{'Lyon'}", "['', 'Lyon']", "['Lyon'", "['Lyon'] ['Paris']", "b'Lyon'",
    "__import__('os').system('touch pwned')", "[open('x')]", "[" * 50000, "Lyon", "", "None",
])
def test_an_answer_field_that_is_no_list_of_strings_is_refused(text, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert answers_of(text) is None
    assert not (tmp_path / "pwned").exists()   # read as a literal, never run


def test_a_bad_row_is_one_line_naming_the_file_and_line(tmp_path):
    path = tmp_path / "t.txt"
    for body, line in [("q one\t['a']\nq two\t['b']\textra\n", 2), ("q one\n", 1), ("\t['a']\n", 1),
                       ("q one\t['a']\n\nq two\t[x for x in y]\n", 3)]:
        path.write_text(body)
        with pytest.raises(ValueError, match=rf"^{path} line {line}: not question<TAB>a Python list") as err:
            rows(path)
        assert "\n" not in str(err.value)
    path.write_bytes(b"q one\t['\xff']\n")
    with pytest.raises(ValueError, match="not UTF-8"):
        rows(path)
    path.write_text('q one\t"[\'a\', ' + "b" * 200000 + "\n")   # an unclosed quote runs past the field limit
    with pytest.raises(ValueError, match=rf"^{path} line \d+: .*each line must be question<TAB>"):
        rows(path)


@pytest.fixture
def fixtures_lm(monkeypatch):
    monkeypatch.setenv("RAG_DATA_DIR", str(FIXTURES))
    monkeypatch.setattr(sessions, "make_lm", lambda *a, **k: DummyLM({"question": {"answer": "Lyons"}}))


def test_a_retrieval_run_without_a_corpus_stops_in_one_line_naming_the_fix(fixtures_lm, capsys):
    with pytest.raises(SystemExit):
        evaluate.main(["--program", "rag", "--dataset", "nq", "--train", "0", "--dev", "0", "--test", "2"])
    err = capsys.readouterr().err.strip()
    assert err == ("error: nq comes with no retrieval corpus: give one with --corpus jsonl:DIR|index:DIR|wikipedia:en "
                   "(e.g. Wikipedia passages exported to DIR/en.jsonl), or run a closed-book program")
    evaluate.main(["--program", "direct", "--dataset", "triviaqa", "--train", "0", "--dev", "0", "--test", "3",
                   "--split", "test"])
    run = mlflow.search_runs(output_format="list")[0]
    assert run.data.metrics["test_em"] == pytest.approx(1 / 3)   # "Lyons" is an alias of the first question


def test_a_retrieval_run_with_a_jsonl_corpus_searches_it(fixtures_lm, tmp_path):
    docs = [{"id": "d1", "title": "Ana Berg", "text": "Ana Berg, the painter of Blue Fox, was born in Lyon."},
            {"id": "d2", "title": "Red Owl", "text": "Red Owl is a 1950 film."}]
    (tmp_path / "en.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    evaluate.main(["--program", "rag", "--dataset", "triviaqa", "--corpus", f"jsonl:{tmp_path}", "--k", "1",
                   "--train", "0", "--dev", "0", "--test", "3", "--split", "test"])
    run = mlflow.search_runs(output_format="list")[0]
    assert run.data.params["corpus_source"] == f"jsonl:{tmp_path}"
    assert run.data.metrics["test_em"] == pytest.approx(1 / 3)


@pytest.mark.skipif(not os.environ.get("RAG_DATA_DIR"), reason="needs RAG_DATA_DIR with the shared benchmark files")
def test_real_open_sets_match_manifest_counts():
    assert len(data.load("nq").examples) == 3610       # MANIFEST: NQ test 3,610
    trivia = data.load("triviaqa").examples
    assert len(trivia) == 11313 and max(len(ex.answers) for ex in trivia) > 10   # aliases
