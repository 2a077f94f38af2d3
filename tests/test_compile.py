"""compile_program on a DummyLM: random search, MIPROv2 and GEPA pick demos / instructions from the trainset and
select on the devset; an unreadable verdict or reply fails the example, any other metric or program error stops the
compile; an LM budget stops a compile with the best program so far; demos fit a token budget. (BootstrapFewShot's CLI
run is covered by test_cli.)"""
from __future__ import annotations


import dspy
import pytest
from dspy.utils.dummies import DummyLM

import programs
from fake_openai import FakeOpenAI
from optimizers.compile import (OPTIMIZERS, compile_program, feedback, fit_demos, instruction_fault, unecho_demos,
                                verdicts_only, with_feedback)
from evaluation.loop import QuestionError
from evaluation.metrics import UnreadableVerdict, exact_match
from retrieval.corpus import Passage
from runtime.lm import make_lm
from runtime.metering import BudgetSpent, Limit, limited
from runtime.roles import init_dspy
from tests.dummies import unreadable

CAPITALS = [("capital of France", "Paris"), ("capital of Italy", "Rome"), ("capital of Spain", "Madrid"),
            ("capital of Japan", "Tokyo"), ("capital of Peru", "Lima"), ("capital of Chile", "Santiago")]
EXAMPLES = [dspy.Example(question=q, answer=a, answers=[a]).with_inputs("question") for q, a in CAPITALS]
TRAIN, DEV = EXAMPLES[:4], EXAMPLES[4:]
TRAIN_QUESTIONS = {ex.question for ex in TRAIN}
PROPOSED = "Name the capital city in one word."

# MIPROv2's proposer prompts, keyed by the output field each asks for (DummyLM matches keys in the last message,
# which ends "starting with the field `[[ ## <first output> ## ]]`"); listed first so they win over the questions
# that the dataset summary and task demos quote.
PROPOSER_ANSWERS = {f"`[[ ## {name} ## ]]`": {name: text} for name, text in [
    ("proposed_instruction", PROPOSED), ("observations", "Every question asks for a capital city."),
    ("summary", "Capital-city questions."), ("program_description", "Answers short factual questions."),
    ("module_description", "Writes the final short answer.")]}


def instructions(program: dspy.Module) -> dict[str, str]:
    return {name: p.signature.instructions for name, p in program.named_predictors()}


def demo_questions(program: dspy.Module) -> list[str]:
    return [d["question"] for p in program.predictors() for d in p.demos]


# --- metric wrappers --------------------------------------------------------------------------------------------

def test_an_unreadable_verdict_scores_the_example_wrong_in_a_compile():
    def unreadable(example, pred, trace=None):
        raise UnreadableVerdict("2 unreadable replies")

    safe = verdicts_only(unreadable)
    ex, pred = EXAMPLES[0], dspy.Prediction(answer=None)
    assert safe(ex, pred) == 0.0 and isinstance(safe(ex, pred), float)
    assert safe(ex, pred, trace=[]) is False  # bootstrapping (trace set) wants a bool
    ok = verdicts_only(exact_match)  # a working metric passes through untouched
    assert ok(ex, dspy.Prediction(answer="Paris")) == 1.0 and ok(ex, dspy.Prediction(answer="Rome"), trace=[]) is False


def test_with_feedback_scores_and_names_the_expected_answer():
    gepa_metric = with_feedback(exact_match)
    wrong = gepa_metric(EXAMPLES[0], dspy.Prediction(answer="Lyon"), None, "writer.short", None)
    assert isinstance(wrong, dspy.Prediction) and wrong.score == 0.0
    assert "Expected answer: 'Paris'" in wrong.feedback and "'Lyon'" in wrong.feedback
    right = gepa_metric(EXAMPLES[0], dspy.Prediction(answer="Paris"))
    assert right.score == 1.0 and "Score 1.00" in right.feedback
    no_answer = with_feedback(exact_match)(EXAMPLES[0], dspy.Prediction(answer=None))
    assert no_answer.score == 0.0 and "Predicted: None" in no_answer.feedback
    as_bool = with_feedback(lambda gold, pred, trace=None: gold.answer == pred.answer)  # GEPA wants a float
    assert type(as_bool(EXAMPLES[0], dspy.Prediction(answer="Paris")).score) is float


# --- dispatch ---------------------------------------------------------------------------------------------------

def test_unknown_optimizer_names_the_choices(dummy):
    lm = dummy([{"answer": "Paris"}])
    with pytest.raises(ValueError, match="unknown optimizer 'copro'; choose one of: bootstrap, random_search, "
                                         "mipro, gepa"):
        compile_program(programs.build("direct"), "copro", TRAIN, DEV, exact_match)
    assert OPTIMIZERS == ("bootstrap", "random_search", "mipro", "gepa") and not lm.history


# --- random search ----------------------------------------------------------------------------------------------

def test_random_search_picks_trainset_demos_on_the_devset(dummy):
    """The DummyLM only answers a question it sees as a demo, so zero-shot scores 0 and the devset decides which
    trainset demos win."""
    dummy([], follow_examples=True)
    program = programs.build("direct")
    dev = EXAMPLES[2:]  # two questions from the trainset (answerable from demos), two never seen
    compiled = compile_program(program, "random_search", TRAIN, dev, exact_match, max_demos=2, candidates=2)

    assert compiled is not program and demo_questions(program) == []  # the student is left alone
    assert compiled.writer.short.demos and set(demo_questions(compiled)) <= TRAIN_QUESTIONS
    cands = compiled.candidate_programs  # zero-shot, labeled-only, unshuffled bootstrap + `candidates` seeds
    assert len(cands) == 2 + 3 and all(len(c["subscores"]) == len(dev) for c in cands)
    assert all(len(p.demos) <= 2 for c in cands for p in c["program"].predictors())  # max_demos reached it
    zero_shot = next(c for c in cands if c["seed"] == -3)
    assert zero_shot["score"] == 0.0 and cands[0]["program"] is compiled  # the best on the devset is returned
    # its devset score is exactly the dev questions its writer has demos for
    hits = {d["question"] for d in compiled.writer.short.demos} & {ex.question for ex in dev}
    assert hits and cands[0]["score"] == 100 * len(hits) / len(dev)


def test_every_candidate_scored_on_the_devset_is_a_step_of_the_mlflow_run(dummy):
    import mlflow

    from evaluation import tracking

    dummy([], follow_examples=True)
    with tracking.run("compile-test", "random-search") as active:
        compiled = compile_program(programs.build("direct"), "random_search", TRAIN, EXAMPLES[2:], exact_match,
                                   max_demos=2, candidates=2)
    history = mlflow.MlflowClient().get_metric_history(active.info.run_id, "compile_candidate_dev_score")
    scores = sorted(c["score"] for c in compiled.candidate_programs)
    assert [m.step for m in history] == list(range(1, len(scores) + 1))  # one step per candidate, in order
    assert sorted(m.value for m in history) == scores
    best = mlflow.MlflowClient().get_metric_history(active.info.run_id, "compile_best_dev_score")
    assert best[-1].value == max(scores) and all(a.value <= b.value for a, b in zip(best, best[1:]))


def test_a_crashing_metric_stops_the_compile_with_one_line_instead_of_scoring_zero(dummy):
    """DSPy counts a metric that raises as a failed example (scored 0) and cancels only after 10 of them."""
    dummy({q: {"answer": a} for q, a in CAPITALS})

    def crashes(example, pred, trace=None):
        raise KeyError("answers")

    dev = [ex.copy(id=f"d{i}") for i, ex in enumerate(EXAMPLES * 2)]  # 12: more than dspy.settings.max_errors
    with pytest.raises(QuestionError, match=r"^question d0: the compile metric raised KeyError: 'answers'"):
        compile_program(programs.build("direct"), "random_search", TRAIN, dev, crashes, candidates=1)


class Unreachable(DummyLM):
    """An LM endpoint that refuses every connection; counts the calls."""

    def __call__(self, *args, **kwargs):
        from dspy.utils.exceptions import LMTransportError

        self.history.append(kwargs)
        raise LMTransportError("connection refused")


@pytest.mark.parametrize("optimizer", ["bootstrap", "random_search"])
def test_a_judge_outage_stops_the_compile_instead_of_compiling_without_demos(dummy, monkeypatch, optimizer):
    from evaluation.loop import EndpointDown
    from evaluation.metrics import Judge

    monkeypatch.setenv("RAG_ENDPOINT_BACKOFF", "0")
    dummy({q: {"answer": f"the city of {a}"} for q, a in CAPITALS})  # not an exact match: the judge is asked
    judge = Unreachable([])
    with pytest.raises(EndpointDown, match="^the compile metric failed 3 times in a row .last: LMTransportError"):
        compile_program(programs.build("direct"), optimizer, TRAIN, DEV, Judge(judge), candidates=1)
    assert len(judge.history) == 3  # asked greedily 3 times, then stopped


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_a_program_outage_or_bug_stops_the_compile_instead_of_compiling_without_demos(monkeypatch, optimizer):
    """DSPy's optimizers count a program that raises as a failed example (up to 10 of them) and compile on."""
    from evaluation.loop import EndpointDown

    monkeypatch.setenv("RAG_ENDPOINT_BACKOFF", "0")
    lm = Unreachable([])
    init_dspy(lm, cache=False)
    with pytest.raises(EndpointDown, match=r"^the program Direct \(compile\) failed 3 times in a row .last: "
                                           "LMTransportError: connection refused"):
        compile_program(programs.build("direct"), optimizer, TRAIN, DEV, exact_match, candidates=1, budget=4,
                        reflection_lm=lm)
    assert len(lm.history) == 3

    class Broken(dspy.Module):
        def __init__(self):
            super().__init__()
            self.write = dspy.Predict("question -> answer")  # never reached: a bug comes first

        def forward(self, question):
            return self.write(question={}["answer"])

    with pytest.raises(QuestionError, match="^question 'capital of [A-Za-z]+': the program Broken .compile. raised "
                                            "KeyError: 'answer'"):
        compile_program(Broken(), optimizer, TRAIN, DEV, exact_match, candidates=1, budget=4, reflection_lm=lm)


def test_an_unreadable_reply_fails_the_example_as_dspy_does_and_the_compile_goes_on(dummy):
    dummy({q: {"answer": a} for q, a in CAPITALS})

    class Unreadable(dspy.Module):
        def __init__(self):
            super().__init__()
            self.write = dspy.Predict("question -> answer")

        def forward(self, question):
            if question == TRAIN[0].question:
                raise unreadable()
            return self.write(question=question)

    compiled = compile_program(Unreadable(), "bootstrap", TRAIN, DEV, exact_match, max_demos=4)
    bootstrapped = [d["question"] for p in compiled.predictors() for d in p.demos if d.get("augmented")]
    assert bootstrapped == [ex.question for ex in TRAIN[1:]]  # the unreadable one made no demo
    assert "forward" not in vars(compiled) and "reset_copy" not in vars(compiled)


# --- MIPROv2 ----------------------------------------------------------------------------------------------------

class _LastChoice:
    """Stands in for an optuna trial: always takes the last candidate (a proposed instruction, a bootstrapped set)."""

    def suggest_categorical(self, name, choices):
        return list(choices)[-1]


def test_mipro_bootstraps_trainset_demos_and_proposes_instructions(dummy, monkeypatch):
    """Steps 1-2 of MIPROv2 run for real; its optuna search (step 3) is replaced by one trial that inserts the last
    instruction and demo candidates with MIPROv2's own code, so the candidates can be checked."""
    seen = {}

    def one_trial(self, program, instruction_candidates, demo_candidates, evaluate, valset, num_trials, minibatch,
                  minibatch_size, *rest):
        seen.update(instructions=instruction_candidates, demos=demo_candidates, valset=valset,
                    num_trials=num_trials, minibatch=minibatch, minibatch_size=minibatch_size)
        candidate = program.deepcopy()
        self._select_and_insert_instructions_and_demos(candidate, instruction_candidates, demo_candidates,
                                                       _LastChoice(), {1: {}}, 1)
        return candidate

    monkeypatch.setattr(dspy.MIPROv2, "_optimize_prompt_parameters", one_trial)
    dummy({**PROPOSER_ANSWERS, **{q: {"answer": a} for q, a in CAPITALS}})
    program = programs.build("direct")
    original = instructions(program)
    compiled = compile_program(program, "mipro", TRAIN, DEV, exact_match, max_demos=2, candidates=3)

    assert seen["num_trials"] == 2 * 3 and seen["valset"] == DEV
    assert not seen["minibatch"]  # a devset of <= 35 is scored whole: minibatches would repeat full evaluations
    short = seen["instructions"][0]  # writer.short: the original first, then the proposer's (from the DummyLM)
    assert short[0] == original["writer.short"] and short[1:] == [PROPOSED, PROPOSED]
    bootstrapped = [d for demo_set in seen["demos"][0] for d in demo_set if d.get("augmented")]
    assert bootstrapped and all(d["question"] in TRAIN_QUESTIONS and d["answer"] == dict(CAPITALS)[d["question"]]
                                for d in bootstrapped)  # traces the LM got right under the metric

    assert len(short) == 3 and len(seen["instructions"]) == 1  # writer.choice (never called here): no proposals
    assert compiled is not program and instructions(program) == original and demo_questions(program) == []
    assert instructions(compiled) == {"writer.short": PROPOSED, "writer.choice": original["writer.choice"]}
    assert compiled.writer.short.demos and not compiled.writer.choice.demos
    assert set(demo_questions(compiled)) <= TRAIN_QUESTIONS


def test_mipro_tunes_only_the_predictors_the_train_questions_call(dummy, monkeypatch, capsys):
    """Multiple-choice questions call writer.choice only: MIPROv2 proposes for it alone, and says what it left."""
    proposed = []
    monkeypatch.setattr(dspy.MIPROv2, "_optimize_prompt_parameters",
                        lambda self, program, instructions, *rest: proposed.append(instructions) or program)
    mc = [dspy.Example(question=q, options={"A": a, "B": "Oslo"}, answer="A").with_inputs("question", "options")
          for q, a in CAPITALS]
    dummy({**PROPOSER_ANSWERS, **{q: {"answer": "A"} for q, _ in CAPITALS}})
    program = programs.build("direct")
    compiled = compile_program(program, "mipro", mc[:4], mc[4:], exact_match, candidates=2)

    assert len(proposed[0]) == 1 and proposed[0][0][1:] == [PROPOSED]  # one predictor: the original + 1 proposal
    assert type(compiled) is type(program)  # the program, not the view MIPROv2 tuned
    assert "left as they are (not called on the first 4 train examples): writer.short" in capsys.readouterr().err


def test_mipro_budget_sets_the_trial_count(dummy, monkeypatch):
    trials = []
    monkeypatch.setattr(dspy.MIPROv2, "_optimize_prompt_parameters",
                        lambda self, program, ic, dc, ev, vs, num_trials, *rest: trials.append(num_trials) or program)
    dummy({**PROPOSER_ANSWERS, **{q: {"answer": a} for q, a in CAPITALS}})
    compile_program(programs.build("direct"), "mipro", TRAIN, DEV, exact_match, candidates=2, budget=5)
    assert trials == [5]


def test_mipro_proposes_instructions_with_the_reflection_lm(dummy, monkeypatch):
    """The proposer (e.g. the 1.5B) writes the instructions; the program's own LM (the 0.5B) only answers."""
    proposed = []
    monkeypatch.setattr(dspy.MIPROv2, "_optimize_prompt_parameters",
                        lambda self, program, instructions, *rest: proposed.append(instructions) or program)
    dummy({q: {"answer": a} for q, a in CAPITALS})  # no proposer answers: asked to propose, it fails the compile
    proposer = DummyLM(PROPOSER_ANSWERS)
    compile_program(programs.build("direct"), "mipro", TRAIN, DEV, exact_match, candidates=2, reflection_lm=proposer)
    assert proposed[0][0][1:] == [PROPOSED]  # writer.short: the original, then the proposer's (MIPROv2 asks a copy)
    assert proposer.history  # the dataset summary, too


def test_mipro_end_to_end_with_optuna(dummy):
    dummy({**PROPOSER_ANSWERS, **{q: {"answer": a} for q, a in CAPITALS}})
    program = programs.build("direct")
    original = instructions(program)
    compiled = compile_program(program, "mipro", TRAIN, DEV, exact_match, max_demos=2, candidates=3, budget=3)
    assert compiled is not program and instructions(program) == original
    assert all(text in (original[name], PROPOSED) for name, text in instructions(compiled).items())
    assert set(demo_questions(compiled)) <= TRAIN_QUESTIONS
    assert compiled.score == 100.0  # every answer in the script is right


# --- GEPA -------------------------------------------------------------------------------------------------------

YES_NO = [dspy.Example(question=q, answer="yes").with_inputs("question")
          for q in ("Is Paris in France?", "Is Rome in Italy?", "Is Lima in Peru?", "Is Oslo in Norway?",
                    "Is Bern in Switzerland?", "Is Kyiv in Ukraine?")]


def said_yes(example, pred, trace=None):
    return float(pred.answer == example.answer)


def reflected(i: int) -> str:
    return f"Reply with one word, yes or no (instruction {i})."


def reflection_lm(n=10):
    """GEPA's instruction proposer talks JSON to the reflection LM."""
    return DummyLM([{"new_instruction": reflected(i)} for i in range(n)], adapter=dspy.JSONAdapter())


def test_gepa_adopts_a_reflected_instruction_that_scores_better(dummy):
    # GEPA scores the seed on the devset (2 calls) and a train minibatch (3), reflects once, then re-runs the
    # minibatch with the new instruction: from then on the scripted writer answers right.
    writer = dummy([{"answer": "no"}] * 5 + [{"answer": "yes"}] * 40)
    reflect = reflection_lm()
    program = programs.build("direct")
    original = instructions(program)
    compiled = compile_program(program, "gepa", YES_NO[:4], YES_NO[4:], said_yes, budget=12, reflection_lm=reflect)

    assert compiled is not program and instructions(program) == original
    assert instructions(compiled) == {"writer.short": reflected(0), "writer.choice": original["writer.choice"]}
    assert len(reflect.history) == 1
    prompt = reflect.history[0]["messages"][-1]["content"]
    assert original["writer.short"] in prompt and "Expected answer: 'yes'. Predicted: 'no'." in prompt
    systems = [call["messages"][0]["content"] for call in writer.history]
    assert len(systems) > 5 and all((reflected(0) in s) == (i >= 5) for i, s in enumerate(systems))


def test_gepa_keeps_the_instructions_when_no_reflection_helps(dummy):
    writer = dummy({q: {"answer": "Oslo"} for q, _ in CAPITALS})  # wrong whatever the instruction
    reflect = reflection_lm()
    program = programs.build("direct")
    original = instructions(program)
    compiled = compile_program(program, "gepa", TRAIN, DEV, exact_match, budget=12, reflection_lm=reflect)

    assert compiled is not program and instructions(compiled) == original
    assert reflect.history  # it did reflect, with feedback naming the gold answers of the train minibatch
    prompts = " ".join(call["messages"][-1]["content"] for call in reflect.history)
    assert "Predicted: 'Oslo'" in prompts and any(f"Expected answer: '{a}'" in prompts for _, a in CAPITALS[:4])
    assert all(f"Expected answer: '{a}'" not in prompts for _, a in CAPITALS[4:])  # devset is for selection only
    calls_small = len(writer.history)
    writer.history.clear()
    compile_program(program, "gepa", TRAIN, DEV, exact_match, budget=30, reflection_lm=reflection_lm())
    assert len(writer.history) > calls_small  # budget is GEPA's metric-call budget


def test_gepa_reflects_on_the_predictor_the_data_uses_from_the_first_iteration(dummy):
    # multiple-choice questions call writer.choice only; writer.short (listed first) has no trace to reflect on.
    # The budget (dev 2 + minibatch 3 + 1) leaves room for one iteration: it must reflect on writer.choice.
    mc = [dspy.Example(question=ex.question, options={"A": "yes", "B": "no"}, answer="A")
          .with_inputs("question", "options") for ex in YES_NO]
    dummy([{"answer": "B"}] * 5 + [{"answer": "A"}] * 40)
    reflect = reflection_lm()
    program = programs.build("direct")
    compiled = compile_program(program, "gepa", mc[:4], mc[4:], said_yes, budget=6, reflection_lm=reflect)

    assert len(reflect.history) == 1 and instructions(compiled)["writer.choice"] == reflected(0)


# --- GEPA feedback ----------------------------------------------------------------------------------------------

def test_feedback_names_the_gold_titles_never_retrieved_and_the_decisions():
    gold = dspy.Example(question="Who directed Alien?", answer="Ridley Scott", answers=["Ridley Scott"],
                        gold_titles=["Alien (film)", "Ridley Scott"])
    passages = [Passage("1", "Alien (film)", "Alien is a 1979 film."), Passage("2", "Aliens", "Aliens is a sequel.")]
    trace = {"iterations": 1, "queries": ["Alien director"], "actions": ["ambiguous"], "grades": ["correct", None],
             "stop_reason": "max_loops", "parse_failures": 0}
    pred = dspy.Prediction(answer="James Cameron", passages=passages, trace=trace)
    assert feedback(gold, pred, 0.0) == (
        "Expected answer: 'Ridley Scott'. Predicted: 'James Cameron'. Score 0.00. "
        "Gold passages never retrieved: 'Ridley Scott'. "
        'Decisions: queries=["Alien director"]; actions=["ambiguous"]; grades=["correct", null]; '
        'stop_reason="max_loops".')
    # everything retrieved (``retrieved`` counts, not only the passages shown); no trace: no decisions
    found = dspy.Prediction(answer="Ridley Scott", passages=passages[:1],
                            retrieved=[*passages, Passage("3", "Ridley Scott", "Scott is a director.")])
    assert feedback(gold, found, 1.0) == ("Expected answer: 'Ridley Scott'. Predicted: 'Ridley Scott'. Score 1.00. "
                                          "Every gold passage was retrieved.")
    long = dspy.Prediction(answer="x", passages=passages, trace={"queries": ["a very long search " * 40] * 5})
    text = feedback(gold, long, 0.0)
    assert len(text) <= 600 and text.count("a very long search") < 10  # capped
    assert with_feedback(exact_match)(gold, pred).feedback == feedback(gold, pred, 0.0)


# --- compile budget ---------------------------------------------------------------------------------------------

def augmented_questions(program: dspy.Module) -> list[str]:
    return [d["question"] for p in program.predictors() for d in p.demos if d.get("augmented")]


def test_a_call_budget_stops_bootstrap_and_keeps_the_demos_bootstrapped_so_far(dummy, capsys):
    lm = dummy({q: {"answer": a} for q, a in CAPITALS})  # every answer right: each train example bootstraps
    limit = Limit(calls=2)
    compiled = compile_program(programs.build("direct"), "bootstrap", TRAIN, DEV, exact_match, max_demos=4,
                               limit=limit)
    assert len(lm.history) == 2 and limit.reached == "2 LM calls"  # the third call was never made
    assert augmented_questions(compiled) == [q for q, _ in CAPITALS[:2]]
    labeled = [d["question"] for d in compiled.writer.short.demos if not d.get("augmented")]
    assert sorted(labeled) == sorted(q for q, _ in CAPITALS[2:4])  # as unstopped: the rest as labeled demos
    assert ("compile budget spent (2 LM calls): bootstrap stopped early and kept the demos bootstrapped from 2 of 4 "
            "train examples so far") in capsys.readouterr().err
    assert compiled(question="capital of Peru").answer == "Lima"  # usable, outside the budget


def test_without_a_budget_bootstrap_compiles_as_dspy_does(dummy, capsys):
    lm = dummy({q: {"answer": a} for q, a in CAPITALS})
    limit = Limit()
    ours = compile_program(programs.build("direct"), "bootstrap", TRAIN, DEV, exact_match, max_demos=2, limit=limit)
    calls = len(lm.history)
    plain = dspy.BootstrapFewShot(metric=exact_match, max_bootstrapped_demos=2, max_labeled_demos=2).compile(
        programs.build("direct"), trainset=TRAIN)
    assert calls == len(lm.history) - calls == 2 and not limit.reached
    assert [p.demos for p in ours.predictors()] == [p.demos for p in plain.predictors()]
    assert "budget" not in capsys.readouterr().err


def test_a_budget_stops_a_search_with_the_best_candidate_scored_so_far(dummy, capsys):
    dummy({q: {"answer": a} for q, a in CAPITALS})
    # random search scores zero-shot on the dev set first (2 calls, all right), then the labeled-only candidate
    compiled = compile_program(programs.build("direct"), "random_search", TRAIN, DEV, exact_match, candidates=2,
                               limit=Limit(calls=3))
    assert demo_questions(compiled) == []  # the zero-shot candidate
    assert ("random_search stopped early and kept the best of 1 candidate(s) scored on the dev set so far (dev "
            "score 100.0)") in capsys.readouterr().err
    program = programs.build("direct")
    kept = compile_program(program, "random_search", TRAIN, DEV, exact_match, limit=Limit(calls=1))
    assert kept is not program and demo_questions(kept) == []
    assert "kept the uncompiled program: no candidate was scored on the whole dev set" in capsys.readouterr().err
    # GEPA scores the seed program on the dev set (2 calls), then train minibatches: stopped there, it keeps the seed
    original = instructions(program)
    gepa = compile_program(program, "gepa", TRAIN, DEV, exact_match, budget=12, reflection_lm=reflection_lm(),
                           limit=Limit(calls=4))
    assert instructions(gepa) == original
    assert "gepa stopped early and kept the best of 1 candidate(s) scored on the dev set" in capsys.readouterr().err


def test_a_minute_budget_refuses_the_call_past_its_deadline(dummy):
    lm = dummy([{"answer": "Paris"}])
    limit = Limit(minutes=0)
    with limited(limit), pytest.raises(BudgetSpent):
        programs.build("direct")(question="capital of France")  # DSPy's callback guard let it through
    assert not lm.history and limit.reached == "0 minutes"


def test_a_rerun_of_an_interrupted_bootstrap_reads_what_it_asked_from_the_lm_cache():
    """An interrupted bootstrap (here by a budget) run again asks the LM endpoint only what it had not asked: its
    calls are greedy and DSPy's disk cache (init_dspy) holds the first run's replies."""
    with FakeOpenAI() as server:  # its answers are wrong: no example bootstraps, every train example is asked
        def run(limit=None):
            init_dspy(make_lm("openai/fake", server.api_base), cache=True)  # a new process: empty memory cache
            return compile_program(programs.build("direct"), "bootstrap", TRAIN, DEV, exact_match, limit=limit)

        run(Limit(calls=2))
        assert server.requests == 2
        run()
        assert server.requests == len(TRAIN)  # the first two came from the disk cache


# --- demo token budget ------------------------------------------------------------------------------------------

def test_fit_demos_drops_the_longest_demos_until_they_fit():
    program = programs.build("direct")
    short = dspy.Example(question="q" * 8, answer="a" * 4, augmented=True)  # 12 characters: 3 tokens
    long = dspy.Example(question="q" * 36, answer="a" * 4)  # 10 tokens
    middle = dspy.Example(question="q" * 16, answer="a" * 4)  # 5 tokens
    program.writer.short.demos = [short, long, middle]
    assert fit_demos(program, None) == {"writer.short": (18, 0), "writer.choice": (0, 0)}
    assert program.writer.short.demos == [short, long, middle]
    assert fit_demos(program, 9)["writer.short"] == (8, 1) and program.writer.short.demos == [short, middle]
    assert fit_demos(program, 2)["writer.short"] == (0, 2) and program.writer.short.demos == []


# --- role LMs ---------------------------------------------------------------------------------------------------

class Checked(dspy.Module):
    """A critic on an LM of its own, then the writer."""

    def __init__(self):
        super().__init__()
        self.critic = dspy.Predict("question -> verdict")
        self.writer = dspy.Predict("question -> answer")

    def forward(self, question):
        self.critic(question=question)
        return self.writer(question=question)


@pytest.mark.parametrize("optimizer", ["bootstrap", "random_search"])
def test_every_program_a_compile_runs_keeps_the_critics_own_lm(dummy, optimizer):
    """DSPy's reset_copy clears each predictor's LM: the candidates a compile scored, and the program it returned,
    ran the critic on the default LM. Now the default LM never sees a critic prompt."""
    writer = dummy([{"answer": a, "verdict": "asked the wrong LM"} for _, a in CAPITALS] * 20)
    critic = DummyLM([{"verdict": "fine"}] * 200)
    program = Checked()
    program.critic.lm = critic
    compiled = compile_program(program, optimizer, TRAIN, DEV, exact_match, max_demos=1, candidates=1)
    compiled(question="capital of Peru")

    assert critic.history and writer.history
    assert not [call for call in writer.history if "verdict" in str(call["messages"])]
    assert compiled.critic.lm is critic and "reset_copy" not in vars(compiled)


# --- proposed instructions --------------------------------------------------------------------------------------

LONG = [dspy.Example(question="Which river flows through the capital city of the country that won the 1998 cup?",
                     answer="Seine").with_inputs("question")]


@pytest.mark.parametrize("text, fault", [
    # the shapes the 1.5B proposer wrote in CRAG's MuSiQue table (in other words)
    ("Which river flows through the capital city of the country that won the 1998 cup? [Seine]",
     "it copies a train example"),
    ("How many rivers flow through capital cities, and when were they first named?", "a question, not an instruction"),
    ("Generate a question about rivers using:\n- [1] [Seine] The Seine is a river in France.",
     "it copies retrieved passages"),
    ("I don't know", "too short to instruct"),
    ("Don't answer.", "too short to instruct"),
    ("Name the river, then cite the passages that say so, e.g. 'Seine [1] [2]'.", None),
    ("Answer in 2-4 words from the passages; if they do not give it, say: I don't know", None),
    ("Give the answer as a short phrase: which river flows through the city the question names.", None),
])
def test_a_proposed_instruction_that_copies_asks_or_says_nothing_is_refused(text, fault):
    assert instruction_fault(text, LONG) == fault


def test_mipro_never_tries_a_proposal_that_is_not_an_instruction(dummy, monkeypatch, capsys):
    seen = {}

    def record(self, program, instruction_candidates, *rest):
        seen.update(instructions=instruction_candidates)
        return program.deepcopy()

    monkeypatch.setattr(dspy.MIPROv2, "_optimize_prompt_parameters", record)
    echoed = {**PROPOSER_ANSWERS,
              "`[[ ## proposed_instruction ## ]]`": {"proposed_instruction": "What is the capital of Spain? [Madrid]"}}
    dummy({**echoed, **{q: {"answer": a} for q, a in CAPITALS}})
    program = programs.build("direct")
    compile_program(program, "mipro", TRAIN, DEV, exact_match, max_demos=2, candidates=3)

    assert seen["instructions"][0] == [instructions(program)["writer.short"]]  # only the program's own
    assert "proposed instruction refused (it copies a train example)" in capsys.readouterr().err


def test_gepa_keeps_the_instruction_where_the_reflection_wrote_none(dummy, capsys):
    dummy([{"answer": "no"}] * 5 + [{"answer": "yes"}] * 40)  # the adopted test above, with an answer for a reply
    reflect = DummyLM([{"new_instruction": "I don't know"}] * 10, adapter=dspy.JSONAdapter())
    program = programs.build("direct")
    compiled = compile_program(program, "gepa", YES_NO[:4], YES_NO[4:], said_yes, budget=12, reflection_lm=reflect)

    assert reflect.history and instructions(compiled) == instructions(program)
    assert "proposed instruction refused (too short to instruct): \"I don't know\"" in capsys.readouterr().err


def test_a_bootstrapped_demo_loses_the_format_text_its_teacher_echoed():
    """A self-taught CORAL replanner demo ended in DSPy's type note; its student echoed it in 5 of 11 rewrites
    (uncompiled: 2)."""
    program = programs.build("direct")
    note = ' # note: the value you produce must adhere to the JSON schema: {"type": "string"}'
    echoed = dspy.Example(question="capital of Peru", answer="Lima" + note, augmented=True)
    clean = dspy.Example(question="capital of Chile", answer="Santiago", augmented=True)
    program.writer.short.demos = [echoed, clean]
    assert unecho_demos(program) == {"writer.short": 1}
    assert [d.answer for d in program.writer.short.demos] == ["Lima", "Santiago"]
    assert program.writer.short.demos[0].question == "capital of Peru" and unecho_demos(program) == {}
