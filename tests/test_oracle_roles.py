"""Generative oracle roles (--oracle query, plan, writer, all): each reveals only what a perfect reader of the program's
own prompt could know -- a hop's answer once a held passage holds it, a gold title once something held or the
question names it, the gold answer once the context shown supports it."""
from types import SimpleNamespace

import dspy
import pytest

import data
import programs
from evaluation.metrics import gold_of
from experiments import cli, derived, sessions
from programs.rag_critic.plan import oracle_plan
from programs.shared.oracle import ALL, Gold, Hop, check_roles, gold_labels, labelling, parse_roles
from programs.shared.text import IDK
from retrieval.corpus import Corpus, Passage
from retrieval.retriever import Retriever
from runtime.roles import init_dspy
from tests.test_musique import write
from tests.test_rag_critic import FIXTURES

# Made-up two-hop question in MuSiQue's layout (not benchmark text): hop 1 on paragraph m:1, hop 2 on m:2.
HAGAR = Passage("musique:00001", "Hagar (disambiguation)", "Hagar was the spouse of Abraham.")
KETURAH = Passage("musique:00002", "Keturah", "After Sarah died, Abraham married Keturah.")
NOISE = Passage("musique:00003", "Sarah Stewart", "Sarah Stewart wrote books.")
ABRAHAM_ELSEWHERE = Passage("musique:00004", "Patriarchs", "Abraham is a patriarch.")
MUSIQUE = dspy.Example(
    id="2hop", question="Who did the spouse of Hagar marry after the death of Sarah?", answer="Keturah",
    answers=["Keturah"], gold_titles=["Hagar (disambiguation)", "Keturah"], gold_ids=["musique:00001", "musique:00002"],
    hops=[{"question": "Hagar >> spouse", "answer": "Abraham", "key": "musique:00001"},
          {"question": "who did #1 marry after the death of sarah", "answer": "Keturah", "key": "musique:00002"}],
).with_inputs("question")

# HotpotQA-style: gold titles, no decomposition.
FILM = Passage("h:1", "Blue Fox (film)", "Blue Fox is a film directed by Ada Lind.")
ADA = Passage("h:2", "Ada Lind", "Ada Lind was born in Lyon.")
OTHER = Passage("h:3", "Red Fox", "Red Fox mentions Ada Lind in passing.")
HOTPOT = dspy.Example(id="hp", question="Where was the director of Blue Fox born?", answer="Lyon",
                      answers=["Lyon"], gold_titles=["Ada Lind", "Blue Fox (film)"]).with_inputs("question")
# single-hop (XRAG-like: a supporting article, answer span)
XRAG = dspy.Example(id="x", question="Which river runs through Kel Ora?", answer="the Vesk", answers=["the Vesk"],
                    supporting=["xrag:7"]).with_inputs("question")


def test_musique_hop_two_stays_unsubstituted_until_a_held_passage_holds_hop_ones_answer():
    gold = gold_of(MUSIQUE)
    assert gold.query([]) == "spouse of Hagar"  # ">>" read as plain text, the first hop unresolved
    assert gold.query([NOISE]) == "spouse of Hagar"
    # hop 1 resolved (its paragraph held): hop 2, its "#1" now the answer the held paragraph holds
    assert gold.query([HAGAR]) == "who did Abraham marry after the death of sarah"
    # hop 1's paragraph id held but its text cut of the answer: "#1" is not revealed, hop 1's own question stands in
    cut = Passage("musique:00001", "Hagar (disambiguation)", "Hagar was an Egyptian.")
    query = gold.query([cut])
    assert "Abraham" not in query and query == "who did spouse of Hagar marry after the death of sarah"
    # the answer held elsewhere (not the supporting paragraph) reveals it too: a perfect reader reads it there
    assert gold.query([cut, ABRAHAM_ELSEWHERE]) == "who did Abraham marry after the death of sarah"
    assert gold.query([HAGAR, KETURAH]) == MUSIQUE.question  # nothing missing


def test_a_gold_title_named_only_in_an_unheld_passage_is_not_revealed():
    gold = gold_of(HOTPOT)
    # the question names "Blue Fox" (the gold "Blue Fox (film)"): revealed; "Ada Lind" is not named by anything held
    assert gold.query([]) == "Blue Fox (film)" and gold.gap([]) == ("Blue Fox (film)",)
    # holding the film's page reveals its director's page
    assert gold.query([FILM]) == "Ada Lind" and gold.gap([FILM]) == ("Ada Lind",)
    # OTHER names Ada Lind, but it is not held: the question and the held page alone count
    nameless = dspy.Example(id="n", question="Where was the director born?", answers=["Lyon"],
                            gold_titles=["Ada Lind", "Blue Fox (film)"])
    assert gold_of(nameless).query([]) == nameless.question and gold_of(nameless).gap([]) == ()
    assert gold_of(nameless).query([OTHER]) == "Ada Lind"
    assert gold.query([FILM, ADA]) == HOTPOT.question


def test_the_writer_abstains_while_one_supporting_paragraph_is_missing():
    gold = gold_of(MUSIQUE)
    assert gold.writer([KETURAH, NOISE]) == IDK  # the answer's own paragraph is not enough: hop 1 is missing
    assert gold.writer([HAGAR, NOISE, KETURAH]) == "Keturah"
    assert gold.writer([]) == IDK  # closed book


def test_the_single_hop_writer_needs_the_answer_span_in_the_context_shown():
    gold = gold_of(XRAG)
    support = Passage("xrag:7", "Kel Ora", "Kel Ora lies on the Vesk, a long river.")
    assert gold.span and gold.writer([support]) == "the Vesk"
    assert gold.writer([Passage("xrag:7", "Kel Ora", "Kel Ora is a town.")]) == IDK  # supporting id, no span
    assert gold.writer([support], max_chars=10) == IDK  # the span cut off the context shown
    mc = Gold(answers=("B",), span=True, question="?")
    assert mc.writer([support], {"A": "the Rhine", "B": "the Vesk"}) == "B"
    assert mc.writer([support], {"A": "the Vesk", "B": "the Rhine"}) == IDK


def test_the_plan_searches_the_oracle_query_while_a_gold_passage_is_missing_else_regenerates():
    gold = gold_of(MUSIQUE)
    assert gold.plan([HAGAR]) == "who did Abraham marry after the death of sarah"
    assert gold.plan([]) == "spouse of Hagar"
    assert gold.plan([HAGAR, KETURAH]) is None


def test_all_expands_to_every_role_a_program_has_and_unknown_roles_are_refused():
    assert parse_roles("writer,all") == (ALL,)
    assert check_roles("all", ("relevance", "writer"), "p") == {"relevance", "writer"}
    assert parse_roles("query,writer,plan") == ("query", "plan", "writer")
    with pytest.raises(ValueError, match="unknown --oracle role 'reader'.*writer, all"):
        parse_roles("reader")
    with pytest.raises(ValueError, match="rag has no such decision; its oracle roles: writer"):
        check_roles("query", ("writer",), "rag")


def test_a_run_names_its_oracle_all_and_only_roles_it_has():
    assert derived.program_oracle("all", "rag") == "all"
    assert derived.program_oracle("writer,relevance", "rag") == "writer"
    assert derived.program_oracle("relevance", "rag") == ""


def test_the_generative_roles_need_their_labels():
    with gold_labels(Gold(question="?")):
        with pytest.raises(ValueError, match="--oracle writer: no gold label"):
            labelling(frozenset({"writer"}), "writer")
        assert labelling(frozenset({"query"}), "query")([]) == "?"


def test_musique_loader_carries_the_decomposition_as_gold_keys(tmp_path):
    bundle = data.load("musique", write(tmp_path))
    first = next(ex for ex in bundle.examples if ex.id == "2hop__11_22")
    assert [h["question"] for h in first.hops] == ["Tova Lind >> place of birth", "#1 >> country"]
    by_text = {d["text"]: f"musique:{d['id']}" for d in bundle.corpora[0].docs}
    assert [h["key"] for h in first.hops] == [by_text["Tova Lind was born in Kel Ora."],
                                               by_text["Kel Ora is a town in Norvania."]]
    assert gold_of(first).hops == (Hop("Tova Lind >> place of birth", "Kel Ora", first.hops[0]["key"]),
                                   Hop("#1 >> country", "Norvania", first.hops[1]["key"]))


# --oracle all: no LM call at all, and the gold answer wherever retrieval reaches the gold passages.
# Made up: the question's own top 2 hold hop 1's paragraph and a distractor, never hop 2's; the oracle query for hop 2
# ("who did Abraham wed ...") reaches it once hop 1's paragraph, which names Abraham, is held.
DOCS = [{"id": "00001", "title": "Hagar (disambiguation)", "text": "Hagar was the spouse of Abraham."},
        {"id": "00002", "title": "Keturah", "text": "Abraham wed Keturah once Sarah was gone."},
        {"id": "00003", "title": "Sarah Stewart", "text": "Who did the widower of Sarah Stewart marry after the death "
                                                          "of Sarah? Nobody knows."},
        {"id": "00004", "title": "Hagar Olsson", "text": "Hagar Olsson wrote plays in Helsinki."}]
GERMAN = [{"id": "d1", "title": "Helsinki", "text": "Helsinki ist eine Stadt am Meer."}]  # CORAL's planner has a choice
TWO_HOP = MUSIQUE.copy(hops=[MUSIQUE.hops[0], {**MUSIQUE.hops[1], "question": "who did #1 wed once Sarah was gone"}],
                       source_lang="en")  # CORAL's planner oracle needs the culture's language
#: Programs whose loop reaches hop 2's paragraph here. The others end holding hop 1's alone: closed book, one pass over
#: the question's top 2 (t_rag's one query is the oracle's hop 1, par2_anchor's plan too), coral_select (no rewrite),
#: CRAG (a correct-graded passage ends its loop), Self-RAG (its merge back to k=2 drops hop 1's paragraph for hop 2's).
REACHES = {"coral", "coral_probe", "coral_fixed_own", "coral_fixed_all", "coral_fixed_own_en", "flare", "ircot",
           "metarag", "par2", "par2_chain", "rag_critic", "rag_critic_2r", "rag_critic_cot", "react", "seal",
           "seal_ledger"}


class NoCalls(dspy.utils.DummyLM):
    """An LM that fails the test on any call (and records it, should a program swallow the failure)."""

    def __init__(self):
        super().__init__([])
        self.prompts = []

    def __call__(self, prompt=None, messages=None, **kwargs):
        self.prompts.append(str(messages or prompt)[-300:])
        pytest.fail(f"an LM call under --oracle all: {self.prompts[-1]}")


@pytest.mark.parametrize("name", [n for n in programs.names() if programs.oracle_roles(n)])
def test_oracle_all_answers_with_no_lm_call(name, embedder, monkeypatch):
    monkeypatch.setenv("RAG_DATA_DIR", str(FIXTURES))  # RAG-Critic's taxonomy (made up)
    search = Retriever([Corpus("musique", DOCS, "en"), Corpus("de", GERMAN, "de")], embedder)
    program = programs.build(name, search=search if programs.spec(name).needs_search else None,
                             **sessions_config(name))
    lm = NoCalls()
    init_dspy(lm, cache=False)
    with gold_labels(gold_of(TWO_HOP)):
        pred = program(question=TWO_HOP.question)
    assert lm.prompts == []
    assert pred.answer == ("Keturah" if name in REACHES else IDK)


def sessions_config(name: str) -> dict:
    """The config a session builds ``name`` with under ``--oracle all`` (small budgets: k=2 of 4 passages, so the
    loops must find the second hop)."""
    args = SimpleNamespace(oracle="all")
    return programs.accepted_config(name, {"oracle": derived.program_oracle(args.oracle, name), "k": 2,
                                           "loops": 3, "rounds": 1, "max_chars": None})


def test_the_plan_oracle_is_a_typed_supplementary_retrieval_or_a_regeneration():
    search, regenerate = oracle_plan("who did Abraham wed", 3), oracle_plan(None, 3)
    assert [s.call.function for s in search.steps] == ["Retrieval", "GenerateAnswer"]
    assert search.steps[0].call.query == "who did Abraham wed" and search.steps[0].call.topk == 3
    assert [s.call.function for s in regenerate.steps] == ["GenerateAnswer"]


def test_oracle_all_for_one_program_checks_the_labels_of_every_role_it_has(capsys):
    examples = [MUSIQUE]  # no culture language: CORAL's planner has no label, SEAL's roles all have theirs
    sessions.check_oracle(cli.parser("x").parse_args(["--program", "seal", "--oracle", "all"]), examples)
    with pytest.raises(SystemExit):
        sessions.check_oracle(cli.parser("x").parse_args(["--program", "coral", "--oracle", "all"]), examples)
    assert "--oracle planner needs the culture's language" in capsys.readouterr().err
