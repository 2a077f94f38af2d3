"""Multiple-choice scoring from option-letter logprobs, PriDe debiasing, and the fallback to the written letter."""
import math
import re
from pathlib import Path

import dspy
import pytest
from dspy.utils.dummies import DummyLM

import programs
from decoding.choice import MCScoring, debias, estimate_prior, letter_logprobs, sample_prior
from optimizers.calibration import calibrate_pride
from programs.shared.writer import Writer, mc_state
from runtime.roles import init_dspy

PRIOR = {"A": 0.4, "B": 0.3, "C": 0.2, "D": 0.1}  # the option-ID prior the fake LM applies
TASTE = {"tea": 0.7, "coffee": 0.1, "juice": 0.1, "milk": 0.1}  # its preference for option texts


def token(text, logprob=0.0, alternatives=()):
    return {"token": text, "logprob": logprob, "top_logprobs": [{"token": t, "logprob": lp} for t, lp in alternatives]}


def biased(texts: list[str]) -> dict[str, float]:
    """What the fake LM observes: prior(letter) x taste(text), normalised."""
    raw = {letter: PRIOR[letter] * TASTE[text] for letter, text in zip("ABCD", texts)}
    return {k: v / sum(raw.values()) for k, v in raw.items()}


class LogprobLM(DummyLM):
    """A DummyLM whose replies carry OpenAI-format logprobs: at the answer token, each option letter has the
    probability ``biased`` gives the option texts found in the prompt."""

    def __call__(self, prompt=None, messages=None, **kwargs):
        outputs = super().__call__(prompt=prompt, messages=messages, **kwargs)
        texts = re.findall(r"^[A-D]\. (\w+)$", messages[-1]["content"], re.M)
        probs = biased(texts)
        content = [token("[["), token(" ## answer ## ]]"), token("\n"),
                   token("A", math.log(probs["A"]), [(" " + k, math.log(p)) for k, p in probs.items()])]
        return [{"text": text, "logprobs": {"content": content}} for text in outputs]


class LetterBiasLM(DummyLM):
    """Writes "B"; its letter probabilities are ``PRIOR`` whatever the options say."""

    def __call__(self, prompt=None, messages=None, **kwargs):
        outputs = super().__call__(prompt=prompt, messages=messages, **kwargs)
        alternatives = [(k, math.log(p)) for k, p in PRIOR.items()]
        content = [token(" ## answer ## ]]"), token("\n"), token("B", math.log(0.3), alternatives)]
        return [{"text": text, "logprobs": {"content": content}} for text in outputs]


def test_letter_probabilities_are_read_at_the_first_answer_token():
    content = [token("[[ ##"), token(" answer ## ]]"), token("\n"),
               token("(", -0.1, [("(", -0.1)]),  # punctuation only: not the answer token
               token("B", -0.5, [("B", math.log(0.5)), (" B", math.log(0.1)), ("A", math.log(0.2)), ("Sure", -3.0)])]
    logps = letter_logprobs({"content": content}, "ABCD")
    assert math.exp(logps["B"]) == pytest.approx(0.6) and math.exp(logps["A"]) == pytest.approx(0.2)
    assert logps["C"] == logps["D"] == -3.0  # not among the alternatives: the smallest returned logprob
    no_header = [token("C", -0.1, [("C", -0.1), ("D", -3.0)])]
    assert letter_logprobs({"content": no_header}, "ABCD")["C"] == pytest.approx(-0.1)
    assert letter_logprobs({"content": [token("Sure", -0.1, [("Sure", -0.1)])]}, "ABCD") is None
    assert letter_logprobs(None, "ABCD") is None


def test_pride_prior_by_hand():
    # a question whose observed distribution does not depend on the option texts: the prior is that distribution
    flat = [{"A": 0.4, "B": 0.3, "C": 0.2, "D": 0.1}] * 4
    assert sample_prior(flat) == pytest.approx(PRIOR)
    # two options, shifts (0.8, 0.2) and (0.2, 0.8): the letters pull equally -> (0.5, 0.5);
    # shifts (0.9, 0.1) and (0.6, 0.4): geometric means sqrt(0.54) = 0.7348 and sqrt(0.04) = 0.2 -> A 0.7860
    assert sample_prior([{"A": 0.8, "B": 0.2}, {"A": 0.2, "B": 0.8}]) == pytest.approx({"A": 0.5, "B": 0.5})
    two = estimate_prior([[{"A": 0.8, "B": 0.2}, {"A": 0.2, "B": 0.8}], [{"A": 0.9, "B": 0.1}, {"A": 0.6, "B": 0.4}]])
    assert two["A"] == pytest.approx((0.5 + 0.7348 / 0.9348) / 2, abs=1e-4) and sum(two.values()) == pytest.approx(1)
    # observed = prior x content / Z at every shift: the prior comes back exactly, whatever the content
    texts = list(TASTE)
    shifts = [biased(texts[s:] + texts[:s]) for s in range(4)]
    assert estimate_prior([shifts]) == pytest.approx(PRIOR)
    with pytest.raises(ValueError, match="no usable question"):
        estimate_prior([])


def test_debiasing_overturns_the_letter_preference():
    # gold D has the highest content score (0.35) but the prior favours A: observed A 0.1, B 0.06, C 0.04, D 0.035
    observed = {"A": 0.4 * 0.25, "B": 0.3 * 0.2, "C": 0.2 * 0.2, "D": 0.1 * 0.35}
    assert max(observed, key=observed.get) == "A"
    fixed = debias(observed, PRIOR)
    assert max(fixed, key=fixed.get) == "D" and fixed["D"] == pytest.approx(0.35)
    assert MCScoring("pride", prior=PRIOR).pick(observed) == "D" and MCScoring("logprob").pick(observed) == "A"
    with pytest.raises(ValueError, match="needs an option-ID prior"):
        MCScoring("pride")
    with pytest.raises(ValueError, match="unknown --mc-scoring"):
        MCScoring("vote")


OPTIONS = {"A": "coffee", "B": "juice", "C": "milk", "D": "tea"}


def test_writer_reads_letters_from_logprobs_and_debiases_them():
    lm = LogprobLM([{"answer": "A"}])
    init_dspy(lm, cache=False)
    assert Writer(use_passages=False)(question="Drink?", options=OPTIONS).answer == "A"  # generate: the written letter
    writer = Writer(use_passages=False, mc=MCScoring("logprob"))
    out = writer(question="Drink?", options=OPTIONS)
    assert out.answer == "D" and out.option_probs == pytest.approx(biased(list(OPTIONS.values())))
    assert lm.history[-1]["kwargs"]["logprobs"] is True and lm.history[-1]["kwargs"]["top_logprobs"] == 20
    shifted = {"A": "tea", "B": "coffee", "C": "juice", "D": "milk"}  # tea at A: 0.4*0.7 wins anyway
    assert writer(question="Drink?", options=shifted).answer == "A"
    writer = Writer(use_passages=False, mc=MCScoring("pride", prior=PRIOR))
    assert writer(question="Drink?", options=shifted).answer == "A"
    assert mc_state(writer) == [{"mode": "pride", "prior": PRIOR}]


def test_every_program_is_built_with_the_multiple_choice_scoring_it_is_given(embedder, monkeypatch):
    from retrieval.corpus import Corpus
    from retrieval.retriever import Retriever

    monkeypatch.setenv("RAG_DATA_DIR", str(Path(__file__).parent / "fixtures"))  # rag_critic's taxonomy
    search = Retriever([Corpus("en", [{"id": "e1", "title": "Drinks", "text": "Tea is drunk."}], "en")], embedder)
    scoring = MCScoring("logprob")
    for name in programs.names():
        writers = [w for _, w in programs.build(name, search=search, mc=scoring).named_sub_modules(Writer)]
        assert writers and all(w.mc is scoring for w in writers), name
    init_dspy(LogprobLM([{"answer": "A"}]), cache=False)
    assert programs.build("direct", mc=scoring)(question="Drink?", options=OPTIONS).answer == "D"  # A is written


def test_no_logprobs_falls_back_to_the_written_letter_with_one_warning(dummy, capsys, monkeypatch):
    monkeypatch.setattr("decoding.choice._WARNED", set())
    dummy([{"answer": "B"}, {"answer": "B"}])
    program = programs.build("direct", mc=MCScoring("logprob"))
    assert program(question="Drink?", options=OPTIONS).answer == "B"
    assert program(question="Drink again?", options=OPTIONS).answer == "B"
    assert capsys.readouterr().err.count("returned no token logprobs") == 1


def test_pride_calibration_recovers_the_prior_a_pride_program_is_built_with():
    init_dspy(LogprobLM([{"answer": "A"}]), cache=False)
    program = programs.build("direct", mc=MCScoring("logprob"))
    examples = [dspy.Example(id=f"q{i}", question=f"Drink {i}?", options=dict(zip("ABCD", texts)), answer="A",
                             lang="en").with_inputs("question", "options", "lang")
                for i, texts in enumerate([["tea", "coffee", "juice", "milk"], ["juice", "milk", "tea", "coffee"]])]
    info = calibrate_pride(program, examples, retries=0)
    assert info["prior"] == pytest.approx(PRIOR) and info["used"] == ["q0", "q1"]
    assert info["cost_lm_calls"] == 10  # per question: the program once, then its writer at the 4 shifts
    program = programs.build("direct", mc=MCScoring("pride", prior=info["prior"]))
    assert program.writer.mc.mode == "pride" and program.writer.mc.prior == info["prior"]
    # debiased, the program picks the option it likes best wherever it stands
    for shift in range(4):
        texts = ["coffee", "juice", "milk", "tea"]
        options = dict(zip("ABCD", texts[shift:] + texts[:shift]))
        assert options[program(question="Drink?", options=options).answer] == "tea"


def test_pride_calibration_runs_a_pipeline_once_per_question_and_shifts_only_the_writer(embedder):
    from retrieval.corpus import Corpus
    from retrieval.retriever import Retriever

    class Counting(Retriever):
        searches = 0

        def search(self, *args, **kwargs):
            Counting.searches += 1
            return super().search(*args, **kwargs)

    init_dspy(LogprobLM([{"answer": "A"}]), cache=False)
    search = Counting([Corpus("en", [{"id": "e1", "title": "Drinks", "text": "Tea is drunk."}], "en")], embedder)
    program = programs.build("mono_rag", search=search, k=1, mc=MCScoring("logprob"))
    examples = [dspy.Example(id=f"q{i}", question=f"Drink {i}?", options=dict(zip("ABCD", ["tea", "coffee", "juice",
                             "milk"])), answer="A", lang="en").with_inputs("question", "options", "lang")
                for i in range(2)]
    info = calibrate_pride(program, examples, retries=0)
    assert Counting.searches == 2 and info["used"] == ["q0", "q1"]
    assert info["prior"] == pytest.approx(PRIOR)


def test_compare_script_scores_every_mode_from_one_run_and_logs_the_calibration(monkeypatch, capsys):
    import mlflow

    import scripts.coral_compare as compare
    from experiments import sessions

    lm = LetterBiasLM({"[[ ## options ## ]]": {"answer": "B"}})
    monkeypatch.setattr(sessions, "make_lm", lambda *a, **k: lm)
    argv = ["--dataset", "demo_culture", "--programs", "direct", "--train", "2", "--dev", "1", "--test", "3",
            "--circular", "--mc-scoring", "pride", "--mc-calibration", "2"]
    compare.main(argv)
    out = capsys.readouterr().out
    assert "| direct [generate] | 0.250 | 0.000 | B (12/12) |" in out  # the written letter
    assert "| direct [logprob] | 0.250 | 0.000 | A (12/12) |" in out  # the letter prior decides
    assert "| direct [pride] |" in out
    run = next(r for r in mlflow.search_runs(experiment_names=["agentic-rag"], output_format="list")
               if "mlflow.parentRunId" not in r.data.tags)
    assert run.data.metrics["direct_prior_A"] == pytest.approx(0.4) and "direct_pride_accuracy" in run.data.metrics
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(run.info.run_id, "calibration")}
    assert artifacts == {"calibration/direct.json"}
    # the same command again: the saved prior is reused, so the evaluation resumes from its checkpoint, no LM call
    calls = len(lm.history)
    compare.main(argv)
    assert len(lm.history) == calls and "(reused: " in capsys.readouterr().err
