"""Self-Refine baseline for RAG-Critic (Madaan et al., 2023): the writer drafts from the top-k passages, reviews
its own answer and revises it on that feedback, round after round until its feedback finds no error (its verdict is
Correct) or the revision changes nothing, within ``rounds`` rounds (``--rounds``). No retrieval beyond the first
search and no separate critic or planner model. Multiple choice is answered by the letter writer alone: the
revision has no letter form, so a feedback call could not change the answer. With ``decisions="logprob"``
(``fused`` alike) the feedback's verdict is read as P(Correct) from token logprobs (``decoding.decisions``): the loop
stops at or above the ``stop_gate`` threshold (program state; 0.5 uncompiled); a reply without logprobs is parsed as
written; a gate at rest says Correct without a call (the round says ``decided: "at rest (no call)"``, the stop
reason is ``feedback_at_rest``): Self-Refine then runs as ``rag`` (:meth:`SelfRefine.resting`). With
``oracle="verdict"`` (``programs.shared.oracle``) the loop stops exactly when the answer is right by the task
metric (no feedback call); a wrong one still gets the model's feedback.
"""
from __future__ import annotations

import dspy

from decoding.choice import MCScoring
from decoding.decisions import REST, Gate, check_mode, decided_by, rest_note, two_way
from programs.rag_critic.error_critic import CORRECT, ERROR, parse_verdict
from programs.shared.evidence import lenient
from programs.shared.oracle import check_roles, oracle as oracle_labels
from programs.shared.writer import Writer
from retrieval.retriever import Retriever
from signatures.revise import GiveFeedback, ReviseAnswer


class SelfRefine(dspy.Module):
    ORACLE_ROLES = ("verdict",)

    def __init__(self, search: Retriever, k: int = 5, max_chars: int = 600, rounds: int = 3,
                 decisions: str = "generate", oracle: str = "", mc: MCScoring | None = None):
        super().__init__()
        self.decisions, self.oracle = check_mode(decisions), check_roles(oracle, self.ORACLE_ROLES, "self_refine")
        if decisions != "generate":  # the verdict read as P(Correct), against a threshold (program state)
            self.stop_gate = Gate("correct", threshold=0.5)
        if rounds < 1:
            raise ValueError(f"self_refine needs rounds >= 1 (got {rounds}); rounds=0 is the plain `rag` program")
        self.search, self.k, self.max_chars, self.rounds = search, k, max_chars, rounds
        self.writer = Writer(use_passages=True, max_chars=max_chars, mc=mc)
        self.feedback = dspy.Predict(GiveFeedback)
        self.revise = dspy.Predict(ReviseAnswer)

    def resting(self) -> str | None:
        """What Self-Refine runs as while its stop gate decides whatever the probability (see
        :func:`decoding.decisions.rest_note`): at rest its first draft stands."""
        return rest_note("stop", getattr(self, "stop_gate", None), "rag")

    def forward(self, question: str, options: dict[str, str] | None = None,
                lang: str | None = None) -> dspy.Prediction:
        passages = self.search.search(question, self.k)
        context = [p.format(self.max_chars) for p in passages]
        answer = self.writer(question=question, passages=passages, options=options).answer          # draft
        rounds, stop = [], "round_budget"
        right = oracle_labels(self.oracle, "verdict")
        for _ in range(0 if options else self.rounds):
            if right is not None and right(answer):
                rounds.append({"answer_in": answer, "verdict": CORRECT, "feedback": None, "oracle": True})
                stop = "self_correct"
                break
            gate = getattr(self, "stop_gate", None)
            fb, verdict, p_correct = two_way(self.feedback, "verdict", (CORRECT, ERROR), parse_verdict,    # feedback
                                             gate, answer, passages=context, question=question, answer=answer)
            verdict = ERROR if right is not None and fb is not None else verdict
            how = decided_by(gate, p_correct) if right is None else None
            rounds.append({"answer_in": answer, "verdict": verdict, "feedback": fb.get("feedback") if fb else None,
                           **({"p_correct": p_correct} if p_correct is not None else {}),
                           **({"decided": how} if how else {})})
            if fb is None or verdict == CORRECT:
                stop = "feedback_unparsed" if fb is None else "feedback_at_rest" if how == REST else "self_correct"
                break
            out = lenient(self.revise, passages=context, question=question, previous_answer=answer,
                          feedback=fb.feedback)                                                      # refine
            revised = out.answer.strip() if out is not None and out.answer.strip() else answer
            rounds[-1]["revised"] = revised
            if revised == answer:  # the same answer would get the same feedback
                stop = "unchanged"
                break
            answer = revised
        stop = "multiple_choice" if options else stop
        trace = {"iterations": len(rounds), "queries": [question], "stop_reason": stop, "rounds": rounds,
                 "flagged": bool(rounds) and rounds[0]["verdict"] != CORRECT,
                 "at_rest": sum(r.get("decided") == REST for r in rounds)}
        return dspy.Prediction(answer=answer, passages=passages, trace=trace)
