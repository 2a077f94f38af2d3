"""FLARE on a fake LM whose look-ahead replies carry token logprobs: it searches exactly when a token falls below
theta, masks the tokens below beta in its query, stops at its sentence budget, and refuses a reply without logprobs;
the token reading (decoding.tokens) on adversarial logprob payloads."""
import math
import re

import pytest
from dspy.utils.dummies import DummyLM

import programs
from decoding.tokens import field_tokens, spelling
from programs.baselines.flare import FLARE, masked
from programs.shared.text import approx_tokens
from runtime.roles import init_dspy
from tests.dummies import Queue, routed
from tests.test_par2 import ManySearch
from tests.test_rag_critic import WRITER, Q, ScriptedSearch, prompts, said

THOUGHT = "`[[ ## next_sentence ## ]]`"


def tok(text, prob=1.0):
    return {"token": text, "logprob": math.log(prob) if prob else -math.inf, "top_logprobs": []}


class ThoughtLM(DummyLM):
    """Routed DummyLM answers; a reply to a call asking for logprobs carries them: every word of the reply (with
    the whitespace before it) is one token, of probability ``probs[word]`` (default 0.95)."""

    def __init__(self, routes, probs=None):
        super().__init__({k: v if isinstance(v, Queue) else Queue(v) for k, v in routes.items()})
        self.probs = probs or {}

    def __call__(self, prompt=None, messages=None, **kwargs):
        outputs = super().__call__(prompt=prompt, messages=messages, **kwargs)
        if not kwargs.get("logprobs"):
            return outputs
        return [{"text": text, "logprobs": {"content": [tok(w, self.probs.get(w.strip(), 0.95))
                                                        for w in re.findall(r"\s*\S+", text)]}} for text in outputs]


def thoughts(*sentences):
    return Queue(*({"next_sentence": s} for s in sentences))


def run(routes, probs=None, search=None, **config):
    lm = ThoughtLM(routes, probs)
    init_dspy(lm, cache=False)
    search = search or ScriptedSearch({"Ana Berg was": ("Ana Berg",)})
    return FLARE(search, **{"k": 2, **config})(question=Q), lm, search


def test_flare_searches_exactly_when_a_token_falls_below_theta():
    pred, lm, search = run(
        {THOUGHT: thoughts("Blue Fox was directed by Ana Berg.", "Ana Berg was born in Lyon.",
                           "So the answer is: Lyon."),
         WRITER: said("Lyon")},
        probs={"Berg.": 0.8, "Lyon.": 0.3})                # exactly theta: no search; below it: search
    t = pred.trace
    assert [q for q, _ in search.calls] == [Q, "Ana Berg was born in"] and t["retrievals"] == 1
    assert "query" not in t["steps"][0] and t["steps"][0]["min_prob"] == pytest.approx(0.8)
    assert [w.strip() for w in t["steps"][1]["low"]] == ["Lyon."] and t["steps"][1]["query_from"] == "sentence"
    # the sentence is written again from the passages found, and that one states the answer
    assert t["sentences"] == ["Blue Fox was directed by Ana Berg.", "So the answer is: Lyon."]
    assert t["stop_reason"] == "answered" and t["iterations"] == 2 and pred.answer == "Lyon"
    again = prompts(lm, THOUGHT)[2]
    assert "Ana Berg was a film director born in Lyon." in again and "Red Owl is a 1950" not in again
    assert [h["kwargs"].get("logprobs") for h in lm.history if THOUGHT in h["messages"][-1]["content"]] == \
        [True, True, None]                                   # look-aheads read logprobs, the rewrite does not
    # the shared chain-of-thought writer answers, the passages FLARE held last first
    assert [p.title for p in pred.passages] == ["Ana Berg", "Blue Fox", "Red Owl"]
    assert [p.title for p in pred.retrieved] == ["Blue Fox", "Red Owl", "Ana Berg"]
    assert "`[[ ## reasoning ## ]]`" in prompts(lm, WRITER)[0]


def test_a_confident_look_ahead_stands_without_a_search():
    pred, lm, search = run({THOUGHT: thoughts("Blue Fox was directed by Ana Berg.", "So the answer is: Lyon."),
                            WRITER: said("Lyon")})
    assert [q for q, _ in search.calls] == [Q] and pred.trace["retrievals"] == 0
    assert len(prompts(lm, THOUGHT)) == 2 and pred.trace["stop_reason"] == "answered"


def test_the_query_masks_the_tokens_below_beta_and_falls_back_to_the_question():
    pred, _, search = run({THOUGHT: thoughts("Blue Fox was directed by Ana Berg.", "Ana Berg."),
                           WRITER: said("Lyon")}, probs={"directed": 0.6, "Ana": 0.2, "Berg.": 0.3}, loops=1)
    step = pred.trace["steps"][0]
    # "directed" (0.6) is below theta 0.8, so the sentence is searched for, but above beta 0.4, so it stays
    assert step["query"] == "Blue Fox was directed by" and [w.strip() for w in step["low"]] == ["directed", "Ana",
                                                                                                "Berg."]
    pred, _, search = run({THOUGHT: thoughts("The Blue Fox.", "So the answer is: Lyon."), WRITER: said("Lyon")},
                          probs={"Blue": 0.1, "Fox.": 0.1}, loops=1)
    step = pred.trace["steps"][0]
    assert step["query"] == Q and step["query_from"] == "question"   # "The" alone holds no content word
    assert masked([(" The", 0.9), (" Blue", 0.1), (" Fox.", 0.5)], 0.4) == "The Fox."


def test_flare_stops_at_its_sentence_budget():
    pred, lm, search = run({THOUGHT: thoughts("Blue Fox is a film.", "Ana Berg made it.", "She lived in France."),
                            WRITER: said("France")}, probs={"France.": 0.5}, loops=2)
    assert pred.trace["stop_reason"] == "sentence_budget" and pred.trace["iterations"] == 2
    assert len(prompts(lm, THOUGHT)) == 2 and [q for q, _ in search.calls] == [Q]
    pred, lm, _ = run({THOUGHT: thoughts("Blue Fox is a film.", "Ana Berg made it."), WRITER: said("x")},
                      probs={"film.": 0.1, "it.": 0.1}, loops=1)
    assert pred.trace["iterations"] == 1 and pred.trace["retrievals"] == 1 and len(prompts(lm, THOUGHT)) == 2
    pred, _, _ = run({THOUGHT: thoughts("..."), WRITER: said("x")})
    assert pred.trace["stop_reason"] == "unusable_sentence" and pred.trace["iterations"] == 0


def test_the_writer_reads_a_middle_searchs_hits_by_ircots_reader_rule():
    """Issue 62 item 3: the writer read at most 8 passages, the last search's hits then the question's, so the hits
    of a search between them (here the second hop's) never reached it; now it reads as IRCoT's reader does:
    everything retrieved, the newest search's hits first, within ``context_tokens``."""
    def sentences():  # each look-ahead is unsure of its last word: searched for, then written again
        return thoughts("Blue Fox was directed by someone.", "Blue Fox was directed by Ana Berg.",
                        "Ana Berg was born somewhere.", "Ana Berg was born in a city.")
    unsure = {"someone.": 0.1, "somewhere.": 0.1}
    pred, lm, _ = run({THOUGHT: sentences(), WRITER: said("Lyon")}, unsure, ManySearch(), loops=2, k=5)
    assert pred.trace["queries"] == [Q, "Blue Fox was directed by", "Ana Berg was born"]
    read = prompts(lm, WRITER)[-1]
    assert all(f"[Blue Fox was directed by #{r}]" in read for r in range(1, 6))  # the middle search's: not dropped
    assert read.count(" fact ") == 15 and pred.trace["shown"] == 15 and pred.trace["context_tokens"] == 3000
    per_passage = approx_tokens(ManySearch().search("Ana Berg was born", 1)[0].format(None))
    pred, lm, _ = run({THOUGHT: sentences(), WRITER: said("Lyon")}, unsure, ManySearch(), loops=2, k=5,
                      context_tokens=4 * per_passage)
    read = prompts(lm, WRITER)[-1]  # a budget that cuts keeps the newest search's best, as IRCoT's does
    assert all(f"[Ana Berg was born #{r}]" in read for r in range(1, 5)) and read.count(" fact ") == 4
    assert [p.title for p in pred.passages] == [f"Ana Berg was born #{r}" for r in range(1, 5)]


def test_a_reply_without_token_logprobs_stops_the_run_in_one_line():
    routed({THOUGHT: {"next_sentence": "Blue Fox is a film."}, WRITER: said("x")})
    with pytest.raises(ValueError, match=r"^flare decides when to search .* returned no token logprobs: run it on an "
                                         r"endpoint that returns them \(the embedded local: server does\)$"):
        FLARE(ScriptedSearch(), k=2)(question=Q)


def test_a_run_on_an_endpoint_without_logprobs_stops_at_its_first_question_in_one_line(monkeypatch, capsys):
    import evaluate
    from experiments import sessions

    monkeypatch.setattr(sessions, "make_lm", lambda *a, **k: DummyLM({"question": {"next_sentence": "A film."}}))
    with pytest.raises(SystemExit) as stopped:
        evaluate.main(["--program", "flare", "--dataset", "demo", "--train", "0", "--dev", "1", "--k", "1"])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert stopped.value.code == 4 and err.startswith("error: question ") and "returned no token logprobs" in err


def test_the_registry_builds_flare_at_its_sentence_budget():
    flare = programs.build("flare", search=ScriptedSearch(), k=3, loops=4, decisions="logprob")
    assert isinstance(flare, FLARE) and (flare.k, flare.loops, flare.theta, flare.beta) == (3, 4, 0.8, 0.4)
    with pytest.raises(ValueError, match="beta <= theta"):
        FLARE(ScriptedSearch(), theta=0.3, beta=0.5)


# --- reading a field's tokens --------------------------------------------------------------------------------

def test_field_tokens_are_those_between_the_fields_header_and_the_next():
    content = [tok("[["), tok(" ## next"), tok("_sentence ## ]]"), tok("\n"), tok("Ana", 0.5), tok(" Berg", 0.9),
               tok(" ", 0.1), tok(".", 0.99), tok("\n\n[[", 0.5), tok(" ## completed ## ]]")]
    assert [(t, round(p, 2)) for t, p in field_tokens({"content": content}, "next_sentence")] == \
        [("Ana", 0.5), (" Berg", 0.9), (".", 0.99)]          # whitespace and the next header left out
    content[-3:] = [tok(".\n\n[[", 0.99), tok(" ## completed ## ]]")]   # a token that starts in the field is in it
    assert [t for t, _ in field_tokens({"content": content}, "next_sentence")] == ["Ana", " Berg", ".\n\n[["]
    bare = [tok("Lyon", 0.4), tok(" is", 0.9), {"token": " it", "logprob": None}]
    assert [t for t, _ in field_tokens({"content": bare}, "next_sentence")] == ["Lyon", " is"]
    assert field_tokens({"content": [tok("[[ ## other ## ]]\nx")]}, "next_sentence") == []
    assert field_tokens(None, "x") is None and field_tokens({"content": []}, "x") is None
    assert field_tokens({"content": [tok("x", 0)]}, "x") == [("x", 0.0)]


def test_spelling_keeps_the_tokens_of_the_first_sentence_whatever_the_spacing():
    tokens = [(" Ana", 0.9), (" Berg", 0.8), (".", 0.7), ("\n", 0.1), (" She", 0.2)]
    assert spelling(tokens, "Ana Berg.") == tokens[:3]
    assert spelling(tokens, "Ana  Berg .") == tokens[:3] and spelling(tokens, "") == []
    assert spelling([(" Lyon.It", 0.5), (" was", 0.5)], "Lyon.") == [(" Lyon.It", 0.5)]
