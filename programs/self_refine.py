"""Self-Refine baseline for RAG-Critic (Madaan et al., 2023): the writer drafts from the top-k passages, reviews
its own answer and revises it on that feedback, for at most ``rounds`` rounds (RAG-Critic's budget), stopping
when its own verdict is Correct. No retrieval beyond the first search and no separate critic or planner model.
"""
from __future__ import annotations

import dspy

from programs.error_critic import CORRECT, parse_verdict
from programs.evidence import lenient
from programs.retrieval import Retriever
from programs.writer import Writer
from signatures.revise import GiveFeedback, ReviseAnswer


class SelfRefine(dspy.Module):
    def __init__(self, search: Retriever, k: int = 5, max_chars: int = 600, rounds: int = 1):
        super().__init__()
        self.search, self.k, self.max_chars, self.rounds = search, k, max_chars, rounds
        self.writer = Writer(use_passages=True, max_chars=max_chars)
        self.feedback = dspy.Predict(GiveFeedback)
        self.revise = dspy.Predict(ReviseAnswer)

    def forward(self, question: str, options: dict[str, str] | None = None,
                lang: str | None = None) -> dspy.Prediction:
        passages = self.search.search(question, self.k)
        context = [p.format(self.max_chars) for p in passages]
        answer = self.writer(question=question, passages=passages, options=options).answer          # draft
        rounds, stop = [], "round_budget"
        for _ in range(self.rounds):
            fb = lenient(self.feedback, passages=context, question=question, answer=answer)           # feedback
            verdict = parse_verdict(fb.verdict) if fb else None
            rounds.append({"answer_in": answer, "verdict": verdict, "feedback": fb.feedback if fb else None})
            if fb is None or verdict == CORRECT:
                stop = "feedback_unparsed" if fb is None else "self_correct"
                break
            if options:  # multiple choice: revise through the letter writer, which has no feedback field
                break
            out = lenient(self.revise, passages=context, question=question, previous_answer=answer,
                          feedback=fb.feedback)                                                      # refine
            if out is not None and out.answer.strip():
                answer = out.answer.strip()
            rounds[-1]["revised"] = answer
        trace = {"iterations": len(rounds), "queries": [question], "stop_reason": stop, "rounds": rounds,
                 "flagged": bool(rounds) and rounds[0]["verdict"] != CORRECT}
        return dspy.Prediction(answer=answer, passages=passages, trace=trace)
