"""MetaRAG (Zhou et al., 2024, "Metacognitive Retrieval-Augmented Large Language Models"), a baseline of RAG-Critic.

Cognition: the shared chain-of-thought writer (the one RAG-Critic drafts with) answers from the top ``k`` passages.
Then at most ``rounds`` rounds of metacognitive regulation, each monitor -> evaluate -> plan:

- **monitor**: an expert reader (the critic role, ``--critic-lm``) answers from the same passages without reasoning;
  the answer is satisfactory when it shares at least the gate's threshold of its content words with the expert's
  (Jaccard; ``monitor_gate``, 0.3 uncompiled, fitted on dev against the answer's correctness). Satisfactory ends the
  loop (``monitor_satisfied``); an unreadable expert reply is not acted on (``monitor_unparsed``). A monitor gate
  at rest passes every answer without a call: MetaRAG then runs as its first draft (:meth:`MetaRAG.resting`).
- **evaluate**: yes/no checks, each a gate (``--decisions``): does the writer model know the answer itself
  (``internal``, asked of the writer model), do the passages hold every fact needed (``external``), and, only when
  both hold, does the answer follow from its reasoning (``consistency``). An unreadable check counts as no.
- **plan** (:data:`PLANS`): passages short -> search again with a query written for what is missing (k passages not
  held yet are added) and answer from own knowledge where they still fall short (internal yes) or by sub-questions
  (internal no); passages enough but own knowledge not -> answer from the passages only; both enough -> rethink the
  answer's form, or reason again step by step when the answer does not follow from the reasoning. The writer model
  then answers again with reasoning under the plan's instruction (``signatures.revise.REGULATION``).

Multiple choice is answered by the letter writer alone (the regulated answer has no letter form).

Oracle roles (``programs.shared.oracle``): ``verdict`` stands in for the monitor (satisfied exactly when the answer is
right by the task metric, no expert call) and for the internal and consistency checks (the model knows the answer,
and the answer follows, exactly when it is right); ``sufficiency`` for the external check (the passages held include
every gold passage); ``query`` for the query written for what is missing (the oracle query from the passages held);
``writer`` for the draft and the regulated answer (the perfect reader of the passages held). ``all``: no call.
"""
from __future__ import annotations

import dspy

from decoding.choice import MCScoring
from decoding.decisions import REST, YES_NO, Gate, record, rest_note
from programs.shared.evidence import lenient, search_excluding
from programs.shared.gates import LabelGate, Ruling
from programs.shared.oracle import check_roles
from programs.shared.steps import Role, RoleStep
from programs.shared.text import clip, jaccard
from programs.shared.writer import Writer, told_language
from retrieval.corpus import Passage
from retrieval.retriever import Retriever
from signatures.critic import KnowsAnswer, PassagesSuffice, ReasoningLeads
from signatures.query import QueryForMissing
from signatures.revise import REGULATION, AnswerWithInstruction
from signatures.writer import AnswerFromPassages

#: (own knowledge enough, passages enough) -> (the fix, whether it searches again); "rethink" becomes "multi_step"
#: when the answer does not follow from its reasoning.
PLANS = {("yes", "yes"): ("rethink", False), ("yes", "no"): ("own_knowledge", True),
         ("no", "yes"): ("passages_only", False), ("no", "no"): ("decompose", True)}
MAX_QUERY_WORDS = 12


def plan(internal: str | None, external: str | None, consistent: str | None) -> tuple[str, bool]:
    """The fix for a round's checks (an unreadable check counts as no) and whether it searches again."""
    action, search = PLANS[(internal or "no", external or "no")]
    return ("multi_step" if action == "rethink" and consistent != "yes" else action), search


class MetaRAG(dspy.Module):
    """Draft, then monitor -> evaluate -> plan -> answer again, at most ``rounds`` times. ``lang`` goes to every call
    that writes an answer (the draft, the monitor's expert, the regeneration).

    Args:
        search: the retriever.
        k: passages per search.
        max_chars: each passage shown to the LM cut after this many characters (None: whole).
        rounds: monitor -> evaluate -> plan rounds at most.
        monitor_threshold: the monitor's agreement (Jaccard) with the expert below which it acts, until a fit on
            dev replaces it.
        decisions: the decision mode of the knowledge and sufficiency gates (``--decisions``).
        oracle: the oracle roles (``--oracle``; see the module).
        mc: how the writer picks multiple-choice letters.
    """

    ROLES = {"expert": "critic", "suffices": "critic", "follows": "critic", "rewrite": "planner"}
    ORACLE_ROLES = ("verdict", "sufficiency", "query", "writer")

    def __init__(self, search: Retriever, *, k: int = 5, max_chars: int | None = None, rounds: int = 3,
                 monitor_threshold: float = 0.3, decisions: str = "generate", oracle: str = "",
                 mc: MCScoring | None = None):
        super().__init__()
        self.oracle = roles = check_roles(oracle, self.ORACLE_ROLES, "metarag")
        if rounds < 1:
            raise ValueError(f"metarag needs rounds >= 1 (got {rounds}); rounds=0 is its chain-of-thought first draft")
        self.search, self.k, self.max_chars, self.rounds = search, k, max_chars, rounds
        self.writer = Writer(use_passages=True, reasoning=True, max_chars=max_chars, mc=mc)
        self.expert = dspy.Predict(AnswerFromPassages)
        self.monitor_gate = Gate("correct", threshold=monitor_threshold)
        self.knows = dspy.Predict(KnowsAnswer)
        self.knows_gate = LabelGate(self.knows, "known", YES_NO, kind="correct", mode=decisions,
                                    roles=roles, role="verdict")
        self.suffices = dspy.Predict(PassagesSuffice)
        self.suffices_gate = LabelGate(self.suffices, "enough", YES_NO, kind="set", mode=decisions,
                                       roles=roles, role="sufficiency")
        self.follows = dspy.Predict(ReasoningLeads)
        self.follows_gate = LabelGate(self.follows, "follows", YES_NO, kind="correct", mode=decisions,
                                      roles=roles, role="verdict")
        self.rewrite = dspy.Predict(QueryForMissing)
        self.rewrite_step = RoleStep(self.rewrite, "query", roles, given=lambda query: clip(query, MAX_QUERY_WORDS),
                                     read=lambda out: clip(out.query, MAX_QUERY_WORDS) or None)  # none: the question
        self.verdict, self.reader = Role("verdict", roles), Role("writer", roles)  # the monitor's; the regeneration's
        self.regenerate = dspy.ChainOfThought(AnswerWithInstruction)

    def resting(self) -> str | None:
        """What MetaRAG runs as while a gate decides whatever its probability (:func:`decoding.decisions.rest_note`):
        a monitor at rest passes every first draft; a check at rest always says yes."""
        if note := rest_note("monitor", self.monitor_gate, "its chain-of-thought first draft"):
            return note
        notes = [rest_note("internal", self.knows_gate, "metarag sure of its own knowledge"),
                 rest_note("external", self.suffices_gate, "metarag that never searches again"),
                 rest_note("consistency", self.follows_gate, "metarag that never reasons again step by step")]
        return "; ".join(n for n in notes if n) or None

    def forward(self, question: str, options: dict[str, str] | None = None,
                lang: str | None = None) -> dspy.Prediction:
        held = self.search.search(question, self.k)
        draft = self.writer(question=question, passages=held, options=options, lang=lang)        # cognition
        answer, reasoning = draft.answer, draft.get("reasoning") or ""
        rounds, queries, stop = [], [question], "round_budget"
        for _ in range(0 if options else self.rounds):
            context = [p.format(self.max_chars) for p in held]
            step = {"answer_in": answer, **self.monitor(question, context, answer, lang)}           # monitor
            rounds.append(step)
            if step["monitor"] != "unsatisfied":
                stop = f"monitor_{step['monitor']}"
                break
            checks = self.evaluate(question, context, answer, reasoning, held)                     # evaluate
            step["checks"] = {name: {"label": r.label, **r.trace("p_yes")} for name, r in checks.items()}
            step["action"], again = plan(*(checks[n].label if n in checks else None
                                           for n in ("internal", "external", "consistency")))      # plan
            if again:
                step["query"], new = self.search_more(question, context, answer, held)
                held, step["added"] = held + new, [p.id for p in new]
                queries.append(step["query"])
                context = [p.format(self.max_chars) for p in held]
            if self.reader.from_gold:  # the perfect reader of what is held now
                out = self.writer(question=question, passages=held, lang=lang)
            else:
                out = lenient(self.regenerate, passages=context, question=question,
                              instruction=REGULATION[step["action"]], **told_language(self.regenerate, lang))
            step["regenerated"] = out is not None and bool(out.answer.strip())
            if step["regenerated"]:
                answer, reasoning = out.answer.strip(), out.get("reasoning") or ""
            step["answer_out"] = answer
        checks = [c for r in rounds for c in r.get("checks", {}).values()]
        trace = {"iterations": sum("action" in r for r in rounds), "queries": queries,
                 "stop_reason": "multiple_choice" if options else stop, "rounds": rounds,
                 "flagged": bool(rounds) and rounds[0]["monitor"] == "unsatisfied",
                 "unparsed_verdicts": sum(c["label"] is None for c in checks)
                 + sum(r["monitor"] == "unparsed" for r in rounds),
                 "at_rest": sum(c.get("decided") == REST for c in checks) + sum(r["monitor"] == "at_rest"
                                                                                for r in rounds)}
        return dspy.Prediction(answer=answer, passages=held, retrieved=held, trace=trace)

    def monitor(self, question: str, context: list[str], answer: str, lang: str | None = None) -> dict:
        """``monitor``: satisfied, unsatisfied, unparsed (the expert's reply is unreadable: not acted on) or at_rest
        (the gate passes every answer, no call); with the expert's answer and the similarity."""
        if self.verdict.from_gold:
            return {"monitor": "satisfied" if self.verdict.gold(answer) else "unsatisfied", "oracle": True}
        if self.monitor_gate.at_rest:
            return {"monitor": "at_rest"}
        out = lenient(self.expert, passages=context, question=question, **told_language(self.expert, lang))
        if out is None:
            return {"monitor": "unparsed"}
        similarity = jaccard(out.answer, answer)
        record(self.monitor_gate, similarity, answer=answer)
        satisfied = similarity >= self.monitor_gate.thresholds["threshold"]
        return {"monitor": "satisfied" if satisfied else "unsatisfied", "expert": out.answer.strip(),
                "similarity": similarity}

    def evaluate(self, question: str, context: list[str], answer: str, reasoning: str,
                 held: list[Passage]) -> dict[str, Ruling]:
        """The checks by name: internal and external always, consistency when both say yes."""
        checks = {"internal": self.knows_gate({"question": question}, gold=answer, answer=answer),
                  "external": self.suffices_gate({"passages": context, "question": question}, gold=held,
                                                 passages=held)}
        if checks["internal"].label == checks["external"].label == "yes":
            checks["consistency"] = self.follows_gate({"question": question, "reasoning": reasoning,
                                                       "answer": answer}, gold=answer, answer=answer)
        return checks

    def search_more(self, question: str, context: list[str], answer: str,
                    held: list[Passage]) -> tuple[str, list[Passage]]:
        """A query for what is missing (the question when the reply gives none; the query oracle's from the passages
        ``held``) and its top ``k`` not held yet."""
        query = self.rewrite_step({"question": question, "passages": context, "answer": answer}, held).value
        query = question if query is None else query
        return query, search_excluding(self.search, query, self.k, {p.id for p in held})
