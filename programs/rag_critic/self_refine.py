"""Self-Refine baseline for RAG-Critic (Madaan et al., 2023): the writer drafts from the top-k passages (RAG-Critic's
first-draft writer: ``rag``'s plain one, ``rag_cot``'s chain of thought with ``cot``, the ``self_refine_cot``
program), reviews its own answer and revises it on that feedback -- the same writer, told the feedback -- round after
round until its feedback finds no error (its verdict is Correct), the verdict cannot be read, or the revision changes
nothing, within ``rounds`` rounds (``--rounds``). No retrieval beyond the first
search and no separate critic or planner model. Multiple choice is answered by the letter writer alone: the
revision has no letter form, so a feedback call could not change the answer. The feedback's verdict is ``stop_gate``
(``programs.shared.gates``): as written or P(Correct) against its threshold (``decisions``); a gate at rest says
Correct without a call (the round says ``decided: "at rest (no call)"``, the stop reason is ``feedback_at_rest``:
Self-Refine then runs as its draft, :meth:`SelfRefine.resting`). With ``oracle="verdict"`` the loop stops exactly
when the answer is right by the task metric (no feedback call); a wrong one still gets the model's feedback. With
``oracle="writer"`` the draft is the perfect reader's (``programs.shared.oracle``), and so would every revision over
the same passages be: an Error ends the round as ``unchanged`` without feedback or revision calls. ``all``: no call.
"""
from __future__ import annotations

import dspy

from decoding.choice import MCScoring
from decoding.decisions import REST, rest_note
from programs.rag_critic.error_critic import CORRECT, ERROR, verdict_of
from programs.shared.evidence import lenient
from programs.shared.gates import LabelGate
from programs.shared.oracle import check_roles
from programs.shared.steps import Role
from programs.shared.writer import Writer
from retrieval.retriever import Retriever
from signatures.revise import REVISION, GiveFeedback


class SelfRefine(dspy.Module):
    """Draft, then review and revise with the same writer until its feedback finds no error (see the module).

    Args:
        search: the retriever.
        k: passages retrieved.
        max_chars: each passage shown to the LM cut after this many characters (None: whole).
        rounds: feedback/revision rounds at most.
        decisions: the decision mode of the feedback's verdict (``--decisions``).
        oracle: the oracle roles (``--oracle``; see the module).
        mc: how the writer picks multiple-choice letters.
        cot: the chain-of-thought writer drafts and revises (``self_refine_cot``).
    """

    ORACLE_ROLES = ("verdict", "writer")

    def __init__(self, search: Retriever, *, k: int = 5, max_chars: int | None = None, rounds: int = 3,
                 decisions: str = "generate", oracle: str = "", mc: MCScoring | None = None, cot: bool = False):
        super().__init__()
        self.oracle = check_roles(oracle, self.ORACLE_ROLES, "self_refine")
        self.draft_program = "rag_cot" if cot else "rag"  # what Self-Refine is without its revision
        if rounds < 1:
            raise ValueError(f"self_refine needs rounds >= 1 (got {rounds}); rounds=0 is the plain "
                             f"`{self.draft_program}` program")
        self.search, self.k, self.max_chars, self.rounds = search, k, max_chars, rounds
        self.writer = Writer(use_passages=True, reasoning=cot, max_chars=max_chars, mc=mc)  # drafts and revises
        self.feedback = dspy.Predict(GiveFeedback)
        self.reader = Role("writer", self.oracle)  # a perfect reader needs no feedback
        self.stop_gate = LabelGate(self.feedback, "verdict", (CORRECT, ERROR), kind="correct", mode=decisions,
                                   roles=self.oracle, role="verdict", parse=verdict_of("verdict"),
                                   oracle_asks=not self.reader.from_gold)

    def resting(self) -> str | None:
        """What Self-Refine runs as while its stop gate decides whatever the probability (see
        :func:`decoding.decisions.rest_note`): at rest its first draft stands."""
        return rest_note("stop", self.stop_gate, self.draft_program)

    def forward(self, question: str, options: dict[str, str] | None = None,
                lang: str | None = None) -> dspy.Prediction:
        passages = self.search.search(question, self.k)
        context = [p.format(self.max_chars) for p in passages]
        answer = self.writer(question=question, passages=passages, options=options, lang=lang).answer  # draft
        rounds, stop = [], "round_budget"
        for _ in range(0 if options else self.rounds):
            ruling = self.stop_gate({"passages": context, "question": question, "answer": answer},    # feedback
                                    gold=answer, answer=answer)
            if ruling.oracle and ruling.label == CORRECT:
                rounds.append({"answer_in": answer, "verdict": CORRECT, "feedback": None, "oracle": True})
                stop = "self_correct"
                break
            fb, verdict = ruling.output, ruling.label
            rounds.append({"answer_in": answer, "verdict": verdict, "feedback": fb.get("feedback") if fb else None,
                           **ruling.trace("p_correct")})
            if self.reader.from_gold and verdict == ERROR:  # the perfect reader revises to what it drafted
                rounds[-1]["revised"] = answer
                stop = "unchanged"
                break
            if verdict != ERROR:  # Correct, at rest, or a verdict that could not be read: nothing to revise
                stop = ("feedback_unparsed" if verdict is None else "feedback_at_rest" if ruling.decided == REST
                        else "self_correct")
                break
            out = lenient(self.writer, question=question, passages=passages, lang=lang,           # refine
                          instruction=REVISION.format(answer=answer, feedback=fb.feedback))
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
